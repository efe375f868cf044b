//! The change a request task applies exactly once (docs/write-path.md, "Exactly once"):
//! the partition sets it for the task (`scope`), and the applier records the change's
//! answer in the batch of the mutation that completes it, so the change and its recorded
//! outcome become durable and reach the copies together.

use std::sync::Arc;
use std::sync::atomic::Ordering;

pub use super::context::OnceSlot;

use crate::state::mutation::{Awaited, Mutation};

tokio::task_local! {
    static ONCE: Option<Arc<OnceSlot>>;
}

/// Runs `fut` (a request's task) applying change `slot.id`.
pub async fn scope<F: std::future::Future>(slot: Arc<OnceSlot>, fut: F) -> F::Output {
    ONCE.scope(Some(slot), fut).await
}

/// Runs `fut` outside any change: work another partition asked for, run in the asking
/// task (a partition of the same server), completes none of that task's changes.
pub async fn outside<F: std::future::Future>(fut: F) -> F::Output {
    ONCE.scope(None, fut).await
}

use super::context::OnceJob;

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

/// Transition check (issue 50): reports and aborts (a panic in a request task would be
/// swallowed by its runtime).
fn fail(msg: String) {
    eprintln!("CHECKFAIL {msg}\n{}", std::backtrace::Backtrace::force_capture());
    std::process::abort();
}

/// Transition check (issue 50): the client named explicitly is the task-local's.
pub(crate) fn check_client(explicit: Option<u64>, site: &str) {
    let local = task_client();
    if local != explicit {
        fail(format!("{site}: the task's client {local:?}, the one passed {explicit:?}"));
    }
}

/// Transition check (issue 50): the context passed explicitly says what the task-local
/// says. Removed with the task-local.
pub(crate) fn check(ctx: &super::context::Context, m: Option<&Mutation>, site: &str) {
    let local = task_client();
    // A mutation that changes no directory recalls nothing: its requester does not matter.
    let recalls = m.is_none_or(|m| {
        !matches!(
            crate::state::changed_dirs::changed_dirs(m),
            crate::state::changed_dirs::ChangedDirs::None
        )
    });
    let same = !recalls
        || local == ctx.client()
        || (ctx.client().is_none() && local.is_some() && ctx.exempt.all_for() == local);
    if !same {
        fail(format!("{site}: the task's client {local:?}, the context's {:?}", ctx.client()));
    }
    if let Some(m) = m {
        let a = job_for(m).map(|j| j.id);
        let b = ctx.job_for(m).map(|j| j.id);
        if a != b {
            fail(format!("{site}: the task completes {a:?}, the context {b:?}"));
        }
    }
}
