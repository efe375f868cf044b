//! Ancestor resolution on a partition (TyrFS Algorithm 1): resolving a path's ancestors
//! for permission checks, from replicas of their metadata kept in `ancestor_replicas.rs`, and the
//! subscriptions and bookkeeping that keep those replicas fresh.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use myriad_placement::{PartitionId, parent_of};
use myriad_proto::ask;
use myriad_proto::reply::AttrLease;
use myriad_proto::{Caller, FileKind, Inode, Request, Response, WireError};

use crate::partition::ancestor_replicas::{Cached, LEASE_MARGIN, ancestors};
use crate::partition::core::Partition;
use crate::state::perm;
use myriad_proto::PeerRequest;

impl Partition {
    /// Attributes of directories `dirs` (for permission checks), per Algorithm 1; the first
    /// error in path order.
    pub(crate) async fn resolve_dirs(
        self: &Arc<Self>,
        dirs: &[String],
    ) -> Result<Vec<Inode>, WireError> {
        self.resolve_each(dirs).await.into_iter().collect()
    }

    /// Attributes of each of directories `dirs`, or why it could not be had: a walk down a
    /// path stops at the first component that fails it (a denied directory above an
    /// unreachable one gives EACCES, as on a local file system), so callers check in order.
    pub(crate) async fn resolve_each(
        self: &Arc<Self>,
        dirs: &[String],
    ) -> Vec<Result<Inode, WireError>> {
        let mut out: Vec<Option<Result<Inode, WireError>>> = vec![None; dirs.len()];
        let mut remote = Vec::new();
        for (i, dir) in dirs.iter().enumerate() {
            let owner = self.entry_node(dir);
            if owner == self.me {
                match self.lookup(dir).await {
                    Ok(inode) => {
                        out[i] = Some(Ok(inode));
                        self.replicas.stats.local.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    // A split moved the entry away: ask where it went (below).
                    Err(WireError::WrongShard { dir: parent, map }) => {
                        self.learn_shard_map(&parent, map.map(|m| *m)).await;
                    }
                    Err(e) => {
                        out[i] = Some(Err(e));
                        continue;
                    }
                }
            }
            if !self.replicas.config.enabled {
                remote.push((i, owner, false));
                continue;
            }
            match self.replicas.lookup(dir) {
                Cached::Hit(inode) => {
                    out[i] = Some(Ok(inode));
                    self.replicas.stats.local.fetch_add(1, Ordering::Relaxed);
                }
                Cached::Miss { popular } => remote.push((i, owner, popular)),
            }
        }
        let fetches = remote.iter().map(|&(i, _owner, subscribe)| {
            let path = dirs[i].clone();
            async move {
                let sent = Instant::now();
                let mark = self.replicas.mark();
                let seq = self.replicas.next_seq();
                let r = self
                    .ask_entry(&path, ask::get_attrs(&path, subscribe, seq))
                    .await;
                (i, path, sent, mark, r)
            }
        });
        for (i, path, sent, mark, r) in futures::future::join_all(fetches).await {
            self.replicas.stats.remote.fetch_add(1, Ordering::Relaxed);
            out[i] = Some(match r {
                Ok(AttrLease { inode, lease_ms }) => {
                    if lease_ms > 0 {
                        let valid =
                            sent + Duration::from_millis(lease_ms).saturating_sub(LEASE_MARGIN);
                        self.replicas.keep(&path, inode.clone(), valid, mark);
                    }
                    Ok(inode)
                }
                Err(e) => Err(e),
            });
        }
        out.into_iter()
            .map(|r| match r {
                Some(Ok(inode)) if inode.kind != FileKind::Directory => {
                    Err(WireError::NotADirectory)
                }
                Some(r) => r,
                None => Err(WireError::Protocol("an ancestor left unresolved".into())),
            })
            .collect()
    }

    /// The attributes of directory `dir` if this partition holds a replica of them under
    /// its lease (kept current by the owner's invalidations): for reads a copy answers
    /// (docs/zones.md "Nearest copy"). Not counted as this partition's request: its
    /// popularity is for what it serves.
    pub(crate) fn cached_attrs(&self, dir: &str) -> Option<Inode> {
        self.replicas.peek(dir)
    }

    /// Search permission on every ancestor of `path`; returns the parent's attributes (None
    /// for "/" itself). Root skips the checks (it passes them all).
    pub(crate) async fn search(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
    ) -> Result<Option<Inode>, WireError> {
        if caller.uid == 0 || path == "/" {
            return Ok(None);
        }
        let mut last = None;
        for r in self.resolve_each(&ancestors(path)).await {
            let inode = r?;
            perm::require(&inode, caller, perm::EXEC)?;
            last = Some(inode);
        }
        Ok(last)
    }

    /// Search on the ancestors and write on the parent: what creating or removing a name needs.
    pub(crate) async fn may_modify_dir(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
    ) -> Result<Option<Inode>, WireError> {
        let parent = self.search(caller, path).await?;
        if let Some(p) = &parent {
            perm::require(p, caller, perm::WRITE | perm::EXEC)?;
        }
        Ok(parent)
    }

    /// Search on the ancestors of `dir` and `want` on `dir` itself (readdir, stat_many).
    pub(crate) async fn access_dir(
        self: &Arc<Self>,
        caller: &Caller,
        dir: &str,
        want: u32,
    ) -> Result<(), WireError> {
        if caller.uid == 0 {
            return Ok(());
        }
        let mut dirs = ancestors(dir);
        dirs.push(dir.to_string());
        let n = dirs.len();
        for (k, r) in self.resolve_each(&dirs).await.into_iter().enumerate() {
            let inode = r?;
            perm::require(&inode, caller, if k + 1 == n { want } else { perm::EXEC })?;
        }
        Ok(())
    }

    /// Removing or renaming `path` away: write on the parent and the sticky-bit rule.
    pub(crate) async fn may_remove(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
    ) -> Result<(), WireError> {
        if let Some(parent) = self.may_modify_dir(caller, path).await?
            && parent.mode & perm::STICKY != 0
        {
            let target = self.lookup(path).await?;
            perm::require_sticky(&parent, &self.resolve(target).await?, caller)?;
        }
        Ok(())
    }

    /// Search on the ancestors and write on the file itself (`opened`: through a
    /// descriptor whose open checked access: `perm::require_write`). Returns the file's
    /// attributes, looked up for the check (`None` for root, who needs no check).
    pub(crate) async fn may_write_file(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
        opened: bool,
    ) -> Result<Option<Inode>, WireError> {
        if caller.uid == 0 {
            return Ok(None);
        }
        self.search(caller, path).await?;
        let inode = self.lookup(path).await?;
        perm::require_write(&inode, caller, opened)?;
        Ok(Some(inode))
    }

    /// What creating the name `path` needs (`may_modify_dir`), and the parent's attributes
    /// even for root: a set-group-id parent decides the new inode's group.
    pub(crate) async fn may_create(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
    ) -> Result<Option<Inode>, WireError> {
        if let Some(parent) = self.may_modify_dir(caller, path).await? {
            return Ok(Some(parent));
        }
        if path == "/" {
            return Ok(None);
        }
        Ok(self
            .resolve_dirs(&[parent_of(path).to_string()])
            .await?
            .pop())
    }

    /// Renaming `from` to `to`, beyond removing `from`: write on the new parent; in a
    /// sticky new parent, the rule for the entry replaced; and a directory moving to
    /// another parent needs write permission on itself (its ".." changes), as on Linux.
    pub(crate) async fn may_rename_to(
        self: &Arc<Self>,
        caller: &Caller,
        from: &str,
        to: &str,
    ) -> Result<(), WireError> {
        let Some(parent) = self.may_modify_dir(caller, to).await? else {
            return Ok(());
        };
        if parent.mode & perm::STICKY != 0
            && let Some(victim) = self.entry_attrs(to).await?
        {
            perm::require_sticky(&parent, &victim, caller)?;
        }
        if parent_of(from) != parent_of(to) {
            let src = self.resolve(self.lookup(from).await?).await?;
            if src.kind == FileKind::Directory {
                perm::require(&src, caller, perm::WRITE)?;
            }
        }
        Ok(())
    }

    /// The attributes of the entry `path` wherever it lives (resolved if a hard-link
    /// name); `None` if there is no such entry.
    pub(crate) async fn entry_attrs(
        self: &Arc<Self>,
        path: &str,
    ) -> Result<Option<Inode>, WireError> {
        let found = if self.entry_node(path) == self.me {
            self.lookup(path).await
        } else {
            let get = ask::get_attrs(path, false, 0);
            self.ask_entry(path, get).await.map(|a| a.inode)
        };
        match found {
            Ok(i) => Ok(Some(self.resolve(i).await?)),
            Err(WireError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GetAttrs` and `RenewAttrs` from partition `from` (a renewal subscribes again):
    /// the attributes of `path`, whose entry this partition holds, under a replica lease.
    pub(super) async fn peer_get_attrs(
        self: &Arc<Self>,
        st: &crate::cluster::MapState,
        from: Option<PartitionId>,
        path: String,
        (subscribe, seq): (bool, u64),
    ) -> Result<Response, WireError> {
        myriad_proto::validate_path(&path)?;
        self.own_entry(st, &path)?;
        self.serve_attrs(&path, from, subscribe, seq).await
    }

    /// `Unsubscribe` from partition `from`: it keeps no replica of `path` any more.
    pub(super) fn peer_unsubscribe(&self, from: Option<PartitionId>, path: &str, seq: u64) {
        if let Some(node) = from {
            self.replicas.unsubscribe(path, node, seq);
        }
    }

    /// `DirAttrsChanging` at directory `path`'s home: its mode or owner is about to change
    /// by client `by` (`before_attrs_change`).
    pub(super) async fn peer_dir_attrs_changing(
        &self,
        path: String,
        by: Option<u64>,
    ) -> Result<Response, WireError> {
        myriad_proto::validate_path(&path)?;
        if let Some(t) = self.leases() {
            t.before_attrs_change(&path, by).await;
        }
        Ok(Response::Unit)
    }

    /// `DirAttrsChanged` from another partition (`dir_attrs_changed`).
    pub(super) async fn peer_dir_attrs_changed(
        &self,
        path: String,
        inode: Inode,
        by: Option<u64>,
    ) -> Result<Response, WireError> {
        myriad_proto::validate_path(&path)?;
        self.dir_attrs_changed(&path, inode, by).await;
        Ok(Response::Unit)
    }

    /// Owner side of GetAttrs / RenewAttrs.
    pub(crate) async fn serve_attrs(
        self: &Arc<Self>,
        path: &str,
        from: Option<PartitionId>,
        subscribe: bool,
        seq: u64,
    ) -> Result<Response, WireError> {
        // Subscribe first, then read: a change committed before the read is in the answer,
        // and one committed after it finds the subscription and is pushed (a read before
        // subscribing could miss both: the old attributes under a fresh lease).
        let subscribed = match (subscribe && self.replicas.config.enabled, from) {
            (true, Some(node)) => Some((node, self.replicas.subscribe(path, node, seq))),
            _ => None,
        };
        let found = self.lookup(path).await;
        let lease_ms = match (&found, subscribed) {
            (Ok(inode), Some((_, lease))) if inode.kind == FileKind::Directory => {
                u64::try_from(lease.as_millis()).unwrap_or(0)
            }
            (_, Some((node, _))) => {
                self.replicas.withdraw(path, node, seq);
                0
            }
            _ => 0,
        };
        Ok(Response::AttrLease {
            inode: found?,
            lease_ms,
        })
    }

    /// Pushes a change of directory `path` to every subscriber and waits for each ack or its
    /// lease end, whichever comes first. Called before the change is acknowledged.
    pub(crate) async fn notify_subscribers(self: &Arc<Self>, path: &str, inode: Option<Inode>) {
        // Subscriptions made before a restart are forgotten: wait them out.
        let grace_end = self.replicas.grace_end;
        if Instant::now() < grace_end {
            tokio::time::sleep_until(grace_end).await;
        }
        let subs = self.replicas.live_subscribers(path);
        let sends = subs.into_iter().map(|(node, until)| {
            let inode = inode.clone();
            let path = path.to_string();
            async move {
                let deadline = until.saturating_duration_since(Instant::now());
                self.notify_one(
                    node,
                    Request::Peer(PeerRequest::AttrUpdate { path, inode }),
                    deadline,
                )
                .await;
            }
        });
        futures::future::join_all(sends).await;
    }

    /// After a change of directory `path`'s mode or owner to `inode`'s: tells its home,
    /// where an exclusive lease carries the attributes its grant found (the holder answers
    /// creates behind by them: the permission checks, a new file's group). Bounded by the
    /// lease period (an unreachable home's holder has lost its lease by then).
    pub(crate) async fn tell_dir_home(
        self: &Arc<Self>,
        path: &str,
        inode: &Inode,
        by: Option<u64>,
    ) {
        let home = self.dir_owner(path);
        if home == self.me {
            self.dir_attrs_changed(path, inode.clone(), by).await;
            return;
        }
        let req = Request::Peer(PeerRequest::DirAttrsChanged {
            path: path.to_string(),
            inode: inode.clone(),
            by,
        });
        self.notify_one(home, req, crate::commit::leases::LEASE_PERIOD)
            .await;
    }

    /// Before a change of directory `path`'s mode or owner: its home grants no exclusive
    /// lease on it until told of the change (`tell_dir_home`), and every other client's
    /// exclusive lease there is given back first, with the changes its holder answered
    /// behind by the old attributes (`LeaseTable::before_attrs_change`). Bounded: a
    /// silent home's holders have lost their leases by the deadline.
    pub(crate) async fn hold_dir_home(self: &Arc<Self>, path: &str, by: Option<u64>) {
        let home = self.dir_owner(path);
        if home == self.me {
            if let Some(t) = self.leases() {
                t.before_attrs_change(path, by).await;
            }
            return;
        }
        let req = Request::Peer(PeerRequest::DirAttrsChanging {
            path: path.to_string(),
            by,
        });
        self.notify_one(home, req, 2 * crate::commit::leases::LEASE_PERIOD)
            .await;
    }

    /// `DirAttrsChanged` at the directory's home: the exclusive lease's attributes are
    /// refreshed (later grants tell the new ones), and another client's exclusive lease
    /// is recalled (the changer's own client refreshes its copy from the change's answer).
    pub(crate) async fn dir_attrs_changed(&self, path: &str, inode: Inode, by: Option<u64>) {
        if let Some(t) = self.leases() {
            t.refresh_attrs(path, inode);
            t.before_read(path, by).await;
        }
    }

    /// Sends one change notification until it is acknowledged, at most `deadline` (the end
    /// of the receiver's lease, after which it no longer trusts what the notification
    /// changes). An error is no acknowledgement: a subscriber whose server is briefly without
    /// its serving lease (a Raft leader paused), or a connection that broke, still holds its
    /// replica, so the notification is sent again. (Counting an error as an ack let a chmod
    /// return while a subscriber kept denying access for a lease.) Notifications are
    /// idempotent: the receiver never rolls a replica back.
    pub(super) async fn notify_one(
        self: &Arc<Self>,
        node: PartitionId,
        req: Request,
        deadline: Duration,
    ) {
        let started = Instant::now();
        let end = started + deadline;
        let mut backoff = crate::backoff::NOTIFY;
        loop {
            match tokio::time::timeout_at(end, self.call_node(node, req.clone())).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) if Instant::now() + backoff.peek() < end => {
                    tracing::debug!(node = %node, "permission change not acknowledged ({e}); again");
                    backoff.wait().await;
                }
                Ok(Err(_)) | Err(_) => {
                    tracing::warn!(
                        node = %node,
                        "no acknowledgement of a permission change before the lease ended"
                    );
                    tokio::time::sleep_until(end).await;
                    break;
                }
            }
        }
        let stats = &self.replicas.stats;
        stats.invalidations.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        stats.invalidation_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Tells every partition to drop replicas under `prefix` (a directory was renamed away).
    /// (Every partition keeps replicas of its own: before partition ids were a type of their
    /// own, this went to the partitions numbered like the servers, 1..=servers, so most
    /// partitions kept replicas of a renamed directory until their lease ran out.)
    pub(crate) async fn broadcast_invalidate(self: &Arc<Self>, prefix: &str) {
        self.replicas.invalidate_prefix(prefix);
        let lease = self.replicas.config.lease;
        let nodes: Vec<PartitionId> = self
            .state()
            .map
            .partitions
            .iter()
            .map(|p| p.id)
            .filter(|&p| p != self.me)
            .collect();
        let sends = nodes.into_iter().map(|node| {
            let req = PeerRequest::InvalidatePrefix {
                prefix: prefix.to_string(),
            };
            async move { self.notify_one(node, Request::Peer(req), lease).await }
        });
        futures::future::join_all(sends).await;
    }

    /// One bookkeeping pass: renew popular replicas, evict unpopular ones.
    pub(crate) async fn replica_bookkeeping(self: &Arc<Self>) {
        if !self.replicas.config.enabled {
            return;
        }
        let (renew, evicted) = self.replicas.bookkeeping();
        for (path, seq) in evicted {
            let _ = self
                .call_entry(
                    &path.clone(),
                    Request::Peer(PeerRequest::Unsubscribe { path, seq }),
                )
                .await;
        }
        for path in renew {
            let sent = Instant::now();
            let mark = self.replicas.mark();
            if let Ok(Response::AttrLease { inode, lease_ms }) = self
                .call_entry(
                    &path,
                    Request::Peer(PeerRequest::RenewAttrs {
                        path: path.clone(),
                        seq: self.replicas.next_seq(),
                    }),
                )
                .await
                && lease_ms > 0
            {
                let valid = sent + Duration::from_millis(lease_ms).saturating_sub(LEASE_MARGIN);
                self.replicas.keep(&path, inode, valid, mark);
            }
        }
    }

    pub(crate) fn bookkeeping_interval(&self) -> Duration {
        (self.replicas.config.window / crate::partition::popularity::SUB_WINDOWS as u32)
            .min(self.replicas.config.lease / 4)
            .max(crate::backoff::BOOKKEEPING_MIN)
    }
}
