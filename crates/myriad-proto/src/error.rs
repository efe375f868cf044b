//! The error every operation can return, on the wire and in the client API. Each variant maps
//! to one errno (`errno()`); the CLI prints `Display`, FUSE returns the errno.

use myriad_placement::{ClusterMap, ShardMap};
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
    /// A backup cannot apply a replicated batch: it lacks batches its primary counts as
    /// acknowledged (it lost its disk), or it is receiving a whole copy (`next` None). The
    /// primary then copies the whole partition to it (docs/replication.md).
    #[error("replica needs a whole copy (its next batch would be {next:?})")]
    ReplicaGap { next: Option<u64> },
    #[error("operation not permitted")]
    NotPermitted,
    /// Stored data failed its checksum and no intact copy could replace it.
    #[error("block {block} of inode {ino} is corrupt on disk and no intact copy was found")]
    Corrupt { ino: u64, block: u64 },
    /// A seek for data or a hole at or beyond the end of file (ENXIO).
    #[error("offset beyond the end of file")]
    NoSuchOffset,
}

impl FsError {
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
            FsError::Io(_)
            | FsError::Corrupt { .. }
            | FsError::Unavailable(_)
            | FsError::Protocol(_)
            | FsError::ReplicaGap { .. } => 5, // EIO
        }
    }

    /// Errors that say nothing about the file system's state: the same request may succeed later.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            FsError::Busy | FsError::Unavailable(_) | FsError::TimedOut(_)
        )
    }
}
