//! One partition's single writer, round by round (docs/write-path.md, "Rounds").
//!
//! A round applies the jobs queued for the partition, one after the other, each into the
//! store's stage (`StagedKv`: visible to every reader at once), and commits the stage as
//! numbered batches shipped to the copies; the round's replies share one fsync. Each job
//! is a batch of its own, except the changes of one client's journal batch being served
//! (`Applier::hold`; the batch's number is in their `Context`), which share one: they
//! arrive one at a time (each applied before the next is checked), so while such a batch
//! is served and nobody waits for the round's durability, the round stays open for its
//! next change, within bounds (time, jobs, bytes): a batch of 100 creates becomes one or
//! two store batches and replication messages, not 100.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use myriad_proto::WireError;
use myriad_storage::{StagedKv, Store};
use tokio::sync::{Notify, mpsc, watch};

use super::kept_quotas::Counted;
use super::ship::{CHAIN_KEY, Numbered, SEQ_KEY, Ship, TERM_KEY, chain_next};
use super::sync::{Done, Reply, SyncSlot, Syncer, drain};
use crate::state::mutation::{Ctx, IdAlloc, Layout, Mutation, Outcome, execute, storage_err};

/// Jobs applied per round before its batch is committed, so replies are not held back by
/// an endless stream of new work.
const ROUND_MAX: usize = 512;
/// A round held open for a batch in progress commits after this long at most...
const ROUND_HOLD_MAX: Duration = Duration::from_millis(5);
/// ...or once no job came for this long.
const ROUND_IDLE_MAX: Duration = Duration::from_millis(1);
/// A stage past this many bytes is committed at once: a batch (this plus one job's
/// largest write, 4 MiB) stays inside one replication frame.
const STAGE_BYTES_MAX: usize = 1 << 20;

/// One mutation for a partition's writer, and where its answers go.
pub(super) struct Job {
    pub(super) mutation: Mutation,
    /// The client's change this mutation completes, whose outcome goes into its batch.
    pub(super) once: Option<super::context::OnceJob>,
    pub(super) reply: Reply,
    /// false: reply once applied; the fsync still follows at once.
    pub(super) durable: bool,
    /// With `durable` false: also told (outcome `Unit`) once the fsync covering the batch
    /// is done (`run_staged_in`).
    pub(super) synced: Option<Reply>,
    /// The client's batch it is part of (`Context::batch`), if any.
    pub(super) batch: Option<u64>,
}

/// Numbers the batches served, so that jobs of different ones never share a store batch.
static NEXT_BATCH: AtomicU64 = AtomicU64::new(1);

/// Batches being served on a partition (`Applier::hold`).
#[derive(Default)]
pub(crate) struct Holds {
    count: AtomicUsize,
    released: Notify,
}

impl Holds {
    /// A client's batch to be served: while the `Held` lives, the partition's rounds stay
    /// open for its next change; its mutations are applied with its number
    /// (`Context::batch`).
    pub(super) fn hold(self: &Arc<Self>) -> Held {
        self.count.fetch_add(1, Ordering::AcqRel);
        Held {
            batch: NEXT_BATCH.fetch_add(1, Ordering::Relaxed),
            holds: self.clone(),
        }
    }
}

/// A client's batch being served (`Applier::hold`): while it lives, the partition's
/// rounds stay open for the batch's next change.
pub struct Held {
    /// The batch's number, for the context of its mutations (`Context::batch`).
    pub batch: u64,
    holds: Arc<Holds>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.holds.count.fetch_sub(1, Ordering::AcqRel);
        self.holds.released.notify_one();
    }
}

/// What one round owes: replies waiting for its batch, replies waiting for the fsync.
#[derive(Default)]
struct Round {
    /// Answered once the batch holding their change is committed (then durable).
    unflushed: Vec<(Reply, Outcome)>,
    /// Answered after the fsync that covers the round.
    done: Vec<(Reply, Done)>,
    /// Something was answered as applied: the fsync follows at once all the same.
    must_sync: bool,
    /// Somebody waits for this round's durability: it is not held open.
    waited_on: bool,
    /// The stage could not be committed: changes answered as applied are lost.
    failed: Option<String>,
}

/// One partition's single writer: applies jobs in order into the stage, numbers and ships
/// each round's batch, hands durable replies to the syncer.
pub(super) struct ApplyLoop {
    pub(super) store: Store,
    pub(super) staged: Arc<StagedKv>,
    pub(super) ids: IdAlloc,
    /// The outcomes of clients' changes held here (`state/outcomes.rs`).
    pub(super) outcomes: crate::state::outcomes::Outcomes,
    pub(super) layout: Layout,
    /// The last batch committed, and the chain up to it.
    pub(super) seq: u64,
    pub(super) chain: u64,
    /// Written in every batch (`TERM_KEY`).
    pub(super) term: u64,
    pub(super) copies: Arc<dyn Ship>,
    pub(super) retired: Arc<AtomicBool>,
    pub(super) changed: watch::Sender<u64>,
    pub(super) holds: Arc<Holds>,
    /// The client's batch whose changes the stage holds (`None`: nothing staged).
    pub(super) staged_for: Option<u64>,
    /// The partition's kept fsstats (`kept.rs`).
    pub(super) kept: super::kept::Kept,
    /// The usage of the quotas it counts (`kept_quotas.rs`).
    pub(super) quotas: super::kept_quotas::KeptQuotas,
}

impl ApplyLoop {
    /// Rounds until the partition's queue closes. Each round first takes its place in the
    /// syncer's queue (waiting while the disk is behind), then applies whatever queued up
    /// meanwhile, and what comes while it is held open.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Job>, syncer: Syncer) {
        while let Some(first) = rx.recv().await {
            let Ok(slot) = syncer.slot().await else {
                break;
            };
            let started = tokio::time::Instant::now();
            let mut round = Round::default();
            let mut jobs = drain(first, || rx.try_recv().ok(), ROUND_MAX);
            let mut count = 0;
            loop {
                count += jobs.len();
                for job in jobs {
                    self.apply(job, &mut round);
                }
                jobs = Vec::new();
                let released = self.holds.released.notified();
                tokio::pin!(released);
                released.as_mut().enable();
                let left = ROUND_HOLD_MAX.saturating_sub(started.elapsed());
                if round.waited_on
                    || count >= ROUND_MAX
                    || left.is_zero()
                    || self.holds.count.load(Ordering::Acquire) == 0
                {
                    break;
                }
                tokio::select! {
                    next = rx.recv() => match next {
                        Some(job) => jobs = drain(job, || rx.try_recv().ok(), ROUND_MAX - count),
                        None => break,
                    },
                    () = &mut released => {}
                    () = tokio::time::sleep(left.min(ROUND_IDLE_MAX)) => break,
                }
            }
            self.end(round, slot);
        }
    }

    /// Applies one job into the stage and answers it (or queues its answer), with the
    /// job's entry reads remembered (`StagedKv::with_memo`).
    fn apply(&mut self, job: Job, round: &mut Round) {
        if self.layout.kept_stats || self.quotas.active() {
            // The kept statistics and quotas read again what the change read (`kept.rs`).
            let staged = self.staged.clone();
            staged.with_memo(|| self.apply_one(job, round));
        } else {
            self.apply_one(job, round);
        }
    }

    fn apply_one(&mut self, job: Job, round: &mut Round) {
        if self.retired.load(Ordering::Acquire) {
            // Deposed: nothing more is committed here, not even what is staged (`flush`).
            self.flush(round);
            let _ = job.reply.send(Err(no_longer_served()));
            return;
        }
        // A store batch holds the changes of one client's batch, or one job: never jobs of
        // unrelated requests that merely queued together (sharing one made simulation seeds
        // 130055 and 150167 end with a stale read and a diverged copy; not understood yet).
        if job.batch.is_none() || job.batch != self.staged_for {
            self.flush(round);
        }
        let mut ctx = Ctx {
            store: &self.store,
            ids: &mut self.ids,
            outcomes: &mut self.outcomes,
            layout: self.layout,
        };
        let quota_role = (job.mutation.quota_checked(), job.mutation.quota_may_move());
        let ids_at = ctx.ids.changes();
        let (mut batch, outcome) = match execute(&mut ctx, job.mutation) {
            Ok(r) => r,
            Err(e) => {
                // Ids handed out for a batch that is not staged: read again (`not_staged`).
                if self.ids.changes() != ids_at {
                    self.not_staged();
                }
                let _ = job.reply.send(Err(e.into()));
                return;
            }
        };
        // The change's outcome, in the change's own batch (if it has one worth keeping).
        let mut settled = None;
        if let Some(o) = job.once {
            let answer = (o.slot.answer)(&outcome);
            let recorded = answer.is_some();
            if let Some(answer) = answer
                && let Err(e) = crate::state::outcomes::record(
                    &self.store,
                    &mut self.outcomes,
                    &mut batch,
                    o.slot.id,
                    o.slot.at_ns,
                    answer,
                )
            {
                let _ = job.reply.send(Err(e.into()));
                return;
            }
            settled = Some((o, recorded));
        }
        let wrote = !batch.is_empty();
        if !batch.is_empty() {
            // The usage of the quotas the partition counts follows the change, first: a
            // client's change past an allowance is not staged (nothing else counted it).
            match self.quotas.account(&self.store, &mut batch, quota_role) {
                Ok(Counted::Ok) => {}
                Ok(Counted::Short(quota, (files, bytes))) => {
                    self.not_staged();
                    let _ = job.reply.send(Err(WireError::QuotaShort {
                        quota,
                        files,
                        bytes,
                    }));
                    return;
                }
                Err(e) => {
                    self.not_staged();
                    self.forget_kept();
                    let _ = job.reply.send(Err(storage_err(e)));
                    return;
                }
            }
            // So do the partition's kept fsstats (written with the round).
            if self.layout.kept_stats
                && let Err(e) = self.kept.account(&self.store, &mut batch)
            {
                self.not_staged();
                self.forget_kept();
                let _ = job.reply.send(Err(storage_err(e)));
                return;
            }
            if let Err(e) = self.staged.stage(batch) {
                self.not_staged();
                self.forget_kept();
                let _ = job.reply.send(Err(storage_err(e)));
                return;
            }
            self.staged_for = job.batch;
        }
        if let Some((o, recorded)) = settled {
            o.slot.recorded.store(recorded, Ordering::Release);
            o.slot.wrote.store(wrote, Ordering::Release);
            o.slot.settled.store(true, Ordering::Release);
        }
        if job.durable {
            round.waited_on = true;
            round.unflushed.push((job.reply, outcome));
        } else {
            round.must_sync = true;
            // The batch this change goes in, if the round staged anything so far.
            let seq = self.seq + u64::from(self.staged.is_staged());
            let _ = job.reply.send(Ok(Done { outcome, seq }));
            if let Some(s) = job.synced {
                round.waited_on = true;
                round.unflushed.push((s, Outcome::Unit));
            }
        }
        if job.batch.is_none() || self.staged.staged_bytes() >= STAGE_BYTES_MAX {
            self.flush(round);
        }
    }

    /// A change's batch was not staged: what executing it changed in memory (outcomes,
    /// ids handed out) is read again from the store.
    fn not_staged(&mut self) {
        self.outcomes.reload();
        if let Err(e) = self.ids.reload(&self.store) {
            // Refused from here on, rather than hand out an id twice.
            tracing::error!(
                "the partition's ids could not be read again; it stops taking changes: {e}"
            );
            self.retired.store(true, Ordering::Release);
        }
    }

    /// What the stage counted (fsstats, quotas' usage) is read again from the store.
    fn forget_kept(&mut self) {
        self.kept.forget();
        self.quotas.forget();
    }

    /// Commits the stage as the partition's next batch (numbered, chained, shipped in
    /// order); the replies waiting for it move on to wait for the fsync.
    fn flush(&mut self, round: &mut Round) {
        self.staged_for = None;
        if self.retired.load(Ordering::Acquire) {
            // The partition was deposed (`Partition::depose`): from that moment nothing more
            // is committed or shipped here, so the stage is dropped, as a crash would drop
            // it. Changes answered as applied from it are reported lost by their clients'
            // syncs (the partition's next primary has another incarnation); those waiting
            // for durability fail. Committed after the depose, it would be a batch of this
            // store that no copy ever saw.
            if self.staged.is_staged() {
                self.staged.discard();
                self.not_staged();
                self.forget_kept();
            }
            for (reply, _) in round.unflushed.drain(..) {
                let _ = reply.send(Err(no_longer_served()));
            }
            return;
        }
        if self.staged.is_staged() {
            // The shipping order is held from numbering to shipping so that a copy added
            // meanwhile starts at a batch boundary.
            let mut ship = self.copies.hold();
            let (seq, prev_chain, term) = (self.seq + 1, self.chain, self.term);
            let store = &self.store;
            let (kept, quotas) = (&mut self.kept, &mut self.quotas);
            let committed = self.staged.commit_stage(|batch| {
                kept.finish(store, batch);
                quotas.finish(store, batch);
                store.put_meta_u64(batch, SEQ_KEY, seq);
                store.put_meta_u64(batch, TERM_KEY, term);
                let chain = chain_next(prev_chain, batch);
                store.put_meta_u64(batch, CHAIN_KEY, chain);
                (chain, ship.encode(batch))
            });
            match committed {
                Ok((chain, ops)) => {
                    self.seq = seq;
                    self.chain = chain;
                    ship.ship(
                        Numbered {
                            seq,
                            prev_chain,
                            chain,
                        },
                        ops,
                    );
                }
                Err(e) => {
                    drop(ship);
                    self.outcomes.reload();
                    self.forget_kept();
                    tracing::error!(
                        "a batch of changes could not be committed; this server acknowledges no more writes: {e}"
                    );
                    round.failed = Some(e.to_string());
                    let e = storage_err(e);
                    for (reply, _) in round.unflushed.drain(..) {
                        let _ = reply.send(Err(e.clone()));
                    }
                    return;
                }
            }
        }
        let seq = self.seq;
        round.done.extend(
            round
                .unflushed
                .drain(..)
                .map(|(reply, outcome)| (reply, Done { outcome, seq })),
        );
    }

    /// Commits the round's stage and hands its replies to the syncer (`slot`).
    fn end(&mut self, mut round: Round, slot: SyncSlot) {
        self.flush(&mut round);
        if let Some(e) = round.failed {
            slot.fail(e);
            return;
        }
        if round.done.is_empty() && !round.must_sync {
            return;
        }
        slot.after_sync(self.changed.clone(), round.done);
    }
}

fn no_longer_served() -> WireError {
    WireError::Unavailable("the partition is no longer served by this server".into())
}
