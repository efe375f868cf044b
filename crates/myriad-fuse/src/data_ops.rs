//! The data operations beyond read and write: fallocate, copy_file_range (a server-side
//! copy), and SEEK_DATA / SEEK_HOLE. Each first sends the bytes this mount still holds for
//! the file, so it acts on every write made before it.

use myriad_client::FileHandle;
use myriad_proto::{FsError, Inode, InodeId};

use crate::mount::Mount;

/// Most bytes one copy_file_range call moves when the mount copies itself (into a
/// hard-linked file; they pass through this process's memory); the caller gets a short
/// count and goes on, as the system call allows.
const COPY_MAX_BYTES: u64 = 16 * 1024 * 1024;

impl Mount {
    /// fallocate: modes 0 (allocate: the size grows to cover the range), KEEP_SIZE,
    /// PUNCH_HOLE|KEEP_SIZE and ZERO_RANGE (with or without KEEP_SIZE). Space is not
    /// reserved ahead (a later write can still meet a full disk); zeroed ranges read as
    /// zeros at once. Others: EOPNOTSUPP, as most file systems answer them.
    pub async fn fallocate(
        &self,
        fh: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<Inode, FsError> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        if mode & !(KEEP | PUNCH | ZERO) != 0 || (mode & PUNCH != 0 && mode & (KEEP | ZERO) != KEEP)
        {
            return Err(FsError::NotSupported(format!("fallocate mode {mode:#x}")));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= myriad_proto::limits::FILE_BYTES_MAX)
            .ok_or(FsError::TooLarge)?;
        let (file, _) = self.handles.snapshot(fh).ok_or(FsError::Stale)?;
        let ino = file.inode.ino;
        // Bytes this mount buffered are older than the zeroing.
        self.flush_ino(ino).await?;
        let mut inode = self.client.stat(&file.path).await?;
        if inode.ino != ino {
            return Err(FsError::Stale);
        }
        if mode & (PUNCH | ZERO) != 0 {
            let zero_end = if mode & KEEP != 0 {
                end.min(inode.size)
            } else {
                end
            };
            if zero_end > offset {
                inode = self.write_zeros(&file, offset, zero_end).await?;
            }
        }
        if mode & KEEP == 0 && end > inode.size {
            inode = self.client.extend_size(&file, end).await?;
        }
        self.drop_prefetched(ino);
        self.handles.written(&inode);
        self.inodes.observe_own(&inode);
        Ok(self.visible(inode, self.pending(ino)))
    }

    /// Zeros over `[from, to)` of `file`, a bounded buffer at a time.
    async fn write_zeros(&self, file: &FileHandle, from: u64, to: u64) -> Result<Inode, FsError> {
        const PIECE: u64 = 4 * 1024 * 1024;
        let zeros = vec![0u8; usize::try_from(PIECE.min(to - from)).unwrap_or(0)];
        let mut at = from;
        let mut inode = file.inode.clone();
        while at < to {
            let n = (to - at).min(PIECE);
            inode = self
                .client
                .write(file, at, &zeros[..usize::try_from(n).unwrap_or(0)])
                .await?;
            at += n;
        }
        Ok(inode)
    }

    /// copy_file_range: up to `COPY_MAX_BYTES` of `src` at `src_off` written to `dst` at
    /// `dst_off` (short at the source's end; callers loop, as with write). The bytes pass
    /// through this mount: the servers have no copy request yet (docs/fuse.md).
    pub async fn copy_range(
        &self,
        (src_fh, src_off): (u64, u64),
        (dst_fh, dst_off): (u64, u64),
        len: u64,
    ) -> Result<u64, FsError> {
        let (src, _) = self.handles.snapshot(src_fh).ok_or(FsError::Stale)?;
        let (dst, _) = self.handles.snapshot(dst_fh).ok_or(FsError::Stale)?;
        dst_off
            .checked_add(len.min(COPY_MAX_BYTES))
            .filter(|&e| e <= myriad_proto::limits::FILE_BYTES_MAX)
            .ok_or(FsError::TooLarge)?;
        self.flush_ino(src.inode.ino).await?;
        self.flush_ino(dst.inode.ino).await?;
        let (inode, n) = match self
            .client
            .copy_range((&src, src_off), (&dst, dst_off), len)
            .await
        {
            Err(FsError::NotSupported(_)) => {
                // A hard-linked destination: through this mount.
                let data = self
                    .client
                    .read(&src, src_off, len.min(COPY_MAX_BYTES))
                    .await?;
                if data.is_empty() {
                    return Ok(0);
                }
                let inode = self.client.write(&dst, dst_off, &data).await?;
                (inode, data.len() as u64)
            }
            other => other?,
        };
        if n > 0 {
            self.drop_prefetched(inode.ino);
            self.handles.written(&inode);
            self.inodes.observe_own(&inode);
        }
        Ok(n)
    }

    /// SEEK_DATA / SEEK_HOLE (the kernel asks only these): one extent of data up to the
    /// end of file, as file systems without hole tracking answer.
    pub async fn seek_data_hole(
        &self,
        (fh, ino): (u64, InodeId),
        offset: i64,
        whence: i32,
    ) -> Result<i64, FsError> {
        let inode = match self.handles.snapshot(fh) {
            Some((file, _)) => {
                self.flush_ino(file.inode.ino).await?;
                let inode = self.client.stat(&file.path).await?;
                if inode.ino != file.inode.ino {
                    return Err(FsError::Stale);
                }
                inode
            }
            // Opened with no request (zero-message opens): nothing buffered here. A file
            // removed elsewhere is stated by its inode, as getattr does.
            None if fh == crate::handles::NO_HANDLE => match self.stat_ino(ino).await {
                Err(FsError::Stale) => self.stat_open_ino(ino).await?,
                other => other?,
            },
            None => return Err(FsError::Stale),
        };
        let size = i64::try_from(inode.size).unwrap_or(i64::MAX);
        if offset < 0 {
            return Err(FsError::InvalidArgument("negative offset".into()));
        }
        if offset >= size {
            return Err(FsError::NoSuchOffset);
        }
        Ok(if whence == libc::SEEK_DATA {
            offset
        } else {
            size
        })
    }
}
