//! The server's one fsync loop (group commit): writers take a place in its queue, commit,
//! and hand it the replies that must wait for the fsync covering what they committed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use myriad_proto::WireError;
use myriad_storage::Kv;
use tokio::sync::{mpsc, oneshot, watch};

use crate::state::mutation::Outcome;

/// What a mutation's caller gets back: its outcome, and the sequence number of the batch it
/// committed (or of the last batch before it, if it wrote nothing), which replication waits on.
pub struct Done {
    pub outcome: Outcome,
    pub seq: u64,
}

pub(crate) type Reply = oneshot::Sender<Result<Done, WireError>>;

pub struct SyncStats {
    pub syncs: AtomicU64,
    pub synced_mutations: AtomicU64,
    /// Mutations per group commit (the `myriad_fsync_batch_mutations` metric).
    pub batch_sizes: prometheus_client::metrics::histogram::Histogram,
}

impl Default for SyncStats {
    fn default() -> SyncStats {
        SyncStats {
            syncs: AtomicU64::new(0),
            synced_mutations: AtomicU64::new(0),
            batch_sizes: crate::metrics::batch_size_histogram(),
        }
    }
}

/// Replies waiting for the fsync that covers their batches, and the partition's change
/// signal to bump after it.
struct SyncGroup {
    replies: Vec<(Reply, Done)>,
    changed: watch::Sender<u64>,
    /// A writer could not commit what it had answered as applied: the disk is failing.
    failed: Option<String>,
}

/// Where the commit loops run: OS threads in the server process (an fsync blocks its
/// thread), tasks of the current runtime in a simulation (no threads, one deterministic
/// scheduler; the simulated disk never blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    Threads,
    /// Not constructed by the server process; the simulation (docs/simulation.md) and the
    /// tests here run the loops this way. `fsync`: how long each sync takes on the clock
    /// (so that writes pile up unsynced, and a crash can lose them).
    #[cfg_attr(not(test), allow(dead_code))]
    Tasks {
        fsync: std::time::Duration,
    },
}

/// The server's one fsync loop, shared by the appliers of all its partitions (they share
/// one engine, so one fsync covers them all).
#[derive(Clone)]
pub struct Syncer {
    tx: mpsc::Sender<SyncGroup>,
    pub stats: Arc<SyncStats>,
    /// Set once an fsync failed (the process then stops: `lib.rs`, `embed.rs`).
    failed: watch::Receiver<Option<String>>,
}

/// Groups of replies waiting for an fsync, across the server. A writer (an applier, a
/// copy) takes a place before it commits, so a disk that stalls holds writers back
/// instead of letting the queue grow.
pub(crate) const SYNC_GROUPS_QUEUED_MAX: usize = 1024;

/// A place in the syncer's queue, taken before committing (`Syncer::slot`).
pub(crate) struct SyncSlot(mpsc::OwnedPermit<SyncGroup>);

impl SyncSlot {
    /// Sends `replies` once everything committed so far is durable, then bumps `changed`.
    pub(crate) fn after_sync(self, changed: watch::Sender<u64>, replies: Vec<(Reply, Done)>) {
        self.0.send(SyncGroup {
            replies,
            changed,
            failed: None,
        });
    }

    /// Reports that changes answered as applied could not be committed: this server fails
    /// as after a failed fsync (nothing later can be trusted to be durable).
    pub(crate) fn fail(self, error: String) {
        let (changed, _) = watch::channel(0);
        self.0.send(SyncGroup {
            replies: Vec::new(),
            changed,
            failed: Some(error),
        });
    }
}

/// The syncer's state: after a failed fsync nothing later can be trusted to be durable (the
/// failed pages may be gone from the page cache), so every later sync fails too.
struct SyncLoop {
    kv: Arc<dyn Kv>,
    failed: Option<String>,
    /// Tells the process the disk failed.
    failure: watch::Sender<Option<String>>,
    stats: Arc<SyncStats>,
}

impl SyncLoop {
    /// One fsync for every group queued, then their replies and change signals.
    fn round(&mut self, groups: Vec<SyncGroup>) {
        if self.failed.is_none()
            && let Some(e) = groups.iter().find_map(|g| g.failed.clone())
        {
            self.failed = Some(e.clone());
            self.failure.send_replace(Some(e));
        }
        let result = match &self.failed {
            Some(e) => Err(myriad_storage::StorageError::Engine(e.clone())),
            None => self.kv.sync(),
        };
        if let Err(e) = &result
            && self.failed.is_none()
        {
            tracing::error!("fsync failed; this server acknowledges no more writes: {e}");
            self.failed = Some(e.to_string());
            self.failure.send_replace(Some(e.to_string()));
        }
        let count: usize = groups.iter().map(|g| g.replies.len()).sum();
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        self.stats
            .synced_mutations
            .fetch_add(count as u64, Ordering::Relaxed);
        self.stats.batch_sizes.observe(count as f64);
        let mut signals: Vec<watch::Sender<u64>> = Vec::new();
        for group in groups {
            for (reply, outcome) in group.replies {
                let _ = reply.send(match &result {
                    Ok(()) => Ok(outcome),
                    Err(e) => Err(WireError::Io(format!("fsync failed: {e}"))),
                });
            }
            if !signals.iter().any(|s| s.same_channel(&group.changed)) {
                signals.push(group.changed);
            }
        }
        for changed in signals {
            changed.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

/// The first item and whatever else is queued behind it (`next`: a non-blocking receive).
pub(crate) fn drain<T>(first: T, mut next: impl FnMut() -> Option<T>, max: usize) -> Vec<T> {
    let mut items = vec![first];
    while items.len() < max {
        match next() {
            Some(more) => items.push(more),
            None => break,
        }
    }
    items
}

impl Syncer {
    pub fn start(kv: Arc<dyn Kv>, runner: Runner) -> std::io::Result<Syncer> {
        let (tx, mut rx) = mpsc::channel::<SyncGroup>(SYNC_GROUPS_QUEUED_MAX);
        let stats = Arc::new(SyncStats::default());
        let (failure, failed) = watch::channel(None);
        let mut sync = SyncLoop {
            kv,
            failed: None,
            failure,
            stats: stats.clone(),
        };
        match runner {
            Runner::Threads => {
                std::thread::Builder::new()
                    .name("myriad-syncer".into())
                    .spawn(move || {
                        while let Some(first) = rx.blocking_recv() {
                            // Let the threads that are ready run first: under load they
                            // commit more for this fsync (measured: 1.0 -> 0.35-0.6 fsyncs
                            // per create); an idle server syncs at once.
                            std::thread::yield_now();
                            sync.round(drain(first, || rx.try_recv().ok(), usize::MAX));
                        }
                    })?;
            }
            Runner::Tasks { fsync } => {
                tokio::spawn(async move {
                    while let Some(first) = rx.recv().await {
                        tokio::time::sleep(fsync).await;
                        sync.round(drain(first, || rx.try_recv().ok(), usize::MAX));
                    }
                });
            }
        }
        Ok(Syncer { tx, stats, failed })
    }

    /// A place in the queue of the next fsync: waits while `SYNC_GROUPS_QUEUED_MAX` groups
    /// wait for one. Fails once the server stops.
    pub(crate) async fn slot(&self) -> Result<SyncSlot, WireError> {
        self.tx
            .clone()
            .reserve_owned()
            .await
            .map(SyncSlot)
            .map_err(|_| WireError::Unavailable("the server is stopping".into()))
    }

    /// Resolves with the error once an fsync has failed (never, while the disk is well).
    pub(crate) async fn failure(&self) -> String {
        let mut rx = self.failed.clone();
        loop {
            if let Some(e) = rx.borrow_and_update().clone() {
                return e;
            }
            if rx.changed().await.is_err() {
                // The syncer is gone (the server stops): nothing more will fail.
                std::future::pending::<()>().await;
            }
        }
    }
}
