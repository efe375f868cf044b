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
//! owner side:    GetAttrs(subscribe) records (subscriber, lease end), then reads; a
//!                chmod/chown of dir commits, then pushes AttrUpdate to every unexpired
//!                subscriber and waits for each ack (an error is none: sent again) or its
//!                lease end before replying; rmdir pushes "gone"; a directory rename
//!                broadcasts InvalidatePrefix.
//! subscriber:    an answer is kept as a replica only if no update or invalidation of its
//!                path arrived while it was on its way (`keep`).
//! bookkeeping:   every sub-window: mark replicas that left the top-k, evict marked ones
//!                when over `replica_slots`, renew leases of popular ones past half-life.
//! ```
//!
//! Lease rule: a subscriber trusts a replica until `sent_at + lease - margin` by its own
//! clock (measured from before it asked, so it stops trusting before the owner stops
//! notifying). An owner that restarted has forgotten its subscribers, so it holds permission
//! changes until one lease after its start. Worst case for a permission change: one lease.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use myriad_placement::{PartitionId, parent_of};
use myriad_proto::Inode;

use crate::config::ReplicationConfig;
use crate::partition::popularity::WindowedTopK;

/// Safety margin between a subscriber's and the owner's idea of when a lease ends.
pub(super) const LEASE_MARGIN: Duration = Duration::from_millis(200);

pub(super) struct Replica {
    pub(super) inode: Inode,
    pub(super) valid_until: Instant,
    pub(super) popular: bool,
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
    pub(super) config: ReplicationConfig,
    pub(super) started: Instant,
    pub(super) grace_end: Instant,
    pub(super) state: std::sync::Mutex<State>,
    /// Owner side: path -> subscriber -> (lease end, the subscriber's sequence number).
    pub(super) subscribers: std::sync::Mutex<BTreeMap<String, Subscribers>>,
    /// Subscriber side: numbers our subscribe/unsubscribe requests (see `PeerRequest::GetAttrs`).
    pub(super) seq: AtomicU64,
    pub stats: ReplicaStats,
}

/// Subscribers of one path: node -> (lease end, its latest sequence number).
pub(super) type Subscribers = BTreeMap<PartitionId, (Instant, u64)>;

pub(super) struct State {
    pub(super) topk: WindowedTopK,
    pub(super) replicas: BTreeMap<String, Replica>,
    /// Numbers every update or invalidation this node received (see `Replicas::keep`).
    pub(super) updates: u64,
    /// Path -> (number of its latest update, when it came), for one lease.
    pub(super) recent: BTreeMap<String, (u64, Instant)>,
    /// Number of the latest prefix invalidation (renames are rare: one for all paths).
    pub(super) last_prefix: u64,
}

/// What a subscriber had received when it sent a fetch or renewal (`Replicas::mark`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Mark(u64);

pub(super) enum Cached {
    Hit(Inode),
    Miss { popular: bool },
}

/// The first request number of a partition's subscriber side: the wall clock in
/// microseconds, so a partition opened again (after a break in its primary's lease, or a
/// restart) numbers its requests above those of its earlier incarnation, which the owners
/// may still hold (`Replicas::subscribe`).
fn first_seq() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
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
                replicas: BTreeMap::new(),
                updates: 0,
                recent: BTreeMap::new(),
                last_prefix: 0,
            }),
            grace_end: if restarted {
                Instant::now() + config.lease
            } else {
                Instant::now()
            },
            config,
            started: Instant::now(),
            subscribers: std::sync::Mutex::new(BTreeMap::new()),
            seq: AtomicU64::new(first_seq()),
            stats: ReplicaStats::default(),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Algorithm 1's first half: count the request, answer from a valid replica if held.
    pub(super) fn lookup(&self, path: &str) -> Cached {
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

    /// A valid replica of `path`, if held, without counting a request (`lookup` counts):
    /// for reads this partition does not serve (a copy's, docs/zones.md "Nearest copy").
    pub(super) fn peek(&self, path: &str) -> Option<Inode> {
        let st = self.state.lock().ok()?;
        st.replicas
            .get(path)
            .filter(|r| r.valid_until > Instant::now())
            .map(|r| r.inode.clone())
    }

    /// Taken before sending a fetch or renewal whose answer may become a replica.
    pub(super) fn mark(&self) -> Mark {
        Mark(self.state.lock().map(|s| s.updates).unwrap_or(u64::MAX))
    }

    /// Keeps the answer to a fetch or renewal sent at `mark` as a replica, unless an update
    /// or invalidation of `path` arrived since: the owner may have pushed it while the
    /// answer, read before the change, was on its way (the update found no replica to
    /// change, or the answer would undo it), and nothing would correct the replica before
    /// its lease ended. Not kept, the answer serves only the request that asked.
    pub(super) fn keep(&self, path: &str, inode: Inode, valid_until: Instant, mark: Mark) {
        if let Ok(mut st) = self.state.lock() {
            let changed_since =
                st.last_prefix > mark.0 || st.recent.get(path).is_some_and(|&(n, _)| n > mark.0);
            if changed_since {
                return;
            }
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
            st.updates += 1;
            let n = st.updates;
            st.recent.insert(path.to_string(), (n, Instant::now()));
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
            st.updates += 1;
            st.last_prefix = st.updates;
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

    /// Up to `max` paths of trusted replicas of popular directories, in path order.
    pub fn popular_paths(&self, max: usize) -> Vec<String> {
        let now = Instant::now();
        self.state
            .lock()
            .map(|s| {
                let mut v: Vec<String> = s
                    .replicas
                    .iter()
                    .filter(|(_, r)| r.popular && r.valid_until > now)
                    .map(|(p, _)| p.clone())
                    .collect();
                v.sort();
                v.truncate(max);
                v
            })
            .unwrap_or_default()
    }

    // ---- owner side ----

    /// The next sequence number for one of our subscribe/unsubscribe requests.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Records `node`'s subscription to `path` (request number `seq`); returns the lease
    /// the owner keeps for it, which is all the subscriber may trust: where a newer request
    /// decided already, only what is left of its subscription. (Answering a full lease
    /// there let a subscriber partition opened again, whose numbers had started over,
    /// keep a replica the owner no longer told of changes: a chmod returned, and that
    /// partition denied access by the old mode.)
    pub fn subscribe(&self, path: &str, node: PartitionId, seq: u64) -> Duration {
        let Ok(mut subs) = self.subscribers.lock() else {
            return Duration::ZERO;
        };
        let entry = subs.entry(path.to_string()).or_default();
        let now = Instant::now();
        match entry.get(&node) {
            // A newer request already decided (requests run out of order).
            Some(&(until, held)) if held > seq && until > now => until - now,
            _ => {
                entry.insert(node, (now + self.config.lease, seq));
                self.config.lease
            }
        }
    }

    pub fn unsubscribe(&self, path: &str, node: PartitionId, seq: u64) {
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

    /// Takes back the subscription `seq` made (the path is no directory, or gone), unless a
    /// newer request of the same node decided since.
    pub fn withdraw(&self, path: &str, node: PartitionId, seq: u64) {
        self.unsubscribe(path, node, seq.saturating_add(1));
    }

    /// Subscribers of `path` whose lease has not ended, with their lease end.
    pub(super) fn live_subscribers(&self, path: &str) -> Vec<(PartitionId, Instant)> {
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
    pub(super) fn bookkeeping(&self) -> (Vec<String>, Vec<(String, u64)>) {
        let now_ms = self.now_ms();
        let now = Instant::now();
        let Ok(mut st) = self.state.lock() else {
            return (Vec::new(), Vec::new());
        };
        let top: std::collections::BTreeSet<String> =
            st.topk.top(now_ms).into_iter().map(|t| t.0).collect();
        let half = self.config.lease / 2;
        st.replicas.retain(|_, r| r.valid_until > now);
        // An answer sent before an update more than a lease ago is past its lease anyway.
        let lease = self.config.lease;
        st.recent
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < lease);
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

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_proto::FileKind;
    use myriad_proto::InodeId;

    #[test]
    fn ancestors_of_paths() {
        assert!(ancestors("/").is_empty());
        assert_eq!(ancestors("/f"), ["/"]);
        assert_eq!(ancestors("/a/b/c/f"), ["/", "/a", "/a/b", "/a/b/c"]);
    }

    fn dir(mode: u32) -> Inode {
        Inode {
            ino: InodeId(5),
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

    /// A directory with `mode` whose attributes last changed at `ctime`.
    fn at(mode: u32, ctime: i64) -> Inode {
        Inode {
            mode,
            ctime_ns: ctime,
            ..dir(0)
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
        r.keep("/hot1", dir(0o755), far, r.mark());
        r.keep("/hot2", dir(0o755), far, r.mark());
        assert!(matches!(r.lookup("/hot1"), Cached::Hit(_)));
        // Full of popular replicas: a third is not kept.
        r.keep("/other", dir(0o755), far, r.mark());
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
        r.subscribe("/d", PartitionId(7), 10);
        r.unsubscribe("/d", PartitionId(7), 9); // decided before the subscribe, handled after it
        assert_eq!(r.live_subscribers("/d").len(), 1);
        r.unsubscribe("/d", PartitionId(7), 11);
        assert!(r.live_subscribers("/d").is_empty());
        r.subscribe("/d", PartitionId(7), 12);
        r.subscribe("/d", PartitionId(7), 5); // a stale renew does not lower the sequence
        r.unsubscribe("/d", PartitionId(7), 11);
        assert_eq!(r.live_subscribers("/d").len(), 1);
    }

    /// A subscribe a newer request already decided is answered with what is left of the
    /// subscription the owner keeps, never a fresh lease it does not keep.
    #[tokio::test(start_paused = true)]
    async fn a_stale_subscribe_is_given_only_the_lease_the_owner_keeps() {
        let cfg = ReplicationConfig::default_on();
        let lease = cfg.lease;
        let r = Replicas::new(cfg, false);
        assert_eq!(r.subscribe("/d", PartitionId(7), 50), lease);
        tokio::time::advance(lease / 2).await;
        assert_eq!(r.subscribe("/d", PartitionId(7), 3), lease - lease / 2);
        assert_eq!(r.live_subscribers("/d").len(), 1);
        tokio::time::advance(lease).await;
        // Its subscription ended: a request numbered lower subscribes anew (a clock that
        // went back), and is told the whole lease it is kept for.
        assert!(r.live_subscribers("/d").is_empty());
        r.subscribe("/e", PartitionId(7), 50);
        tokio::time::advance(2 * lease).await;
        assert_eq!(r.subscribe("/e", PartitionId(7), 4), lease);
        assert_eq!(r.live_subscribers("/e").len(), 1);
        // A partition opened again numbers its requests above its earlier incarnation's.
        std::thread::sleep(Duration::from_millis(2));
        let again = Replicas::new(ReplicationConfig::default_on(), true);
        assert!(again.next_seq() > r.next_seq());
    }

    #[test]
    fn late_updates_never_roll_a_replica_back() {
        let r = Replicas::new(ReplicationConfig::default_on(), false);
        let far = Instant::now() + Duration::from_secs(60);
        r.keep("/d", at(0o755, 10), far, r.mark());
        r.apply_update("/d", Some(at(0o700, 30)));
        r.apply_update("/d", Some(at(0o711, 20))); // older, arrives late
        assert!(matches!(r.lookup("/d"), Cached::Hit(i) if i.mode == 0o700));
        r.keep("/d", at(0o755, 25), far, r.mark()); // a renewal answered before the newest update
        assert!(matches!(r.lookup("/d"), Cached::Hit(i) if i.mode == 0o700));
        r.keep("/d", at(0o755, 40), far, r.mark());
        assert!(matches!(r.lookup("/d"), Cached::Hit(i) if i.mode == 0o755));
    }

    /// The race behind a flaky permissions test: the owner reads the old mode for a fetch,
    /// a chmod commits and pushes its update, the update reaches the subscriber before the
    /// fetch's answer (and finds no replica to change). The late answer must not become a
    /// replica: it would deny access for a whole lease after the change returned.
    #[test]
    fn an_answer_sent_before_an_update_does_not_become_a_replica() {
        let r = Replicas::new(ReplicationConfig::default_on(), false);
        let far = Instant::now() + Duration::from_secs(60);
        let fetch = r.mark();
        r.apply_update("/d", Some(at(0o755, 30)));
        r.keep("/d", at(0o700, 20), far, fetch);
        assert!(matches!(r.lookup("/d"), Cached::Miss { .. }));
        // Other paths' updates do not stop it; a later fetch is kept.
        let fetch = r.mark();
        r.apply_update("/e", Some(at(0o755, 40)));
        r.keep("/d", at(0o755, 30), far, fetch);
        assert!(matches!(r.lookup("/d"), Cached::Hit(i) if i.mode == 0o755));
        // "Gone" and prefix invalidations too.
        let fetch = r.mark();
        r.apply_update("/g", None);
        r.keep("/g", at(0o755, 10), far, fetch);
        assert!(matches!(r.lookup("/g"), Cached::Miss { .. }));
        let fetch = r.mark();
        r.invalidate_prefix("/x");
        r.keep("/h", at(0o755, 10), far, fetch);
        assert!(matches!(r.lookup("/h"), Cached::Miss { .. }));
    }

    #[test]
    fn a_subscription_withdrawn_goes_unless_a_newer_one_came() {
        let r = Replicas::new(ReplicationConfig::default_on(), false);
        r.subscribe("/f", PartitionId(3), 10);
        r.withdraw("/f", PartitionId(3), 10);
        assert!(r.live_subscribers("/f").is_empty());
        r.subscribe("/f", PartitionId(3), 12);
        r.withdraw("/f", PartitionId(3), 11);
        assert_eq!(r.live_subscribers("/f").len(), 1);
    }

    #[test]
    fn expired_replicas_are_not_trusted_and_are_evicted() {
        let r = Replicas::new(ReplicationConfig::default_on(), false);
        r.keep(
            "/a",
            dir(0o755),
            Instant::now() - Duration::from_millis(1),
            r.mark(),
        );
        assert!(matches!(r.lookup("/a"), Cached::Miss { .. }));
        let (renew, evicted) = r.bookkeeping();
        assert!(
            renew.is_empty() && evicted.is_empty(),
            "expired replicas go silently"
        );
        assert_eq!(r.held(), 0);
    }
}
