//! Reads through files the kernel opened without asking: with zero-message opens
//! (`FsConfig::zero_message_opens`, a read-only mount) there is no open handle, so a read
//! names only the inode, and is answered by its name now (docs/fuse.md "Zero-message
//! opens").

use myriad_client::FileHandle;
use myriad_proto::{Caller, FsError, InodeId};

use super::Mount;
use crate::handles::part;

impl Mount {
    /// The bytes at `offset` when a loaded index or a valid lease holds the file whole:
    /// no request and no task (`None`: `read_unopened`).
    pub fn read_held(
        &self,
        (caller, pid): (&Caller, u32),
        ino: InodeId,
        offset: u64,
        size: u32,
    ) -> Option<Vec<u8>> {
        // What the lookup of the reader's path walk brought (no open takes it here).
        if let Some((_, data, _)) = self.take_prefetched(ino, pid) {
            return Some(part(&data, offset, size).to_vec());
        }
        let path = self.path(ino).ok()?;
        let (inode, data) = self
            .client
            .for_caller(caller.clone())
            .fetch_head_now(&path, self.client.inline_max())?
            .ok()?;
        (inode.ino == ino && data.len() as u64 == inode.size)
            .then(|| part(&data, offset, size).to_vec())
    }

    /// A read by the file's name: its contents come with its attributes when small (one
    /// request), else a read of the range. A file no name names any more (removed or
    /// replaced by another client) is read by its inode, as a handle would read it: its
    /// servers keep it for a while (`orphan_handle`).
    pub async fn read_unopened(
        &self,
        ino: InodeId,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, FsError> {
        let (path, inode, data) = match self
            .by_path(ino, |path| self.fetch_head_of(path, ino))
            .await
        {
            Ok(found) => found,
            Err(FsError::NotFound | FsError::Stale) => {
                let file = self.orphan_handle(ino)?;
                return self.client.read(&file, offset, u64::from(size)).await;
            }
            Err(e) => return Err(e),
        };
        if data.len() as u64 == inode.size {
            return Ok(part(&data, offset, size).to_vec());
        }
        let file = FileHandle {
            path,
            inode,
            opened: false,
        };
        self.client.read(&file, offset, u64::from(size)).await
    }

    /// The file as this mount saw it last, for a read or stat by inode once no name names
    /// it: the servers keep a removed or replaced file's inode for `ORPHAN_HOLD` (30 s;
    /// a mount's open handles renew it, and this mount has none), then `Stale`.
    pub(super) fn orphan_handle(&self, ino: InodeId) -> Result<FileHandle, FsError> {
        Ok(FileHandle {
            path: self.path(ino)?,
            inode: self.inodes.last_seen(ino).ok_or(FsError::Stale)?,
            opened: false,
        })
    }

    /// `fetch_head` of `path` with as many bytes as come with the attributes, if it still
    /// names `ino` (else `NotFound`, so that `by_path` tries the inode's other names).
    pub(super) async fn fetch_head_of(
        &self,
        path: String,
        ino: InodeId,
    ) -> Result<(String, myriad_proto::Inode, Vec<u8>), FsError> {
        let (i, d) = self
            .client
            .fetch_head(&path, self.client.inline_max())
            .await?;
        if i.ino != ino {
            return Err(FsError::NotFound);
        }
        Ok((path, i, d))
    }
}
