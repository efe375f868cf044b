//! The single writer and the group commit.
//!
//! ```text
//! request tasks ──Job──> applier thread: validate + stage + commit batch (visible, not yet durable)
//!                              │ (reply, outcome) pairs
//!                              v
//!                        syncer thread: one fsync for everything queued, then reply to all
//! ```
//! One thread per partition applies every mutation of that partition in order, so
//! validations never race (`commit/rounds.rs`: each job is a store batch, the changes of
//! a client's batch being served share one). The server's one syncer drains whatever has
//! queued up while the previous fsync ran and covers it with one fsync
//! (`commit/sync.rs`): concurrent requests share the cost (group commit), and the applier
//! keeps applying while the disk syncs (pipelining). No durable reply leaves before the
//! fsync covering its batch.
//!
//! Known relaxation: a batch is visible to readers on this node between commit and fsync
//! (typically < 1 ms). A crash in that window loses a write that was never acknowledged but
//! may have been read. Acknowledged writes are never lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use myriad_placement::PartitionId;
use myriad_proto::{ReadOnlyMark, WireError};
use myriad_storage::{Kv, PartitionKv, StagedKv, StorageError, Store};
use tokio::sync::{mpsc, oneshot, watch};

use crate::state::mutation::{IdAlloc, Layout, Mutation, Outcome};

mod applier_threads;
pub mod context;
mod kept;
mod kept_quotas;
pub mod leases;
mod rounds;
mod ship;
mod sync;

pub use context::{Context, OnceSlot};
use rounds::Job;
#[cfg(test)]
pub use ship::NoCopies;
pub(crate) use ship::{CHAIN_KEY, SEQ_KEY, TERM_KEY};
pub use ship::{Numbered, Ship, ShipSlot};
pub(crate) use sync::SyncSlot;
pub use sync::{Done, Runner, Syncer};

/// A partition's store as its applier writes it: through a stage (`StagedKv`), so that
/// the changes of one round reach the engine as one batch (`rounds.rs`).
#[derive(Clone)]
pub struct StagedStore {
    pub store: Store,
    pub staged: Arc<StagedKv>,
    /// The same store without the stage: exactly the batches up to its `SEQ_KEY`, for
    /// whoever compares copies at a batch number (anti-entropy, fsck digests).
    pub committed: Store,
}

impl StagedStore {
    /// Partition `pid`'s store on the server's engine `kv`, with a stage.
    pub fn open(kv: Arc<dyn Kv>, pid: PartitionId) -> Result<StagedStore, StorageError> {
        let staged = Arc::new(StagedKv::new(Arc::new(PartitionKv::new(kv, pid.0))));
        let store = Store::open(staged.clone(), pid.0)?;
        let committed = Store::open(staged.committed(), pid.0)?;
        Ok(StagedStore {
            store,
            staged,
            committed,
        })
    }
}

/// The durability of a mutation applied by `Applier::run_staged_in`.
pub struct Durable {
    rx: oneshot::Receiver<Result<Done, WireError>>,
    copies: Arc<dyn Ship>,
}

impl Durable {
    /// Returns once the mutation is fsynced here and acknowledged by every live backup.
    pub async fn wait(self) -> Result<(), WireError> {
        let done = self
            .rx
            .await
            .map_err(|_| WireError::Unavailable("server is shutting down".into()))??;
        self.copies.wait(done.seq).await
    }
}

/// What a partition's applier does when a change meets the mark of an automatic index
/// (`WireError::AutoIndexed`): unregister that index (docs/metadata-index.md "Automatic
/// indexes"). The server implements it by asking the partition of the registry entry.
pub trait AutoIndexes: Send + Sync {
    /// Unregisters automatic index `mark` (its pending entry, then its live one) for
    /// partition `source`, whose change met it; every client's lease on the registry is
    /// recalled before that applies. `Ok` also when it was unregistered already.
    fn unregister(
        &self,
        source: PartitionId,
        mark: ReadOnlyMark,
    ) -> BoxFuture<'_, Result<(), WireError>>;
}

/// Mutations queued for one partition's writer before submitters wait for room: a flood
/// of requests is held back (each waits in its task) instead of growing the queue without
/// bound.
const JOBS_QUEUED_MAX: usize = 4096;

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
    /// Unregisters automatic indexes whose trees a change meets (for this partition);
    /// none in unit tests.
    auto_indexes: Option<(Arc<dyn AutoIndexes>, PartitionId)>,
    /// The automatic indexes this applier unregistered lately: a change meeting one of
    /// them again (another directory of its tree) only clears its mark.
    unregistered: Arc<std::sync::Mutex<std::collections::VecDeque<ReadOnlyMark>>>,
}

/// How many unregistered automatic indexes an applier remembers.
const UNREGISTERED_KEPT: usize = 64;

impl Applier {
    /// Starts the applier of one partition (a loop on one of the process's applier threads,
    /// or a task under a simulation).
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
            outcomes: crate::state::outcomes::Outcomes::default(),
            layout,
            seq: start_seq,
            chain: start_chain,
            term,
            copies: copies.clone(),
            retired: retired.clone(),
            changed,
            holds: holds.clone(),
            staged_for: None,
            kept: kept::Kept::default(),
            quotas: kept_quotas::KeptQuotas::default(),
        };
        let syncer = syncer.clone();
        match runner {
            Runner::Threads => {
                // On one of the process's applier threads (`applier_threads.rs`): the loop
                // waits for jobs (and, in a round held open, for a timer), and blocks its
                // thread on the store.
                applier_threads::spawn(apply.run(rx, syncer))?;
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
            auto_indexes: None,
            unregistered: Arc::default(),
        })
    }

    /// The applier of partition `pid` with `hook` unregistering the automatic indexes
    /// changes meet.
    #[must_use]
    pub fn with_auto_indexes(mut self, hook: Arc<dyn AutoIndexes>, pid: PartitionId) -> Applier {
        self.auto_indexes = Some((hook, pid));
        self
    }

    /// A change met directory `dir` in the tree of automatic index `mark`: the index is
    /// unregistered (every client stops answering from it), then `dir`'s mark cleared.
    /// The change itself is not applied: it answers `Busy`, and its sender (a client or
    /// a two-partition protocol, which retry `Busy` anyway) sends it again, once. `Ok`
    /// when the mark is gone (the caller may go on).
    pub async fn unregister_auto_index(
        &self,
        ctx: &Context,
        dir: &str,
        mark: ReadOnlyMark,
    ) -> Result<(), WireError> {
        let Some((hook, pid)) = &self.auto_indexes else {
            return Err(WireError::Unavailable(
                "this server cannot unregister automatic indexes".into(),
            ));
        };
        let known = self.unregistered.lock().is_ok_and(|l| l.contains(&mark));
        if !known {
            hook.unregister(*pid, mark).await?;
            if let Ok(mut l) = self.unregistered.lock() {
                if l.len() >= UNREGISTERED_KEPT {
                    l.pop_front();
                }
                l.push_back(mark);
            }
        }
        Box::pin(self.submit(
            ctx,
            Mutation::ClearAutoIndex {
                path: dir.to_string(),
                mark,
            },
            true,
        ))
        .await
        .map(|_| ())
    }

    /// The applier's answer to a job, once it applied: the gate is held until then (a
    /// failure lets it go first: unregistering an automatic index must not wait on it).
    async fn answered(
        &self,
        ctx: &Context,
        rx: oneshot::Receiver<Result<Done, WireError>>,
        gate: Option<leases::ChangeGuard>,
    ) -> Result<Done, WireError> {
        let answer = rx.await;
        drop(gate);
        match answer {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(e)) => Err(self.met_auto_index(ctx, e).await),
            Err(_) => Err(WireError::Unavailable("server is shutting down".into())),
        }
    }

    /// What a change that met an automatic index answers (`unregister_auto_index`).
    async fn met_auto_index(&self, ctx: &Context, e: WireError) -> WireError {
        match e {
            WireError::AutoIndexed { dir, mark } => {
                match self.unregister_auto_index(ctx, &dir, mark).await {
                    Ok(()) => WireError::Busy,
                    Err(e) => e,
                }
            }
            other => other,
        }
    }

    /// The applier with `table` as the gate of every mutation (directory leases).
    #[must_use]
    pub fn with_leases(mut self, table: Arc<leases::LeaseTable>) -> Applier {
        self.leases = Some(table);
        self
    }

    /// One client's batch to be served, held until it is: its changes (applied with its
    /// number in their context, `Context::batch`) share a store batch, a replicated batch
    /// and an fsync per copy, and the partition's rounds stay open (within bounds) for its
    /// next change meanwhile (`commit/rounds.rs`).
    #[must_use]
    pub fn hold(&self) -> rounds::Held {
        self.holds.hold()
    }

    /// The partition's directory leases.
    pub fn leases(&self) -> Option<&Arc<leases::LeaseTable>> {
        self.leases.as_ref()
    }

    /// Recalls the directory leases `mutation` breaks (not those of the client whose
    /// change it is, nor of those `ctx.exempt` names) and waits for them: held until the
    /// mutation is applied.
    async fn gate(&self, mutation: &Mutation, ctx: &Context) -> Option<leases::ChangeGuard> {
        let table = self.leases.as_ref()?;
        let changed = crate::state::changed_dirs::changed_dirs(mutation);
        Some(table.before(changed, ctx.client(), &ctx.exempt).await)
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
                batch: None,
            })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        self.copies.close();
    }

    /// Applies `mutation`, work of no client's request (`Context::background`), and
    /// returns once it is durable.
    pub async fn run(&self, mutation: Mutation) -> Result<Outcome, WireError> {
        self.submit(&Context::background(), mutation, true).await
    }

    /// Applies `mutation` for what `ctx` says (the change it may complete, the batch it
    /// is part of, the clients it does not recall) and returns once it is durable.
    pub async fn run_in(&self, ctx: &Context, mutation: Mutation) -> Result<Outcome, WireError> {
        self.submit(ctx, mutation, true).await
    }

    /// `run`, its outcome read as the kind `K` the mutation has (`state/outcome_kinds.rs`).
    pub(crate) async fn run_for<K: crate::state::outcome_kinds::OutcomeKind>(
        &self,
        mutation: Mutation,
    ) -> Result<K, WireError> {
        Ok(crate::state::outcome_kinds::expect(
            self.run(mutation).await?,
        )?)
    }

    /// `run_in`, its outcome read as the kind `K` the mutation has.
    pub(crate) async fn run_for_in<K: crate::state::outcome_kinds::OutcomeKind>(
        &self,
        ctx: &Context,
        mutation: Mutation,
    ) -> Result<K, WireError> {
        Ok(crate::state::outcome_kinds::expect(
            self.run_in(ctx, mutation).await?,
        )?)
    }

    /// Applies `mutation` for what `ctx` says and returns once it is visible; the group
    /// commit covering it starts at once (`Barrier` waits for it).
    pub async fn run_visible_in(
        &self,
        ctx: &Context,
        mutation: Mutation,
    ) -> Result<Outcome, WireError> {
        self.submit(ctx, mutation, false).await
    }

    /// Applies `mutation` for what `ctx` says and returns its outcome once it is visible,
    /// with what tells when it is durable: work that needs only the change visible
    /// overlaps the group commit and the backups' acknowledgements. A failed mutation
    /// fails here.
    pub async fn run_staged_in(
        &self,
        ctx: &Context,
        mutation: Mutation,
    ) -> Result<(Outcome, Durable), WireError> {
        let gate = self.gate(&mutation, ctx).await;
        let (reply, rx) = oneshot::channel();
        let (synced, synced_rx) = oneshot::channel();
        self.tx
            .send(Job {
                once: ctx.job_for(&mutation),
                mutation,
                reply,
                durable: false,
                synced: Some(synced),
                batch: ctx.batch,
            })
            .await
            .map_err(|_| WireError::Unavailable("server is shutting down".into()))?;
        let done = self.answered(ctx, rx, gate).await?;
        let durable = Durable {
            rx: synced_rx,
            copies: self.copies.clone(),
        };
        Ok((done.outcome, durable))
    }

    async fn submit(
        &self,
        ctx: &Context,
        mutation: Mutation,
        durable: bool,
    ) -> Result<Outcome, WireError> {
        let gate = self.gate(&mutation, ctx).await;
        let (reply, rx) = oneshot::channel();
        let once = ctx.job_for(&mutation);
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
                batch: ctx.batch,
            })
            .await
            .map_err(|_| WireError::Unavailable("server is shutting down".into()))?;
        let done = self.answered(ctx, rx, gate).await?;
        if durable {
            self.copies.wait(done.seq).await?;
        }
        Ok(done.outcome)
    }
}

#[cfg(test)]
mod tests;
