//! What `df` shows through the mount: the cluster's capacity, or under a directory quota
//! that quota's limit as the size and its usage as used (docs/quotas.md "What clients
//! see"), as CephFS's client does.

use myriad_client::FsError;
use myriad_proto::InodeId;

use crate::mount::Mount;

/// The block size `statfs` counts in.
pub const BLOCK: u64 = 4096;
/// Inodes are not preallocated: with no file quota, a large, honest-looking budget.
const FILES: u64 = 1 << 40;

/// A `statfs` answer in the kernel's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub blocks: u64,
    pub free_blocks: u64,
    pub files: u64,
    pub free_files: u64,
}

impl Mount {
    /// `statfs` of inode `ino` (an inode this mount does not know: the cluster's).
    pub async fn capacity(&self, ino: InodeId) -> Result<Capacity, FsError> {
        let path = self.path(ino).unwrap_or_else(|_| "/".to_string());
        let s = self.client.statfs_at(&path).await?;
        let files = s.max_files.unwrap_or(FILES);
        Ok(Capacity {
            blocks: s.space.total_bytes / BLOCK,
            free_blocks: s.space.free_bytes / BLOCK,
            files,
            free_files: files.saturating_sub(s.space.files),
        })
    }
}
