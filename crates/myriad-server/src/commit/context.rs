//! What a mutation is applied for (issue 50: request context passed explicitly, from where
//! a request arrives to the applier, in place of task-locals read frames below where they
//! were set): the client's change it may complete, applied exactly once
//! (docs/write-path.md, "Exactly once"), the client's batch it is part of (its mutations
//! share a store batch, `rounds.rs`), and the clients whose leases it does not recall
//! (`leases::Exempt`). Work that belongs to no request passes `Context::background()`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use myriad_proto::{OnceId, Response};

use super::leases::Exempt;
use crate::state::mutation::{Awaited, Mutation, Outcome};

/// The client's change a request applies exactly once, as the partition tells the applier
/// (`exactly_once.rs`): the applier records the change's answer in the batch of the
/// mutation that completes it, so the change and its recorded outcome become durable and
/// reach the copies together.
pub struct OnceSlot {
    pub id: OnceId,
    pub at_ns: i64,
    /// Whether a mutation is the one that completes the change (its outcome is recorded).
    pub completes: fn(&Mutation) -> bool,
    /// The change's answer, from that mutation's outcome (`None`: nothing worth
    /// recording, a retry may simply run again).
    pub answer: fn(&Outcome) -> Option<Response>,
    /// Set once the mutation that completes the change committed: with its answer
    /// recorded in the same batch, or with nothing worth recording. Either way the change
    /// needs no record of its own afterwards.
    pub settled: AtomicBool,
    /// Set with `settled` when an answer was recorded: only such a change may be answered
    /// before it is durable (`Response::Applied`), for its client may send it again
    /// after later ones (docs/fuse.md "Keeping answered changes until they are durable")
    /// and running it again then would undo them.
    pub recorded: AtomicBool,
    /// Set with `settled` when the completing mutation wrote anything.
    pub wrote: AtomicBool,
    /// The client asked for an answer once applied (`SentOnce::visible`): the
    /// completing mutation is answered without waiting for its fsync and copies.
    pub visible: bool,
}

/// What a mutation is applied for, passed by whoever submits it (`Applier::run_in`).
#[derive(Clone, Default)]
pub struct Context {
    /// The client's change the submitting request applies, if any: a mutation that
    /// completes it records its outcome.
    pub once: Option<Arc<OnceSlot>>,
    /// The client's batch being served (`Applier::hold`), if any: its mutations share
    /// a store batch.
    pub batch: Option<u64>,
    /// Clients whose leases on the directories changed are not recalled.
    pub exempt: Exempt,
}

impl OnceSlot {
    /// The slot of change `id` at `at_ns`, recorded as `completes` and `answer` say,
    /// nothing settled yet.
    #[must_use]
    pub fn new(
        (id, at_ns): (OnceId, i64),
        completes: fn(&Mutation) -> bool,
        answer: fn(&Outcome) -> Option<Response>,
        visible: bool,
    ) -> OnceSlot {
        OnceSlot {
            id,
            at_ns,
            completes,
            answer,
            settled: AtomicBool::new(false),
            recorded: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            visible,
        }
    }
}

/// What a job carries of its request's change: set when the job's mutation completes it.
pub(crate) struct OnceJob {
    pub(crate) slot: Arc<OnceSlot>,
    /// Answered once applied, not once durable (`OnceSlot::visible`, and a mutation that
    /// may be: `may_answer_visible`).
    pub(crate) visible: bool,
}

impl Context {
    /// Work that belongs to no client's request: a server's own (recovery, sweeps, splits
    /// started by a tick, coding rounds), or another partition's asking.
    #[must_use]
    pub fn background() -> Context {
        Context::default()
    }

    /// Part of no change sent once, but of `client`'s (if any), wherever it changes
    /// something: another partition's side of it, or a touch reporting it.
    #[must_use]
    pub fn for_client(client: Option<u64>) -> Context {
        Context::exempting(Exempt::client(client))
    }

    /// Part of no change sent once, with the clients `exempt` names exempt from recalls.
    #[must_use]
    pub fn exempting(exempt: Exempt) -> Context {
        Context {
            exempt,
            ..Context::default()
        }
    }

    /// The client whose change this is (`None` outside any change: a server's own work,
    /// a peer request (which names its client itself: its handler passes it on,
    /// `leases::Exempt::client`), or a request not sent once).
    #[must_use]
    pub fn client(&self) -> Option<u64> {
        self.once.as_ref().map(|s| s.id.client)
    }

    /// The change applied, for an intent to record its outcome when it resolves
    /// (`Mutation::MkdirBegin::once`), whoever resolves it.
    #[must_use]
    pub fn awaited(&self) -> Option<Awaited> {
        self.once.as_ref().map(|s| Awaited {
            id: s.id,
            at_ns: s.at_ns,
        })
    }

    /// Whether the change asked for an answer once applied and `m` completes it: then
    /// nothing waits for `m`'s durability (multi-partition changes, whose other mutations
    /// are not the completing one, stay durable: their intents must be on disk for
    /// recovery).
    #[must_use]
    pub fn visible_completion(&self, m: &Mutation) -> bool {
        self.completing(m)
            .is_some_and(|s| s.visible && may_answer_visible(m))
    }

    /// The change `m` completes, if this is one and `m` is the mutation that completes it
    /// (and it is not settled yet).
    pub(crate) fn job_for(&self, m: &Mutation) -> Option<OnceJob> {
        self.completing(m).map(|s| OnceJob {
            slot: s.clone(),
            visible: s.visible && may_answer_visible(m),
        })
    }

    /// The change, if `m` is the mutation that completes it and it is not settled yet.
    fn completing(&self, m: &Mutation) -> Option<&Arc<OnceSlot>> {
        self.once
            .as_ref()
            .filter(|s| (s.completes)(m) && !s.settled.load(Ordering::Acquire))
    }
}

/// Whether a completing mutation may be answered before it is durable: not the decision
/// of a change spanning partitions (a rename's), which the other partitions act on.
fn may_answer_visible(m: &Mutation) -> bool {
    !matches!(m, Mutation::RenameSourceDecide { .. })
}
