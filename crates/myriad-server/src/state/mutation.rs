//! Local atomic mutations. Each `Mutation` is validated and turned into one `Batch` on the
//! applier thread, the only writer of the store, so check-then-write is race-free. The batch
//! becomes durable in the next group commit, and only then is the outcome returned.
//!
//! Pure over `Store` (no clock, no network): timestamps come in the mutation. The types are
//! in `ops.rs`; each family of mutations executes in its own module (`files`, `data`,
//! `attrs`, `dirs`, `renames`, `links`, `shards`, `lock_marks`); this module routes.

use crate::state::failure::StateError;
use myriad_storage::Batch;

pub use crate::state::ids::IdAlloc;
pub use crate::state::ops::{
    Awaited, Blocks, Ctx, DirImport, DirTouchOne, InodeChange, Layout, Mutation, Outcome,
    RenamePrepare, ShardMutation, prepare_key, storage_err,
};
pub use crate::state::records::{INODE_DIR, ORPHAN_DIR, inode_name, wrong_shard};
pub(crate) use crate::state::renames::leaving_here;
use crate::state::{
    attrs, coded, data, dirs, files, link_mutations, lock_marks, outcomes, renames, split_mutations,
};

/// Validates `m` against the store and returns the batch that applies it, with its outcome.
pub fn execute(ctx: &mut Ctx<'_>, m: Mutation) -> Result<(Batch, Outcome), StateError> {
    let mut b = Batch::new();
    let out = match m {
        Mutation::Barrier => Outcome::Unit,
        Mutation::RebuildStats => {
            let kept = ctx.store.load_kept_stats()?.is_some();
            if ctx.layout.kept_stats && !kept {
                b = ctx.store.rebuild_stats()?;
            } else if !ctx.layout.kept_stats && kept {
                // Kept no more: none left to go stale.
                b = ctx.store.drop_stats()?;
            }
            Outcome::Unit
        }
        Mutation::SyncQuotas { epoch, roots } => {
            b = ctx.store.sync_quotas(epoch, &roots)?;
            Outcome::Unit
        }
        Mutation::QuotaAllow { quota, granted } => {
            Outcome::Ledger(ctx.store.adopt_allowance(&mut b, quota, granted)?.triple())
        }
        Mutation::QuotaSettle { quota, ledger } => {
            Outcome::Ledger(ctx.store.settle_allowance(&mut b, quota, ledger)?.triple())
        }
        Mutation::QuotaLedger { quota, entries } => {
            for (pid, a) in &entries {
                ctx.store.put_quota_ledger(&mut b, quota, *pid, a);
            }
            Outcome::Unit
        }
        Mutation::ReserveIds { client, count } => {
            Outcome::Ids(ctx.ids.reserve(ctx.store, &mut b, client, count)?, count)
        }
        Mutation::ClaimReserved { client, ino, by } => {
            ctx.ids.claim_reserved(ctx.store, &mut b, client, ino, by)?;
            Outcome::Unit
        }
        Mutation::MoveClaim {
            client,
            ino,
            from,
            to,
        } => {
            ctx.ids
                .move_claim(ctx.store, &mut b, client, ino, (from, to))?;
            Outcome::Unit
        }
        Mutation::GiveUpClaimed { ino } => {
            ctx.ids.give_up_claimed(ctx.store, &mut b, ino)?;
            Outcome::Unit
        }
        m @ Mutation::MarkFileLocks { .. } => lock_marks::execute(ctx, &mut b, m)?,
        m @ (Mutation::RecordOnce { .. } | Mutation::ForgetOnces { .. }) => {
            outcomes::execute(ctx, &mut b, m)?
        }
        Mutation::Shard(m) => split_mutations::execute(ctx, &mut b, m)?,
        m @ (Mutation::InitRoot { .. }
        | Mutation::CreateFile { .. }
        | Mutation::Symlink { .. }
        | Mutation::Mknod { .. }
        | Mutation::Unlink { .. }
        | Mutation::DropOrphans { .. }) => files::execute(ctx, &mut b, m)?,
        m @ (Mutation::Write { .. }
        | Mutation::ExtendSize { .. }
        | Mutation::Truncate { .. }
        | Mutation::WriteChunk { .. }
        | Mutation::ChunkTrim { .. }
        | Mutation::ChunkTrimFrom { .. }
        | Mutation::RepairBlock { .. }
        | Mutation::RepairRecord { .. }
        | Mutation::Resync { .. }
        | Mutation::DropBlocks { .. }) => data::execute(ctx, &mut b, m)?,
        m @ (Mutation::CodeChunk { .. }
        | Mutation::UncodeChunk { .. }
        | Mutation::RecodeChunk { .. }) => coded::execute(ctx, &mut b, m)?,
        m @ (Mutation::SetAttr { .. } | Mutation::DirTouch { .. } | Mutation::DirTouches(_)) => {
            attrs::execute(ctx, &mut b, m)?
        }
        m @ (Mutation::MkdirBegin { .. }
        | Mutation::RmdirBegin { .. }
        | Mutation::ResolveEntry { .. }
        | Mutation::Decide { .. }
        | Mutation::DeleteIntent { .. }
        | Mutation::TreeMoveBegin { .. }
        | Mutation::TreeMoveRecord { .. }
        | Mutation::DirObjectCreate { .. }
        | Mutation::DirObjectConfirm { .. }
        | Mutation::DirObjectRemove { .. }
        | Mutation::MarkReadOnly { .. }
        | Mutation::ClearAutoIndex { .. }) => dirs::execute(ctx, &mut b, m)?,
        m @ (Mutation::RenameLocal { .. }
        | Mutation::RenameSourceBegin { .. }
        | Mutation::RenameSourceDecide { .. }
        | Mutation::RenamePrepare(_)
        | Mutation::RenameTargetResolve { .. }
        | Mutation::DirFreeze { .. }
        | Mutation::DirImport(_)
        | Mutation::DirFinish { .. }) => renames::execute(ctx, &mut b, m)?,
        m @ (Mutation::LinkSource { .. }
        | Mutation::PutLinkRef { .. }
        | Mutation::AdjustLinks { .. }) => link_mutations::execute(ctx, &mut b, m)?,
    };
    Ok((b, out))
}

#[cfg(test)]
mod tests;
