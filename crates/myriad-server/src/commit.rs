//! The single writer and the group commit.
//!
//! ```text
//! request tasks ──Job──> applier thread: validate + commit batch (visible, not yet durable)
//!                              │ (reply, outcome) pairs
//!                              v
//!                        syncer thread: one fsync for everything queued, then reply to all
//! ```
//! One thread per partition applies every mutation of that partition in order, so
//! validations never race. The server's one syncer drains whatever has queued up while the previous fsync ran and covers it with one
//! fsync: concurrent requests share the cost (group commit), and the applier keeps applying
//! while the disk syncs (pipelining). No reply leaves before the fsync covering its batch.
//!
//! Known relaxation: a batch is visible to readers on this node between commit and fsync
//! (typically < 1 ms). A crash in that window loses a write that was never acknowledged but
//! may have been read. Acknowledged writes are never lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::future::BoxFuture;
use myriad_placement::PartitionId;
use myriad_proto::{FsError, ReplOp};
use myriad_storage::{Batch, Kv, PartitionKv, StagedKv, StorageError, Store};
use tokio::sync::{mpsc, oneshot, watch};

use crate::state::mutation::{IdAlloc, Layout, Mutation, Outcome};

/// The meta key holding the sequence number of the last batch committed to a partition's
/// store (written in the batch itself; copies apply batches in this order).
pub(crate) const SEQ_KEY: &str = "repl_seq";
/// The meta key holding the hash chain of the batches up to `SEQ_KEY` (written in each batch,
/// so copies hold the same value): two copies at one batch number over different histories
/// (a deposed primary's own batches) differ here, and the primary's stream copies the whole
/// partition to such a copy. Found by the simulation (seed 3059).
pub(crate) const CHAIN_KEY: &str = "repl_chain";
/// The meta key holding the term of the last batch: the map epoch under which the primary
/// that committed it was opened (written in each batch, so copies hold it too). Of two
/// copies, the one whose last batch has the newer term holds every acknowledged batch
/// (each primary caught up before it wrote), whatever their batch numbers: a copy that was
/// down while a newer primary wrote may hold more batches of an older history
/// (simulation seed 60151).
pub(crate) const TERM_KEY: &str = "repl_term";

/// The chain after `batch`: a hash of the previous chain and every operation of the batch.
fn chain_next(prev: u64, batch: &Batch) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&prev.to_le_bytes());
    for (space, key, value) in &batch.ops {
        h.update(&[space.code()]);
        h.update(&(key.len() as u64).to_le_bytes());
        h.update(key);
        match value {
            Some(v) => {
                h.update(&[1]);
                h.update(&(v.len() as u64).to_le_bytes());
                h.update(v);
            }
            None => h.update(&[0]),
        }
    }
    h.digest()
}

/// Where numbered batches go once committed: the partition's copies. Commit names only this
/// trait; replication implements it (the primary's streams), tests may implement it with
/// no copies.
pub trait Ship: Send + Sync {
    /// Holds the shipping order for one batch, from numbering to shipping, so that a copy
    /// added meanwhile starts at a batch boundary.
    fn hold(&self) -> Box<dyn ShipSlot + '_>;
    /// Returns once every current copy has acknowledged every batch up to `seq`.
    fn wait(&self, seq: u64) -> BoxFuture<'_, Result<(), FsError>>;
    /// Ends shipping; writes waiting for acknowledgements fail.
    fn close(&self);
}

/// Where a batch sits in its partition's history: its number, and the batch chain before
/// and after it (`CHAIN_KEY`). Copies apply a batch only on top of `prev_chain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numbered {
    pub seq: u64,
    pub prev_chain: u64,
    pub chain: u64,
}

/// One batch's turn to be shipped (`Ship::hold`).
pub trait ShipSlot {
    /// The batch as copies get it, if any copy wants batches (else it is not encoded).
    fn encode(&self, batch: &Batch) -> Option<Vec<ReplOp>>;
    /// Hands batch `at` (encoded by `encode`) to every copy, in order.
    fn ship(&mut self, at: Numbered, ops: Option<Vec<ReplOp>>);
}

/// A partition without copies: nothing to ship, nothing to wait for (tests of this layer).
#[cfg(test)]
pub struct NoCopies;

#[cfg(test)]
impl Ship for NoCopies {
    fn hold(&self) -> Box<dyn ShipSlot + '_> {
        Box::new(NoCopies)
    }
    fn wait(&self, _seq: u64) -> BoxFuture<'_, Result<(), FsError>> {
        Box::pin(async { Ok(()) })
    }
    fn close(&self) {}
}

#[cfg(test)]
impl ShipSlot for NoCopies {
    fn encode(&self, _batch: &Batch) -> Option<Vec<ReplOp>> {
        None
    }
    fn ship(&mut self, _at: Numbered, _ops: Option<Vec<ReplOp>>) {}
}

/// A partition's store as its applier writes it: through a stage (`StagedKv`), so that
/// the changes of one round reach the engine as one batch (`rounds.rs`).
#[derive(Clone)]
pub struct StagedStore {
    pub store: Store,
    pub staged: Arc<StagedKv>,
}

impl StagedStore {
    /// Partition `pid`'s store on the server's engine `kv`, with a stage.
    pub fn open(kv: Arc<dyn Kv>, pid: PartitionId) -> Result<StagedStore, StorageError> {
        let staged = Arc::new(StagedKv::new(Arc::new(PartitionKv::new(kv, pid.0))));
        let store = Store::open(staged.clone(), pid.0)?;
        Ok(StagedStore { store, staged })
    }
}

/// What a mutation's caller gets back: its outcome, and the sequence number of the batch it
/// committed (or of the last batch before it, if it wrote nothing), which replication waits on.
pub struct Done {
    pub outcome: Outcome,
    pub seq: u64,
}

pub(crate) type Reply = oneshot::Sender<Result<Done, FsError>>;

struct Job {
    mutation: Mutation,
    /// The client's change this mutation completes, whose outcome goes into its batch.
    once: Option<once::OnceJob>,
    reply: Reply,
    /// false: reply once applied; the fsync still follows at once.
    durable: bool,
    /// With `durable` false: also told (outcome `Unit`) once the fsync covering the batch
    /// is done (`run_staged`).
    synced: Option<Reply>,
}

/// The durability of a mutation applied by `Applier::run_staged`.
pub struct Durable {
    rx: oneshot::Receiver<Result<Done, FsError>>,
    copies: Arc<dyn Ship>,
}

impl Durable {
    /// Returns once the mutation is fsynced here and acknowledged by every live backup.
    pub async fn wait(self) -> Result<(), FsError> {
        let done = self
            .rx
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))??;
        self.copies.wait(done.seq).await
    }
}

/// Mutations queued for one partition's writer before submitters wait for room: a flood
/// of requests is held back (each waits in its task) instead of growing the queue without
/// bound.
const JOBS_QUEUED_MAX: usize = 4096;

#[derive(Default)]
pub struct SyncStats {
    pub syncs: AtomicU64,
    pub synced_mutations: AtomicU64,
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
        let mut signals: Vec<watch::Sender<u64>> = Vec::new();
        for group in groups {
            for (reply, outcome) in group.replies {
                let _ = reply.send(match &result {
                    Ok(()) => Ok(outcome),
                    Err(e) => Err(FsError::Io(format!("fsync failed: {e}"))),
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
fn drain<T>(first: T, mut next: impl FnMut() -> Option<T>, max: usize) -> Vec<T> {
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
    pub(crate) async fn slot(&self) -> Result<SyncSlot, FsError> {
        self.tx
            .clone()
            .reserve_owned()
            .await
            .map(SyncSlot)
            .map_err(|_| FsError::Unavailable("the server is stopping".into()))
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

#[derive(Clone)]
pub struct Applier {
    tx: mpsc::Sender<Job>,
    /// Batches being served: rounds stay open for their next change (`rounds.rs`).
    holds: Arc<rounds::Holds>,
    /// The gate every mutation passes (directory leases); none in unit tests.
    leases: Option<Arc<leases::LeaseTable>>,
    /// Durable replies also wait for every copy's ack.
    copies: Arc<dyn Ship>,
    /// Set when the partition is no longer served here: nothing more is committed.
    retired: Arc<AtomicBool>,
}

impl Applier {
    /// Starts the applier of one partition (a thread, or a task under a simulation).
    /// `changed` is bumped after every group commit so readers waiting on a pending entry
    /// look again. `(start_seq, term)`: the last batch in the store, and the term every
    /// batch committed from now carries (`TERM_KEY`).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        store: StagedStore,
        ids: IdAlloc,
        layout: Layout,
        changed: watch::Sender<u64>,
        syncer: &Syncer,
        (start_seq, term): (u64, u64),
        copies: Arc<dyn Ship>,
        runner: Runner,
    ) -> std::io::Result<Applier> {
        let (tx, rx) = mpsc::channel::<Job>(JOBS_QUEUED_MAX);
        let retired = Arc::new(AtomicBool::new(false));
        let holds = Arc::new(rounds::Holds::default());
        let start_chain = store.store.meta_u64(CHAIN_KEY).ok().flatten().unwrap_or(0);
        let apply = rounds::ApplyLoop {
            store: store.store,
            staged: store.staged,
            ids,
            outcomes: crate::state::once::Outcomes::default(),
            layout,
            seq: start_seq,
            chain: start_chain,
            term,
            copies: copies.clone(),
            retired: retired.clone(),
            changed,
            holds: holds.clone(),
        };
        let syncer = syncer.clone();
        match runner {
            Runner::Threads => {
                // Its own single-threaded runtime: the loop waits for jobs (and, in a
                // round held open, for a timer), and blocks its thread on the store.
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()?;
                std::thread::Builder::new()
                    .name("myriad-applier".into())
                    .spawn(move || rt.block_on(apply.run(rx, syncer)))?;
            }
            Runner::Tasks { .. } => {
                tokio::spawn(apply.run(rx, syncer));
            }
        }
        Ok(Applier {
            tx,
            holds,
            leases: None,
            copies,
            retired,
        })
    }

    /// The applier with `table` as the gate of every mutation (directory leases).
    #[must_use]
    pub fn with_leases(mut self, table: Arc<leases::LeaseTable>) -> Applier {
        self.leases = Some(table);
        self
    }

    /// While the returned guard lives, the partition's rounds stay open (within bounds)
    /// for the next change of the batch being served, so its changes share one store
    /// batch, one replicated batch and one fsync per copy.
    pub fn hold(&self) -> Hold {
        Hold::new(&self.holds)
    }

    /// The partition's directory leases.
    pub fn leases(&self) -> Option<&Arc<leases::LeaseTable>> {
        self.leases.as_ref()
    }

    /// Recalls the directory leases `mutation` breaks (not its own client's) and waits
    /// for them: held until the mutation is applied.
    async fn gate(&self, mutation: &Mutation) -> Option<leases::ChangeGuard> {
        let table = self.leases.as_ref()?;
        let changed = crate::state::changed_dirs::changed_dirs(mutation);
        Some(table.before(changed, once::task_client()).await)
    }

    /// Refuses from now on: every mutation not yet applied fails with `Unavailable` (without
    /// the fence of `retire`, for callers that cannot wait).
    pub(crate) fn refuse(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Stops committing: every mutation queued or submitted later fails with `Unavailable`,
    /// and once this returns nothing more reaches the store (a backup may open it next).
    /// Writes waiting for backup acks fail too.
    pub(crate) async fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        // The fence: the thread handles jobs in order, so once this one is answered every
        // earlier one is done.
        let (reply, rx) = oneshot::channel();
        if self
            .tx
            .send(Job {
                mutation: Mutation::Barrier,
                once: None,
                reply,
                durable: false,
                synced: None,
            })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        self.copies.close();
    }

    /// Applies `mutation` and returns once it is durable.
    pub async fn run(&self, mutation: Mutation) -> Result<Outcome, FsError> {
        self.submit(mutation, true).await
    }

    /// Applies `mutation` and returns once it is visible; the group commit covering it
    /// starts at once (`Barrier` waits for it).
    pub async fn run_visible(&self, mutation: Mutation) -> Result<Outcome, FsError> {
        self.submit(mutation, false).await
    }

    /// Applies `mutation` and returns its outcome once it is visible, with what tells
    /// when it is durable: work that needs only the change visible overlaps the group
    /// commit and the backups' acknowledgements. A failed mutation fails here.
    pub async fn run_staged(&self, mutation: Mutation) -> Result<(Outcome, Durable), FsError> {
        let _gate = self.gate(&mutation).await;
        let (reply, rx) = oneshot::channel();
        let (synced, synced_rx) = oneshot::channel();
        self.tx
            .send(Job {
                once: once::job_for(&mutation),
                mutation,
                reply,
                durable: false,
                synced: Some(synced),
            })
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))?;
        let done = rx
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))??;
        let durable = Durable {
            rx: synced_rx,
            copies: self.copies.clone(),
        };
        Ok((done.outcome, durable))
    }

    async fn submit(&self, mutation: Mutation, durable: bool) -> Result<Outcome, FsError> {
        let gate = self.gate(&mutation).await;
        let (reply, rx) = oneshot::channel();
        let once = once::job_for(&mutation);
        // A change the client wants answered once applied: its completing mutation is
        // made durable all the same (the fsync follows at once), just not waited for.
        let durable = durable && !once.as_ref().is_some_and(|o| o.visible);
        self.tx
            .send(Job {
                once,
                mutation,
                reply,
                durable,
                synced: None,
            })
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))?;
        let done = rx
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))??;
        drop(gate);
        if durable {
            self.copies.wait(done.seq).await?;
        }
        Ok(done.outcome)
    }
}

pub mod leases;
pub mod once;
mod rounds;

pub use rounds::Hold;

#[cfg(test)]
mod tests;
