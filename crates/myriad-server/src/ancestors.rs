//! Ancestor permission metadata: resolution, popularity-based replicas, and change
//! notification (TyrFS Algorithm 1, Sections V-B and VIII-D).
//!
//! To serve a request on `/a/b/c/f` a node must check search permission on `/`, `/a`,
//! `/a/b`, `/a/b/c`, whose inodes live in their parents' directory objects on other nodes.
//!
//! ```text
//! resolve(dir):  insert dir into the windowed top-k (if another node owns it)
//!                own store if this node owns dir's entry      -> local
//!                replica with an unexpired lease              -> local
//!                else GetAttrs(dir, subscribe = dir in top-k) -> remote; keep it if subscribed
//! owner side:    GetAttrs(subscribe) records (subscriber, lease end); a chmod/chown of dir
//!                pushes AttrUpdate to every unexpired subscriber and waits for each ack or
//!                its lease end before replying; rmdir pushes "gone"; a directory rename
//!                broadcasts InvalidatePrefix.
//! bookkeeping:   every sub-window: mark replicas that left the top-k, evict marked ones
//!                when over `replica_slots`, renew leases of popular ones past half-life.
//! ```
//!
//! Lease rule: a subscriber trusts a replica until `sent_at + lease - margin` by its own
//! clock (measured from before it asked, so it stops trusting before the owner stops
//! notifying). An owner that restarted has forgotten its subscribers, so it holds permission
//! changes until one lease after its start. Worst case for a permission change: one lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use myriad_placement::{NodeId, parent_of};
use myriad_proto::{Caller, FileKind, FsError, Inode, Request, Response};

use crate::node::Node;
use crate::state::perm;
use crate::popularity::WindowedTopK;

/// Replication settings (`--metadata-replication`, `--popularity-k`, ...).
#[derive(Clone, Debug)]
pub struct ReplicationConfig {
    /// Off: every ancestor check on another node's metadata is a request to that node.
    pub enabled: bool,
    /// How many paths count as popular (paper: 20).
    pub popularity_k: usize,
    /// Sliding window of the popularity estimate (paper: 60 s).
    pub window: Duration,
    /// Most replicas kept before unpopular ones are evicted.
    pub replica_slots: usize,
    /// How long a subscription lasts without renewal; bounds how long a dead subscriber can
    /// delay a permission change.
    pub lease: Duration,
}

impl ReplicationConfig {
    #[must_use]
    pub fn default_on() -> ReplicationConfig {
        ReplicationConfig {
            enabled: true,
            popularity_k: 20,
            window: Duration::from_secs(60),
            replica_slots: 1024,
            lease: Duration::from_secs(10),
        }
    }
}

/// Safety margin between a subscriber's and the owner's idea of when a lease ends.
const LEASE_MARGIN: Duration = Duration::from_millis(200);

struct Replica {
    inode: Inode,
    valid_until: Instant,
    popular: bool,
}

#[derive(Default)]
pub struct ReplicaStats {
    pub local: AtomicU64,
    pub remote: AtomicU64,
    pub invalidations: AtomicU64,
    pub invalidation_us: AtomicU64,
}

impl ReplicaStats {
    pub fn reset(&self) {
        for c in [
            &self.local,
            &self.remote,
            &self.invalidations,
            &self.invalidation_us,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

pub struct Replicas {
    config: ReplicationConfig,
    started: Instant,
    grace_end: Instant,
    state: std::sync::Mutex<State>,
    /// Owner side: path -> subscriber -> (lease end, the subscriber's sequence number).
    subscribers: std::sync::Mutex<HashMap<String, Subscribers>>,
    /// Subscriber side: numbers our subscribe/unsubscribe requests (see `Request::GetAttrs`).
    seq: AtomicU64,
    pub stats: ReplicaStats,
}

/// Subscribers of one path: node -> (lease end, its latest sequence number).
type Subscribers = HashMap<NodeId, (Instant, u64)>;

struct State {
    topk: WindowedTopK,
    replicas: HashMap<String, Replica>,
}

enum Cached {
    Hit(Inode),
    Miss { popular: bool },
}

impl Replicas {
    /// `restarted`: the node ran before on this data, so it may have had subscribers it has
    /// now forgotten; permission changes then wait one lease after start.
    #[must_use]
    pub fn new(config: ReplicationConfig, restarted: bool) -> Replicas {
        let window_ms = u64::try_from(config.window.as_millis()).unwrap_or(u64::MAX);
        Replicas {
            state: std::sync::Mutex::new(State {
                topk: WindowedTopK::new(config.popularity_k, window_ms),
                replicas: HashMap::new(),
            }),
            grace_end: if restarted {
                Instant::now() + config.lease
            } else {
                Instant::now()
            },
            config,
            started: Instant::now(),
            subscribers: std::sync::Mutex::new(HashMap::new()),
            seq: AtomicU64::new(1),
            stats: ReplicaStats::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Algorithm 1's first half: count the request, answer from a valid replica if held.
    fn lookup(&self, path: &str) -> Cached {
        let now_ms = self.now_ms();
        let Ok(mut st) = self.state.lock() else {
            return Cached::Miss { popular: false };
        };
        st.topk.insert(path, now_ms);
        if let Some(r) = st.replicas.get(path)
            && r.valid_until > Instant::now()
        {
            return Cached::Hit(r.inode.clone());
        }
        // Popular first: it is cheap, and the slot scan is only needed for popular paths.
        let popular = st.topk.is_top(path, now_ms)
            && (st.replicas.len() < self.config.replica_slots
                || st.replicas.values().any(|r| !r.popular));
        Cached::Miss { popular }
    }

    fn keep(&self, path: &str, inode: Inode, valid_until: Instant) {
        if let Ok(mut st) = self.state.lock() {
            if st.replicas.len() >= self.config.replica_slots && !st.replicas.contains_key(path) {
                let victim = st
                    .replicas
                    .iter()
                    .find(|(_, r)| !r.popular)
                    .map(|(k, _)| k.clone());
                match victim {
                    Some(v) => {
                        st.replicas.remove(&v);
                    }
                    None => return,
                }
            }
            // A renewal answered before a newer pushed update must not undo it.
            let inode = match st.replicas.get(path) {
                Some(r) if r.inode.ctime_ns > inode.ctime_ns => r.inode.clone(),
                _ => inode,
            };
            st.replicas.insert(
                path.to_string(),
                Replica {
                    inode,
                    valid_until,
                    popular: true,
                },
            );
        }
    }

    pub fn apply_update(&self, path: &str, inode: Option<Inode>) {
        if let Ok(mut st) = self.state.lock() {
            match inode {
                Some(i) => {
                    // Updates can arrive out of order (each request runs as its own task, and
                    // one delayed past its lease may land after a newer one): never go back.
                    if let Some(r) = st.replicas.get_mut(path)
                        && i.ctime_ns >= r.inode.ctime_ns
                    {
                        r.inode = i;
                    }
                }
                None => {
                    st.replicas.remove(path);
                }
            }
        }
    }

    pub fn invalidate_prefix(&self, prefix: &str) {
        let under = format!("{prefix}/");
        if let Ok(mut st) = self.state.lock() {
            st.replicas
                .retain(|p, _| p != prefix && !p.starts_with(&under));
        }
    }

    /// Replicas currently trusted (lease not ended).
    pub fn held(&self) -> u64 {
        let now = Instant::now();
        self.state
            .lock()
            .map(|s| s.replicas.values().filter(|r| r.valid_until > now).count() as u64)
            .unwrap_or(0)
    }

    // ---- owner side ----

    /// The next sequence number for one of our subscribe/unsubscribe requests.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub fn subscribe(&self, path: &str, node: NodeId, seq: u64) -> Duration {
        if let Ok(mut subs) = self.subscribers.lock() {
            let entry = subs.entry(path.to_string()).or_default();
            let until = Instant::now() + self.config.lease;
            match entry.get(&node) {
                Some(&(_, held)) if held > seq => {} // a newer request already decided
                _ => {
                    entry.insert(node, (until, seq));
                }
            }
        }
        self.config.lease
    }

    pub fn unsubscribe(&self, path: &str, node: NodeId, seq: u64) {
        if let Ok(mut subs) = self.subscribers.lock()
            && let Some(s) = subs.get_mut(path)
        {
            // Only if no newer subscribe arrived first (requests run out of order).
            if s.get(&node).is_some_and(|&(_, held)| held < seq) {
                s.remove(&node);
            }
            if s.is_empty() {
                subs.remove(path);
            }
        }
    }

    /// Subscribers of `path` whose lease has not ended, with their lease end.
    fn live_subscribers(&self, path: &str) -> Vec<(NodeId, Instant)> {
        let now = Instant::now();
        let Ok(mut subs) = self.subscribers.lock() else {
            return Vec::new();
        };
        let Some(s) = subs.get_mut(path) else {
            return Vec::new();
        };
        s.retain(|_, (until, _)| *until > now);
        s.iter().map(|(n, (u, _))| (*n, *u)).collect()
    }

    pub fn subscriptions_served(&self) -> u64 {
        let now = Instant::now();
        self.subscribers
            .lock()
            .map(|s| {
                s.values()
                    .flat_map(|m| m.values())
                    .filter(|(until, _)| *until > now)
                    .count() as u64
            })
            .unwrap_or(0)
    }

    /// One bookkeeping pass over the replicas: (paths to renew, unpopular replicas evicted
    /// for space with the sequence number of their unsubscribe). Expired replicas are dropped
    /// silently: the owner's side of their lease has ended too.
    fn bookkeeping(&self) -> (Vec<String>, Vec<(String, u64)>) {
        let now_ms = self.now_ms();
        let now = Instant::now();
        let Ok(mut st) = self.state.lock() else {
            return (Vec::new(), Vec::new());
        };
        let top: std::collections::HashSet<String> =
            st.topk.top(now_ms).into_iter().map(|t| t.0).collect();
        let half = self.config.lease / 2;
        st.replicas.retain(|_, r| r.valid_until > now);
        let mut renew = Vec::new();
        for (path, r) in st.replicas.iter_mut() {
            r.popular = top.contains(path);
            if r.popular && r.valid_until.saturating_duration_since(now) < half {
                renew.push(path.clone());
            }
        }
        let over = st.replicas.len().saturating_sub(self.config.replica_slots);
        let victims: Vec<String> = st
            .replicas
            .iter()
            .filter(|(_, r)| !r.popular)
            .map(|(p, _)| p.clone())
            .take(over)
            .collect();
        // Sequence numbers taken under the lock: a miss after this eviction subscribes with
        // a higher number, so the owner never drops that newer subscription.
        let evicted = victims
            .into_iter()
            .map(|p| {
                st.replicas.remove(&p);
                (p, self.next_seq())
            })
            .collect();
        (renew, evicted)
    }
}

/// Every directory whose search permission guards `path`: "/", "/a", ..., parent(path).
#[must_use]
pub fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    if path == "/" {
        return out;
    }
    let parent = parent_of(path);
    out.push("/".to_string());
    if parent == "/" {
        return out;
    }
    let mut cur = String::new();
    for name in parent[1..].split('/') {
        cur.push('/');
        cur.push_str(name);
        out.push(cur.clone());
    }
    out
}

impl Node {
    /// Attributes of directories `dirs` (for permission checks), per Algorithm 1.
    pub(crate) async fn resolve_dirs(
        self: &Arc<Self>,
        dirs: &[String],
    ) -> Result<Vec<Inode>, FsError> {
        let mut out: Vec<Option<Inode>> = vec![None; dirs.len()];
        let mut remote = Vec::new();
        for (i, dir) in dirs.iter().enumerate() {
            let owner = self.entry_node(dir);
            if owner == self.me {
                match self.lookup(dir).await {
                    Ok(inode) => {
                        out[i] = Some(inode);
                        self.replicas.stats.local.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    // A split moved the entry away: ask where it went (below).
                    Err(FsError::WrongShard { dir: parent, map }) => {
                        self.learn_shard_map(&parent, map.map(|m| *m)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !self.replicas.config.enabled {
                remote.push((i, owner, false));
                continue;
            }
            match self.replicas.lookup(dir) {
                Cached::Hit(inode) => {
                    out[i] = Some(inode);
                    self.replicas.stats.local.fetch_add(1, Ordering::Relaxed);
                }
                Cached::Miss { popular } => remote.push((i, owner, popular)),
            }
        }
        let fetches = remote.iter().map(|&(i, _owner, subscribe)| {
            let path = dirs[i].clone();
            async move {
                let sent = Instant::now();
                let seq = self.replicas.next_seq();
                let r = self
                    .call_entry(
                        &path,
                        Request::GetAttrs {
                            path: path.clone(),
                            subscribe,
                            seq,
                        },
                    )
                    .await;
                (i, path, sent, r)
            }
        });
        for (i, path, sent, r) in futures::future::join_all(fetches).await {
            self.replicas.stats.remote.fetch_add(1, Ordering::Relaxed);
            match r? {
                Response::AttrLease { inode, lease_ms } => {
                    if lease_ms > 0 {
                        let valid =
                            sent + Duration::from_millis(lease_ms).saturating_sub(LEASE_MARGIN);
                        self.replicas.keep(&path, inode.clone(), valid);
                    }
                    out[i] = Some(inode);
                }
                _ => return Err(FsError::Protocol("unexpected reply to get_attrs".into())),
            }
        }
        let mut inodes = Vec::with_capacity(dirs.len());
        for inode in out.into_iter().flatten() {
            if inode.kind != FileKind::Directory {
                return Err(FsError::NotADirectory);
            }
            inodes.push(inode);
        }
        Ok(inodes)
    }

    /// Search permission on every ancestor of `path`; returns the parent's attributes (None
    /// for "/" itself). Root skips the checks (it passes them all).
    pub(crate) async fn search(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
    ) -> Result<Option<Inode>, FsError> {
        if caller.uid == 0 || path == "/" {
            return Ok(None);
        }
        let dirs = ancestors(path);
        let inodes = self.resolve_dirs(&dirs).await?;
        for i in &inodes {
            perm::require(i, caller, perm::EXEC)?;
        }
        Ok(inodes.last().cloned())
    }

    /// Search on the ancestors and write on the parent: what creating or removing a name needs.
    pub(crate) async fn may_modify_dir(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
    ) -> Result<Option<Inode>, FsError> {
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
    ) -> Result<(), FsError> {
        if caller.uid == 0 {
            return Ok(());
        }
        let mut dirs = ancestors(dir);
        dirs.push(dir.to_string());
        let inodes = self.resolve_dirs(&dirs).await?;
        let Some((last, above)) = inodes.split_last() else {
            return Ok(());
        };
        for i in above {
            perm::require(i, caller, perm::EXEC)?;
        }
        perm::require(last, caller, want)
    }

    /// Removing or renaming `path` away: write on the parent and the sticky-bit rule.
    pub(crate) async fn may_remove(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
    ) -> Result<(), FsError> {
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
    ) -> Result<Option<Inode>, FsError> {
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
    ) -> Result<Option<Inode>, FsError> {
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
    ) -> Result<(), FsError> {
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
    ) -> Result<Option<Inode>, FsError> {
        let found = if self.entry_node(path) == self.me {
            self.lookup(path).await
        } else {
            let req = Request::GetAttrs {
                path: path.to_string(),
                subscribe: false,
                seq: 0,
            };
            match self.call_entry(path, req).await {
                Ok(Response::AttrLease { inode, .. }) => Ok(inode),
                Ok(_) => return Err(FsError::Protocol("unexpected reply to get_attrs".into())),
                Err(e) => Err(e),
            }
        };
        match found {
            Ok(i) => Ok(Some(self.resolve(i).await?)),
            Err(FsError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Owner side of GetAttrs / RenewAttrs.
    pub(crate) async fn serve_attrs(
        self: &Arc<Self>,
        path: &str,
        from: Option<NodeId>,
        subscribe: bool,
        seq: u64,
    ) -> Result<Response, FsError> {
        let inode = self.lookup(path).await?;
        let lease_ms = match (subscribe && self.replicas.config.enabled, from) {
            (true, Some(node)) if inode.kind == FileKind::Directory => {
                u64::try_from(self.replicas.subscribe(path, node, seq).as_millis()).unwrap_or(0)
            }
            _ => 0,
        };
        Ok(Response::AttrLease { inode, lease_ms })
    }

    /// Pushes a change of directory `path` to every subscriber and waits for each ack or its
    /// lease end, whichever comes first. Called before the change is acknowledged.
    pub(crate) async fn notify_subscribers(self: &Arc<Self>, path: &str, inode: Option<Inode>) {
        // Subscriptions made before a restart are forgotten: wait them out.
        let grace_end = self.replicas.grace_end;
        if Instant::now() < grace_end {
            tokio::time::sleep_until(grace_end.into()).await;
        }
        let subs = self.replicas.live_subscribers(path);
        let sends = subs.into_iter().map(|(node, until)| {
            let inode = inode.clone();
            let path = path.to_string();
            async move {
                let deadline = until.saturating_duration_since(Instant::now());
                self.notify_one(node, Request::AttrUpdate { path, inode }, deadline)
                    .await;
            }
        });
        futures::future::join_all(sends).await;
    }

    /// Sends one change notification and waits for its ack, at most `deadline` (the end of
    /// the receiver's lease, after which it no longer trusts what the notification changes).
    async fn notify_one(self: &Arc<Self>, node: NodeId, req: Request, deadline: Duration) {
        let started = Instant::now();
        if tokio::time::timeout(deadline, self.call_node(node, req))
            .await
            .is_err()
        {
            tracing::warn!(
                node,
                "no acknowledgement of a permission change before the lease ended"
            );
        }
        let stats = &self.replicas.stats;
        stats.invalidations.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        stats.invalidation_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Tells every node to drop replicas under `prefix` (a directory was renamed away).
    pub(crate) async fn broadcast_invalidate(self: &Arc<Self>, prefix: &str) {
        self.replicas.invalidate_prefix(prefix);
        let lease = self.replicas.config.lease;
        let nodes: Vec<NodeId> = self
            .state()
            .map
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|&n| n != self.me)
            .collect();
        let sends = nodes.into_iter().map(|node| {
            let req = Request::InvalidatePrefix {
                prefix: prefix.to_string(),
            };
            async move { self.notify_one(node, req, lease).await }
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
                .call_entry(&path.clone(), Request::Unsubscribe { path, seq })
                .await;
        }
        for path in renew {
            let sent = Instant::now();
            if let Ok(Response::AttrLease { inode, lease_ms }) = self
                .call_entry(
                    &path,
                    Request::RenewAttrs {
                        path: path.clone(),
                        seq: self.replicas.next_seq(),
                    },
                )
                .await
                && lease_ms > 0
            {
                let valid = sent + Duration::from_millis(lease_ms).saturating_sub(LEASE_MARGIN);
                self.replicas.keep(&path, inode, valid);
            }
        }
    }

    pub(crate) fn bookkeeping_interval(&self) -> Duration {
        (self.replicas.config.window / crate::popularity::SUB_WINDOWS as u32)
            .min(self.replicas.config.lease / 4)
            .max(Duration::from_millis(100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_of_paths() {
        assert!(ancestors("/").is_empty());
        assert_eq!(ancestors("/f"), ["/"]);
        assert_eq!(ancestors("/a/b/c/f"), ["/", "/a", "/a/b", "/a/b/c"]);
    }

    fn dir(mode: u32) -> Inode {
        Inode {
            ino: 5,
            kind: FileKind::Directory,
            mode,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 2,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            symlink_target: None,
            xattrs: Vec::new(),
            link_home: None,
            rdev: 0,
        }
    }

    #[test]
    fn popular_paths_are_kept_and_replica_slots_bound_the_store() {
        let cfg = ReplicationConfig {
            replica_slots: 2,
            popularity_k: 2,
            ..ReplicationConfig::default_on()
        };
        let r = Replicas::new(cfg, false);
        let far = Instant::now() + Duration::from_secs(60);
        for _ in 0..10 {
            let _ = r.lookup("/hot1");
            let _ = r.lookup("/hot2");
        }
        let _ = r.lookup("/cold");
        assert!(matches!(r.lookup("/hot1"), Cached::Miss { popular: true }));
        assert!(matches!(r.lookup("/cold"), Cached::Miss { popular: false }));
        r.keep("/hot1", dir(0o755), far);
        r.keep("/hot2", dir(0o755), far);
        assert!(matches!(r.lookup("/hot1"), Cached::Hit(_)));
        // Full of popular replicas: a third is not kept.
        r.keep("/other", dir(0o755), far);
        assert_eq!(r.held(), 2);
        assert!(matches!(r.lookup("/other"), Cached::Miss { .. }));
        // Updates replace, "gone" removes, prefixes invalidate.
        r.apply_update("/hot1", Some(dir(0o700)));
        assert!(matches!(r.lookup("/hot1"), Cached::Hit(i) if i.mode == 0o700));
        r.invalidate_prefix("/hot");
        assert_eq!(r.held(), 2, "a prefix matches whole components only");
        r.invalidate_prefix("/hot2");
        assert_eq!(r.held(), 1);
        r.apply_update("/hot1", None);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn an_unsubscribe_older_than_the_subscription_is_ignored() {
        let r = Replicas::new(ReplicationConfig::default_on(), false);
        r.subscribe("/d", 7, 10);
        r.unsubscribe("/d", 7, 9); // decided before the subscribe, handled after it
        assert_eq!(r.live_subscribers("/d").len(), 1);
        r.unsubscribe("/d", 7, 11);
        assert!(r.live_subscribers("/d").is_empty());
        r.subscribe("/d", 7, 12);
        r.subscribe("/d", 7, 5); // a stale renew does not lower the sequence
        r.unsubscribe("/d", 7, 11);
        assert_eq!(r.live_subscribers("/d").len(), 1);
    }

    #[test]
    fn late_updates_never_roll_a_replica_back() {
        let r = Replicas::new(ReplicationConfig::default_on(), false);
        let far = Instant::now() + Duration::from_secs(60);
        let at = |mode, ctime| Inode {
            mode,
            ctime_ns: ctime,
            ..dir(0)
        };
        r.keep("/d", at(0o755, 10), far);
        r.apply_update("/d", Some(at(0o700, 30)));
        r.apply_update("/d", Some(at(0o711, 20))); // older, arrives late
        assert!(matches!(r.lookup("/d"), Cached::Hit(i) if i.mode == 0o700));
        r.keep("/d", at(0o755, 25), far); // a renewal answered before the newest update
        assert!(matches!(r.lookup("/d"), Cached::Hit(i) if i.mode == 0o700));
        r.keep("/d", at(0o755, 40), far);
        assert!(matches!(r.lookup("/d"), Cached::Hit(i) if i.mode == 0o755));
    }

    #[test]
    fn expired_replicas_are_not_trusted_and_are_evicted() {
        let r = Replicas::new(ReplicationConfig::default_on(), false);
        r.keep("/a", dir(0o755), Instant::now() - Duration::from_millis(1));
        assert!(matches!(r.lookup("/a"), Cached::Miss { .. }));
        let (renew, evicted) = r.bookkeeping();
        assert!(
            renew.is_empty() && evicted.is_empty(),
            "expired replicas go silently"
        );
        assert_eq!(r.held(), 0);
    }
}
