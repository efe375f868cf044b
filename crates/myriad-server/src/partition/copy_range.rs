//! Server-side copy (copy_file_range): the node holding the destination's entry reads the
//! source range from wherever it lives (its own store, or the source entry's node and the
//! chunk owners, server to server) and writes it into the destination's chunks, so the
//! bytes never pass through the client. Bounded by `limits::COPY_BYTES_MAX` per request
//! (short count; the caller goes on). A hard-linked destination is `NotSupported`: the
//! client then copies by reading and writing.

use std::sync::Arc;

use myriad_placement::split_parent;
use myriad_proto::ask;
use myriad_proto::reply::ChunkRead;
use myriad_proto::{
    Caller, CopyRange, FileKind, Request, Response, WireError, limits, validate_path,
};

use crate::commit::Context;
use crate::partition::core::Partition;
use crate::state::mutation::Mutation;
use crate::state::perm;
use myriad_proto::ClientRequest;

impl Partition {
    pub(crate) async fn copy_range(
        self: &Arc<Self>,
        (caller, ctx): (&Caller, &Context),
        c: CopyRange,
    ) -> Result<Response, WireError> {
        validate_path(&c.src)?;
        if self.link_target(&c.dst)?.is_some() {
            return Err(WireError::NotSupported(
                "server-side copy into a hard-linked file".into(),
            ));
        }
        let target = self.may_write_file(caller, &c.dst, c.opened).await?;
        self.search(caller, &c.src).await?;
        let src = self.entry_attrs(&c.src).await?.ok_or(WireError::NotFound)?;
        if src.ino != c.src_ino {
            return Err(WireError::Stale);
        }
        match src.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(WireError::IsADirectory),
            _ => return Err(WireError::InvalidArgument("not a regular file".into())),
        }
        perm::require(&src, caller, perm::READ)?;
        let len = c
            .len
            .min(limits::COPY_BYTES_MAX)
            .min(src.size.saturating_sub(c.src_off));
        c.dst_off
            .checked_add(len)
            .filter(|&e| e <= limits::FILE_BYTES_MAX)
            .ok_or(WireError::TooLarge)?;
        let dst = self.lookup(&c.dst).await?;
        if dst.ino != c.dst_ino {
            return Err(WireError::Stale);
        }
        if len == 0 {
            return Ok(Response::Copied {
                inode: dst,
                bytes: 0,
            });
        }
        let data = self.read_source(&c, src.size, len).await?;
        let (dir, name) = split_parent(&c.dst);
        let now = self.env.now_ns();
        self.kill_setid(dir, name, target.as_ref(), (caller, now, ctx))
            .await?;
        let inode = self.write_copy(ctx, &c, &data).await?;
        Ok(Response::Copied {
            inode,
            bytes: data.len() as u64,
        })
    }

    /// `len` bytes of the source from `src_off` (fewer if it shrank meanwhile).
    pub(super) async fn read_source(
        self: &Arc<Self>,
        c: &CopyRange,
        size: u64,
        len: u64,
    ) -> Result<Vec<u8>, WireError> {
        let cs = self.state().map.chunk_size_bytes;
        let end = c.src_off + len;
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        let mut pos = c.src_off;
        while pos < end {
            let chunk = pos / cs;
            let n = (cs - pos % cs).min(end - pos).min(limits::IO_BYTES_MAX);
            let reply = if chunk == 0 {
                let read = ask::read(&c.src, c.src_ino, pos, n);
                ChunkRead::Bytes(self.ask_entry(&c.src, read).await?)
            } else {
                // From this server: chunk servers need no capability.
                let read = ask::read_chunk(c.src_ino, chunk, pos % cs, n, None);
                let owner = self.state().ring.owner_of_chunk(c.src_ino, chunk);
                self.ask_node(owner, read).await?
            };
            let data = match reply {
                ChunkRead::Bytes(b) => b.data,
                ChunkRead::Coded(coded) => {
                    let whole = self.decode_chunk(c.src_ino, chunk, &coded).await?;
                    myriad_proto::ec_layout::window(&whole, pos % cs, n)
                }
            };
            let got = data.len() as u64;
            out.extend_from_slice(&data);
            pos += got;
            if got < n && (chunk == 0 || pos >= size) {
                break; // the end of the file
            }
        }
        Ok(out)
    }

    /// Writes `data` at `dst_off` of the destination: chunk 0 here, other chunks on their
    /// owners, then the size. Returns the destination's inode after it.
    pub(super) async fn write_copy(
        self: &Arc<Self>,
        ctx: &Context,
        c: &CopyRange,
        data: &[u8],
    ) -> Result<myriad_proto::Inode, WireError> {
        let cs = self.state().map.chunk_size_bytes;
        let (dir, name) = split_parent(&c.dst);
        let end = c.dst_off + data.len() as u64;
        let mut inode = None;
        let mut pos = c.dst_off;
        while pos < end {
            let chunk = pos / cs;
            let n = (cs - pos % cs).min(end - pos).min(limits::IO_BYTES_MAX);
            let piece = &data[usize::try_from(pos - c.dst_off).unwrap_or(0)
                ..usize::try_from(pos - c.dst_off + n).unwrap_or(0)];
            if chunk == 0 {
                let m = Mutation::Write {
                    dir: dir.to_string(),
                    name: name.to_string(),
                    ino: c.dst_ino,
                    offset: pos,
                    data: piece.to_vec(),
                    now: self.env.now_ns(),
                };
                if let Response::Attr(i) = self.mutate_file(ctx, m).await? {
                    inode = Some(i);
                }
            } else {
                let owner = self.state().ring.owner_of_chunk(c.dst_ino, chunk);
                let req = ClientRequest::WriteChunk {
                    ino: c.dst_ino,
                    chunk,
                    offset: pos % cs,
                    data: piece.to_vec(),
                    cap: None,
                };
                self.call_node(owner, Request::from(req)).await?;
            }
            pos += n;
        }
        let m = Mutation::ExtendSize {
            dir: dir.to_string(),
            name: name.to_string(),
            ino: c.dst_ino,
            size: end,
            now: self.env.now_ns(),
        };
        match self.mutate_file(ctx, m).await? {
            Response::Attr(i) => Ok(i),
            _ => inode.ok_or_else(|| WireError::Io("no inode after a copy".into())),
        }
    }
}
