//! A partition's answers to other servers (`PeerRequest`): the partition's side of
//! two-partition protocols, splits, hard-link bookkeeping, directory times, ancestor replicas.

use std::sync::Arc;

use myriad_placement::PartitionId;
use myriad_proto::{Caller, FsError, Inode, PeerRequest, Response, validate_path};

use crate::cluster::MapState;
use crate::partition::core::{Partition, attrs_key, inode_response};
use crate::state::mutation::{DirTouchOne, Mutation, Outcome};

impl Partition {
    /// Serves one request from another server.
    pub(super) async fn serve_peer(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        from: Option<PartitionId>,
        _caller: Caller,
        body: PeerRequest,
    ) -> Result<Response, FsError> {
        let cs = st.map.chunk_size_bytes;
        match body {
            PeerRequest::Raft { .. }
            | PeerRequest::Lease
            | PeerRequest::PartitionSeqs
            | PeerRequest::LendReads
            | PeerRequest::KeepsFragments => Err(FsError::InvalidArgument(
                "membership requests go to a server, not a partition".into(),
            )),
            PeerRequest::PutFragments { .. } | PeerRequest::DropFragments { .. } => Err(
                FsError::InvalidArgument("fragments are kept by a server, not a partition".into()),
            ),
            PeerRequest::ClaimReserved { client, ino, by } => {
                self.applier
                    .run(Mutation::ClaimReserved {
                        client,
                        ino: ino.0,
                        by,
                    })
                    .await?;
                Ok(Response::Unit)
            }
            PeerRequest::FragmentNamed {
                ino,
                chunk,
                index,
                generation,
                server,
            } => {
                self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
                let named = self
                    .store
                    .coded(ino, chunk)
                    .map_err(crate::state::mutation::storage_err)?
                    .is_some_and(|c| {
                        c.generation == generation
                            && c.servers.get(usize::from(index)) == Some(&server)
                    });
                Ok(Response::Bool(named))
            }
            PeerRequest::PutLinkRef {
                path, ino, home, ..
            } => {
                let (dir, name) = self.entry_target(st, &path)?;
                let m = Mutation::PutLinkRef {
                    dir: dir.clone(),
                    name,
                    ino,
                    home,
                };
                let (out, _) = self.run_touching(m, &dir, true, |_| true).await?;
                inode_response(out)
            }
            PeerRequest::AdjustLinks { ino, delta } => self.adjust_links(ino, delta).await,
            PeerRequest::AtInode { ino, caller, op } => self.at_inode(ino, caller, op, cs).await,
            PeerRequest::ShardCreate { dir, ino, shards } => {
                validate_path(&dir)?;
                self.applier
                    .run(Mutation::Shard(
                        crate::state::mutation::ShardMutation::Create { dir, ino, shards },
                    ))
                    .await?;
                Ok(Response::Unit)
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
            } => {
                validate_path(&dir)?;
                self.applier
                    .run(Mutation::Shard(
                        crate::state::mutation::ShardMutation::Finish {
                            dir: dir.clone(),
                            txid,
                            child,
                            reveal,
                        },
                    ))
                    .await?;
                if reveal {
                    // A huge directory's new shard may split on (split_trigger).
                    self.check_splits(&dir);
                }
                Ok(Response::Unit)
            }
            PeerRequest::ShardMapChange {
                dir,
                ino,
                shard,
                split,
            } => {
                validate_path(&dir)?;
                self.own_dir(st, &dir)?;
                if !shard.is_valid() {
                    return Err(FsError::InvalidArgument("bad shard".into()));
                }
                self.applier
                    .run(Mutation::Shard(
                        crate::state::mutation::ShardMutation::MapChange {
                            dir,
                            ino,
                            shard,
                            split,
                        },
                    ))
                    .await?;
                Ok(Response::Unit)
            }
            PeerRequest::ChunkTrim {
                ino,
                chunk,
                keep_bytes,
            } => {
                self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
                self.cut(ino, chunk, || Mutation::ChunkTrim {
                    ino,
                    chunk,
                    keep_bytes,
                })
                .await?;
                Ok(Response::Unit)
            }
            PeerRequest::ChunkTrimFrom { ino, from_bytes } => {
                let inside = from_bytes / st.map.chunk_size_bytes.max(1);
                self.cut(ino, inside, || Mutation::ChunkTrimFrom { ino, from_bytes })
                    .await?;
                Ok(Response::Unit)
            }
            PeerRequest::DirTouch {
                path,
                ino,
                now_ns,
                nlink,
                client,
            } => {
                validate_path(&path)?;
                if path == "/" {
                    self.own(st, st.ring.owner_of_dir("/"))?;
                } else {
                    self.own_entry(st, &path)?;
                }
                let (dir, name) = attrs_key(&path);
                let exempt = crate::commit::leases::Exempt::of([(dir.clone(), client)]);
                // Visible is enough: a lost touch costs a stale time, never data, and the
                // change it reports is already durable on its own partition.
                let touch = self.applier.run_visible(Mutation::DirTouch {
                    dir,
                    name,
                    ino,
                    now: now_ns,
                    nlink,
                });
                match exempt.scope(touch).await? {
                    Outcome::Inode(i) => Ok(Response::Attr(i)),
                    _ => Ok(Response::Unit),
                }
            }
            PeerRequest::DirTouches { touches } => self.serve_dir_touches(st, touches).await,
            PeerRequest::DirObjectCreate { path, ino, depth } => {
                validate_path(&path)?;
                self.own_dir(st, &path)?;
                self.create_dir_object(&path, ino, depth.min(myriad_placement::SHARD_DEPTH_MAX))
                    .await?;
                Ok(Response::Unit)
            }
            PeerRequest::DirObjectRemove { path, ino, .. } => {
                validate_path(&path)?;
                self.own_dir(st, &path)?;
                self.remove_dir_object(&path, ino).await?;
                Ok(Response::Unit)
            }
            PeerRequest::RenamePrepare {
                txid,
                coordinator,
                to,
                inode,
                flags,
                blocks,
                replaces,
                ..
            } => {
                validate_path(&to)?;
                self.own_entry(st, &to)?;
                let blocks = blocks.into_iter().map(|(b, d)| (b, d.into_vec())).collect();
                let outcome = self
                    .applier
                    .run(Mutation::RenamePrepare {
                        txid,
                        coordinator,
                        to,
                        inode,
                        flags,
                        blocks,
                        replaces,
                    })
                    .await?;
                Ok(match outcome {
                    Outcome::Exchanged(inode, blocks) => Response::Exchanged {
                        inode,
                        blocks: blocks
                            .into_iter()
                            .map(|(b, d)| (b, serde_bytes::ByteBuf::from(d)))
                            .collect(),
                    },
                    _ => Response::Unit,
                })
            }
            PeerRequest::DirFreeze { path, txid } => {
                validate_path(&path)?;
                self.own_dir_part(st, &path)?;
                self.applier.run(Mutation::DirFreeze { path, txid }).await?;
                Ok(Response::Unit)
            }
            PeerRequest::DirExport { path, txid, after } => {
                validate_path(&path)?;
                self.own_dir_part(st, &path)?;
                self.dir_export(&path, txid, after)
            }
            PeerRequest::DirImport {
                path,
                txid,
                ino,
                shards,
                map,
                entries,
                replaces,
            } => {
                validate_path(&path)?;
                // Placed here now, or (a tree moving between zones) where its move heads.
                let here = |ring: &myriad_placement::Ring| match shards.first() {
                    Some(s) => s.is_valid() && ring.owner_of_shard(&path, *s) == self.me,
                    None => ring.owner_of_dir(&path) == self.me,
                };
                let moving_here = || st.map.moving_policy().is_some() && here(st.target_ring());
                if !here(&st.ring) && !moving_here() {
                    return Err(FsError::Redirect(Box::new(st.map.clone())));
                }
                self.applier
                    .run(Mutation::DirImport {
                        path,
                        txid,
                        ino,
                        shards,
                        map,
                        entries,
                        replaces,
                    })
                    .await?;
                Ok(Response::Unit)
            }
            PeerRequest::DirFinish { path, txid, action } => {
                validate_path(&path)?;
                // No ownership check: keyed by (path, txid) and idempotent, and a node without
                // a part of `path` (already dropped, or never made) has nothing to do.
                self.applier
                    .run(Mutation::DirFinish { path, txid, action })
                    .await?;
                Ok(Response::Unit)
            }
            PeerRequest::GetAttrs {
                path,
                subscribe,
                seq,
            } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.serve_attrs(&path, from, subscribe, seq).await
            }
            PeerRequest::RenewAttrs { path, seq } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.serve_attrs(&path, from, true, seq).await
            }
            PeerRequest::Unsubscribe { path, seq } => {
                if let Some(node) = from {
                    self.replicas.unsubscribe(&path, node, seq);
                }
                Ok(Response::Unit)
            }
            PeerRequest::AttrUpdate { path, inode } => {
                self.replicas.apply_update(&path, inode);
                Ok(Response::Unit)
            }
            PeerRequest::DirAttrsChanging { path, by } => {
                validate_path(&path)?;
                if let Some(t) = self.leases() {
                    // Boxed: this match is every peer request's future, kept small.
                    Box::pin(t.before_attrs_change(&path, by)).await;
                }
                Ok(Response::Unit)
            }
            PeerRequest::DirAttrsChanged { path, inode, by } => {
                validate_path(&path)?;
                // Boxed: this match is every peer request's future, kept small.
                Box::pin(self.dir_attrs_changed(&path, inode, by)).await;
                Ok(Response::Unit)
            }
            PeerRequest::DirMarkReadOnly { path, mark, auto } => {
                validate_path(&path)?;
                self.own_dir_part(st, &path)?;
                self.mark_part(&path, mark, auto).await?;
                Ok(Response::Unit)
            }
            PeerRequest::UnregisterIndex { name } => {
                Box::pin(self.unregister_index(st, &name)).await?;
                Ok(Response::Unit)
            }
            PeerRequest::InvalidatePrefix { prefix } => {
                self.replicas.invalidate_prefix(&prefix);
                Ok(Response::Unit)
            }
            PeerRequest::RenameCommit { txid, visible, .. } => {
                self.rename_target_resolve(txid, true, !visible).await
            }
            PeerRequest::RenameAbort { txid } => {
                self.rename_target_resolve(txid, false, true).await
            }
        }
    }
}

impl Partition {
    /// `DirTouches`: every touch of a path this partition holds, in one batch; the others
    /// answer their own routing error (the sender sends those alone, learning the shard).
    async fn serve_dir_touches(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        touches: Vec<myriad_proto::DirTouchItem>,
    ) -> Result<Response, FsError> {
        if touches.len() > myriad_proto::limits::DIR_TOUCHES_MAX {
            return Err(FsError::InvalidArgument(format!(
                "at most {} directory touches per request",
                myriad_proto::limits::DIR_TOUCHES_MAX
            )));
        }
        let mut results: Vec<Result<Inode, FsError>> = Vec::with_capacity(touches.len());
        let mut mine = Vec::new();
        let mut clients: Vec<(String, Option<u64>)> = Vec::new();
        for t in touches {
            let owned = validate_path(&t.path).and_then(|()| {
                if t.path == "/" {
                    self.own(st, st.ring.owner_of_dir("/"))
                } else {
                    self.own_entry(st, &t.path)
                }
            });
            match owned {
                Ok(()) => {
                    let (dir, name) = attrs_key(&t.path);
                    clients.push((dir.clone(), t.client));
                    mine.push((
                        results.len(),
                        DirTouchOne {
                            dir,
                            name,
                            ino: t.ino,
                            now: t.now_ns,
                            nlink: t.nlink,
                        },
                    ));
                    results.push(Err(FsError::NotFound));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if mine.is_empty() {
            return Ok(Response::Attrs(results));
        }
        let (at, batch): (Vec<usize>, Vec<DirTouchOne>) = mine.into_iter().unzip();
        // Visible is enough, as for one touch (`DirTouch`).
        let touch = self.applier.run_visible(Mutation::DirTouches(batch));
        let touched = match crate::commit::leases::Exempt::of(clients)
            .scope(touch)
            .await?
        {
            Outcome::Touched(t) => t,
            _ => {
                return Err(FsError::Io(
                    "unexpected outcome of directory touches".into(),
                ));
            }
        };
        for (i, inode) in at.into_iter().zip(touched) {
            results[i] = inode.ok_or(FsError::NotFound);
        }
        Ok(Response::Attrs(results))
    }
}
