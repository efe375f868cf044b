//! Write-behind, the client's calls (docs/fuse.md "Write-behind"): creates, writes into
//! chunk 0, setattrs, unlinks and rmdirs answered at once under an exclusive lease, from
//! what the lease covers and by the servers' own rules (`myriad_proto::access`), then
//! sent by a sender per directory part, in order but for a directory's setattr that
//! waits (`behind_journals.rs` keeps the journals).
//!
//! Every answer here is one the servers would give at that moment: the lease is
//! exclusive (nobody else has read or changed the directory part since it was granted),
//! the name's state is known from it, and the checks are theirs. What can still differ
//! is what the lease does not cover (a full disk, the directory made unwritable by a
//! change to its own entry elsewhere): reported by the next `fsync` or `close`.

use std::time::Duration;

use myriad_placement::split_parent;
use myriad_proto::access::{
    EXEC, WRITE, allowed, apply_setattr, check_setattr, new_owner_group, only_widens,
    require_sticky, require_write, without_unchanged_access,
};
use myriad_proto::{
    ClientRequest, Envelope, FileKind, FsError, Inode, InodeId, LeaseKey, PartitionId, Request,
    Response, SentOnce, SetAttr, WireError,
};

use crate::behind_journals::{BehindSpawner, BehindTask, Op, RESERVE, Taken};
use crate::client::{Client, Route};
use crate::dirs::ListFor;
use crate::file::FileHandle;
use crate::leases::Touch;
use myriad_proto::reply::Bundle;

/// A batch the servers cannot take now (unreachable, busy, moving) is tried again after
/// this, for as long as it takes.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Whether the names of `dir` are in the tree of a quota with a limit: changes there are
/// sent, never answered behind, so that one past a limit fails with EDQUOT when it is made
/// (docs/quotas.md "What clients see").
fn under_limited_quota(map: &myriad_placement::ClusterMap, dir: &str) -> bool {
    map.ext
        .quotas
        .iter()
        .any(|q| (q.max_files > 0 || q.max_bytes > 0) && q.encloses_dir(dir))
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What an unlink or rmdir answered behind removes: `name`'s attributes, if the caller
/// may write and search the held directory, the name is known and `fits` (else `None`:
/// sent at once, the servers answer), or the refusal the servers would give (the name
/// missing, the sticky rule).
fn removable(
    held: &crate::leases::Held<'_>,
    name: &str,
    caller: &myriad_proto::Caller,
    fits: impl Fn(&Inode) -> bool,
) -> Option<Result<Inode, FsError>> {
    let dir = held.dir_attrs()?;
    if !allowed(dir, caller, WRITE | EXEC) {
        return None;
    }
    let Some(inode) = held.lookup(name)? else {
        return Some(Err(FsError::NotFound));
    };
    if !fits(&inode) {
        return None;
    }
    Some(require_sticky(dir, &inode, caller).map(|()| inode))
}

/// The most partitions a group may have for `Client::reserve_everywhere` to ask each for
/// numbers (a cluster of eight servers at eight partitions each).
const RESERVE_EVERYWHERE_MAX: usize = 64;

impl Client {
    /// Turns write-behind on: `spawn` runs the client's background work (a sender per
    /// directory part, inode number reservations) by calling `run_behind` on a task.
    /// Needs leases (`ClientConfig::leases`) and changes answered once applied.
    pub fn set_behind_spawner(&self, spawn: BehindSpawner) {
        if self.config.leases && !self.config.durable_changes {
            self.leases.journal.set_spawner(spawn);
        }
    }

    /// Runs one piece of background work (`set_behind_spawner`).
    pub async fn run_behind(&self, task: BehindTask) {
        match task {
            BehindTask::Send(key) => self.send_behind(&key).await,
            BehindTask::Reserve(partition) => self.reserve_ids(partition).await,
        }
    }

    /// The error a change answered behind met when applied, for file `ino`: reported
    /// (taken) by its next `fsync` or `close`.
    pub fn take_behind_error(&self, ino: InodeId) -> Option<FsError> {
        self.leases.journal.take_error(ino)
    }

    /// Any error kept for a change answered behind, taken (a `syncfs` reports one).
    pub fn take_any_behind_error(&self) -> Option<FsError> {
        self.leases.journal.take_any_error()
    }

    #[must_use]
    pub fn has_behind_error(&self, ino: InodeId) -> bool {
        self.leases.journal.has_error(ino)
    }

    /// Runs `f` on `path`'s directory part if it is held exclusively and write-behind is
    /// on; `f` answers the change (or refuses it as the servers would), and gives the
    /// change to journal. The change's sender is started.
    fn behind<R>(
        &self,
        (path, emptied): (&str, Option<&str>),
        bytes: usize,
        f: impl FnOnce(
            &mut crate::leases::Held<'_>,
            &str,
            i64,
        ) -> Option<(Result<R, FsError>, Option<Op>)>,
    ) -> Option<Result<R, FsError>> {
        let journal = &self.leases.journal;
        if !journal.enabled() || path == "/" {
            return None;
        }
        let (dir, name) = split_parent(path);
        if under_limited_quota(&self.map(), dir) {
            return None;
        }
        let partition = self.entry_partition(path);
        let key = LeaseKey {
            partition,
            dir: dir.to_string(),
        };
        if !journal.has_room(&key, bytes) {
            return None;
        }
        let caller = self.acting_caller();
        self.recent_changes.note(&[path.to_string()]);
        // One time for the answer, the directory's times and the servers' (`Batch::times`).
        let at = now_ns();
        let held_at = (dir, emptied);
        let (result, started) = self.leases.behind(held_at, partition, caller, |mut held| {
            let (result, op) = f(&mut held, name, at)?;
            // A create, an unlink or an rmdir moves the directory's times.
            let touched = op.as_ref().and_then(|op| {
                let subdirs = match op.request {
                    ClientRequest::Create { .. } | ClientRequest::Unlink { .. } => 0,
                    ClientRequest::Rmdir { .. } => -1,
                    ClientRequest::MkdirNumbered { .. } => 1,
                    _ => return None,
                };
                Some(Touch { at, subdirs })
            });
            let started = op.map(|mut op| {
                op.at_ns = at;
                journal.push(&key, op)
            });
            Some(((result, started), touched))
        })?;
        if let Some(s) = started {
            journal.start(s);
        }
        Some(result)
    }

    /// A create answered behind: a new file under a reserved inode number, if the lease
    /// shows the name free (an existing name is left to the servers unless `exclusive`).
    pub(crate) fn create_behind(
        &self,
        path: &str,
        mode: u32,
        exclusive: bool,
    ) -> Option<Result<FileHandle, FsError>> {
        if !self.leases.journal.enabled() {
            return None;
        }
        let caller = self.acting_caller();
        let ino = self.number_behind(path, caller, "create")?;
        let r = self.behind((path, None), 0, |held, name, at| {
            let dir = held.dir_attrs()?.clone();
            if !allowed(&dir, caller, WRITE | EXEC) {
                return None;
            }
            let Some(known) = held.lookup(name) else {
                tracing::trace!(path, "create not behind: the name's state is not known");
                return None;
            };
            match known {
                Some(_) if exclusive => return Some((Err(FsError::AlreadyExists), None)),
                Some(_) => return None,
                None => {}
            }
            let (gid, mode) = new_owner_group(Some(&dir), caller, FileKind::File, mode);
            let inode = Inode::new(ino, FileKind::File, mode, (caller.uid, gid), at);
            held.set(name, Some(inode.clone()));
            tracing::trace!(path, ino = ino.0, "create answered behind");
            let op = Op::new(
                caller,
                Some(ino),
                ClientRequest::Create(myriad_proto::requests::Create {
                    path: path.to_string(),
                    mode,
                    exclusive: true,
                    data: Vec::new(),
                    durable: false,
                    ino: Some(ino),
                    data_at: None,
                    then: None,
                }),
            );
            Some((Ok(inode), Some(op)))
        });
        // An unused reserved number costs nothing.
        r.map(|r| {
            r.map(|inode| FileHandle {
                path: path.to_string(),
                inode,
                opened: true,
            })
        })
    }

    /// The inode number of `path`, about to be made behind by `caller` (`what`: a create
    /// or a mkdir): one reserved in its parent's partition, if its parent's part there is
    /// held for `caller`'s changes. Checked before a number is taken (`behind` checks
    /// again, under the lock); an unused number costs nothing.
    fn number_behind(
        &self,
        path: &str,
        caller: &myriad_proto::Caller,
        what: &str,
    ) -> Option<InodeId> {
        let partition = self.entry_partition(path);
        if !self
            .leases
            .answers_behind(split_parent(path).0, partition, caller)
        {
            tracing::trace!(
                path,
                "{what} not behind: no exclusive lease listed by this caller"
            );
            return None;
        }
        let (ino, started) = self.leases.journal.take_id(partition);
        self.leases.journal.start(started);
        if ino.is_none() {
            tracing::trace!(path, %partition, "{what} not behind: no inode number reserved yet");
            self.reserve_everywhere(partition);
        }
        ino
    }

    /// Numbers asked for in every partition of `partition`'s group that has none: the
    /// first create in a partition this client has not used yet comes before the numbers
    /// its lease asked for, and is sent at once, after the journals it must follow (a
    /// new directory's mkdir: 20-50 ms in `tar -x`, one per partition its tree reaches).
    /// Asked once such a create missed, they are there for the partitions next. Only in
    /// a group of at most `RESERVE_EVERYWHERE_MAX` partitions: each reservation is a
    /// durable, replicated change and state the partition keeps for the client, which a
    /// large cluster's mount writing in a few of them should not spread over all.
    fn reserve_everywhere(&self, partition: PartitionId) {
        let st = self.st();
        let group = st
            .map
            .partitions
            .iter()
            .find(|p| p.id == partition)
            .map(|p| p.group);
        let ids: Vec<PartitionId> = st
            .map
            .partitions
            .iter()
            .filter(|p| Some(p.group) == group)
            .map(|p| p.id)
            .collect();
        if ids.len() > RESERVE_EVERYWHERE_MAX {
            return;
        }
        for id in ids {
            let started = self.leases.journal.refill_ids(id);
            self.leases.journal.start(started);
        }
    }

    /// Before a create or unlink that could not be answered behind for want of an
    /// exclusive lease listed by this caller on its directory (one made by someone else,
    /// by another user, or by an earlier mount): asks for one, listing the directory (at
    /// most every few seconds per directory), so that this change and those that follow
    /// are answered behind. Returns whether it was asked.
    pub(crate) async fn claim_for_change(&self, path: &str) -> bool {
        if path == "/" {
            return false;
        }
        self.claim_dir(split_parent(path).0, self.entry_partition(path))
            .await
    }

    /// `claim_for_change` of directory `dir`, whose names (the one to change) live in
    /// `partition`.
    pub(crate) async fn claim_dir(&self, dir: &str, partition: PartitionId) -> bool {
        let journal = &self.leases.journal;
        if !journal.enabled() || under_limited_quota(&self.map(), dir) {
            return false;
        }
        let caller = self.acting_caller();
        if self.leases.answers_behind(dir, partition, caller) || !journal.claim(dir) {
            return false;
        }
        // As many names as a page may hold: only a directory listed whole in one page
        // is answered behind.
        let page = (None, myriad_proto::limits::READDIR_PAGE_MAX);
        if let Err(e) = self.readdir_page_for(dir, page, ListFor::Filling).await {
            tracing::debug!(dir, "directory not claimed: {e}");
        }
        true
    }

    /// A write into chunk 0 of a file the lease covers (one link), answered behind.
    pub(crate) fn write_behind(
        &self,
        h: &FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Option<Result<Inode, FsError>> {
        let end = offset.checked_add(data.len() as u64)?;
        if end > self.chunk_size() || data.len() as u64 > myriad_proto::limits::IO_BYTES_MAX {
            return None;
        }
        let caller = self.acting_caller();
        self.behind((&h.path, None), data.len(), |held, name, at| {
            let inode = held.lookup(name)??;
            if inode.ino != h.inode.ino
                || inode.kind != FileKind::File
                || !inode.alone_in_its_entry()
            {
                return None;
            }
            if let Err(e) = require_write(&inode, caller, h.opened) {
                return Some((Err(e), None));
            }
            let mut after = inode.clone();
            after.size = after.size.max(end);
            after.mtime_ns = at;
            after.ctime_ns = at;
            after.mode &= !myriad_proto::access::setid_bits_killed(&inode, caller);
            held.set(name, Some(after.clone()));
            let op = Op::new(
                caller,
                Some(inode.ino),
                ClientRequest::Write(myriad_proto::requests::Write {
                    path: h.path.clone(),
                    ino: inode.ino,
                    offset,
                    data: data.to_vec(),
                    opened: h.opened,
                }),
            );
            Some((Ok(after), Some(op)))
        })
    }

    /// A setattr (no size) of a file the lease covers (one link), or one of a directory
    /// that refuses nothing it allowed (its times; an owner it already has; read, write
    /// or search bits added), answered behind.
    pub(crate) fn setattr_behind(
        &self,
        path: &str,
        set: &SetAttr,
    ) -> Option<Result<Inode, FsError>> {
        let caller = self.acting_caller();
        // Every server takes a create carrying a setattr, and so does this process (one
        // made to speak an older protocol would write the create without it).
        let floor = self
            .st()
            .map
            .ext
            .protocol_floor
            .min(myriad_net::newest_protocol());
        self.behind((path, None), 0, |held, name, at| {
            let inode = held.lookup(name)??;
            if set.of.is_some_and(|of| of != inode.ino) {
                // Meant for a file no longer at this name (as the servers would answer).
                return Some((Err(FsError::Stale), None));
            }
            let directory = inode.kind == FileKind::Directory;
            if !directory && (inode.kind != FileKind::File || !inode.alone_in_its_entry()) {
                return None;
            }
            let checked = match check_setattr(&inode, caller, set) {
                Ok(c) => c,
                Err(e) => return Some((Err(e), None)),
            };
            // A directory's mode and owner are what changes behind in it and below it were
            // answered by: one that could refuse any of them takes the steps of
            // `Client::setattr` (docs/fuse.md "Write-behind"). Bits only added refuse
            // nothing; the servers still tell the directory's home and replicas.
            let sent = if directory {
                let sent = without_unchanged_access(&inode, set.clone());
                let left = without_unchanged_access(&inode, checked.clone());
                let narrows = |s: &SetAttr| {
                    s.uid.is_some()
                        || s.gid.is_some()
                        || s.mode.is_some_and(|m| !only_widens(inode.mode, m))
                };
                if narrows(&sent) || narrows(&left) {
                    return None;
                }
                sent
            } else {
                set.clone()
            };
            let mut after = inode.clone();
            apply_setattr(&mut after, &checked, at);
            held.set(name, Some(after.clone()));
            let op = Op::new(
                caller,
                Some(inode.ino),
                ClientRequest::SetAttr {
                    path: path.to_string(),
                    set: sent,
                },
            );
            let op = if directory {
                tracing::trace!(path, "directory setattr answered behind");
                op.of_directory()
            } else {
                op.into_create_from(floor)
            };
            Some((Ok(after), Some(op)))
        })
    }

    /// An unlink of a file the lease covers (one link), answered behind.
    pub(crate) fn unlink_behind(&self, path: &str) -> Option<Result<(), FsError>> {
        let caller = self.acting_caller();
        self.behind((path, None), 0, |held, name, _at| {
            let fits = |i: &Inode| i.kind != FileKind::Directory && i.alone_in_its_entry();
            let inode = match removable(held, name, caller, fits)? {
                Ok(i) => i,
                Err(e) => return Some((Err(e), None)),
            };
            held.set(name, None);
            tracing::trace!(path, "unlink answered behind");
            let op = Op::new(
                caller,
                Some(inode.ino),
                ClientRequest::Unlink {
                    path: path.to_string(),
                },
            );
            Some((Ok(()), Some(op)))
        })
    }

    /// An rmdir answered behind: the directory's name held in its parent's part, the
    /// directory itself held too and shown empty (`Leases::behind`'s `emptied`). Sent
    /// after the changes journaled in the directory (its unlinks: `Op::of_directory`),
    /// and whatever is sent later about it or below it waits for it (the fence).
    pub(crate) fn rmdir_behind(&self, path: &str) -> Option<Result<(), FsError>> {
        let caller = self.acting_caller();
        self.behind((path, Some(path)), 0, |held, name, _at| {
            let fits = |i: &Inode| i.kind == FileKind::Directory;
            if let Err(e) = removable(held, name, caller, fits)? {
                return Some((Err(e), None));
            }
            held.set(name, None);
            tracing::trace!(path, "rmdir answered behind");
            let op = Op::new(
                caller,
                None,
                ClientRequest::Rmdir {
                    path: path.to_string(),
                },
            );
            Some((Ok(()), Some(op.of_directory())))
        })
    }

    /// A mkdir answered behind (docs/fuse.md "mkdir behind"): under the parent's part
    /// held exclusively showing the name free, once every server takes it (the map's
    /// floor), with a number reserved in the parent's partition. Sent as a directory
    /// change (`Op::of_directory`): whatever is journaled in the new directory, and
    /// whatever is sent at once about it or below it, waits for it (the fence). The
    /// client holds the new directory from its birth, exclusive, listed whole and empty
    /// (`keep_born`); the servers grant that lease when they make its object.
    pub(crate) fn mkdir_behind(&self, path: &str, mode: u32) -> Option<Result<Inode, FsError>> {
        let journal = &self.leases.journal;
        let floor = self.st().map.ext.protocol_floor;
        if !journal.enabled() || floor < myriad_proto::MKDIR_BEHIND_SINCE {
            tracing::trace!(path, floor, "mkdir not behind: not every server takes it");
            return None;
        }
        let caller = self.acting_caller();
        let ino = self.number_behind(path, caller, "mkdir")?;
        let answered = tokio::time::Instant::now();
        let r = self.behind((path, None), 0, |held, name, at| {
            let dir = held.dir_attrs()?.clone();
            if !allowed(&dir, caller, WRITE | EXEC) {
                return None;
            }
            if held.lookup(name)?.is_some() {
                return Some((Err(FsError::AlreadyExists), None));
            }
            let (gid, mode) = new_owner_group(Some(&dir), caller, FileKind::Directory, mode);
            let mut inode = Inode::new(
                ino,
                FileKind::Directory,
                mode & 0o7777,
                (caller.uid, gid),
                at,
            );
            inode.nlink = 2;
            held.set(name, Some(inode.clone()));
            tracing::trace!(path, ino = ino.0, "mkdir answered behind");
            let op = Op::new(
                caller,
                None,
                ClientRequest::MkdirNumbered {
                    path: path.to_string(),
                    mode,
                    ino,
                },
            );
            Some((Ok((inode, held.period())), Some(op.of_directory())))
        })?;
        Some(r.map(|(inode, period)| {
            self.keep_born(path, &inode, (answered, period));
            inode
        }))
    }

    /// Reserves inode numbers in `partition` for creates behind (durable before use: a
    /// failover must not forget them).
    async fn reserve_ids(&self, partition: PartitionId) {
        let req = ClientRequest::ReserveIds { count: RESERVE };
        let r = self
            .call(Route::Partition(partition), Request::from(req))
            .await;
        let range = match r {
            Ok(Response::Ids { first, count }) => Some((first.0, count)),
            other => {
                tracing::debug!(%partition, "inode numbers not reserved: {other:?}");
                None
            }
        };
        self.leases.journal.reserved(partition, range);
    }

    /// The sender of `key`'s journal: batches (`Journal::take_batch`), one in flight, until
    /// it is empty.
    async fn send_behind(&self, key: &LeaseKey) {
        let journal = &self.leases.journal;
        let mut waited = false;
        loop {
            if !waited {
                journal.linger(key).await;
            }
            waited = false;
            let (caller, ops) = match journal.take_batch(key) {
                Taken::Batch(caller, ops) => (caller, ops),
                Taken::Blocked => {
                    // Another part's earlier changes first (a directory's times: `After`).
                    journal.wait_ready(key).await;
                    waited = true;
                    continue;
                }
                Taken::Empty => return,
            };
            let answers = self.for_caller(caller).send_batch(key, &ops).await;
            let mut again = Vec::new();
            let mut answered = Vec::new();
            for (op, answer) in ops.iter().zip(answers) {
                match answer {
                    Ok(()) => answered.push(op),
                    // Refused for now, not for good (busy, short of copies, a peer that
                    // timed out): sent again on its own, never given up while its server
                    // may take it (simulation seed 8007: an unlink refused `Unavailable`
                    // while a copy was down was dropped, and its client read the file back).
                    Err(e) if e.is_transient() || e.is_routing() || !again.is_empty() => {
                        again.push(op);
                    }
                    Err(e) => {
                        self.refused(key, op, e.into());
                        answered.push(op);
                    }
                }
            }
            journal.done(key, &answered);
            // Tried again in order, each routed on its own (the directory may have been
            // split, or the partition moved), before the rest of the journal.
            for op in again {
                let r = self.for_caller(op.caller.clone()).send_one(op).await;
                if let Err(e) = r {
                    self.refused(key, op, e);
                }
                journal.done(key, &[op]);
            }
        }
    }

    /// Change `op` of `key`'s journal was refused when applied: its error kept for an
    /// `fsync`, and what this client holds of the directory dropped (it showed the change
    /// made); a refused mkdir's new directory too (its birth lease held a directory that
    /// is not there).
    fn refused(&self, key: &LeaseKey, op: &Op, e: FsError) {
        self.leases.journal.failed(op, e);
        self.leases.drop_refused(key);
        if let ClientRequest::MkdirNumbered { path, .. } = &op.request {
            let born = LeaseKey {
                partition: self.dir_home(path),
                dir: path.clone(),
            };
            self.leases.drop_refused(&born);
        }
    }

    /// One batch of `key`'s journal; an answer per change (`Ok` once applied). A batch
    /// the servers cannot take now is sent again until they do (its changes are applied
    /// once whatever happens: each has its `OnceId`).
    async fn send_batch(&self, key: &LeaseKey, ops: &[Op]) -> Vec<Result<(), WireError>> {
        let taken = tokio::time::Instant::now();
        for op in ops {
            if let ClientRequest::MkdirNumbered { path, .. } = &op.request {
                self.leases.born_sent(path, taken);
            }
        }
        let mut waiting = Vec::with_capacity(ops.len());
        let mut reqs = Vec::with_capacity(ops.len());
        for op in ops {
            let (id, w) = self.once();
            waiting.push(w);
            reqs.push(SentOnce {
                id,
                request: op.request.clone(),
                visible: true,
            });
        }
        // Back-pressure (`held.rs`): the batch goes anyway once the wait is over (its
        // changes were answered already).
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        if let Err(e) = self.make_room(deadline).await {
            tracing::warn!("{e}");
        }
        let mut started = tokio::time::Instant::now();
        let route = Route::Partition(key.partition);
        loop {
            // The connection before the call: one that closes after the answer must not be
            // taken for the one the changes were answered over.
            let link = self.link_of(key.partition);
            let batch =
                myriad_proto::ask::batch(reqs.clone(), ops.iter().map(|o| o.at_ns).collect());
            let r = self
                .route(route.clone(), Request::Client(batch.request))
                .await
                .and_then(|r| batch.answer.of(r));
            match r {
                Ok(Bundle(answers)) if answers.len() == ops.len() => {
                    // Kept until durable, as if sent one by one (`held.rs`).
                    return answers
                        .into_iter()
                        .zip(reqs)
                        .map(|(a, req)| match a {
                            Ok(applied @ Response::Applied { .. }) => {
                                let link = (link.0.as_str(), link.1);
                                let req = Request::Client(Envelope::Once(req));
                                self.keep_applied((key.partition, &route), link, req, applied);
                                Ok(())
                            }
                            Ok(_) => Ok(()),
                            Err(e) => Err(e),
                        })
                        .collect();
                }
                Ok(Bundle(answers)) => {
                    let e = WireError::Protocol(format!(
                        "{} answers to a batch of {}",
                        answers.len(),
                        ops.len()
                    ));
                    return ops.iter().map(|_| Err(e.clone())).collect();
                }
                // Answered changes are never given up for a server that may come back
                // (or be replaced by a failover): a stopped server resumes, a dead one's
                // partition gets a new primary, and the batch goes there (each change
                // once). Meanwhile whoever waits for the journal is told it timed out.
                Err(e) if e.is_transient() || e.is_routing() => {
                    if started.elapsed() > self.config.request_timeout {
                        tracing::warn!(partition = %key.partition, "changes answered behind still not taken by their server, trying on: {e}");
                        started = tokio::time::Instant::now();
                    }
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                Err(e) => return ops.iter().map(|_| Err(e.clone())).collect(),
            }
        }
    }

    /// One change of a journal on its own, routed by its path; like a batch, never given
    /// up for a server that may come back (simulation seed 7071: an unlink whose answer
    /// was lost timed out here and was dropped, though the application had been told it
    /// was done; the next `fsync` reported the timeout once and the one after said all
    /// was durable, with the name still there).
    async fn send_one(&self, op: &Op) -> Result<(), FsError> {
        let (id, _waiting) = self.once();
        let req = Request::Client(Envelope::Once(SentOnce {
            id,
            request: op.request.clone(),
            visible: true,
        }));
        let mut started = tokio::time::Instant::now();
        let mut tries = crate::client::Tries::default();
        loop {
            let route = Route::Entry(op.path.clone());
            match self.route_tried(route, req.clone(), &mut tries).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_transient() || e.is_routing() => {
                    if started.elapsed() > self.config.request_timeout {
                        tracing::warn!(
                            path = op.path,
                            "a change answered behind still not taken by its server, trying on: {e}"
                        );
                        started = tokio::time::Instant::now();
                    }
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}
