//! The outcomes of clients' changes, kept so that a retried change answers its first
//! outcome (docs/write-path.md, "Exactly once"). A change's outcome goes into the batch of
//! the change itself (`record`, called by the applier), or, for a change whose work spans
//! several mutations, into a batch of its own once the work is done (`RecordOnce`). Either
//! way it is replicated and made durable with the partition's data, so a new primary after
//! a failover has it.
//!
//! Bounds: recording change `seq` of a client forgets that client's outcomes below the
//! lowest change it still waits for (`OnceId::low`); `ForgetOnces` forgets outcomes older
//! than an age, and the oldest beyond a count, for clients that went away.

use crate::state::failure::StateError;
use myriad_proto::{OnceId, Response, WireError, codec};
use myriad_storage::{Batch, Store};

use crate::state::ops::{Awaited, Ctx, Mutation, Outcome, not_routed};
pub use crate::state::outcome_index::Outcomes;
use crate::state::outcome_index::Recorded;

/// Puts `answer` as the outcome of change `id` into `batch`, and forgets the client's
/// outcomes below `id.low` (it has their answers).
pub fn record(
    store: &Store,
    outcomes: &mut Outcomes,
    batch: &mut Batch,
    id: OnceId,
    at_ns: i64,
    answer: Response,
) -> Result<(), StateError> {
    let value = codec::encode(&Recorded { at_ns, answer })
        .map_err(|e| WireError::Io(format!("encoding an outcome: {e}")))?;
    outcomes.load(store)?;
    let answered: Vec<u64> = outcomes
        .by_client
        .get(&id.client)
        .map(|mine| {
            mine.range(..id.low.min(id.seq))
                .map(|(&seq, _)| seq)
                .collect()
        })
        .unwrap_or_default();
    for seq in answered {
        outcomes.forget(store, batch, id.client, seq);
    }
    store.put_outcome(batch, id.client, id.seq, value);
    outcomes
        .by_client
        .entry(id.client)
        .or_default()
        .insert(id.seq, at_ns);
    Ok(())
}

/// Keeps, with intent `txid` (in its batch), the change it completes.
pub(crate) fn await_outcome(store: &Store, batch: &mut Batch, txid: u64, once: Option<Awaited>) {
    if let Some(once) = once
        && let Ok(value) = codec::encode(&once)
    {
        store.put_awaited_outcome(batch, txid, value);
    }
}

/// Intent `txid` resolves in `batch`: the change it completes (if any) gets `answer`
/// recorded as its outcome (`None`: it failed, and a retry runs it again).
pub(crate) fn resolve_awaited(
    ctx: &mut Ctx<'_>,
    batch: &mut Batch,
    txid: u64,
    answer: Option<Response>,
) -> Result<(), StateError> {
    let Some(once) = awaited(ctx.store, txid)? else {
        return Ok(());
    };
    ctx.store.delete_awaited_outcome(batch, txid);
    if let Some(answer) = answer {
        record(ctx.store, ctx.outcomes, batch, once.id, once.at_ns, answer)?;
    }
    Ok(())
}

/// The change whose outcome intent `txid` records when it resolves, if any (one that does
/// not decode counts as none: its retry runs again, as before outcomes were kept so).
pub(crate) fn awaited(store: &Store, txid: u64) -> Result<Option<Awaited>, StateError> {
    Ok(store
        .awaited_outcome(txid)?
        .and_then(|bytes| codec::decode::<Awaited>(&bytes).ok()))
}

/// The answer recorded for change `seq` of `client`, if any.
pub fn recorded(store: &Store, client: u64, seq: u64) -> Result<Option<Response>, StateError> {
    match store.outcome(client, seq)? {
        None => Ok(None),
        Some(bytes) => codec::decode::<Recorded>(&bytes)
            .map(|r| Some(r.answer))
            .map_err(|e| {
                WireError::Io(format!("outcome of change {seq} of {client:x}: {e}")).into()
            }),
    }
}

pub(crate) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    match m {
        Mutation::RecordOnce { id, at_ns, answer } => {
            record(ctx.store, ctx.outcomes, b, id, at_ns, answer)?;
            Ok(Outcome::Unit)
        }
        Mutation::ForgetOnces {
            before_ns,
            keep_max,
        } => {
            forget(ctx.store, ctx.outcomes, b, before_ns, keep_max)?;
            Ok(Outcome::Unit)
        }
        m => Err(not_routed(&m).into()),
    }
}

/// Forgets outcomes recorded before `before_ns` (and any that do not decode), then the
/// oldest of the rest beyond `keep_max`.
fn forget(
    store: &Store,
    outcomes: &mut Outcomes,
    b: &mut Batch,
    before_ns: i64,
    keep_max: usize,
) -> Result<(), StateError> {
    outcomes.load(store)?;
    let mut all: Vec<(i64, u64, u64)> = outcomes
        .by_client
        .iter()
        .flat_map(|(&client, mine)| mine.iter().map(move |(&seq, &at)| (at, client, seq)))
        .collect();
    all.sort_unstable();
    let old = all.partition_point(|&(at, _, _)| at < before_ns);
    let over = all.len().saturating_sub(keep_max);
    for &(_, client, seq) in &all[..old.max(over)] {
        outcomes.forget(store, b, client, seq);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
