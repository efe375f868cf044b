//! Errors in two types by who sees them: `WireError` on the wire, `FsError` from the client
//! library, which has no routing signal (ARCHITECTURE.md, "Errors").
//!
//! - `WireError`: what a server answers on the wire. Besides what the file system says
//!   (the errnos) it carries the routing signals (`Redirect`, `MapTooOld`, `WrongShard`,
//!   `AskPrimary`) and `AutoIndexed`, which the client library acts on.
//! - `FsError`: what the client library returns to its callers (the mount, the S3 gateway,
//!   the Python bindings, the CLI). It has no routing signal, so none can reach a user:
//!   each variant maps to one errno (`errno()`); the CLI prints `Display`, FUSE returns
//!   the errno.
//!
//! `From<WireError> for FsError` is the one place a routing signal left over becomes what
//! a caller sees ("try again"); `From<FsError> for WireError` is the plain inclusion, for
//! a server answering what a check shared with the client (`access.rs`, `path.rs`) said.

use myriad_placement::{ClusterMap, ShardMap};

use crate::InodeId;
use serde::{Deserialize, Serialize};

/// A server's answer that is not a success. Its variants and their order are the wire's
/// (postcard numbers them by position): append, never insert or reorder.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum WireError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    AlreadyExists,
    #[error("not a directory")]
    NotADirectory,
    #[error("is a directory")]
    IsADirectory,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("file name too long")]
    NameTooLong,
    #[error("permission denied")]
    PermissionDenied,
    #[error("stale file handle (the file was replaced or removed)")]
    Stale,
    #[error("resource busy, try again")]
    Busy,
    /// A copy asked for a read it cannot answer now (it holds no loan of reads from the
    /// primary, lacks batches, or the read needs what only the primary knows): the client
    /// sends it to the primary (docs/zones.md "Nearest copy").
    #[error("this copy cannot answer the read now: ask the partition's primary")]
    AskPrimary,
    #[error("no space left on device")]
    NoSpace,
    #[error("file too large")]
    TooLarge,
    #[error("I/O error: {0}")]
    Io(String),
    #[error("server unavailable: {0}")]
    Unavailable(String),
    #[error("request timed out: {0}")]
    TimedOut(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The receiver does not own the key under its (newer) map; retry with this map.
    #[error("wrong node for this request (cluster map epoch {})", .0.epoch)]
    Redirect(Box<ClusterMap>),
    /// The receiver's map is older than the sender's; the sender should push its map.
    #[error("server has an older cluster map (epoch {0})")]
    MapTooOld(u64),
    #[error("operation not supported: {0}")]
    NotSupported(String),
    /// The receiver holds no shard of `dir` with that name (a split moved it, or the sender's
    /// shard map is stale). `map`: the directory's map if the receiver is its home; else the
    /// sender asks the home (`GetShardMap`) and retries (docs/huge-dirs.md).
    #[error("wrong shard of directory {dir}")]
    WrongShard {
        dir: String,
        map: Option<Box<ShardMap>>,
    },
    #[error("no such attribute")]
    NoData,
    #[error("operation not permitted")]
    NotPermitted,
    /// Stored data failed its checksum and no intact copy could replace it.
    #[error("block {block} of inode {ino} is corrupt on disk and no intact copy was found")]
    Corrupt { ino: InodeId, block: u64 },
    /// A seek for data or a hole at or beyond the end of file (ENXIO).
    #[error("offset beyond the end of file")]
    NoSuchOffset,
    /// A change inside a tree frozen for its metadata index (EROFS; docs/metadata-index.md).
    #[error(
        "read-only: the tree is frozen for its metadata index (`myriad index drop` it to change it)"
    )]
    ReadOnly,
    /// Internal to a server: a change met directory `dir`, which is in the tree of the
    /// automatic index `mark` (docs/metadata-index.md "Automatic indexes"). The server's
    /// applier unregisters that index, clears the mark and applies the change again, so
    /// no client is meant to see this; one that does retries.
    #[error("{dir} is in an automatic metadata index being unregistered; try again")]
    AutoIndexed {
        dir: String,
        mark: crate::ReadOnlyMark,
    },
    /// More symbolic links met while following a path than Linux's MAXSYMLINKS (40), or
    /// a loop (ELOOP). Found by the client following links; servers never follow one.
    #[error("too many levels of symbolic links")]
    TooManyLinks,
    /// The change would take a directory quota past its limit (EDQUOT; docs/quotas.md).
    /// Protocol 37: a peer below it is sent `NoSpace` instead (`ResponseFrame::for_version`).
    #[error("disk quota exceeded")]
    QuotaExceeded,
    /// Inside a server only: the partition's allowance of quota `quota` is short for this
    /// change, which needs `files` names and `bytes` bytes in all here; the partition asks
    /// the quota's home for more and applies it again. Never sent (`for_version` turns one
    /// left over into `Busy`).
    #[error("quota {quota}: this partition's allowance is short; try again")]
    QuotaShort { quota: u64, files: u64, bytes: u64 },
    /// Inside a server only: the change meets directory `dir`'s part made by a mkdir not
    /// yet known to be committed (inode `ino`); the partition asks the directory's entry
    /// and serves the change again (ARCHITECTURE.md "Undecided directory objects").
    /// Never sent (`for_version` turns one left over into `Busy`). Protocol 39.
    #[error("{dir}: its mkdir is not decided yet; try again")]
    DirUndecided { dir: String, ino: InodeId },
    /// A rename the file system makes only as a copy (EXDEV): a directory's, or an
    /// exchange, across the boundary of a limited directory quota (docs/quotas.md), as XFS
    /// and CephFS answer; `mv` then copies and removes, each step counted and checked.
    /// Protocol 40: a peer below it is sent `NotSupported` instead (`for_version`).
    #[error("invalid cross-device link: {0}")]
    CrossDevice(String),
}

/// What the client library returns: what the file system says of a request, or that it
/// could not be made now (`Busy`, `Unavailable`, `TimedOut`, once the library's retries
/// are spent). Never a routing signal (`WireError` has those).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    AlreadyExists,
    #[error("not a directory")]
    NotADirectory,
    #[error("is a directory")]
    IsADirectory,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("file name too long")]
    NameTooLong,
    #[error("permission denied")]
    PermissionDenied,
    #[error("stale file handle (the file was replaced or removed)")]
    Stale,
    #[error("resource busy, try again")]
    Busy,
    #[error("no space left on device")]
    NoSpace,
    #[error("file too large")]
    TooLarge,
    #[error("I/O error: {0}")]
    Io(String),
    #[error("server unavailable: {0}")]
    Unavailable(String),
    #[error("request timed out: {0}")]
    TimedOut(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("operation not supported: {0}")]
    NotSupported(String),
    #[error("no such attribute")]
    NoData,
    #[error("operation not permitted")]
    NotPermitted,
    /// Stored data failed its checksum and no intact copy could replace it.
    #[error("block {block} of inode {ino} is corrupt on disk and no intact copy was found")]
    Corrupt { ino: InodeId, block: u64 },
    /// A seek for data or a hole at or beyond the end of file (ENXIO).
    #[error("offset beyond the end of file")]
    NoSuchOffset,
    /// A change inside a tree frozen for its metadata index (EROFS; docs/metadata-index.md).
    #[error(
        "read-only: the tree is frozen for its metadata index (`myriad index drop` it to change it)"
    )]
    ReadOnly,
    /// More symbolic links met while following a path than Linux's MAXSYMLINKS (40), or
    /// a loop (ELOOP).
    #[error("too many levels of symbolic links")]
    TooManyLinks,
    /// A directory quota's limit would be passed (EDQUOT; docs/quotas.md).
    #[error("disk quota exceeded")]
    QuotaExceeded,
    /// A rename made only as a copy (EXDEV): across the boundary of a limited quota.
    #[error("invalid cross-device link: {0}")]
    CrossDevice(String),
}

impl From<WireError> for FsError {
    /// What a caller sees of a server's answer. The routing signals are the client
    /// library's to follow; one left over (the routing did not settle within the library's
    /// tries) becomes `Unavailable`; a copy's `AskPrimary` and an automatic index being
    /// unregistered become `Busy`.
    fn from(e: WireError) -> FsError {
        match e {
            WireError::NotFound => FsError::NotFound,
            WireError::AlreadyExists => FsError::AlreadyExists,
            WireError::NotADirectory => FsError::NotADirectory,
            WireError::IsADirectory => FsError::IsADirectory,
            WireError::NotEmpty => FsError::NotEmpty,
            WireError::InvalidArgument(m) => FsError::InvalidArgument(m),
            WireError::NameTooLong => FsError::NameTooLong,
            WireError::PermissionDenied => FsError::PermissionDenied,
            WireError::Stale => FsError::Stale,
            // Each retried as `Busy` is until the request's deadline (`AskPrimary`: a copy
            // asked as if it were the primary), and what is left is what `Busy` leaves.
            WireError::Busy | WireError::AutoIndexed { .. } | WireError::AskPrimary => {
                FsError::Busy
            }
            WireError::NoSpace => FsError::NoSpace,
            WireError::TooLarge => FsError::TooLarge,
            WireError::Io(m) => FsError::Io(m),
            WireError::Unavailable(m) => FsError::Unavailable(m),
            WireError::TimedOut(m) => FsError::TimedOut(m),
            WireError::Protocol(m) => FsError::Protocol(m),
            WireError::NotSupported(m) => FsError::NotSupported(m),
            WireError::NoData => FsError::NoData,
            WireError::NotPermitted => FsError::NotPermitted,
            WireError::Corrupt { ino, block } => FsError::Corrupt { ino, block },
            WireError::NoSuchOffset => FsError::NoSuchOffset,
            WireError::ReadOnly => FsError::ReadOnly,
            WireError::TooManyLinks => FsError::TooManyLinks,
            WireError::QuotaExceeded => FsError::QuotaExceeded,
            WireError::CrossDevice(m) => FsError::CrossDevice(m),
            WireError::QuotaShort { .. } | WireError::DirUndecided { .. } => FsError::Busy,
            e @ (WireError::Redirect(_)
            | WireError::MapTooOld(_)
            | WireError::WrongShard { .. }) => {
                FsError::Unavailable(format!("the cluster's routing did not settle: {e}"))
            }
        }
    }
}

impl From<FsError> for WireError {
    fn from(e: FsError) -> WireError {
        match e {
            FsError::NotFound => WireError::NotFound,
            FsError::AlreadyExists => WireError::AlreadyExists,
            FsError::NotADirectory => WireError::NotADirectory,
            FsError::IsADirectory => WireError::IsADirectory,
            FsError::NotEmpty => WireError::NotEmpty,
            FsError::InvalidArgument(m) => WireError::InvalidArgument(m),
            FsError::NameTooLong => WireError::NameTooLong,
            FsError::PermissionDenied => WireError::PermissionDenied,
            FsError::Stale => WireError::Stale,
            FsError::Busy => WireError::Busy,
            FsError::NoSpace => WireError::NoSpace,
            FsError::TooLarge => WireError::TooLarge,
            FsError::Io(m) => WireError::Io(m),
            FsError::Unavailable(m) => WireError::Unavailable(m),
            FsError::TimedOut(m) => WireError::TimedOut(m),
            FsError::Protocol(m) => WireError::Protocol(m),
            FsError::NotSupported(m) => WireError::NotSupported(m),
            FsError::NoData => WireError::NoData,
            FsError::NotPermitted => WireError::NotPermitted,
            FsError::Corrupt { ino, block } => WireError::Corrupt { ino, block },
            FsError::NoSuchOffset => WireError::NoSuchOffset,
            FsError::ReadOnly => WireError::ReadOnly,
            FsError::TooManyLinks => WireError::TooManyLinks,
            FsError::QuotaExceeded => WireError::QuotaExceeded,
            FsError::CrossDevice(m) => WireError::CrossDevice(m),
        }
    }
}

/// The families of errors (ARCHITECTURE.md, "Errors"). Replication's own answers (a copy
/// that needs a whole copy) are not errors at all but responses (`Response::ReplicaGap`), and
/// a server's internal faults reach clients as `Io` (EIO) with their message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// About the file system or the request: the user gets it, as an errno.
    Posix,
    /// Try again, later or elsewhere: `Busy`, `Unavailable`, `TimedOut` (these reach the
    /// client library's callers once its retries are spent) and, on the wire only, the
    /// routing signals `Redirect`, `MapTooOld`, `WrongShard`, `AskPrimary` and
    /// `AutoIndexed` (the client library follows them or turns them into one of the
    /// others).
    Retry,
    /// The two ends do not understand each other (a malformed or unexpected message).
    Protocol,
}

impl FsError {
    /// Which family this error belongs to. Exhaustive: a new variant must say.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            FsError::NotFound
            | FsError::AlreadyExists
            | FsError::NotADirectory
            | FsError::IsADirectory
            | FsError::NotEmpty
            | FsError::InvalidArgument(_)
            | FsError::NameTooLong
            | FsError::PermissionDenied
            | FsError::Stale
            | FsError::NoSpace
            | FsError::TooLarge
            | FsError::Io(_)
            | FsError::NotSupported(_)
            | FsError::NoData
            | FsError::NotPermitted
            | FsError::Corrupt { .. }
            | FsError::NoSuchOffset
            | FsError::ReadOnly
            | FsError::TooManyLinks
            | FsError::QuotaExceeded
            | FsError::CrossDevice(_) => ErrorKind::Posix,
            FsError::Busy | FsError::Unavailable(_) | FsError::TimedOut(_) => ErrorKind::Retry,
            FsError::Protocol(_) => ErrorKind::Protocol,
        }
    }

    /// The Linux errno for this error.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => 2,            // ENOENT
            FsError::AlreadyExists => 17,      // EEXIST
            FsError::NotADirectory => 20,      // ENOTDIR
            FsError::IsADirectory => 21,       // EISDIR
            FsError::NotEmpty => 39,           // ENOTEMPTY
            FsError::InvalidArgument(_) => 22, // EINVAL
            FsError::NameTooLong => 36,        // ENAMETOOLONG
            FsError::PermissionDenied => 13,   // EACCES
            FsError::Stale => 116,             // ESTALE
            FsError::Busy => 11,               // EAGAIN
            FsError::NoSpace => 28,            // ENOSPC
            FsError::TooLarge => 27,           // EFBIG
            FsError::TimedOut(_) => 110,       // ETIMEDOUT
            FsError::NotSupported(_) => 95,    // EOPNOTSUPP
            FsError::NoData => 61,             // ENODATA
            FsError::NotPermitted => 1,        // EPERM
            FsError::NoSuchOffset => 6,        // ENXIO
            FsError::ReadOnly => 30,           // EROFS
            FsError::TooManyLinks => 40,       // ELOOP
            FsError::QuotaExceeded => 122,     // EDQUOT
            FsError::CrossDevice(_) => 18,     // EXDEV
            FsError::Io(_)
            | FsError::Corrupt { .. }
            | FsError::Unavailable(_)
            | FsError::Protocol(_) => 5, // EIO
        }
    }

    /// Errors that say nothing about the file system's state: the same request may succeed later.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Retry
    }
}

impl WireError {
    /// Which family this error belongs to: a routing signal is `Retry`, else what the
    /// caller would see says.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        if self.is_routing()
            || matches!(
                self,
                WireError::AutoIndexed { .. }
                    | WireError::AskPrimary
                    | WireError::QuotaShort { .. }
                    | WireError::DirUndecided { .. }
            )
        {
            ErrorKind::Retry
        } else {
            FsError::from(self.clone()).kind()
        }
    }

    /// A routing signal about the cluster's map or a directory's (`Redirect`,
    /// `MapTooOld`, `WrongShard`): the client library acts on it and never returns it.
    /// (`AskPrimary`, a copy's refusal of a read, is followed where nearest-copy reads are
    /// sent: `nearest.rs`.)
    #[must_use]
    pub fn is_routing(&self) -> bool {
        matches!(
            self,
            WireError::Redirect(_) | WireError::MapTooOld(_) | WireError::WrongShard { .. }
        )
    }

    /// Errors that say nothing about the file system's state and are not routing signals:
    /// the same request, sent the same way, may succeed later.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            WireError::Busy
                | WireError::AutoIndexed { .. }
                | WireError::QuotaShort { .. }
                | WireError::DirUndecided { .. }
                | WireError::Unavailable(_)
                | WireError::TimedOut(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every() -> Vec<WireError> {
        vec![
            WireError::NotFound,
            WireError::AlreadyExists,
            WireError::NotADirectory,
            WireError::IsADirectory,
            WireError::NotEmpty,
            WireError::InvalidArgument(String::new()),
            WireError::NameTooLong,
            WireError::PermissionDenied,
            WireError::Stale,
            WireError::Busy,
            WireError::AskPrimary,
            WireError::NoSpace,
            WireError::TooLarge,
            WireError::Io(String::new()),
            WireError::Unavailable(String::new()),
            WireError::TimedOut(String::new()),
            WireError::Protocol(String::new()),
            WireError::Redirect(Box::new(ClusterMap::new(1, &["a:1".to_string()]))),
            WireError::MapTooOld(1),
            WireError::NotSupported(String::new()),
            WireError::WrongShard {
                dir: "/".into(),
                map: None,
            },
            WireError::NoData,
            WireError::NotPermitted,
            WireError::Corrupt {
                ino: InodeId(1),
                block: 0,
            },
            WireError::NoSuchOffset,
            WireError::ReadOnly,
            WireError::AutoIndexed {
                dir: "/a".into(),
                mark: crate::ReadOnlyMark {
                    root: InodeId(2),
                    version: 1,
                },
            },
            WireError::TooManyLinks,
            WireError::QuotaExceeded,
            WireError::QuotaShort {
                quota: 1,
                files: 2,
                bytes: 3,
            },
            WireError::DirUndecided {
                dir: "/d".into(),
                ino: InodeId(9),
            },
            WireError::CrossDevice("across".into()),
        ]
    }

    #[test]
    fn the_families_are_what_clients_retry_and_what_they_report() {
        for e in every() {
            let retry = e.is_transient() || e.is_routing() || e == WireError::AskPrimary;
            assert_eq!(e.kind() == ErrorKind::Retry, retry, "{e:?}");
            let seen = FsError::from(e.clone());
            assert!(seen.errno() > 0, "{e:?}");
            // What a caller sees is in the same family as what the server said.
            assert_eq!(seen.kind(), e.kind(), "{e:?} seen as {seen:?}");
            assert_eq!(seen.is_transient(), seen.kind() == ErrorKind::Retry);
        }
    }

    #[test]
    fn a_caller_sees_every_answer_but_a_routing_signal_as_the_server_said_it() {
        for e in every() {
            let seen = FsError::from(e.clone());
            if e.is_routing() {
                assert!(
                    matches!(seen, FsError::Unavailable(_)),
                    "{e:?} seen as {seen:?}"
                );
            } else if matches!(
                e,
                WireError::AutoIndexed { .. }
                    | WireError::AskPrimary
                    | WireError::QuotaShort { .. }
                    | WireError::DirUndecided { .. }
            ) {
                assert_eq!(seen, FsError::Busy);
            } else {
                // The same variant, message and all: sent back, it is the same answer.
                assert_eq!(WireError::from(seen.clone()), e, "{e:?} seen as {seen:?}");
                assert_eq!(seen.to_string(), e.to_string());
            }
        }
    }

    #[test]
    fn the_wire_numbers_of_the_answers_are_those_of_protocol_32() {
        // Postcard numbers an enum's variants by position: these must never move
        // (docs/upgrades.md), whatever the variants are called in the code.
        let at = |e: WireError| crate::codec::encode(&e).unwrap_or_else(|x| panic!("{x}"))[0];
        assert_eq!(at(WireError::NotFound), 0);
        assert_eq!(at(WireError::Busy), 9);
        assert_eq!(at(WireError::AskPrimary), 10);
        assert_eq!(at(WireError::Io(String::new())), 13);
        assert_eq!(at(WireError::MapTooOld(1)), 18);
        assert_eq!(at(WireError::NoData), 21);
        assert_eq!(at(WireError::ReadOnly), 25);
        assert_eq!(at(WireError::TooManyLinks), 27);
        assert_eq!(at(WireError::QuotaExceeded), 28);
        let undecided = WireError::DirUndecided {
            dir: String::new(),
            ino: InodeId(1),
        };
        assert_eq!(at(undecided), 30);
        assert_eq!(at(WireError::CrossDevice(String::new())), 31);
    }
}
