//! The error every operation can return, on the wire and in the client API. Each variant maps
//! to one errno (`errno()`); the CLI prints `Display`, FUSE returns the errno.

use myriad_placement::{ClusterMap, ShardMap};

use crate::InodeId;
use serde::{Deserialize, Serialize};

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
    /// A copy asked for a read it cannot answer now (it holds no loan of reads from the
    /// primary, lacks batches, or the read needs what only the primary knows): the client
    /// sends it to the primary (docs/zones.md "Nearest copy"). Never reaches callers.
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
}

/// The families of `FsError` (ARCHITECTURE.md, "Errors"). Replication's own answers (a copy
/// that needs a whole copy) are not errors at all but responses (`Response::ReplicaGap`), and
/// a server's internal faults reach clients as `Io` (EIO) with their message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// About the file system or the request: the user gets it, as an errno.
    Posix,
    /// Try again, later or elsewhere: `Busy`, `Unavailable`, `TimedOut` (these reach the
    /// client library's callers once its retries are spent) and the routing signals
    /// `Redirect`, `MapTooOld`, `WrongShard` (these never do: the client library follows
    /// them or turns them into one of the others).
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
            | FsError::TooManyLinks => ErrorKind::Posix,
            FsError::Busy
            | FsError::AskPrimary
            | FsError::AutoIndexed { .. }
            | FsError::Unavailable(_)
            | FsError::TimedOut(_)
            | FsError::Redirect(_)
            | FsError::MapTooOld(_)
            | FsError::WrongShard { .. } => ErrorKind::Retry,
            FsError::Protocol(_) => ErrorKind::Protocol,
        }
    }

    /// A routing signal (`Redirect`, `MapTooOld`, `WrongShard`): the client library acts on
    /// it and never returns it.
    #[must_use]
    pub fn is_routing(&self) -> bool {
        matches!(
            self,
            FsError::Redirect(_) | FsError::MapTooOld(_) | FsError::WrongShard { .. }
        )
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
            FsError::Busy
            | FsError::AutoIndexed { .. }
            | FsError::AskPrimary
            | FsError::Redirect(_)
            | FsError::MapTooOld(_)
            | FsError::WrongShard { .. } => 11, // EAGAIN
            FsError::NoSpace => 28,            // ENOSPC
            FsError::TooLarge => 27,           // EFBIG
            FsError::TimedOut(_) => 110,       // ETIMEDOUT
            FsError::NotSupported(_) => 95,    // EOPNOTSUPP
            FsError::NoData => 61,             // ENODATA
            FsError::NotPermitted => 1,        // EPERM
            FsError::NoSuchOffset => 6,        // ENXIO
            FsError::ReadOnly => 30,           // EROFS
            FsError::TooManyLinks => 40,       // ELOOP
            FsError::Io(_)
            | FsError::Corrupt { .. }
            | FsError::Unavailable(_)
            | FsError::Protocol(_) => 5, // EIO
        }
    }

    /// Errors that say nothing about the file system's state: the same request may succeed later.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            FsError::Busy
                | FsError::AutoIndexed { .. }
                | FsError::Unavailable(_)
                | FsError::TimedOut(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every() -> Vec<FsError> {
        vec![
            FsError::NotFound,
            FsError::AlreadyExists,
            FsError::NotADirectory,
            FsError::IsADirectory,
            FsError::NotEmpty,
            FsError::InvalidArgument(String::new()),
            FsError::NameTooLong,
            FsError::PermissionDenied,
            FsError::Stale,
            FsError::Busy,
            FsError::NoSpace,
            FsError::TooLarge,
            FsError::Io(String::new()),
            FsError::Unavailable(String::new()),
            FsError::TimedOut(String::new()),
            FsError::Protocol(String::new()),
            FsError::Redirect(Box::new(ClusterMap::new(1, &["a:1".to_string()]))),
            FsError::MapTooOld(1),
            FsError::NotSupported(String::new()),
            FsError::WrongShard {
                dir: "/".into(),
                map: None,
            },
            FsError::NoData,
            FsError::NotPermitted,
            FsError::Corrupt {
                ino: InodeId(1),
                block: 0,
            },
            FsError::NoSuchOffset,
            FsError::ReadOnly,
            FsError::AutoIndexed {
                dir: "/a".into(),
                mark: crate::ReadOnlyMark {
                    root: InodeId(2),
                    version: 1,
                },
            },
            FsError::TooManyLinks,
        ]
    }

    #[test]
    fn the_families_are_what_clients_retry_and_what_they_report() {
        for e in every() {
            let retry = e.is_transient() || e.is_routing();
            assert_eq!(e.kind() == ErrorKind::Retry, retry, "{e:?}");
            assert!(e.errno() > 0, "{e:?}");
            if e.kind() == ErrorKind::Posix {
                assert!(!e.is_transient(), "{e:?}");
            }
        }
        // Routing signals and `Busy` all say "try again" to a program that gets one.
        for e in every().into_iter().filter(FsError::is_routing) {
            assert_eq!(e.errno(), 11, "{e:?}");
        }
    }
}
