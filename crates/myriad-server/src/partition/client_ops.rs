//! A partition's answers to client requests (`ClientRequest`): ownership and permission
//! checks, then the family module that does the work.

use std::sync::Arc;

use myriad_placement::split_parent;
use myriad_proto::{
    Caller, ClientRequest, FileKind, FsError, Inode, InodeOp, PeerRequest, Request, Response,
    limits, validate_path,
};

use crate::cluster::MapState;
use crate::partition::core::{
    Partition, attrs_key, changed_response, check_xattr_name, shard_depth,
};
use crate::state::mutation::{InodeChange, Mutation, Outcome, storage_err};
use crate::state::perm;

impl Partition {
    /// A create with inode number `ino` reserved by another partition (the client took
    /// it before the directory split moved the name here): that partition marks it used
    /// for this one first (`PeerRequest::ClaimReserved`; asked again on a retry, it answers
    /// the same).
    async fn claim_if_foreign(
        self: &Arc<Self>,
        client: u64,
        ino: myriad_proto::InodeId,
    ) -> Result<(), FsError> {
        let owner = myriad_proto::PartitionId(u32::try_from(ino.0 >> 40).unwrap_or(u32::MAX));
        if owner == self.me {
            return Ok(());
        }
        if self.state().map.partition(owner).is_none() {
            return Err(FsError::InvalidArgument(format!(
                "inode number {ino} is not one any partition reserved"
            )));
        }
        self.call_node(
            owner,
            Request::Peer(PeerRequest::ClaimReserved {
                client,
                ino,
                by: self.me,
            }),
        )
        .await?;
        Ok(())
    }

    /// Serves one client request (already admitted and checked against the map).
    pub(super) async fn serve_client(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        body: ClientRequest,
    ) -> Result<Response, FsError> {
        let cs = st.map.chunk_size_bytes;
        match body {
            ClientRequest::Echo(p) => Ok(Response::Echo(p)),
            ClientRequest::Lock(req) => self.serve_lock(st, req).await,
            ClientRequest::KeepOpen { inos } => self.keep_open(&inos),
            ClientRequest::MarkReadOnly { path, mark, auto } => {
                validate_path(&path)?;
                self.own_dir(st, &path)?;
                // Freezing a tree is an administrator's act, as fsck is.
                if caller.uid != 0 {
                    return Err(FsError::PermissionDenied);
                }
                self.mark_read_only(&path, mark, auto).await?;
                Ok(Response::Unit)
            }
            ClientRequest::Grant {
                path,
                ino,
                write,
                opened,
            } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.grant(&caller, &path, ino, write, opened).await
            }
            // Unwrapped by `dispatch` when it comes from a client.
            ClientRequest::Once { .. }
            | ClientRequest::Resend { .. }
            | ClientRequest::Leased { .. }
            | ClientRequest::ReadAs { .. }
            | ClientRequest::Batch { .. } => Err(FsError::InvalidArgument(
                "a change sent once, a batch or a leased read comes from its client".into(),
            )),
            ClientRequest::ReserveIds { count } => {
                let client = crate::commit::once::task_client().ok_or_else(|| {
                    FsError::InvalidArgument(
                        "inode numbers are reserved by a change sent once".into(),
                    )
                })?;
                match self
                    .applier
                    .run(Mutation::ReserveIds { client, count })
                    .await?
                {
                    Outcome::Ids(first, count) => Ok(Response::Ids {
                        first: myriad_proto::InodeId(first),
                        count,
                    }),
                    _ => Err(FsError::Io("unexpected outcome".into())),
                }
            }
            ClientRequest::Link { from, to } => {
                validate_path(&from)?;
                self.own_entry(st, &from)?;
                self.link(&caller, &from, &to).await
            }
            ClientRequest::Stat { path } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.search(&caller, &path).await?;
                let i = self.lookup(&path).await?;
                Ok(Response::Attr(self.resolve(i).await?))
            }
            ClientRequest::OpenWrite { path } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.search(&caller, &path).await?;
                let i = self.lookup(&path).await?;
                // The file itself first: a missing one is NotFound wherever it would be.
                self.require_not_frozen(myriad_placement::parent_of(&path))?;
                Ok(Response::Attr(self.resolve(i).await?))
            }
            ClientRequest::StatMany { dir, names } => {
                validate_path(&dir)?;
                if names.len() > limits::STAT_MANY_MAX {
                    return Err(FsError::InvalidArgument(format!(
                        "at most {} names per stat_many",
                        limits::STAT_MANY_MAX
                    )));
                }
                self.own_dir_part(st, &dir)?;
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
            ClientRequest::Fetch { path, max_bytes } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.search(&caller, &path).await?;
                let inode = self.lookup(&path).await?;
                if let (FileKind::HardLink, Some(home)) = (inode.kind, inode.link_home) {
                    let req = PeerRequest::AtInode {
                        ino: inode.ino,
                        caller,
                        op: InodeOp::Fetch { max_bytes },
                    };
                    return self.call_node(home, Request::Peer(req)).await;
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
            ClientRequest::ReadDir {
                path,
                from: position,
                after,
                limit,
            } => {
                validate_path(&path)?;
                self.own_dir_part(st, &path)?;
                self.access_dir(&caller, &path, perm::READ).await?;
                match self.readdir_shard(&path, position, after, limit)? {
                    Response::DirPage {
                        mut entries,
                        next,
                        shard_end,
                        hidden,
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
                            hidden,
                            map,
                        })
                    }
                    other => Ok(other),
                }
            }
            ClientRequest::IndexCandidates {
                min_reads,
                quiet_ms,
            } => {
                // Without leases no gate sees the changes: no directory is known quiet.
                let Some(table) = self.leases() else {
                    return Ok(Response::IndexCandidates(Vec::new()));
                };
                Ok(Response::IndexCandidates(self.read_mostly.candidates(
                    min_reads,
                    std::time::Duration::from_millis(quiet_ms),
                    |dir| table.last_change(dir),
                )))
            }
            ClientRequest::GetShardMap { dir } => {
                validate_path(&dir)?;
                Ok(Response::ShardMap(Box::new(self.shard_map_of(st, &dir)?)))
            }
            ClientRequest::Read {
                path,
                ino,
                offset,
                len,
            } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                let inode = self.open_file(&caller, &path, ino, true).await?;
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
            ClientRequest::ReadChunk {
                ino,
                chunk,
                offset,
                len,
                ..
            } => {
                if chunk == 0 {
                    return Err(FsError::InvalidArgument("chunk 0 is read with Read".into()));
                }
                self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
                let coded = || self.store.coded(ino, chunk).map_err(storage_err);
                if let Some(c) = coded()? {
                    return Ok(Response::Coded(Box::new(c)));
                }
                let len = len.min(limits::IO_BYTES_MAX).min(cs.saturating_sub(offset));
                let start = chunk.saturating_mul(cs).saturating_add(offset);
                let data = self
                    .read_range_repairing(ino, start, len, start.saturating_add(len))
                    .await?;
                // Coded while it was read (its blocks may be gone): the record instead.
                if let Some(c) = coded()? {
                    return Ok(Response::Coded(Box::new(c)));
                }
                Ok(Response::Data { inode: None, data })
            }
            ClientRequest::Readlink { path } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.search(&caller, &path).await?;
                let inode = self.resolve(self.lookup(&path).await?).await?;
                inode
                    .symlink_target
                    .ok_or_else(|| FsError::InvalidArgument("not a symbolic link".into()))
                    .map(Response::Link)
            }
            ClientRequest::SyncPartition { incarnation } => {
                if incarnation != self.incarnation {
                    return Err(FsError::Io(format!(
                        "partition {}: its primary changed (a failover or restart) since it answered changes now being synced: they may be lost",
                        self.me
                    )));
                }
                self.applier.run(Mutation::Barrier).await?;
                Ok(Response::Unit)
            }
            ClientRequest::Sync { path, ino } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.applier.run(Mutation::Barrier).await?;
                // What is durable now must still hold the file: a crash before the fsync
                // loses a non-durable create, and then the close must not report success.
                let i = self.lookup(&path).await?;
                if i.ino != ino {
                    return Err(FsError::Stale);
                }
                Ok(Response::Unit)
            }
            ClientRequest::Create {
                path,
                mode,
                exclusive,
                data,
                durable,
                ino,
            } => {
                let (dir, name) = self.entry_target(st, &path)?;
                // A reserved number is the sending client's own: only a change sent once
                // says which client that is.
                let ino = match ino {
                    Some(i) => Some((
                        crate::commit::once::task_client().ok_or_else(|| {
                            FsError::InvalidArgument(
                                "a create with a reserved inode number is sent once".into(),
                            )
                        })?,
                        i,
                    )),
                    None => None,
                };
                let parent = self.may_create(&caller, &path).await?;
                let (gid, mode) =
                    perm::new_owner_group(parent.as_ref(), &caller, FileKind::File, mode);
                if let Some((client, i)) = ino {
                    self.claim_if_foreign(client, i).await?;
                }
                self.note_added(&dir);
                let m = Mutation::CreateFile {
                    dir: dir.clone(),
                    name,
                    mode,
                    uid: caller.uid,
                    gid,
                    exclusive,
                    data,
                    now: self.change_time(),
                    ino,
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
            ClientRequest::Symlink { path, target } => {
                let (dir, name) = self.entry_target(st, &path)?;
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
                    now: self.change_time(),
                };
                changed_response(self.run_touching(m, &dir, true, |_| true).await?)
            }
            ClientRequest::Mknod {
                path,
                kind,
                mode,
                rdev,
            } => {
                let (dir, name) = self.entry_target(st, &path)?;
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
                    now: self.change_time(),
                };
                changed_response(self.run_touching(m, &dir, true, |_| true).await?)
            }
            ClientRequest::SetXattr {
                path,
                name,
                value,
                mode,
            } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
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
                    now: self.change_time(),
                })
                .await
            }
            ClientRequest::Unlink { path } => {
                let (dir, name) = self.entry_target(st, &path)?;
                self.may_remove(&caller, &path).await?;
                let parent = self.unlink_entry(dir, name).await?;
                Ok(Response::Changed {
                    inode: None,
                    parent,
                })
            }
            ClientRequest::SetAttr { path, set } => {
                validate_path(&path)?;
                self.own_entry(st, &path)?;
                self.search(&caller, &path).await?;
                let before = self.lookup(&path).await?;
                let set = perm::check_setattr(&before, &caller, &set)?;
                let (dir, name) = attrs_key(&path);
                let changes_access = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
                if changes_access && before.kind == FileKind::Directory {
                    // Changes other clients answered behind in it by its old attributes
                    // are applied first (they were answered before this change).
                    // Boxed: this match is every client request's future, kept small.
                    Box::pin(self.hold_dir_home(&path)).await;
                }
                let reply = self
                    .mutate_inode(Mutation::SetAttr {
                        dir,
                        name,
                        change: InodeChange::Attr(set),
                        now: self.change_time(),
                    })
                    .await?;
                if let Response::Attr(i) = &reply
                    && i.kind == FileKind::Directory
                    && changes_access
                {
                    // Acknowledged only once every replica has the new permissions, and
                    // no client writes behind in the directory by its old ones.
                    // Boxed: this match is every client request's future, kept small.
                    Box::pin(futures::future::join(
                        self.notify_subscribers(&path, Some(i.clone())),
                        self.tell_dir_home(&path, i),
                    ))
                    .await;
                }
                Ok(reply)
            }
            ClientRequest::Write {
                path,
                ino,
                offset,
                data,
                opened,
            } => {
                let (dir, name, target) =
                    self.file_to_change(st, &caller, &path, ino, opened).await?;
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
                    now: self.change_time(),
                })
                .await
            }
            ClientRequest::ExtendSize {
                path,
                ino,
                size,
                opened,
            } => {
                let (dir, name, target) =
                    self.file_to_change(st, &caller, &path, ino, opened).await?;
                self.kill_setid(&dir, &name, target.as_ref(), &caller)
                    .await?;
                self.mutate_inode(Mutation::ExtendSize {
                    dir,
                    name,
                    ino,
                    size,
                    now: self.change_time(),
                })
                .await
            }
            ClientRequest::Truncate {
                path,
                ino,
                size,
                opened,
            } => {
                let (dir, name, target) =
                    self.file_to_change(st, &caller, &path, ino, opened).await?;
                self.kill_setid(&dir, &name, target.as_ref(), &caller)
                    .await?;
                match self
                    .applier
                    .run(Mutation::Truncate {
                        dir,
                        name,
                        ino,
                        size,
                        now: self.change_time(),
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
            ClientRequest::WriteChunk {
                ino,
                chunk,
                offset,
                data,
                ..
            } => {
                if chunk == 0 {
                    return Err(FsError::InvalidArgument(
                        "chunk 0 is written with Write".into(),
                    ));
                }
                self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
                if let Some(c) = self.store.coded(ino, chunk).map_err(storage_err)? {
                    self.uncode(ino, chunk, &c).await?;
                }
                // Noted before (no coding round starts on it meanwhile) and after the write
                // is applied: a round that began before the write reached the store found
                // nothing or less to code and let the chunk go, so only the note after it
                // makes sure the chunk is coded once settled (under load a write spent
                // longer than the settle time queued: a chunk was never coded).
                self.note_chunk_written(ino, chunk);
                let out = self
                    .applier
                    .run(Mutation::WriteChunk {
                        ino,
                        chunk,
                        offset,
                        data,
                    })
                    .await;
                self.note_chunk_written(ino, chunk);
                let out = out?;
                if matches!(out, Outcome::Coded(_)) {
                    // Coded between the look above and the write: the write is asked
                    // again, and uncodes it then.
                    return Err(FsError::Busy);
                }
                Ok(Response::Unit)
            }
            ClientRequest::CopyRange(copy) => {
                self.file_target(st, &copy.dst)?;
                self.copy_range(&caller, copy).await
            }
            ClientRequest::Mkdir { path, mode, shards } => {
                let (dir, name) = self.entry_target(st, &path)?;
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
            ClientRequest::Rmdir { path } => {
                if path == "/" {
                    return Err(FsError::Busy);
                }
                let (dir, name) = self.entry_target(st, &path)?;
                self.may_remove(&caller, &path).await?;
                self.rmdir(&path, dir.clone(), name).await?;
                let parent = self.touch_dir(&dir).await;
                Ok(Response::Changed {
                    inode: None,
                    parent,
                })
            }
            ClientRequest::Rename { from, to, flags } => {
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
                self.own_entry(st, &from)?;
                self.may_remove(&caller, &from).await?;
                self.may_rename_to(&caller, &from, &to).await?;
                let local_target = self.entry_node(&to) == self.me;
                let (from_dir, to_dir) = (
                    split_parent(&from).0.to_string(),
                    split_parent(&to).0.to_string(),
                );
                let moved = self.lookup(&from).await.ok();
                match self.rename(from, to, flags).await {
                    Ok(touched) => {
                        if let Some(i) = moved.filter(|i| i.kind == FileKind::HardLink) {
                            // The name moved, the inode lives at its home: its ctime
                            // changes there (seen under every name).
                            self.touch_link_home(&i).await;
                        }
                        if !touched {
                            self.touch_dir(&from_dir).await;
                        }
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
        }
    }
}

impl Partition {
    /// Removes the name `dir/name` (not a directory) and what only it kept; returns the
    /// parent's attributes after.
    pub(crate) async fn unlink_entry(
        self: &Arc<Self>,
        dir: String,
        name: String,
    ) -> Result<Option<Inode>, FsError> {
        let m = Mutation::Unlink {
            dir: dir.clone(),
            name,
            now: self.change_time(),
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
        Ok(parent)
    }
}
