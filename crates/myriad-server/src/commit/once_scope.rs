//! The change a request task applies exactly once (docs/write-path.md, "Exactly once"):
//! the partition sets it for the task (`scope`), and the applier records the change's
//! answer in the batch of the mutation that completes it, so the change and its recorded
//! outcome become durable and reach the copies together.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use myriad_proto::{OnceId, Response};

use crate::state::mutation::{Awaited, Mutation, Outcome};

/// What the partition tells the applier of the change its task is applying.
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
    pub settled: Arc<AtomicBool>,
    /// Set with `settled` when an answer was recorded: only such a change may be answered
    /// before it is durable (`Response::Applied`), for its client may send it again
    /// after later ones (docs/fuse.md "Keeping answered changes until they are durable")
    /// and running it again then would undo them.
    pub recorded: Arc<AtomicBool>,
    /// Set with `settled` when the completing mutation wrote anything.
    pub wrote: Arc<AtomicBool>,
    /// The client asked for an answer once applied (`ClientRequest::Once::visible`): the
    /// completing mutation is answered without waiting for its fsync and copies.
    pub visible: bool,
}

tokio::task_local! {
    static ONCE: Option<OnceSlot>;
}

/// Runs `fut` (a request's task) applying change `slot.id`.
pub async fn scope<F: std::future::Future>(slot: OnceSlot, fut: F) -> F::Output {
    ONCE.scope(Some(slot), fut).await
}

/// Runs `fut` outside any change: work another partition asked for, run in the asking
/// task (a partition of the same server), completes none of that task's changes.
pub async fn outside<F: std::future::Future>(fut: F) -> F::Output {
    ONCE.scope(None, fut).await
}

/// What a job carries of its task's change: set when the job's mutation completes it.
pub(crate) struct OnceJob {
    pub(crate) id: OnceId,
    pub(crate) at_ns: i64,
    pub(crate) answer: fn(&Outcome) -> Option<Response>,
    pub(crate) settled: Arc<AtomicBool>,
    pub(crate) recorded: Arc<AtomicBool>,
    pub(crate) wrote: Arc<AtomicBool>,
    pub(crate) visible: bool,
}

/// Whether the task's change asked for an answer once applied and `m` completes it: then
/// nothing waits for `m`'s durability (multi-partition changes, whose other mutations are
/// not the completing one, stay durable: their intents must be on disk for recovery).
pub fn visible_completion(m: &Mutation) -> bool {
    ONCE.try_with(|s| {
        s.as_ref().is_some_and(|s| {
            s.visible
                && may_answer_visible(m)
                && (s.completes)(m)
                && !s.settled.load(Ordering::Acquire)
        })
    })
    .unwrap_or(false)
}

/// Whether a completing mutation may be answered before it is durable: not the decision
/// of a change spanning partitions (a rename's), which the other partitions act on.
fn may_answer_visible(m: &Mutation) -> bool {
    !matches!(m, Mutation::RenameSourceDecide { .. })
}

/// The change `m` completes, if the task submitting it applies one and `m` is the
/// mutation that completes it (and it is not settled yet).
pub(crate) fn job_for(m: &Mutation) -> Option<OnceJob> {
    ONCE.try_with(|s| {
        let s = s.as_ref()?;
        ((s.completes)(m) && !s.settled.load(Ordering::Acquire)).then(|| OnceJob {
            id: s.id,
            at_ns: s.at_ns,
            answer: s.answer,
            settled: s.settled.clone(),
            recorded: s.recorded.clone(),
            wrote: s.wrote.clone(),
            visible: s.visible && may_answer_visible(m),
        })
    })
    .ok()
    .flatten()
}

/// The change the current task applies, for an intent to record its outcome when it
/// resolves (`Mutation::MkdirBegin::once`), whoever resolves it.
pub fn awaited() -> Option<Awaited> {
    ONCE.try_with(|s| {
        s.as_ref().map(|s| Awaited {
            id: s.id,
            at_ns: s.at_ns,
        })
    })
    .ok()
    .flatten()
}

/// The client whose change the current task applies (`None` outside any change: a
/// server's own work, a peer request (which names its client itself: its handler passes
/// it on, `leases::Exempt::client`), or a request not sent once).
pub fn task_client() -> Option<u64> {
    ONCE.try_with(|s| s.as_ref().map(|s| s.id.client))
        .ok()
        .flatten()
}
