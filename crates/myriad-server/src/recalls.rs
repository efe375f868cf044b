//! Recalls on their way to lease holders (docs/fuse.md "Directory leases"): one queue per
//! client holding leases from this server, taken by the client's waiting `LeasePoll`.
//!
//! A server cannot call a client, so a client keeps one poll waiting at each server it
//! holds leases from; a recall wakes it. Only holders that polled lately get queued
//! recalls (a holder without a poll is waited out: its leases expire), which bounds what
//! this keeps.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use myriad_proto::LeaseKey;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A holder whose last poll ended longer ago than this has no poller: nothing is queued
/// for it (and it is forgotten).
const POLLER_GONE_AFTER: Duration = Duration::from_secs(30);
/// Past this many holders, a new one first sweeps out those without a poller.
const HOLDERS_SWEEP_AT: usize = 1024;
/// Recalls kept per holder: beyond, the oldest go (their leases expire instead).
const QUEUED_MAX: usize = 4096;

#[derive(Default)]
pub(crate) struct Recalls {
    holders: Mutex<BTreeMap<u64, Holder>>,
    /// Recalls queued for a polling holder, and those for a holder without a poller,
    /// whose lease is waited out instead (metrics: a change waits up to a lease period).
    queued: AtomicU64,
    waited_out: AtomicU64,
}

struct Holder {
    queued: Vec<LeaseKey>,
    wake: Arc<Notify>,
    /// When a poll last started or ended (`None`: one is waiting now).
    idle_since: Option<Instant>,
}

impl Recalls {
    /// Queues a recall of `key` for `holder`, waking its poll. False if `holder` has no
    /// poller (its lease can only be waited out).
    pub(crate) fn push(&self, holder: u64, key: LeaseKey) -> bool {
        let queued = self.push_to(holder, key);
        let count = if queued {
            &self.queued
        } else {
            &self.waited_out
        };
        count.fetch_add(1, Ordering::Relaxed);
        queued
    }

    /// (queued, waited out) recalls since the server started.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.queued.load(Ordering::Relaxed),
            self.waited_out.load(Ordering::Relaxed),
        )
    }

    fn push_to(&self, holder: u64, key: LeaseKey) -> bool {
        let Ok(mut all) = self.holders.lock() else {
            return false;
        };
        let now = Instant::now();
        let Some(h) = all.get_mut(&holder) else {
            return false;
        };
        if h.idle_since.is_some_and(|t| now - t > POLLER_GONE_AFTER) {
            all.remove(&holder);
            return false;
        }
        if h.queued.len() >= QUEUED_MAX {
            h.queued.remove(0);
        }
        if !h.queued.contains(&key) {
            h.queued.push(key);
        }
        h.wake.notify_one();
        true
    }

    /// The recalls queued for `holder`, waiting up to `wait` for the first.
    pub(crate) async fn poll(&self, holder: u64, wait: Duration) -> Vec<LeaseKey> {
        let deadline = Instant::now() + wait;
        loop {
            let wake = {
                let Ok(mut all) = self.holders.lock() else {
                    return Vec::new();
                };
                if !all.contains_key(&holder) && all.len() >= HOLDERS_SWEEP_AT {
                    // Holder ids come from clients: forget those whose poller is gone.
                    let now = Instant::now();
                    all.retain(|_, h| h.idle_since.is_none_or(|t| now - t <= POLLER_GONE_AFTER));
                }
                let h = all.entry(holder).or_insert_with(|| Holder {
                    queued: Vec::new(),
                    wake: Arc::new(Notify::new()),
                    idle_since: None,
                });
                if !h.queued.is_empty() || Instant::now() >= deadline {
                    h.idle_since = Some(Instant::now());
                    return std::mem::take(&mut h.queued);
                }
                h.idle_since = None;
                h.wake.clone()
            };
            // A wake-up may be a stale permit: the loop looks at the queue again.
            let _ = tokio::time::timeout_at(deadline, wake.notified()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_placement::PartitionId;

    fn key(dir: &str) -> LeaseKey {
        LeaseKey {
            partition: PartitionId(3),
            dir: dir.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_recall_wakes_the_waiting_poll_and_holders_without_a_poller_get_none() {
        let r = Arc::new(Recalls::default());
        assert!(!r.push(7, key("/a")), "no poll yet: nothing to deliver to");
        let poller = {
            let r = r.clone();
            tokio::spawn(async move { r.poll(7, Duration::from_secs(5)).await })
        };
        tokio::task::yield_now().await;
        let started = Instant::now();
        assert!(r.push(7, key("/a")));
        assert!(r.push(7, key("/a")), "a repeated recall is queued once");
        assert_eq!(
            poller.await.unwrap_or_else(|e| panic!("{e}")),
            vec![key("/a")]
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        // Queued while no poll waits, taken by the next at once.
        assert!(r.push(7, key("/b")));
        assert_eq!(r.poll(7, Duration::from_secs(5)).await, vec![key("/b")]);
        // An empty poll ends after its wait.
        let t = Instant::now();
        assert!(r.poll(7, Duration::from_secs(2)).await.is_empty());
        assert!(t.elapsed() >= Duration::from_secs(2));
        // A holder that stopped polling is forgotten.
        tokio::time::advance(POLLER_GONE_AFTER + Duration::from_secs(1)).await;
        assert!(!r.push(7, key("/c")));
        // Counted for the metrics: delivered to a poll, or left to the lease's end.
        assert_eq!(r.counts(), (3, 2));
    }
}
