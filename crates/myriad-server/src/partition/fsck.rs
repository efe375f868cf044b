//! The server side of `myriad fsck`: raw, read-only views of what this node stores, and the
//! few repairs that are safe on their own. Root only (admin requests).

use std::sync::Arc;

use myriad_proto::{Caller, FsckDir, FsckEntry, FsckRepair, Response, Shard, WireError, limits};

use crate::partition::core::Partition;
use crate::state::mutation::{INODE_DIR, Mutation, inode_name, storage_err};
use myriad_proto::AdminRequest;

impl Partition {
    pub(crate) async fn fsck(
        self: &Arc<Self>,
        caller: &Caller,
        req: AdminRequest,
    ) -> Result<Response, WireError> {
        if caller.uid != 0 {
            return Err(WireError::PermissionDenied);
        }
        let page = |limit: u32| limit.clamp(1, limits::READDIR_PAGE_MAX) as usize;
        match req {
            AdminRequest::FsckDirs { after, limit } => {
                let dirs = self
                    .store
                    .dirs(after.as_deref(), page(limit))
                    .map_err(storage_err)?;
                Ok(Response::FsckDirs(
                    dirs.into_iter()
                        .map(|(path, r)| FsckDir {
                            busy: r.is_moving(),
                            shards: r.shards.iter().map(|s| s.shard).collect::<Vec<Shard>>(),
                            path,
                            ino: r.ino,
                            map: r.map,
                        })
                        .collect(),
                ))
            }
            AdminRequest::FsckEntries { dir, after, limit } => {
                let limit = page(limit);
                // Damaged entries are left out here; the copy's digest lists them.
                let (rows, next) = self
                    .store
                    .intact_entries(&dir, after.as_deref(), limit)
                    .map_err(storage_err)?;
                let entries = rows
                    .into_iter()
                    .map(|(name, e)| FsckEntry {
                        name,
                        pending: e.pending.is_some(),
                        inode: e.inode.or_else(|| e.pending.and_then(|p| p.after)),
                    })
                    .collect();
                Ok(Response::FsckEntries { entries, next })
            }
            AdminRequest::FsckBlocks { after, limit } => Ok(Response::FsckBlocks(
                self.store
                    .block_inodes(after, page(limit))
                    .map_err(storage_err)?,
            )),
            AdminRequest::FsckBlockFrom { ino, block } => Ok(Response::Block(
                self.store
                    .first_block_from(ino, block)
                    .map_err(storage_err)?,
            )),
            AdminRequest::FsckRepair(r) => self.fsck_repair(r).await,
            AdminRequest::FsckCoded { after, limit } => Ok(Response::CodedChunks(
                self.store
                    .coded_chunks(after, page(limit))
                    .map_err(storage_err)?,
            )),
            AdminRequest::KeptStats => {
                let kept = self.store.kept_stats().map_err(storage_err)?;
                Ok(Response::KeptStats {
                    split_dirs: kept
                        .as_ref()
                        .map(|k| k.split_dirs.clone())
                        .unwrap_or_default(),
                    stats: kept.map(|k| Box::new(k.stats)),
                })
            }
            AdminRequest::QuotaUsage => {
                let (epoch, set) = self.store.quota_set().map_err(storage_err)?;
                let mut usage = Vec::with_capacity(set.len());
                for q in set {
                    let u = self.store.quota_usage(q.id).map_err(storage_err)?;
                    usage.push((q.id, u.files, u.bytes));
                }
                Ok(Response::QuotaUsage { epoch, usage })
            }
            _ => Err(WireError::InvalidArgument("not an fsck request".into())),
        }
    }

    pub(super) async fn fsck_repair(
        self: &Arc<Self>,
        r: FsckRepair,
    ) -> Result<Response, WireError> {
        match r {
            FsckRepair::CreateDirObject { path, ino } => {
                myriad_proto::validate_path(&path)?;
                self.own_dir(&self.state(), &path)?;
                self.applier
                    .run(Mutation::DirObjectCreate {
                        path,
                        ino,
                        shards: vec![Shard::ALL],
                        map: None,
                        // For an entry fsck found visible: its directory exists.
                        undecided: false,
                    })
                    .await?;
            }
            FsckRepair::DropEmptyDirObject { path, ino } => {
                self.applier
                    .run(Mutation::DirObjectRemove { path, ino })
                    .await?;
            }
            FsckRepair::SetLinks { ino, nlink } => {
                let current = self
                    .store
                    .entry(INODE_DIR, &inode_name(ino))
                    .map_err(storage_err)?
                    .and_then(|e| e.inode)
                    .ok_or(WireError::NotFound)?;
                let delta = i64::from(nlink) - i64::from(current.nlink);
                if delta != 0 {
                    self.applier
                        .run(Mutation::AdjustLinks {
                            ino,
                            delta,
                            now: self.env.now_ns(),
                        })
                        .await?;
                }
            }
            FsckRepair::DropBlocks { ino, from_block } => {
                let cs = self.state().map.chunk_size_bytes.max(1);
                let inside = from_block.saturating_mul(myriad_storage::BLOCK_BYTES) / cs;
                self.cut(ino, inside, || Mutation::DropBlocks { ino, from_block })
                    .await?;
            }
            FsckRepair::RepairFragments { ino, chunk } => {
                let _round = self.coding.round.lock().await;
                self.rebuild_fragments(ino, chunk, &[]).await?;
            }
            FsckRepair::DropOrphanFragment {
                ino,
                chunk,
                index,
                generation,
                server,
            } => {
                self.drop_orphan_fragment(ino, chunk, (index, generation), server)
                    .await?;
            }
            FsckRepair::RepairBlock { ino, block } => self.repair_block(ino, block).await?,
            FsckRepair::RepairRecord { space, key } => {
                let space = myriad_storage::Space::partition_space(space)
                    .ok_or_else(|| WireError::InvalidArgument(format!("no space {space}")))?;
                self.repair_record(space, key).await?;
            }
        }
        Ok(Response::Unit)
    }

    /// Drops fragment `index` of `generation` of chunk `chunk` of `ino` on `server` if it
    /// is an orphan: this partition keeps the chunk's record, and with no coding of its own
    /// in flight (the round lock) the record does not name it. A fragment of the record's
    /// generation on a server it names for another index is left (the drop takes the
    /// server's whole generation of the chunk).
    async fn drop_orphan_fragment(
        self: &Arc<Self>,
        ino: myriad_proto::InodeId,
        chunk: u64,
        (index, generation): (u8, u32),
        server: myriad_placement::NodeId,
    ) -> Result<(), WireError> {
        let st = self.state();
        self.own(&st, st.ring.owner_of_chunk(ino, chunk))?;
        let _round = self.coding.round.lock().await;
        self.not_deposed()?;
        if let Some(c) = self.store.coded(ino, chunk).map_err(storage_err)?
            && c.generation == generation
        {
            if c.servers.get(usize::from(index)) == Some(&server) {
                return Err(WireError::InvalidArgument(format!(
                    "fragment {index} of chunk {chunk} of inode {ino} on server {server} is named by its record now"
                )));
            }
            if c.servers.contains(&server) {
                return Err(WireError::InvalidArgument(format!(
                    "server {server} keeps a named fragment of the same generation of chunk {chunk} of inode {ino}: left for the chunk's next coding"
                )));
            }
        }
        let req = myriad_proto::Request::Peer(myriad_proto::PeerRequest::DropFragments {
            ino,
            chunk,
            generation,
        });
        let epoch = self.env.map().map.epoch;
        self.env
            .send(server, epoch, myriad_proto::Endpoints::SERVER, &req)
            .await?;
        tracing::info!(partition = %self.me, %ino, chunk, index, generation, %server, "fsck: an orphan fragment was dropped");
        Ok(())
    }
}
