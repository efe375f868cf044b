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

use myriad_proto::{FsError, OnceId, Response, codec};
use myriad_storage::{Batch, Store};
use serde::{Deserialize, Serialize};

use crate::state::ops::{Ctx, Mutation, Outcome, not_routed, storage_err};

/// Outcomes below `low` looked at (and forgotten) per recording: a client's older ones are
/// gone after a few of its changes.
const FORGET_PER_RECORD: usize = 16;
/// Outcomes read per page while forgetting by age.
const SCAN_PAGE: usize = 4096;

#[derive(Serialize, Deserialize)]
struct Recorded {
    at_ns: i64,
    answer: Response,
}

/// Puts `answer` as the outcome of change `id` into `batch`, and forgets the client's
/// outcomes below `id.low` (it has their answers).
pub fn record(
    store: &Store,
    batch: &mut Batch,
    id: OnceId,
    at_ns: i64,
    answer: Response,
) -> Result<(), FsError> {
    let value = codec::encode(&Recorded { at_ns, answer })
        .map_err(|e| FsError::Io(format!("encoding an outcome: {e}")))?;
    for seq in store
        .outcomes_below(id.client, id.low.min(id.seq), FORGET_PER_RECORD)
        .map_err(storage_err)?
    {
        store.delete_outcome(batch, id.client, seq);
    }
    store.put_outcome(batch, id.client, id.seq, value);
    Ok(())
}

/// The answer recorded for change `seq` of `client`, if any.
pub fn recorded(store: &Store, client: u64, seq: u64) -> Result<Option<Response>, FsError> {
    match store.outcome(client, seq).map_err(storage_err)? {
        None => Ok(None),
        Some(bytes) => codec::decode::<Recorded>(&bytes)
            .map(|r| Some(r.answer))
            .map_err(|e| FsError::Io(format!("outcome of change {seq} of {client:x}: {e}"))),
    }
}

pub(crate) fn execute(ctx: &mut Ctx<'_>, b: &mut Batch, m: Mutation) -> Result<Outcome, FsError> {
    match m {
        Mutation::RecordOnce { id, at_ns, answer } => {
            record(ctx.store, b, id, at_ns, answer)?;
            Ok(Outcome::Unit)
        }
        Mutation::ForgetOnces {
            before_ns,
            keep_max,
        } => {
            forget(ctx.store, b, before_ns, keep_max)?;
            Ok(Outcome::Unit)
        }
        m => Err(not_routed(&m)),
    }
}

/// Forgets outcomes recorded before `before_ns` (and any that do not decode), then the
/// oldest of the rest beyond `keep_max`.
fn forget(store: &Store, b: &mut Batch, before_ns: i64, keep_max: usize) -> Result<(), FsError> {
    let mut kept: Vec<(i64, u64, u64)> = Vec::new();
    let mut after = None;
    loop {
        let page = store.outcomes(after, SCAN_PAGE).map_err(storage_err)?;
        let Some(&(c, s, _)) = page.last() else {
            break;
        };
        after = Some((c, s));
        for (client, seq, value) in page {
            match codec::decode::<Recorded>(&value) {
                Ok(r) if r.at_ns >= before_ns => kept.push((r.at_ns, client, seq)),
                _ => store.delete_outcome(b, client, seq),
            }
        }
    }
    if kept.len() > keep_max {
        kept.sort_unstable();
        for &(_, client, seq) in &kept[..kept.len() - keep_max] {
            store.delete_outcome(b, client, seq);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
