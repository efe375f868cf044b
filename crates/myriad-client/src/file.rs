//! File data: create, open, read and write at any offset, truncate.
//!
//! A file's bytes are split in chunks (default 4 MiB). Chunk 0 lives with the inode on the
//! entry's node, so small files are one request; chunk k >= 1 lives on the node placement
//! picks for (ino, k). A write that reaches beyond chunk 0 writes its chunk pieces in parallel,
//! then raises the size on the inode's node once (`ExtendSize`).

use myriad_proto::{
    FileKind, FsError, Inode, InodeId, PartitionId, Request, limits, validate_path,
};

use crate::client::{Client, Route};
use myriad_proto::ClientRequest;
use myriad_proto::ask;
use myriad_proto::auth::Capability;
use myriad_proto::reply::{Ask, Bytes, ChunkRead, Copied, Granted, Reply};

/// An open file: its path and the inode seen at open. Operations check the inode id, so a
/// handle whose file was replaced or removed gets `Stale` instead of touching another file.
#[derive(Clone, Debug)]
pub struct FileHandle {
    pub path: String,
    pub inode: Inode,
    /// Opened for writing by an open whose access was checked (a create, or a FUSE open):
    /// its writes and truncates carry `opened`, so the file's owner may go on writing
    /// through it after the write bit is gone, as through a POSIX descriptor.
    pub opened: bool,
}

/// Times a read of a coded chunk asks its partition again after its fragments changed
/// under it (the chunk was uncoded for a write, or coded again).
const CODED_READ_TRIES: u32 = 3;

impl Client {
    /// Creates a file with `data` as its contents. Up to one chunk, this is one atomic request
    /// to one node (the inode, its entry and its bytes are written together).
    pub async fn create(
        &self,
        path: &str,
        mode: u32,
        exclusive: bool,
        data: &[u8],
    ) -> Result<FileHandle, FsError> {
        self.create_with(path, mode, exclusive, data, true).await
    }

    /// `create`; with `durable: false` the reply comes once the file exists for everyone but
    /// before it is on disk (it is within the node's next group commit, and a later durable
    /// write or `sync` to the file makes sure of it).
    pub async fn create_with(
        &self,
        path: &str,
        mode: u32,
        exclusive: bool,
        data: &[u8],
        durable: bool,
    ) -> Result<FileHandle, FsError> {
        validate_path(path)?;
        if !durable && data.is_empty() {
            if let Some(r) = self.create_behind(path, mode, exclusive) {
                return r;
            }
            if self.claim_for_change(path).await
                && let Some(r) = self.create_behind(path, mode, exclusive)
            {
                return r;
            }
        }
        let first = data.len().min(
            usize::try_from(self.chunk_size().min(limits::IO_BYTES_MAX)).unwrap_or(usize::MAX),
        );
        let ask = ask::create(
            path,
            (mode, exclusive),
            data[..first].to_vec(),
            durable,
            None,
        );
        let inode = match self
            .call(Route::Entry(path.to_string()), Request::from(ask.request))
            .await
        {
            Ok(r) => {
                self.note_parent(path, &r);
                ask.answer.of::<FsError>(r)?
            }
            Err(e) => return Err(self.refine(path, e).await),
        };
        let mut handle = FileHandle {
            path: path.to_string(),
            inode,
            opened: true,
        };
        if first < data.len() {
            handle.inode = self.write(&handle, first as u64, &data[first..]).await?;
        }
        Ok(handle)
    }

    /// Opens an existing regular file.
    pub async fn open(&self, path: &str) -> Result<FileHandle, FsError> {
        let inode = self.stat(path).await?;
        match inode.kind {
            FileKind::File => Ok(FileHandle {
                path: path.to_string(),
                inode,
                opened: false,
            }),
            FileKind::Directory => Err(FsError::IsADirectory),
            _ => Err(FsError::InvalidArgument("not a regular file".into())),
        }
    }

    /// The current attributes of the open file `h`, by its inode: also when another
    /// client removed its last name meanwhile (an orphan, `nlink` 0; docs/fuse.md "Open
    /// files unlinked elsewhere").
    pub async fn stat_open(&self, h: &FileHandle) -> Result<Inode, FsError> {
        if let Some(Ok(i)) = self.indexed(&h.path, false).await
            && i.inode.ino == h.inode.ino
        {
            return Ok(i.inode);
        }
        let read = ask::read(&h.path, h.inode.ino, 0, 0);
        let got = self.ask(Route::Entry(h.path.clone()), read).await?;
        got.inode.ok_or_else(|| {
            FsError::Protocol("a read by name answered without the file's attributes".into())
        })
    }

    /// Reads up to `len` bytes at `offset`. Short only at end of file.
    pub async fn read(&self, h: &FileHandle, offset: u64, len: u64) -> Result<Vec<u8>, FsError> {
        if let Some(Ok(i)) = self.indexed(&h.path, true).await
            && i.inode.ino == h.inode.ino
            && let Some(data) = i.contents
        {
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let end = usize::try_from(offset.saturating_add(len))
                .unwrap_or(usize::MAX)
                .min(data.len());
            return Ok(data[start..end].to_vec());
        }
        self.read_servers(h, offset, len).await
    }

    /// `read` from the servers, no index.
    pub(crate) async fn read_servers(
        &self,
        h: &FileHandle,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, FsError> {
        let cs = self.chunk_size();
        let mut size = h.inode.size;
        let mut out = Vec::new();
        let mut pos = offset;
        let end = offset.saturating_add(len);
        // Chunk 0 first: its reply carries the current size.
        if pos < cs && pos < end {
            let n = (end.min(cs) - pos).min(limits::IO_BYTES_MAX);
            let read = ask::read(&h.path, h.inode.ino, pos, n);
            let Bytes { inode, data } = self.ask(Route::Entry(h.path.clone()), read).await?;
            if let Some(i) = inode {
                size = i.size;
            }
            let got = data.len() as u64;
            out.extend_from_slice(&data);
            pos += got;
            if got < n {
                return Ok(out);
            }
        }
        let end = end.min(size);
        let mut pieces = Vec::new();
        while pos < end {
            let chunk = pos / cs;
            let in_chunk = pos % cs;
            let n = (cs - in_chunk).min(end - pos).min(limits::IO_BYTES_MAX);
            pieces.push((chunk, in_chunk, n));
            pos += n;
        }
        let futs = pieces
            .iter()
            .map(|&(chunk, off, n)| self.read_chunk(h, chunk, off, n));
        for r in futures::future::join_all(futs).await {
            out.extend_from_slice(&r?);
        }
        Ok(out)
    }

    /// Bytes `off .. off + n` of chunk `chunk` (>= 1) of `h`: from its partition, or from
    /// the fragments' servers when it is coded (asked again if it was uncoded meanwhile).
    async fn read_chunk(
        &self,
        h: &FileHandle,
        chunk: u64,
        off: u64,
        n: u64,
    ) -> Result<Vec<u8>, FsError> {
        let mut tries = 0;
        loop {
            let answer = self
                .chunk_call(h, chunk, false, |cap| {
                    ask::read_chunk(h.inode.ino, chunk, off, n, Some(cap))
                })
                .await?;
            match answer {
                ChunkRead::Bytes(b) => return Ok(b.data),
                ChunkRead::Coded(coded) => match self.read_coded(h, chunk, &coded, off, n).await {
                    Err(FsError::Stale | FsError::NotFound) if tries < CODED_READ_TRIES => {
                        tries += 1;
                    }
                    other => return other,
                },
            }
        }
    }

    /// Reads a whole file.
    pub async fn read_all(&self, path: &str) -> Result<Vec<u8>, FsError> {
        if self.stat(path).await?.size <= self.inline_max() {
            return self.fetch(path).await.map(|(_, d)| d);
        }
        let h = self.open(path).await?;
        self.read(&h, 0, h.inode.size).await
    }

    /// Writes `data` at `offset`; returns the inode after the write. Durable on return.
    pub async fn write(&self, h: &FileHandle, offset: u64, data: &[u8]) -> Result<Inode, FsError> {
        if let Some(r) = self.write_behind(h, offset, data) {
            return r;
        }
        let cs = self.chunk_size();
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::TooLarge)?;
        let mut chunk0 = Vec::new();
        let mut others = Vec::new();
        let mut pos = offset;
        while pos < end {
            let chunk = pos / cs;
            let in_chunk = pos % cs;
            let n = (cs - in_chunk).min(end - pos).min(limits::IO_BYTES_MAX);
            let slice = &data[usize::try_from(pos - offset).unwrap_or(0)
                ..usize::try_from(pos - offset + n).unwrap_or(0)];
            if chunk == 0 {
                chunk0.push((in_chunk, slice));
            } else {
                others.push((chunk, in_chunk, slice));
            }
            pos += n;
        }
        let futs = others.iter().map(|&(chunk, off, slice)| {
            self.chunk_call(h, chunk, true, move |cap| {
                ask::write_chunk(h.inode.ino, (chunk, off), slice.to_vec(), Some(cap))
            })
        });
        for r in futures::future::join_all(futs).await {
            r?;
        }
        let mut inode = h.inode.clone();
        for (off, slice) in chunk0 {
            let write = ask::write(&h.path, h.inode.ino, off, slice.to_vec(), h.opened);
            inode = self.ask(Route::Entry(h.path.clone()), write).await?;
        }
        if end > cs {
            let extend = ask::extend_size(&h.path, h.inode.ino, end, h.opened);
            inode = self.ask(Route::Entry(h.path.clone()), extend).await?;
        }
        Ok(inode)
    }

    /// Sends the request `make` builds for chunk `chunk` (>= 1) of `h`, with a capability
    /// to read (or `write`) its chunks; a refusal (the capability expired, or the servers'
    /// clocks ran ahead) gets a fresh capability and one more try.
    pub(crate) async fn chunk_call<R: Reply>(
        &self,
        h: &FileHandle,
        chunk: u64,
        write: bool,
        make: impl Fn(Capability) -> Ask<R>,
    ) -> Result<R, FsError> {
        let route = || Route::Chunk(h.inode.ino, chunk);
        let cap = self.capability(h, write).await?;
        match self.ask(route(), make(cap)).await {
            Err(FsError::PermissionDenied) => {
                self.caps.forget(h.inode.ino, write);
                let cap = self.capability(h, write).await?;
                self.ask(route(), make(cap)).await
            }
            other => other,
        }
    }

    /// A capability for the chunks of `h` (from the cache while good, else granted by the
    /// server of its entry after an access check).
    pub(crate) async fn capability(
        &self,
        h: &FileHandle,
        write: bool,
    ) -> Result<Capability, FsError> {
        if let Some(cap) = self.caps.get(h.inode.ino, write) {
            return Ok(cap);
        }
        let grant = ask::grant(&h.path, h.inode.ino, write, h.opened);
        let Granted { cap, valid_ms } = self.ask(Route::Entry(h.path.clone()), grant).await?;
        self.caps
            .put(cap, std::time::Duration::from_millis(valid_ms));
        Ok(cap)
    }

    /// Copies up to `len` bytes of `src` at `src_off` into `dst` at `dst_off` on the
    /// servers (the bytes do not pass through this client); returns `dst` after it and the
    /// bytes copied: fewer at the source's end or past `limits::COPY_BYTES_MAX` (call
    /// again). `NotSupported` for a hard-linked destination: copy by reading and writing.
    pub async fn copy_range(
        &self,
        (src, src_off): (&FileHandle, u64),
        (dst, dst_off): (&FileHandle, u64),
        len: u64,
    ) -> Result<(Inode, u64), FsError> {
        let copy = ask::copy_range(myriad_proto::CopyRange {
            src: src.path.clone(),
            src_ino: src.inode.ino,
            src_off,
            dst: dst.path.clone(),
            dst_ino: dst.inode.ino,
            dst_off,
            len,
            opened: dst.opened,
        });
        let Copied { inode, bytes } = self.ask(Route::Entry(dst.path.clone()), copy).await?;
        Ok((inode, bytes))
    }

    /// Copies `len` bytes of `src` from `src_off` into `dst` at `dst_off`: on the servers
    /// (`copy_range`, called until done), or by reading and writing a piece at a time where
    /// the servers cannot (a hard-linked destination). Returns `dst` after it (as given if
    /// nothing was copied) and the bytes copied: fewer only where the source ended first.
    pub async fn copy_all(
        &self,
        (src, src_off): (&FileHandle, u64),
        (dst, dst_off): (&FileHandle, u64),
        len: u64,
    ) -> Result<(Inode, u64), FsError> {
        let mut done = 0u64;
        let mut inode = dst.inode.clone();
        while done < len {
            match self
                .copy_range((src, src_off + done), (dst, dst_off + done), len - done)
                .await
            {
                Ok((_, 0)) => return Ok((inode, done)),
                Ok((written, n)) => {
                    inode = written;
                    done += n;
                }
                Err(FsError::NotSupported(_)) => break,
                Err(e) => return Err(e),
            }
        }
        while done < len {
            let piece_len = (len - done).min(limits::IO_BYTES_MAX);
            let piece = self.read(src, src_off + done, piece_len).await?;
            if piece.is_empty() {
                break;
            }
            inode = self.write(dst, dst_off + done, &piece).await?;
            done += piece.len() as u64;
        }
        Ok((inode, done))
    }

    /// Raises the size to at least `size` (never lowers it: a concurrent writer that went
    /// further keeps its bytes). Durable on return.
    pub async fn extend_size(&self, h: &FileHandle, size: u64) -> Result<Inode, FsError> {
        let extend = ask::extend_size(&h.path, h.inode.ino, size, h.opened);
        self.ask(Route::Entry(h.path.clone()), extend).await
    }

    pub async fn truncate(&self, h: &FileHandle, size: u64) -> Result<Inode, FsError> {
        let truncate = ask::truncate(&h.path, h.inode.ino, size, h.opened);
        self.ask(Route::Entry(h.path.clone()), truncate).await
    }

    /// Returns once everything the file's node applied so far (this file's non-durable
    /// create included) is durable.
    pub async fn sync(&self, h: &FileHandle) -> Result<(), FsError> {
        let req = ClientRequest::Sync {
            path: h.path.clone(),
            ino: h.inode.ino,
        };
        self.call(
            Route::Entry(h.path.clone()),
            myriad_proto::Request::from(req),
        )
        .await
        .map(|_| ())
    }

    /// Every acknowledged write is already durable (fsynced by group commit on its node), so
    /// there is nothing to flush; this checks the file still exists.
    pub async fn fsync(&self, h: &FileHandle) -> Result<(), FsError> {
        let i = self.stat(&h.path).await?;
        if i.ino != h.inode.ino {
            return Err(FsError::Stale);
        }
        Ok(())
    }
}

impl Client {
    /// Tells the partitions holding these files' names that this client still has them
    /// open (`(path, inode)`; one request per partition), so that if another client
    /// removes a last name, the file's data stays readable here until this client stops
    /// saying so (docs/fuse.md "Open files unlinked elsewhere"). Call it every
    /// `limits::KEEP_OPEN_EVERY` while files are open.
    pub async fn keep_open(&self, files: &[(String, InodeId)]) -> Result<(), FsError> {
        let mut by_part: std::collections::BTreeMap<PartitionId, Vec<InodeId>> =
            std::collections::BTreeMap::new();
        for (path, ino) in files {
            by_part
                .entry(self.entry_partition(path))
                .or_default()
                .push(*ino);
        }
        let mut first_err = None;
        for (pid, inos) in by_part {
            for chunk in inos.chunks(myriad_proto::limits::KEEP_OPEN_MAX) {
                let req = ClientRequest::KeepOpen {
                    inos: chunk.to_vec(),
                };
                if let Err(e) = self.call(Route::Partition(pid), Request::from(req)).await
                    && first_err.is_none()
                {
                    first_err = Some(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
