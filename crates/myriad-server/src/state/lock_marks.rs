//! The partition's record that file locks were granted in some primary's term
//! (docs/fuse.md "File locks between mounts"). Locks live in the primary's memory only;
//! this marker, replicated with the partition, tells the next primary that holders may
//! come back to reclaim theirs, so it opens in grace.

use crate::state::failure::StateError;
use myriad_storage::{Batch, StorageError, Store};

use crate::state::ops::{Ctx, Mutation, Outcome, not_routed};

const KEY: &str = "file_locks_term";

/// Whether a primary of this partition ever granted a file lock.
pub fn granted_before(store: &Store) -> Result<bool, StorageError> {
    Ok(store.meta_u64(KEY)?.is_some())
}

pub(crate) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    let Mutation::MarkFileLocks { term } = m else {
        return Err(not_routed(&m).into());
    };
    ctx.store.put_meta_u64(b, KEY, term);
    Ok(Outcome::Unit)
}
