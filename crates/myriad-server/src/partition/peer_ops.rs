//! A partition's answers to other servers (`PeerRequest`): a routing table, one arm per
//! request, to its handler in the family module that does the work: `peer_names` (reserved
//! numbers, hard-link names, a rename's target side, directory times), `peer_dirs` (shards,
//! directory objects, parts moving), `peer_chunks` (cuts, fragments); ancestor replicas,
//! links and renames' resolution in their own modules.

use std::sync::Arc;

use myriad_placement::PartitionId;
use myriad_proto::{Caller, PeerRequest, Response, WireError, validate_path};

use crate::cluster::MapState;
use crate::partition::core::Partition;

impl Partition {
    /// Serves one request from another server.
    pub(super) async fn serve_peer(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        from: Option<PartitionId>,
        _caller: Caller,
        body: PeerRequest,
    ) -> Result<Response, WireError> {
        let cs = st.map.chunk_size_bytes;
        match body {
            PeerRequest::Raft { .. }
            | PeerRequest::Lease
            | PeerRequest::PartitionSeqs
            | PeerRequest::LendReads
            | PeerRequest::KeepsFragments => Err(WireError::InvalidArgument(
                "membership requests go to a server, not a partition".into(),
            )),
            PeerRequest::PutFragments { .. } | PeerRequest::DropFragments { .. } => {
                Err(WireError::InvalidArgument(
                    "fragments are kept by a server, not a partition".into(),
                ))
            }
            req @ (PeerRequest::QuotaAsk { .. }
            | PeerRequest::QuotaSettle { .. }
            | PeerRequest::QuotaReport { .. }) => self.peer_quota(st, from, req).await,
            PeerRequest::MkdirDecided { path, ino } => self.peer_mkdir_decided(st, path, ino).await,
            PeerRequest::DirObjectConfirm { path, ino } => self.peer_dir_object_confirm(&path, ino),
            PeerRequest::ClaimReserved { client, ino, by } => {
                self.peer_claim_reserved(st, client, ino, by).await
            }
            PeerRequest::GiveUpClaimed { ino } => self.peer_give_up_claimed(ino).await,
            PeerRequest::FragmentNamed {
                ino,
                chunk,
                index,
                generation,
                server,
            } => self.peer_fragment_named(st, ino, chunk, (index, generation), server),
            req @ (PeerRequest::PutLinkRef { .. } | PeerRequest::PutLinkRefOnce { .. }) => {
                self.peer_put_link_ref(st, req).await
            }
            PeerRequest::AdjustLinks { ino, delta } => self.adjust_links(ino, delta).await,
            PeerRequest::AtInode { ino, caller, op } => self.at_inode(ino, caller, op, cs).await,
            PeerRequest::ShardCreate { dir, ino, shards } => {
                self.peer_shard_create(st, dir, ino, shards).await
            }
            PeerRequest::ShardImport {
                dir,
                ino,
                txid,
                child,
                entries,
            } => {
                validate_path(&dir)?;
                self.shard_import(st, dir, ino, txid, child, entries).await
            }
            PeerRequest::ShardFinish {
                dir,
                txid,
                child,
                reveal,
            } => self.peer_shard_finish(dir, txid, child, reveal).await,
            PeerRequest::ShardMapChange {
                dir,
                ino,
                shard,
                split,
            } => self.peer_shard_map_change(st, dir, ino, shard, split).await,
            PeerRequest::ChunkTrim {
                ino,
                chunk,
                keep_bytes,
            } => self.peer_chunk_trim(st, ino, chunk, keep_bytes).await,
            PeerRequest::ChunkTrimFrom { ino, from_bytes } => {
                self.peer_chunk_trim_from(st, ino, from_bytes).await
            }
            PeerRequest::DirTouch {
                path,
                ino,
                now_ns,
                nlink,
                client,
            } => {
                self.peer_dir_touch(st, path, ino, now_ns, nlink, client)
                    .await
            }
            PeerRequest::DirTouches { touches } => self.serve_dir_touches(st, touches).await,
            req @ (PeerRequest::DirObjectCreate { .. }
            | PeerRequest::DirObjectBorn { .. }
            | PeerRequest::DirObjectRemove { .. }
            | PeerRequest::DirSought { .. }) => Box::pin(self.peer_dir_object(st, req)).await,
            req @ PeerRequest::RenamePrepare { .. } => self.peer_rename_prepare(st, req).await,
            PeerRequest::DirFreeze { path, txid } => self.peer_dir_freeze(st, path, txid).await,
            PeerRequest::DirExport { path, txid, after } => {
                self.peer_dir_export(st, &path, (txid, after))
            }
            PeerRequest::DirImport(part) => self.peer_dir_import(st, part).await,
            PeerRequest::DirFinish { path, txid, action } => {
                self.peer_dir_finish(path, txid, action).await
            }
            PeerRequest::GetAttrs {
                path,
                subscribe,
                seq,
            } => self.peer_get_attrs(st, from, path, (subscribe, seq)).await,
            PeerRequest::RenewAttrs { path, seq } => {
                self.peer_get_attrs(st, from, path, (true, seq)).await
            }
            PeerRequest::Unsubscribe { path, seq } => {
                self.peer_unsubscribe(from, &path, seq);
                Ok(Response::Unit)
            }
            PeerRequest::AttrUpdate { path, inode } => {
                self.replicas.apply_update(&path, inode);
                Ok(Response::Unit)
            }
            // Boxed: this match is every peer request's future, kept small.
            PeerRequest::DirAttrsChanging { path, by } => {
                Box::pin(self.peer_dir_attrs_changing(path, by)).await
            }
            PeerRequest::DirAttrsChanged { path, inode, by } => {
                Box::pin(self.peer_dir_attrs_changed(path, inode, by)).await
            }
            PeerRequest::DirMarkReadOnly { path, mark, auto } => {
                self.peer_mark_read_only(st, path, (mark, auto)).await
            }
            PeerRequest::UnregisterIndex { name } => {
                Box::pin(self.unregister_index(st, &name)).await?;
                Ok(Response::Unit)
            }
            PeerRequest::InvalidatePrefix { prefix } => {
                self.replicas.invalidate_prefix(&prefix);
                Ok(Response::Unit)
            }
            PeerRequest::RenameCommit {
                txid,
                visible,
                client,
            } => {
                self.rename_target_resolve(txid, (true, !visible), client)
                    .await
            }
            PeerRequest::RenameAbort { txid } => {
                self.rename_target_resolve(txid, (false, true), None).await
            }
        }
    }
}
