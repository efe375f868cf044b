//! A node: the request handler. Reads are answered directly from the store; mutations go
//! through the applier; operations that span two nodes live in `twophase.rs`.
//!
//! Every request is first checked against placement: a node only serves keys it owns under its
//! map. A request for a key it does not own gets `Redirect(map)`; a request carrying a newer
//! epoch than the node's gets `MapTooOld` so the sender pushes its map.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use myriad_placement::{NodeId, PartitionId, split_parent};
use myriad_proto::{
    Caller, FileKind, FsError, Inode, InodeOp, Request, Response, limits, validate_path,
};
use myriad_storage::{EntryRecord, Store};
use tokio::sync::watch;

use crate::cluster::MapState;
use crate::commit::Applier;
use crate::config::ServerConfig;
use crate::replication::Peers;
use crate::state::mutation::{InodeChange, Mutation, Outcome, storage_err};
use crate::state::perm;

/// What a partition needs from the server process that runs it: the map and the other
/// servers (replication's `Peers`), its configuration, counters, the free-space rule, and
/// calls to other partitions. The process implements it; a partition never names the process.
pub(crate) trait Env: Peers {
    /// The id of the server running this partition.
    fn server_id(&self) -> NodeId;
    fn config(&self) -> &ServerConfig;
    /// Counts one event of kind `what` (server counters).
    fn count(&self, what: &'static str);
    /// Refuses a request that would fill the disk (space.rs).
    fn admit(&self, req: &Request) -> Result<(), FsError>;
    /// Calls partition `pid` wherever it is served, as partition `source`.
    fn call_partition(
        &self,
        source: PartitionId,
        pid: PartitionId,
        body: Request,
    ) -> futures::future::BoxFuture<'_, Result<Response, FsError>>;
}

/// One partition's request handler (docs/replication.md: the rest of the server calls a
/// partition a node). Runs on the partition's primary.
pub struct Node {
    /// The partition id.
    pub(crate) me: NodeId,
    /// The server running it: map, peers, counters, configuration, sibling partitions.
    pub(crate) env: Arc<dyn Env>,
    pub(crate) store: Store,
    pub(crate) applier: Applier,
    /// The primary's side of replication: its copies follow the map (`set_backups`).
    pub(crate) replicator: Arc<crate::replication::Replicator>,
    pub(crate) changed: watch::Sender<u64>,
    /// Txids of multi-node operations being driven right now; recovery leaves them alone.
    pub(crate) live: Mutex<HashSet<u64>>,
    /// Ancestor metadata replicas, popularity, and the subscriptions this node serves.
    pub(crate) replicas: crate::ancestors::Replicas,
    /// Shard maps of split directories whose entries this node addresses (rename
    /// destinations, link names, ancestors).
    pub(crate) shard_maps: myriad_placement::ShardCache,
    /// Counts of names added per directory, and the splits running.
    pub(crate) splits: crate::split::SplitState,
    /// Directory touches in flight, coalesced per directory (`dirtimes.rs`).
    pub(crate) dir_touches: crate::dirtimes::DirTouches,
    /// Background tasks (recovery, replica bookkeeping), ended by `stop`.
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// `mkdir --shards N`: the split depth for N shards (N rounded up to a power of two).
fn shard_depth(shards: u32) -> Result<u8, FsError> {
    if shards > 1 << myriad_placement::SHARD_DEPTH_MAX {
        return Err(FsError::InvalidArgument(format!(
            "at most {} shards per directory",
            1u32 << myriad_placement::SHARD_DEPTH_MAX
        )));
    }
    let depth = shards.max(1).next_power_of_two().trailing_zeros();
    Ok(u8::try_from(depth).unwrap_or(myriad_placement::SHARD_DEPTH_MAX))
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Node {
    /// Starts recovery of abandoned intents (at once, then every `recovery_interval`) and the
    /// bookkeeping of ancestor replicas.
    pub(crate) fn start_tasks(self: &Arc<Self>) {
        let rec = self.clone();
        let recovery = tokio::spawn(async move {
            let mut seen = rec.recover(&HashSet::new(), true).await;
            loop {
                tokio::time::sleep(rec.env.config().recovery_interval).await;
                seen = rec.recover(&seen, false).await;
            }
        });
        let keeper = self.clone();
        let bookkeeping = tokio::spawn(async move {
            loop {
                tokio::time::sleep(keeper.bookkeeping_interval()).await;
                keeper.replica_bookkeeping().await;
            }
        });
        if let Ok(mut t) = self.tasks.lock() {
            t.push(recovery);
            t.push(bookkeeping);
        }
    }

    /// Ends the background tasks; requests in flight finish on their own.
    pub(crate) fn stop(&self) {
        if let Ok(mut t) = self.tasks.lock() {
            for task in t.drain(..) {
                task.abort();
            }
        }
    }

    pub(crate) fn state(&self) -> Arc<MapState> {
        self.env.map()
    }

    fn own(&self, st: &MapState, owner: NodeId) -> Result<(), FsError> {
        if owner == self.me {
            Ok(())
        } else {
            Err(FsError::Redirect(Box::new(st.map.clone())))
        }
    }

    pub(crate) async fn dispatch(
        self: &Arc<Self>,
        from: Option<NodeId>,
        epoch: u64,
        caller: Caller,
        body: Request,
    ) -> Result<Response, FsError> {
        if from.is_none() && body.is_server_only() {
            return Err(FsError::PermissionDenied);
        }
        // Client requests, and clients' hard-link operations forwarded by another server.
        if from.is_none() || matches!(body, Request::AtInode { .. }) {
            self.env.admit(&body)?;
        }
        let st = self.state();
        if !body.is_admin() && epoch > st.map.epoch {
            return Err(FsError::MapTooOld(st.map.epoch));
        }
        let cs = st.map.chunk_size_bytes;
        // A request naming a hard link is applied at the inode's home.
        if let Some(path) = body.link_resolved_path()
            && let Some((home, ino)) = self.link_target(path)?
        {
            let path = path.to_string();
            let op = body
                .into_inode_op()
                .ok_or_else(|| FsError::Io("not an inode operation".into()))?;
            return self.forward_to_home(caller, &path, home, ino, op).await;
        }
        match body {
            Request::Echo(p) => Ok(Response::Echo(p)),
            Request::Link { from, to } => {
                validate_path(&from)?;
                self.own_entry(&st, &from)?;
                self.link(&caller, &from, &to).await
            }
            Request::PutLinkRef { path, ino, home } => {
                let (dir, name) = self.entry_target(&st, &path)?;
                let m = Mutation::PutLinkRef {
                    dir: dir.clone(),
                    name,
                    ino,
                    home,
                };
                let (out, _) = self.run_touching(m, &dir, true, |_| true).await?;
                inode_response(out)
            }
            Request::AdjustLinks { ino, delta } => self.adjust_links(ino, delta).await,
            Request::AtInode { ino, caller, op } => self.at_inode(ino, caller, op, cs).await,
            Request::Stat { path } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.search(&caller, &path).await?;
                let i = self.lookup(&path).await?;
                Ok(Response::Attr(self.resolve(i).await?))
            }
            Request::StatMany { dir, names } => {
                validate_path(&dir)?;
                if names.len() > limits::STAT_MANY_MAX {
                    return Err(FsError::InvalidArgument(format!(
                        "at most {} names per stat_many",
                        limits::STAT_MANY_MAX
                    )));
                }
                self.own_dir_part(&st, &dir)?;
                self.access_dir(&caller, &dir, perm::EXEC).await?;
                let rec = self.store.dir(&dir).map_err(storage_err)?;
                let mut out = Vec::with_capacity(names.len());
                for name in names {
                    let r = match myriad_proto::validate_name(&name) {
                        Ok(()) => match &rec {
                            // Another shard's name: the sender asks that shard's node.
                            Some(rec)
                                if rec.shard_for(myriad_placement::name_hash(&name)).is_none() =>
                            {
                                Err(crate::state::mutation::wrong_shard(&dir, rec))
                            }
                            _ => match self.lookup_in(&dir, &name).await {
                                Ok(i) => self.resolve(i).await,
                                Err(e) => Err(e),
                            },
                        },
                        Err(e) => Err(e),
                    };
                    out.push(r);
                }
                Ok(Response::Attrs(out))
            }
            Request::Fetch { path, max_bytes } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.search(&caller, &path).await?;
                let inode = self.lookup(&path).await?;
                if let (FileKind::HardLink, Some(home)) = (inode.kind, inode.link_home) {
                    let req = Request::AtInode {
                        ino: inode.ino,
                        caller,
                        op: InodeOp::Fetch { max_bytes },
                    };
                    return self.call_node(home, req).await;
                }
                if inode.kind == FileKind::File {
                    perm::require(&inode, &caller, perm::READ)?;
                }
                let data = if inode.kind == FileKind::File {
                    let n = max_bytes.min(cs).min(limits::IO_BYTES_MAX);
                    self.read_range_repairing(inode.ino, 0, n, inode.size.min(cs))
                        .await?
                } else {
                    Vec::new()
                };
                Ok(Response::Fetched { inode, data })
            }
            Request::ReadDir {
                path,
                from: position,
                after,
                limit,
            } => {
                validate_path(&path)?;
                self.own_dir_part(&st, &path)?;
                self.access_dir(&caller, &path, perm::READ).await?;
                match self.readdir_shard(&path, position, after, limit)? {
                    Response::DirPage {
                        mut entries,
                        next,
                        shard_end,
                        map,
                    } => {
                        for e in &mut entries {
                            if e.inode.kind == FileKind::HardLink {
                                e.inode = self.resolve(e.inode.clone()).await?;
                            }
                        }
                        Ok(Response::DirPage {
                            entries,
                            next,
                            shard_end,
                            map,
                        })
                    }
                    other => Ok(other),
                }
            }
            Request::GetShardMap { dir } => {
                validate_path(&dir)?;
                Ok(Response::ShardMap(Box::new(self.shard_map_of(&st, &dir)?)))
            }
            Request::ShardCreate { dir, ino, shards } => {
                validate_path(&dir)?;
                self.applier
                    .run(Mutation::Shard(crate::state::mutation::ShardMutation::Create {
                        dir,
                        ino,
                        shards,
                    }))
                    .await?;
                Ok(Response::Unit)
            }
            Request::ShardImport {
                dir,
                ino,
                txid,
                child,
                entries,
            } => {
                validate_path(&dir)?;
                self.shard_import(&st, dir, ino, txid, child, entries).await
            }
            Request::ShardFinish {
                dir,
                txid,
                child,
                reveal,
            } => {
                validate_path(&dir)?;
                self.applier
                    .run(Mutation::Shard(crate::state::mutation::ShardMutation::Finish {
                        dir,
                        txid,
                        child,
                        reveal,
                    }))
                    .await?;
                Ok(Response::Unit)
            }
            Request::ShardMapChange {
                dir,
                ino,
                shard,
                split,
            } => {
                validate_path(&dir)?;
                self.own_dir(&st, &dir)?;
                if !shard.is_valid() {
                    return Err(FsError::InvalidArgument("bad shard".into()));
                }
                self.applier
                    .run(Mutation::Shard(crate::state::mutation::ShardMutation::MapChange {
                        dir,
                        ino,
                        shard,
                        split,
                    }))
                    .await?;
                Ok(Response::Unit)
            }
            Request::Read {
                path,
                ino,
                offset,
                len,
            } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.search(&caller, &path).await?;
                let inode = self.lookup(&path).await?;
                if inode.kind == FileKind::Directory {
                    return Err(FsError::IsADirectory);
                }
                if inode.ino != ino {
                    return Err(FsError::Stale);
                }
                perm::require(&inode, &caller, perm::READ)?;
                let len = len.min(limits::IO_BYTES_MAX);
                let data = self
                    .read_range_repairing(ino, offset, len, inode.size.min(cs))
                    .await?;
                Ok(Response::Data {
                    inode: Some(inode),
                    data,
                })
            }
            Request::ReadChunk {
                ino,
                chunk,
                offset,
                len,
            } => {
                if chunk == 0 {
                    return Err(FsError::InvalidArgument("chunk 0 is read with Read".into()));
                }
                self.own(&st, st.ring.owner_of_chunk(ino, chunk))?;
                let len = len.min(limits::IO_BYTES_MAX).min(cs.saturating_sub(offset));
                let start = chunk.saturating_mul(cs).saturating_add(offset);
                let data = self
                    .read_range_repairing(ino, start, len, start.saturating_add(len))
                    .await?;
                Ok(Response::Data { inode: None, data })
            }
            Request::Readlink { path } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.search(&caller, &path).await?;
                let inode = self.resolve(self.lookup(&path).await?).await?;
                inode
                    .symlink_target
                    .ok_or_else(|| FsError::InvalidArgument("not a symbolic link".into()))
                    .map(Response::Link)
            }
            Request::Sync { path, ino } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.applier.run(Mutation::Barrier).await?;
                // What is durable now must still hold the file: a crash before the fsync
                // loses a non-durable create, and then the close must not report success.
                let i = self.lookup(&path).await?;
                if i.ino != ino {
                    return Err(FsError::Stale);
                }
                Ok(Response::Unit)
            }
            Request::Create {
                path,
                mode,
                exclusive,
                data,
                durable,
            } => {
                let (dir, name) = self.entry_target(&st, &path)?;
                let parent = self.may_create(&caller, &path).await?;
                let (gid, mode) =
                    perm::new_owner_group(parent.as_ref(), &caller, FileKind::File, mode);
                self.note_added(&dir);
                let m = Mutation::CreateFile {
                    dir: dir.clone(),
                    name,
                    mode,
                    uid: caller.uid,
                    gid,
                    exclusive,
                    data,
                    now: now_ns(),
                };
                let created = |o: &Outcome| matches!(o, Outcome::Created(_));
                match self.run_touching(m, &dir, durable, created).await? {
                    (Outcome::Created(i), parent) => Ok(Response::Changed {
                        inode: Some(i),
                        parent,
                    }),
                    // A non-exclusive create of an existing name opens it: a hard-link name
                    // answers with its inode.
                    (Outcome::Inode(i), _) => Ok(Response::Attr(self.resolve(i).await?)),
                    _ => Err(FsError::Io("unexpected outcome".into())),
                }
            }
            Request::Symlink { path, target } => {
                let (dir, name) = self.entry_target(&st, &path)?;
                let parent = self.may_create(&caller, &path).await?;
                let (gid, _) =
                    perm::new_owner_group(parent.as_ref(), &caller, FileKind::Symlink, 0o777);
                self.note_added(&dir);
                if target.is_empty()
                    || target.len() > limits::SYMLINK_TARGET_BYTES_MAX
                    || target.contains('\0')
                {
                    return Err(FsError::InvalidArgument(
                        "symlink target must be 1..=4096 bytes without NUL".into(),
                    ));
                }
                let m = Mutation::Symlink {
                    dir: dir.clone(),
                    name,
                    target,
                    uid: caller.uid,
                    gid,
                    now: now_ns(),
                };
                changed_response(self.run_touching(m, &dir, true, |_| true).await?)
            }
            Request::Mknod {
                path,
                kind,
                mode,
                rdev,
            } => {
                let (dir, name) = self.entry_target(&st, &path)?;
                let parent = self.may_create(&caller, &path).await?;
                // As Linux: only root (CAP_MKNOD) makes device nodes.
                if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) && caller.uid != 0 {
                    return Err(FsError::NotPermitted);
                }
                let (gid, mode) = perm::new_owner_group(parent.as_ref(), &caller, kind, mode);
                self.note_added(&dir);
                let m = Mutation::Mknod {
                    dir: dir.clone(),
                    name,
                    kind,
                    mode,
                    rdev,
                    uid: caller.uid,
                    gid,
                    now: now_ns(),
                };
                changed_response(self.run_touching(m, &dir, true, |_| true).await?)
            }
            Request::SetXattr {
                path,
                name,
                value,
                mode,
            } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.search(&caller, &path).await?;
                check_xattr_name(&name)?;
                if value
                    .as_ref()
                    .is_some_and(|v| v.len() > limits::XATTR_TOTAL_BYTES_MAX)
                {
                    return Err(FsError::TooLarge);
                }
                let inode = self.lookup(&path).await?;
                // As Linux: user.* only on regular files and directories; the caller needs
                // write permission (the sticky-directory owner rule does not apply here).
                if !matches!(inode.kind, FileKind::File | FileKind::Directory) {
                    return Err(FsError::NotPermitted);
                }
                perm::require(&inode, &caller, perm::WRITE)?;
                let (dir, name_) = attrs_key(&path);
                self.mutate_inode(Mutation::SetAttr {
                    dir,
                    name: name_,
                    change: InodeChange::Xattr {
                        name,
                        value: value.map(serde_bytes::ByteBuf::into_vec),
                        mode,
                    },
                    now: now_ns(),
                })
                .await
            }
            Request::Unlink { path } => {
                let (dir, name) = self.entry_target(&st, &path)?;
                self.may_remove(&caller, &path).await?;
                let m = Mutation::Unlink {
                    dir: dir.clone(),
                    name,
                };
                let (outcome, parent) = self.run_touching(m, &dir, true, |_| true).await?;
                if let Outcome::InodeGc(removed, gc) = outcome {
                    if let Some(txid) = gc {
                        self.spawn_gc(txid);
                    }
                    if removed.kind == FileKind::HardLink {
                        self.drop_link(&removed).await;
                    }
                }
                Ok(Response::Changed {
                    inode: None,
                    parent,
                })
            }
            Request::SetAttr { path, set } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.search(&caller, &path).await?;
                let set = perm::check_setattr(&self.lookup(&path).await?, &caller, &set)?;
                let (dir, name) = attrs_key(&path);
                let changes_access = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
                let reply = self
                    .mutate_inode(Mutation::SetAttr {
                        dir,
                        name,
                        change: InodeChange::Attr(set),
                        now: now_ns(),
                    })
                    .await?;
                if let Response::Attr(i) = &reply
                    && i.kind == FileKind::Directory
                    && changes_access
                {
                    // Acknowledged only once every replica has the new permissions.
                    self.notify_subscribers(&path, Some(i.clone())).await;
                }
                Ok(reply)
            }
            Request::Write {
                path,
                ino,
                offset,
                data,
                opened,
            } => {
                let (dir, name) = self.file_target(&st, &path)?;
                let target = self.may_write_file(&caller, &path, opened).await?;
                if data.len() as u64 > limits::IO_BYTES_MAX {
                    return Err(FsError::InvalidArgument(
                        "write larger than the I/O limit".into(),
                    ));
                }
                self.kill_setid(&dir, &name, target.as_ref(), &caller)
                    .await?;
                self.mutate_inode(Mutation::Write {
                    dir,
                    name,
                    ino,
                    offset,
                    data,
                    now: now_ns(),
                })
                .await
            }
            Request::ExtendSize {
                path,
                ino,
                size,
                opened,
            } => {
                let (dir, name) = self.file_target(&st, &path)?;
                let target = self.may_write_file(&caller, &path, opened).await?;
                self.kill_setid(&dir, &name, target.as_ref(), &caller)
                    .await?;
                self.mutate_inode(Mutation::ExtendSize {
                    dir,
                    name,
                    ino,
                    size,
                    now: now_ns(),
                })
                .await
            }
            Request::Truncate {
                path,
                ino,
                size,
                opened,
            } => {
                let (dir, name) = self.file_target(&st, &path)?;
                let target = self.may_write_file(&caller, &path, opened).await?;
                self.kill_setid(&dir, &name, target.as_ref(), &caller)
                    .await?;
                match self
                    .applier
                    .run(Mutation::Truncate {
                        dir,
                        name,
                        ino,
                        size,
                        now: now_ns(),
                    })
                    .await?
                {
                    Outcome::InodeGc(inode, gc) => {
                        if let Some(txid) = gc {
                            // Trim before replying: a later extend must read zeros, not old bytes.
                            if let Err(e) = self.run_gc(txid).await {
                                tracing::warn!(
                                    "truncate of ino {}: chunk trim deferred to recovery: {e}",
                                    inode.ino
                                );
                            }
                        }
                        Ok(Response::Attr(inode))
                    }
                    _ => Err(FsError::Io("unexpected outcome".into())),
                }
            }
            Request::WriteChunk {
                ino,
                chunk,
                offset,
                data,
            } => {
                if chunk == 0 {
                    return Err(FsError::InvalidArgument(
                        "chunk 0 is written with Write".into(),
                    ));
                }
                self.own(&st, st.ring.owner_of_chunk(ino, chunk))?;
                self.applier
                    .run(Mutation::WriteChunk {
                        ino,
                        chunk,
                        offset,
                        data,
                    })
                    .await?;
                Ok(Response::Unit)
            }
            Request::ChunkTrim {
                ino,
                chunk,
                keep_bytes,
            } => {
                self.own(&st, st.ring.owner_of_chunk(ino, chunk))?;
                self.applier
                    .run(Mutation::ChunkTrim {
                        ino,
                        chunk,
                        keep_bytes,
                    })
                    .await?;
                Ok(Response::Unit)
            }
            Request::CopyRange(copy) => {
                self.file_target(&st, &copy.dst)?;
                self.copy_range(&caller, copy).await
            }
            Request::ChunkTrimFrom { ino, from_bytes } => {
                self.applier
                    .run(Mutation::ChunkTrimFrom { ino, from_bytes })
                    .await?;
                Ok(Response::Unit)
            }
            Request::DirTouch {
                path,
                ino,
                now_ns,
                nlink,
            } => {
                validate_path(&path)?;
                if path == "/" {
                    self.own(&st, st.ring.owner_of_dir("/"))?;
                } else {
                    self.own_entry(&st, &path)?;
                }
                let (dir, name) = attrs_key(&path);
                // Visible is enough: a lost touch costs a stale time, never data, and the
                // change it reports is already durable on its own partition.
                match self
                    .applier
                    .run_visible(Mutation::DirTouch {
                        dir,
                        name,
                        ino,
                        now: now_ns,
                        nlink,
                    })
                    .await?
                {
                    Outcome::Inode(i) => Ok(Response::Attr(i)),
                    _ => Ok(Response::Unit),
                }
            }
            Request::Mkdir { path, mode, shards } => {
                let (dir, name) = self.entry_target(&st, &path)?;
                let parent = self.may_create(&caller, &path).await?;
                let (gid, mode) =
                    perm::new_owner_group(parent.as_ref(), &caller, FileKind::Directory, mode);
                let depth = shard_depth(shards)?;
                let made = self
                    .mkdir(&path, dir.clone(), name, mode, depth, (caller.uid, gid))
                    .await;
                let inode = made?;
                self.note_added(&dir);
                let parent = self.touch_dir(&dir).await;
                Ok(Response::Changed {
                    inode: Some(inode),
                    parent,
                })
            }
            Request::Rmdir { path } => {
                if path == "/" {
                    return Err(FsError::Busy);
                }
                let (dir, name) = self.entry_target(&st, &path)?;
                self.may_remove(&caller, &path).await?;
                self.rmdir(&path, dir.clone(), name).await?;
                let parent = self.touch_dir(&dir).await;
                Ok(Response::Changed {
                    inode: None,
                    parent,
                })
            }
            Request::Rename { from, to, flags } => {
                validate_path(&from)?;
                validate_path(&to)?;
                if from == "/" || to == "/" {
                    return Err(FsError::Busy);
                }
                if to.starts_with(&format!("{from}/")) {
                    return Err(FsError::InvalidArgument(
                        "cannot move a directory into itself".into(),
                    ));
                }
                self.own_entry(&st, &from)?;
                self.may_remove(&caller, &from).await?;
                self.may_rename_to(&caller, &from, &to).await?;
                let local_target = self.entry_node(&to) == self.me;
                let (from_dir, to_dir) = (
                    split_parent(&from).0.to_string(),
                    split_parent(&to).0.to_string(),
                );
                let moved = self.lookup(&from).await.ok();
                match self.rename(from, to, flags).await {
                    Ok(()) => {
                        if let Some(i) = moved.filter(|i| i.kind == FileKind::HardLink) {
                            // The name moved, the inode lives at its home: its ctime
                            // changes there (seen under every name).
                            self.touch_link_home(&i).await;
                        }
                        self.touch_dir(&from_dir).await;
                        if local_target && to_dir != from_dir {
                            self.touch_dir(&to_dir).await;
                        }
                        Ok(Response::Unit)
                    }
                    // A destination in a shard that moved: learn where it is now; the
                    // client's retry goes there.
                    Err(FsError::WrongShard { dir, map }) => {
                        self.learn_shard_map(&dir, map.map(|m| *m)).await;
                        Err(FsError::Busy)
                    }
                    Err(e) => Err(e),
                }
            }
            req @ (Request::StatFs
            | Request::GetCounters
            | Request::ResetCounters
            | Request::GetMap
            | Request::InstallMap(_)) => {
                // The server answers these (Host::handle) before any partition sees them.
                let _ = req;
                Err(FsError::InvalidArgument(
                    "a request for the server, not for a partition".into(),
                ))
            }
            req @ (Request::FsckDirs { .. }
            | Request::FsckEntries { .. }
            | Request::FsckBlocks { .. }
            | Request::FsckBlockFrom { .. }
            | Request::FsckRepair(_)) => self.fsck(&caller, req).await,
            Request::DirObjectCreate { path, ino, depth } => {
                validate_path(&path)?;
                self.own_dir(&st, &path)?;
                self.create_dir_object(&path, ino, depth.min(myriad_placement::SHARD_DEPTH_MAX))
                    .await?;
                Ok(Response::Unit)
            }
            Request::DirObjectRemove { path, ino } => {
                validate_path(&path)?;
                self.own_dir(&st, &path)?;
                self.remove_dir_object(&path, ino).await?;
                Ok(Response::Unit)
            }
            Request::RenamePrepare {
                txid,
                coordinator,
                to,
                inode,
                flags,
                blocks,
            } => {
                validate_path(&to)?;
                self.own_entry(&st, &to)?;
                let blocks = blocks.into_iter().map(|(b, d)| (b, d.into_vec())).collect();
                self.applier
                    .run(Mutation::RenamePrepare {
                        txid,
                        coordinator,
                        to,
                        inode,
                        flags,
                        blocks,
                    })
                    .await?;
                Ok(Response::Unit)
            }
            Request::DirFreeze { path, txid } => {
                validate_path(&path)?;
                self.own_dir_part(&st, &path)?;
                self.applier.run(Mutation::DirFreeze { path, txid }).await?;
                Ok(Response::Unit)
            }
            Request::DirExport { path, txid, after } => {
                validate_path(&path)?;
                self.own_dir_part(&st, &path)?;
                self.dir_export(&path, txid, after)
            }
            Request::DirImport {
                path,
                txid,
                ino,
                shards,
                map,
                entries,
            } => {
                validate_path(&path)?;
                match shards.first() {
                    Some(s) if s.is_valid() && st.ring.owner_of_shard(&path, *s) == self.me => {}
                    Some(_) => return Err(FsError::Redirect(Box::new(st.map.clone()))),
                    None => self.own_dir(&st, &path)?,
                }
                self.applier
                    .run(Mutation::DirImport {
                        path,
                        txid,
                        ino,
                        shards,
                        map,
                        entries,
                    })
                    .await?;
                Ok(Response::Unit)
            }
            Request::DirFinish { path, txid, action } => {
                validate_path(&path)?;
                // No ownership check: keyed by (path, txid) and idempotent, and a node without
                // a part of `path` (already dropped, or never made) has nothing to do.
                self.applier
                    .run(Mutation::DirFinish { path, txid, action })
                    .await?;
                Ok(Response::Unit)
            }
            Request::GetAttrs {
                path,
                subscribe,
                seq,
            } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.serve_attrs(&path, from, subscribe, seq).await
            }
            Request::RenewAttrs { path, seq } => {
                validate_path(&path)?;
                self.own_entry(&st, &path)?;
                self.serve_attrs(&path, from, true, seq).await
            }
            Request::Unsubscribe { path, seq } => {
                if let Some(node) = from {
                    self.replicas.unsubscribe(&path, node, seq);
                }
                Ok(Response::Unit)
            }
            Request::AttrUpdate { path, inode } => {
                self.replicas.apply_update(&path, inode);
                Ok(Response::Unit)
            }
            Request::InvalidatePrefix { prefix } => {
                self.replicas.invalidate_prefix(&prefix);
                Ok(Response::Unit)
            }
            Request::Replicate { .. }
            | Request::ReplicaSeq
            | Request::ReplicaReset
            | Request::ReplicaCopy { .. }
            | Request::ReplicaCopyDone { .. }
            | Request::ReplicaRead { .. }
            | Request::ReplicaBlock { .. }
            | Request::FsckReplica => Err(FsError::InvalidArgument(
                "replication requests go to a backup, not the primary".into(),
            )),
            Request::Raft { .. } | Request::Lease | Request::PartitionSeqs => {
                Err(FsError::InvalidArgument(
                    "membership requests go to a server, not a partition".into(),
                ))
            }
            Request::RenameCommit { txid } => self.rename_target_resolve(txid, true).await,
            Request::RenameAbort { txid } => self.rename_target_resolve(txid, false).await,
        }
    }

    async fn rename_target_resolve(
        self: &Arc<Self>,
        txid: u64,
        commit: bool,
    ) -> Result<Response, FsError> {
        let target_dir = match self
            .store
            .intent(crate::state::mutation::prepare_key(txid))
            .map_err(storage_err)?
            .and_then(|b| crate::state::intent::Intent::decode(&b))
        {
            Some(crate::state::intent::Intent::RenameIn { dir, .. }) if commit => Some(dir),
            _ => None,
        };
        let outcome = self
            .applier
            .run(Mutation::RenameTargetResolve { txid, commit })
            .await?;
        if let Some(dir) = target_dir {
            self.touch_dir(&dir).await;
        }
        if let Outcome::Renamed(gc, dropped) = outcome {
            if let Some(gc) = gc {
                self.spawn_gc(gc);
            }
            if let Some(old) = dropped {
                self.drop_link(&old).await;
            }
        }
        Ok(Response::Unit)
    }

    /// Validates an entry path (not "/") that this node must own; returns (dir, name).
    fn entry_target(&self, st: &MapState, path: &str) -> Result<(String, String), FsError> {
        validate_path(path)?;
        if path == "/" {
            return Err(FsError::AlreadyExists);
        }
        self.own_entry(st, path)?;
        Ok(split_owned(path))
    }

    fn file_target(&self, st: &MapState, path: &str) -> Result<(String, String), FsError> {
        if path == "/" {
            return Err(FsError::IsADirectory);
        }
        self.entry_target(st, path)
    }

    /// Takes off `inode`'s set-id bits that a write or truncate by `caller` removes
    /// (`perm::setid_bits_killed`; the FUSE mount leaves this to the servers), before the
    /// change itself. `None`: root, who removes nothing.
    pub(crate) async fn kill_setid(
        &self,
        dir: &str,
        name: &str,
        inode: Option<&Inode>,
        caller: &Caller,
    ) -> Result<(), FsError> {
        let Some(inode) = inode else {
            return Ok(());
        };
        let kill = perm::setid_bits_killed(inode, caller);
        if kill == 0 {
            return Ok(());
        }
        let set = myriad_proto::SetAttr {
            mode: Some(inode.mode & 0o7777 & !kill),
            ..myriad_proto::SetAttr::default()
        };
        self.applier
            .run(Mutation::SetAttr {
                dir: dir.to_string(),
                name: name.to_string(),
                change: InodeChange::Attr(set),
                now: now_ns(),
            })
            .await?;
        Ok(())
    }

    /// Applies a change of a file's contents or size (copy.rs).
    pub(crate) async fn mutate_file(&self, m: Mutation) -> Result<Response, FsError> {
        self.mutate_inode(m).await
    }

    async fn mutate_inode(&self, m: Mutation) -> Result<Response, FsError> {
        match self.applier.run(m).await? {
            Outcome::Inode(i) | Outcome::InodeGc(i, _) => Ok(Response::Attr(i)),
            _ => Err(FsError::Io("unexpected outcome".into())),
        }
    }

    /// The visible inode at `path`, waiting while a multi-node operation holds the entry.
    pub(crate) async fn lookup(&self, path: &str) -> Result<Inode, FsError> {
        if path == "/" {
            let rec = self
                .store
                .dir("/")
                .map_err(storage_err)?
                .ok_or(FsError::NotFound)?;
            return rec.root_attrs.ok_or(FsError::NotFound);
        }
        let (dir, name) = split_parent(path);
        self.lookup_in(dir, name).await
    }

    pub(crate) async fn lookup_in(&self, dir: &str, name: &str) -> Result<Inode, FsError> {
        // Fast path: most entries are not pending and need no subscription.
        match self.store.entry(dir, name).map_err(storage_err)? {
            Some(EntryRecord {
                pending: None,
                inode: Some(i),
            }) => return Ok(i),
            Some(EntryRecord {
                pending: Some(_), ..
            }) => {}
            _ => {
                self.recheck_shard(dir, name)?;
                return Err(FsError::NotFound);
            }
        }
        let deadline = tokio::time::Instant::now() + self.env.config().pending_wait;
        loop {
            // Subscribe before reading again, so a resolution between the read and the wait
            // is not missed.
            let mut changed = self.changed.subscribe();
            match self.store.entry(dir, name).map_err(storage_err)? {
                Some(EntryRecord {
                    pending: None,
                    inode: Some(i),
                }) => return Ok(i),
                Some(EntryRecord {
                    pending: Some(_), ..
                }) => {
                    if tokio::time::timeout_at(deadline, changed.changed())
                        .await
                        .is_err()
                    {
                        return Err(FsError::Busy);
                    }
                }
                _ => {
                    self.recheck_shard(dir, name)?;
                    return Err(FsError::NotFound);
                }
            }
        }
    }

    /// A page of a frozen directory's entries with the chunk-0 blocks of its files, for a
    /// directory rename. Pages stop after ~2 MiB of data so a reply stays within a frame.
    fn dir_export(
        &self,
        path: &str,
        txid: u64,
        after: Option<String>,
    ) -> Result<Response, FsError> {
        let rec = self
            .store
            .dir(path)
            .map_err(storage_err)?
            .ok_or(FsError::NotFound)?;
        if rec.frozen != Some(txid) {
            return Err(FsError::Busy);
        }
        let (entries, next) = self.export_page(path, myriad_proto::Shard::ALL, after.as_deref())?;
        Ok(Response::Exported { entries, next })
    }

    /// Sends `body` to partition `node` (or runs it here if this server serves it).
    pub(crate) async fn call_node(
        self: &Arc<Self>,
        node: NodeId,
        body: Request,
    ) -> Result<Response, FsError> {
        self.env.call_partition(self.me, node, body).await
    }
}

/// The reply of a change of entries that made `out`'s inode, with the parent's attributes.
fn changed_response((out, parent): (Outcome, Option<Inode>)) -> Result<Response, FsError> {
    match inode_response(out)? {
        Response::Attr(i) => Ok(Response::Changed {
            inode: Some(i),
            parent,
        }),
        other => Ok(other),
    }
}

/// The reply of a mutation that yields an inode.
fn inode_response(out: Outcome) -> Result<Response, FsError> {
    match out {
        Outcome::Inode(i) | Outcome::InodeGc(i, _) | Outcome::Created(i) => Ok(Response::Attr(i)),
        _ => Err(FsError::Io("unexpected outcome".into())),
    }
}

/// Where the attributes of `path` are kept for `Mutation::SetAttr`: its entry, or for "/"
/// (which has no entry) the root's directory record, named ("/", "").
fn attrs_key(path: &str) -> (String, String) {
    if path == "/" {
        ("/".to_string(), String::new())
    } else {
        split_owned(path)
    }
}

pub(crate) fn split_owned(path: &str) -> (String, String) {
    let (d, n) = split_parent(path);
    (d.to_string(), n.to_string())
}

/// (total, free) bytes of the file system holding `dir`.
/// Only the `user.` namespace is stored; others are not supported (as on a file system
/// mounted without ACL or security-label support).
pub(crate) fn check_xattr_name(name: &str) -> Result<(), FsError> {
    if name.len() > limits::XATTR_NAME_BYTES_MAX {
        return Err(FsError::NameTooLong);
    }
    match name.strip_prefix("user.") {
        Some(rest) if !rest.is_empty() && !name.contains('\0') => Ok(()),
        Some(_) => Err(FsError::InvalidArgument(
            "empty or NUL-containing attribute name".into(),
        )),
        None => Err(FsError::NotSupported(format!(
            "extended attribute namespace of {name:?} (only user.* is stored)"
        ))),
    }
}
