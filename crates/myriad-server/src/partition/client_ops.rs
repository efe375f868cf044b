//! A partition's answers to client requests (`ClientRequest`): a routing table, one arm
//! per request, to its handler in the family module that does the work: `serve_reads`
//! (attributes, contents, directory pages), `serve_names` (names made, removed, moved),
//! `serve_changes` (contents, attributes, durability); locks, leases, links and copies in
//! their own modules. Each handler checks ownership and permission itself.

use std::sync::Arc;

use myriad_proto::{Caller, ClientRequest, Response, WireError};

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::partition::made::Made;

impl Partition {
    /// Serves one client request (already admitted and checked against the map).
    pub(super) async fn serve_client(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        body: ClientRequest,
    ) -> Result<Response, WireError> {
        match body {
            ClientRequest::Echo(p) => Ok(Response::Echo(p)),
            ClientRequest::Lock(req) => self.serve_lock(st, req).await,
            ClientRequest::KeepOpen { inos } => self.keep_open(&inos),
            ClientRequest::MarkReadOnly { path, mark, auto } => {
                self.client_mark_read_only(st, caller, path, mark, auto)
                    .await
            }
            ClientRequest::Grant {
                path,
                ino,
                write,
                opened,
            } => {
                self.client_grant(st, caller, path, (ino, write, opened))
                    .await
            }
            ClientRequest::ReserveIds { count } => self.client_reserve_ids(made, count).await,
            ClientRequest::Link { from, to } => {
                self.client_link(st, (caller, made), from, to).await
            }
            ClientRequest::Stat { path } => self.client_stat(st, caller, path).await,
            ClientRequest::OpenWrite { path } => self.client_open_write(st, caller, path).await,
            ClientRequest::StatMany { dir, names } => {
                self.client_stat_many(st, caller, dir, names).await
            }
            ClientRequest::Fetch { path, max_bytes } => {
                self.client_fetch(st, caller, path, max_bytes).await
            }
            ClientRequest::ReadDir {
                path,
                from: position,
                after,
                limit,
            } => {
                self.client_read_dir(st, caller, path, position, after, limit)
                    .await
            }
            ClientRequest::IndexCandidates {
                min_reads,
                quiet_ms,
            } => Ok(Response::IndexCandidates(
                self.index_candidates(min_reads, quiet_ms)
                    .into_iter()
                    .map(|h| (h.path, h.reads, h.since_ms))
                    .collect(),
            )),
            ClientRequest::IndexReaders {
                min_reads,
                quiet_ms,
            } => Ok(Response::IndexReaders(
                self.index_candidates(min_reads, quiet_ms),
            )),
            ClientRequest::GetShardMap { dir } => self.client_get_shard_map(st, dir),
            ClientRequest::Read {
                path,
                ino,
                offset,
                len,
            } => self.client_read(st, caller, path, ino, offset, len).await,
            ClientRequest::ReadChunk {
                ino,
                chunk,
                offset,
                len,
                ..
            } => self.client_read_chunk(st, ino, chunk, offset, len).await,
            ClientRequest::Readlink { path } => self.client_readlink(st, caller, path).await,
            ClientRequest::SyncPartition { incarnation } => {
                self.client_sync_partition(incarnation).await
            }
            ClientRequest::Sync { path, ino } => self.client_sync(st, path, ino).await,
            ClientRequest::Create(c) => self.client_create(st, (caller, made), c).await,
            ClientRequest::Symlink { path, target } => {
                self.client_symlink(st, (caller, made), path, target).await
            }
            ClientRequest::Mknod {
                path,
                kind,
                mode,
                rdev,
            } => {
                self.client_mknod(st, (caller, made), path, kind, mode, rdev)
                    .await
            }
            ClientRequest::SetXattr {
                path,
                name,
                value,
                mode,
            } => {
                self.client_set_xattr(st, (caller, made), path, name, value, mode)
                    .await
            }
            ClientRequest::Unlink { path } => self.client_unlink(st, (caller, made), path).await,
            ClientRequest::SetAttr { path, set } => {
                self.client_set_attr(st, (caller, made), path, set).await
            }
            ClientRequest::Write(w) => self.client_write(st, (caller, made), w).await,
            ClientRequest::ExtendSize(e) => self.client_extend_size(st, (caller, made), e).await,
            ClientRequest::Truncate(t) => self.client_truncate(st, (caller, made), t).await,
            ClientRequest::WriteChunk {
                ino,
                chunk,
                offset,
                data,
                ..
            } => {
                self.client_write_chunk(st, made, (ino, chunk), (offset, data))
                    .await
            }
            ClientRequest::CopyRange(copy) => {
                self.client_copy_range(st, (caller, made), copy).await
            }
            ClientRequest::Mkdir { path, mode, shards } => {
                self.client_mkdir(st, (caller, made), path, (mode, shards), None)
                    .await
            }
            ClientRequest::MkdirNumbered { path, mode, ino } => {
                self.client_mkdir(st, (caller, made), path, (mode, 1), Some(ino))
                    .await
            }
            ClientRequest::Rmdir { path } => self.client_rmdir(st, (caller, made), path).await,
            ClientRequest::Rename { from, to, flags } => {
                self.client_rename(st, (caller, made), from, to, flags)
                    .await
            }
        }
    }
}
