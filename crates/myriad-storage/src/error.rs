//! The storage layer's errors (`StorageError`): engine failures, corrupt records, a data
//! directory of another format or server, a full disk, a block that fails its checksum.

use myriad_proto::InodeId;
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("storage engine error: {0}")]
    Engine(String),
    #[error("corrupt record in {space}: {detail}")]
    Corrupt { space: &'static str, detail: String },
    #[error("data directory has format version {found}, this build reads {expected}")]
    FormatVersion { found: u32, expected: u32 },
    #[error("data directory belongs to node {found}, not node {expected}")]
    WrongNode { found: u32, expected: u32 },
    #[error("no space left on device")]
    NoSpace,
    /// A stored block failed its checksum (blocks.rs): the bytes on disk are not what was
    /// written. The server repairs it from another copy where it can.
    #[error("block {block} of inode {ino} failed its checksum (data corrupted on disk)")]
    Checksum { ino: InodeId, block: u64 },
}

impl From<fjall::Error> for StorageError {
    fn from(e: fjall::Error) -> Self {
        let text = e.to_string();
        if text.contains("No space left") || text.contains("os error 28") {
            StorageError::NoSpace
        } else {
            StorageError::Engine(text)
        }
    }
}
