//! Reads through files the kernel opened without asking: with zero-message opens
//! (`FsConfig::zero_message_opens`, a read-only mount) there is no open handle, so a read
//! names only the inode, and is answered by its name now (docs/fuse.md "Zero-message
//! opens").

use myriad_client::FileHandle;
use myriad_proto::{Caller, FsError, InodeId};

use super::Mount;

impl Mount {
    /// The bytes at `offset` when a loaded index or a valid lease holds the file whole:
    /// no request and no task (`None`: `read_unopened`).
    pub fn read_held(
        &self,
        caller: &Caller,
        ino: InodeId,
        offset: u64,
        size: u32,
    ) -> Option<Vec<u8>> {
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
    /// request), else a read of the range. A name that no longer names the inode (the
    /// file removed or replaced by another client) is `Stale`, as for a file opened
    /// with a handle whose servers freed it.
    pub async fn read_unopened(
        &self,
        ino: InodeId,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, FsError> {
        let (path, inode, data) = self
            .by_path(ino, |path| self.fetch_head_of(path, ino))
            .await
            .map_err(|e| match e {
                FsError::NotFound => FsError::Stale,
                e => e,
            })?;
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

/// The `size` bytes of `data` at `offset`, fewer at its end.
fn part(data: &[u8], offset: u64, size: u32) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    &data[start..end]
}
