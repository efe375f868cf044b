//! The quotas' usage as the partition's single writer holds it (docs/quotas.md "Usage:
//! kept per partition, in the same batch"): the quotas the partition counts and their
//! usage read from the store once, changed in memory by every batch staged, and the
//! changed ones written into each committed batch. A change made for a client that takes
//! a limited quota past the partition's allowance is refused before it is staged
//! (`Short`): the partition gets more from the quota's home and applies it again. A
//! partition that counts no quota reads one record once and does nothing more per batch.

use std::collections::{BTreeMap, BTreeSet};

use myriad_storage::{Allowance, Batch, QuotaRoot, QuotaUsage, StorageError, Store, short_of};

/// A quota short here, and the (names, bytes) a change needs of it in all.
type Needed = (u64, (u64, u64));

#[derive(Default)]
pub(super) struct KeptQuotas {
    /// The quotas counted here (`None`: not read yet).
    set: Option<Vec<QuotaRoot>>,
    usage: BTreeMap<u64, QuotaUsage>,
    /// The allowances as last read (forgotten when a batch changes one).
    allow: BTreeMap<u64, Allowance>,
    /// Changed since the last committed batch.
    dirty: BTreeSet<u64>,
}

/// What a batch does to the quotas.
pub(super) enum Counted {
    Ok,
    /// It would take quota `0` past this partition's allowance, needing (names, bytes)
    /// `1` here in all: not staged.
    Short(u64, (u64, u64)),
}

impl KeptQuotas {
    /// Whether a batch may change what is kept here (the set not read yet counts as yes).
    pub(super) fn active(&self) -> bool {
        self.set.as_ref().is_none_or(|s| !s.is_empty())
    }

    /// Counts `batch`'s changes (before it is staged); `checked`: a client's change, held
    /// to the allowances; `may_move`: what it takes away may go to another partition.
    pub(super) fn account(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        (checked, may_move): (bool, bool),
    ) -> Result<Counted, StorageError> {
        if let Some(next) = Store::quota_set_in(batch)? {
            // A sync writes the set and the usage of quotas it counts afresh itself (new
            // here, or under a new rule for the trash). What this stage changed of the
            // other quotas it keeps goes in with it (a quota it drops is dropped); all is
            // read back from the stage next time.
            for id in std::mem::take(&mut self.dirty) {
                if let Some(u) = self.usage.get(&id)
                    && next.iter().any(|q| q.id == id)
                    && !Store::writes_quota_usage(batch, id)
                {
                    store.put_quota_usage(batch, id, u);
                }
            }
            self.forget();
            return Ok(Counted::Ok);
        }
        if Store::changes_allowances(batch) {
            self.allow.clear();
        }
        if self.set.is_none() {
            self.set = Some(store.quota_set()?.1);
        }
        let set = self.set.as_deref().unwrap_or_default();
        if set.is_empty() {
            return Ok(Counted::Ok);
        }
        let limited = set.iter().any(|q| q.max_files > 0 || q.max_bytes > 0);
        let before = if limited {
            self.usage.clone()
        } else {
            BTreeMap::new()
        };
        let changed = store.account_quotas(batch, set, &mut self.usage)?;
        if limited
            && checked
            && let Some((id, need)) = self.short(store, &changed, &before)?
        {
            // Not staged: the usage in memory goes back to before it (what earlier
            // batches of the stage changed is still to be written).
            self.usage = before;
            return Ok(Counted::Short(id, need));
        }
        if limited && may_move {
            self.give_up_moved(store, batch, &changed, &before)?;
        }
        self.dirty.extend(changed);
        Ok(Counted::Ok)
    }

    /// A change not made for a client (a split's or a tree move's export, a rename's
    /// source dropping its name) that lowered a limited quota's usage here may have moved
    /// it to another partition, where it is counted against no allowance: this partition's
    /// allowance goes down as much (never below its usage), at a newer version, so that
    /// the room it leaves is not used here and there at once (simulation seed 60021 with
    /// --tree-moves --quotas: `/big` held 28 names under a limit of 24).
    fn give_up_moved(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        changed: &[u64],
        before: &BTreeMap<u64, QuotaUsage>,
    ) -> Result<(), StorageError> {
        for (id, was, now, allow) in self.limited_changes(store, changed, before)? {
            let lower = |allow: u64, was: u64, now: u64| {
                allow.saturating_sub(was.saturating_sub(now)).max(now)
            };
            let next = Allowance {
                files: lower(allow.files, was.files, now.files),
                bytes: lower(allow.bytes, was.bytes, now.bytes),
                version: allow.version + 1,
            };
            if (next.files, next.bytes) != (allow.files, allow.bytes) {
                store.put_quota_allowance(batch, id, &next);
                self.allow.insert(id, next);
            }
        }
        Ok(())
    }

    /// The first quota of `changed` whose limited usage grew past the allowance (and past
    /// what was used before the change, kind by kind: a partition over its allowance in
    /// one kind, by entries moved in, may still shrink in it or grow in the other).
    fn short(
        &mut self,
        store: &Store,
        changed: &[u64],
        before: &BTreeMap<u64, QuotaUsage>,
    ) -> Result<Option<Needed>, StorageError> {
        let changes = self.limited_changes(store, changed, before)?;
        let set = self.set.as_deref().unwrap_or_default();
        for (id, was, now, allow) in changes {
            let Some(q) = set.iter().find(|q| q.id == id) else {
                continue;
            };
            let grew = now.files > was.files || now.bytes > was.bytes;
            if grew && short_of(q, &now, &raised(&was, &allow)) {
                return Ok(Some((id, (now.files, now.bytes))));
            }
        }
        Ok(None)
    }

    /// Each quota of `changed` with a limit: (id, its usage before the batch, after it,
    /// the allowance held).
    fn limited_changes(
        &mut self,
        store: &Store,
        changed: &[u64],
        before: &BTreeMap<u64, QuotaUsage>,
    ) -> Result<Vec<(u64, QuotaUsage, QuotaUsage, Allowance)>, StorageError> {
        let set = self.set.as_deref().unwrap_or_default();
        let mut out = Vec::new();
        for id in changed {
            let (Some(q), Some(now)) = (set.iter().find(|q| q.id == *id), self.usage.get(id))
            else {
                continue;
            };
            if q.max_files == 0 && q.max_bytes == 0 {
                continue;
            }
            let was = match before.get(id) {
                Some(u) => *u,
                None => store.quota_usage(*id)?,
            };
            let allow = match self.allow.get(id) {
                Some(a) => *a,
                None => *self.allow.entry(*id).or_insert(store.quota_allowance(*id)?),
            };
            out.push((*id, was, *now, allow));
        }
        Ok(out)
    }

    /// Writes the usage the stage changed into the batch being committed.
    pub(super) fn finish(&mut self, store: &Store, batch: &mut Batch) {
        for id in std::mem::take(&mut self.dirty) {
            if let Some(u) = self.usage.get(&id) {
                store.put_quota_usage(batch, id, u);
            }
        }
    }

    /// The stage was dropped (or could not take a batch): read everything again from
    /// what the store holds.
    pub(super) fn forget(&mut self) {
        *self = KeptQuotas::default();
    }
}

/// The allowance with each kind raised to what was used before the change.
fn raised(was: &QuotaUsage, allow: &Allowance) -> Allowance {
    Allowance {
        files: allow.files.max(was.files),
        bytes: allow.bytes.max(was.bytes),
        version: allow.version,
    }
}
