//! Cluster-unique ids for inodes and transactions, allocated by a partition.

use crate::state::failure::StateError;
use std::collections::HashMap;

use myriad_proto::{PartitionId, WireError, limits};
use myriad_storage::{Batch, StorageError, Store};

/// Allocates cluster-unique ids (`partition << 40 | counter`) for inodes and transactions.
/// The high-water mark is persisted a range at a time, in the same batch as the first id
/// used.
pub struct IdAlloc {
    pid: PartitionId,
    next: u64,
    limit: u64,
    /// Per client, its reserved ranges (`reserve`) as the store holds them, read on first
    /// use: at most two.
    reserved: HashMap<u64, [Reserved; 2]>,
    /// Calls that may have changed the above in memory with a batch (`changes`).
    changes: u64,
}

const ID_RANGE: u64 = 1 << 16;
const ID_COUNTER_MAX: u64 = (1 << 40) - 1;
const HWM_KEY: &str = "id_hwm";
/// `claimed.<ino>` of a number a create here used (`use_claimed`), and of one given up
/// (`give_up_claimed`).
const USED: u64 = 1;
const GIVEN_UP: u64 = 2;

/// Where a partition records another partition's number claimed for it as used or given up.
fn claimed_key(ino: u64) -> String {
    format!("claimed.{ino:016x}")
}

/// Where a number reserved here records whom it was claimed for (`claim_reserved`).
fn claim_key(ino: u64) -> String {
    format!("claim.{ino:016x}")
}

/// Where a claim records the partition it is for (since protocol 39).
fn claimant_key(ino: u64) -> String {
    format!("claimby.{ino:016x}")
}

/// The claim of `client`'s number for partition `by`, as recorded.
fn claim_holder(client: u64, by: PartitionId) -> u64 {
    let mut who = [0u8; 12];
    who[..8].copy_from_slice(&client.to_be_bytes());
    who[8..].copy_from_slice(&by.0.to_be_bytes());
    xxhash_rust::xxh3::xxh3_64(&who)
}

fn meta(store: &Store, key: &str) -> Result<Option<u64>, StateError> {
    Ok(store
        .meta_u64(key)
        .map_err(|e| WireError::Io(e.to_string()))?)
}

impl IdAlloc {
    /// What the store holds again, after a batch this allocator handed ids for was not
    /// staged: it may have raised the high-water mark in memory only, and ids handed out
    /// under that mark would be handed out again by the partition's next primary (found by
    /// simulation seeds 3000 and 3001 with --quotas: a create refused for its quota left
    /// the mark raised, and after a failover a file and a later create shared an inode
    /// number, the create's byte landing in the file).
    /// How many calls that may change the allocator's memory (with a batch) were made:
    /// unchanged across a failed mutation, nothing needs reading again.
    #[must_use]
    pub fn changes(&self) -> u64 {
        self.changes
    }

    pub fn reload(&mut self, store: &Store) -> Result<(), StorageError> {
        let changes = self.changes;
        *self = IdAlloc::load(store, self.pid)?;
        self.changes = changes;
        Ok(())
    }

    pub fn load(store: &Store, pid: PartitionId) -> Result<IdAlloc, StorageError> {
        let hwm = store.meta_u64(HWM_KEY)?.unwrap_or(2);
        Ok(IdAlloc {
            pid,
            next: hwm,
            limit: hwm,
            reserved: HashMap::new(),
            changes: 0,
        })
    }

    pub(crate) fn next(&mut self, store: &Store, batch: &mut Batch) -> Result<u64, StateError> {
        self.changes += 1;
        if self.next >= self.limit {
            self.limit = self.next + ID_RANGE;
            store.put_meta_u64(batch, HWM_KEY, self.limit);
        }
        if self.next > ID_COUNTER_MAX {
            return Err(WireError::NoSpace.into());
        }
        let id = self.pid.id_base() | self.next;
        self.next += 1;
        Ok(id)
    }

    /// Reserves `count` ids for `client`'s creates (docs/fuse.md "Write-behind"): they are
    /// never handed out otherwise, and `use_reserved` lets each be used once, in any order
    /// (a client's journals of several directories reach the partition in any order). The
    /// range replaces the client's older one if it holds two. Returns the first id.
    pub(crate) fn reserve(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        client: u64,
        count: u32,
    ) -> Result<u64, StateError> {
        self.changes += 1;
        if count == 0 || count > limits::RESERVE_IDS_MAX {
            return Err(WireError::InvalidArgument(format!(
                "reserve 1..={} inode numbers",
                limits::RESERVE_IDS_MAX
            ))
            .into());
        }
        let first = self.next;
        let end = first + u64::from(count);
        if end > ID_COUNTER_MAX {
            return Err(WireError::NoSpace.into());
        }
        self.next = end;
        if self.next > self.limit {
            self.limit = self.next + ID_RANGE;
            store.put_meta_u64(batch, HWM_KEY, self.limit);
        }
        let base = self.pid.id_base();
        let ranges = self.ranges(store, client)?;
        // The older range (lower ids) goes.
        let slot = usize::from(ranges[0].end > ranges[1].end);
        ranges[slot] = Reserved {
            start: base | first,
            end: base | end,
            used: vec![0; words(u64::from(count))],
        };
        store.put_meta_u64(batch, &resv_key(client, slot, "start"), base | first);
        store.put_meta_u64(batch, &resv_key(client, slot, "end"), base | end);
        for w in 0..words(u64::from(count)) {
            store.put_meta_u64(batch, &resv_key(client, slot, &format!("used{w}")), 0);
        }
        Ok(base | first)
    }

    /// `client` uses reserved id `ino` for a create: it must lie in one of its ranges,
    /// unused.
    pub(crate) fn use_reserved(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        client: u64,
        ino: u64,
    ) -> Result<(), StateError> {
        self.changes += 1;
        let ranges = self.ranges(store, client)?;
        let free = |r: &Reserved| {
            r.start <= ino && ino < r.end && {
                let k = ino - r.start;
                r.used[(k / 64) as usize] & (1 << (k % 64)) == 0
            }
        };
        let Some(slot) = ranges.iter().position(free) else {
            return Err(WireError::InvalidArgument(format!(
                "inode number {ino:#x} is not one reserved for this client, or was used"
            ))
            .into());
        };
        mark_used(
            &mut ranges[slot],
            (store, batch),
            (client, slot),
            (ino, true),
        );
        Ok(())
    }

    /// The number of a new file or directory: `reserved` (its client and a number that
    /// client reserved, here or, for a name a split moved here, at the partition that
    /// marked it claimed for this one: `ClaimReserved`), used once; or the next free one.
    pub(crate) fn take(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        reserved: Option<(u64, myriad_proto::InodeId)>,
    ) -> Result<u64, StateError> {
        match reserved {
            Some((client, ino)) if self.is_own(ino.0) => {
                self.use_reserved(store, batch, client, ino.0)?;
                Ok(ino.0)
            }
            Some((_, ino)) => {
                self.use_claimed(store, batch, ino.0)?;
                Ok(ino.0)
            }
            None => self.next(store, batch),
        }
    }

    /// `client`'s reserved number `ino`, used by a mkdir that was undone, unused again (so
    /// the mkdir sent again may take it; the client answered with it already). A number
    /// not in the client's ranges is left as it is.
    pub(crate) fn release_reserved(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        client: u64,
        ino: u64,
    ) -> Result<(), StateError> {
        self.changes += 1;
        let ranges = self.ranges(store, client)?;
        let Some(slot) = ranges.iter().position(|r| r.start <= ino && ino < r.end) else {
            return Ok(());
        };
        mark_used(
            &mut ranges[slot],
            (store, batch),
            (client, slot),
            (ino, false),
        );
        Ok(())
    }

    /// Whether `ino` is one of this partition's numbers.
    pub(crate) fn is_own(&self, ino: u64) -> bool {
        ino & !ID_COUNTER_MAX == self.pid.id_base()
    }

    /// Partition `by` creates a file of `client` with `ino`, one of `client`'s reserved
    /// numbers here (its directory was split after the client took it, and the name now
    /// lives there): marked used here, for `by`. Asked again by `by` (a retry after a
    /// failover), it answers the same; no other partition, and no create here, gets it.
    pub(crate) fn claim_reserved(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        client: u64,
        ino: u64,
        by: PartitionId,
    ) -> Result<(), StateError> {
        self.changes += 1;
        let key = claim_key(ino);
        match meta(store, &key)? {
            Some(h) if h == claim_holder(client, by) => Ok(()),
            Some(_) => Err(WireError::InvalidArgument(format!(
                "inode number {ino:#x} was claimed by another partition"
            ))
            .into()),
            None => {
                self.use_reserved(store, batch, client, ino)?;
                store.put_meta_u64(batch, &key, claim_holder(client, by));
                store.put_meta_u64(batch, &claimant_key(ino), u64::from(by.0));
                Ok(())
            }
        }
    }

    /// The partition `ino` (a number reserved here) was claimed for, if the claim said
    /// (claims made since protocol 39 do).
    pub(crate) fn claimant(store: &Store, ino: u64) -> Result<Option<PartitionId>, StateError> {
        Ok(meta(store, &claimant_key(ino))?
            .and_then(|p| u32::try_from(p).ok())
            .map(PartitionId))
    }

    /// The claim of `client`'s number `ino` moves from partition `from` to `to`: the name
    /// its create is for moved on (another split) before `from` used it, and `from` gave it
    /// up (`give_up_claimed`). Refused if `from` does not hold it (any more).
    pub(crate) fn move_claim(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        client: u64,
        ino: u64,
        (from, to): (PartitionId, PartitionId),
    ) -> Result<(), StateError> {
        self.changes += 1;
        let key = claim_key(ino);
        if meta(store, &key)? != Some(claim_holder(client, from)) {
            return Err(WireError::InvalidArgument(format!(
                "inode number {ino:#x} is not claimed by partition {from}"
            ))
            .into());
        }
        store.put_meta_u64(batch, &key, claim_holder(client, to));
        store.put_meta_u64(batch, &claimant_key(ino), u64::from(to.0));
        Ok(())
    }

    /// This partition never uses `ino`, another partition's number claimed for it, after
    /// all (the name its create was for moved on before the create was applied here):
    /// refused (`AlreadyExists`) if a create here used it.
    pub(crate) fn give_up_claimed(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        ino: u64,
    ) -> Result<(), StateError> {
        self.changes += 1;
        let key = claimed_key(ino);
        match meta(store, &key)? {
            Some(GIVEN_UP) => Ok(()),
            Some(_) => Err(WireError::AlreadyExists.into()),
            None => {
                store.put_meta_u64(batch, &key, GIVEN_UP);
                Ok(())
            }
        }
    }

    /// A create here uses `ino`, another partition's number claimed for this one
    /// (`claim_reserved`): once.
    pub(crate) fn use_claimed(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        ino: u64,
    ) -> Result<(), StateError> {
        self.changes += 1;
        let key = claimed_key(ino);
        if meta(store, &key)?.is_some() {
            return Err(
                WireError::InvalidArgument(format!("inode number {ino:#x} was used")).into(),
            );
        }
        store.put_meta_u64(batch, &key, USED);
        Ok(())
    }

    fn ranges(&mut self, store: &Store, client: u64) -> Result<&mut [Reserved; 2], WireError> {
        if let std::collections::hash_map::Entry::Vacant(v) = self.reserved.entry(client) {
            let get = |slot, what: &str| {
                store
                    .meta_u64(&resv_key(client, slot, what))
                    .map(Option::unwrap_or_default)
                    .map_err(|e| WireError::Io(e.to_string()))
            };
            let mut r: [Reserved; 2] = Default::default();
            for (slot, range) in r.iter_mut().enumerate() {
                range.start = get(slot, "start")?;
                range.end = get(slot, "end")?;
                range.used = (0..words(range.end.saturating_sub(range.start)))
                    .map(|w| get(slot, &format!("used{w}")))
                    .collect::<Result<_, _>>()?;
            }
            v.insert(r);
        }
        self.reserved
            .get_mut(&client)
            .ok_or_else(|| WireError::Io("reservations not loaded".into()))
    }
}

/// Marks `ino` of `client`'s range `r` (its slot `slot`) used or unused, here and in the
/// store's word that holds its bit.
fn mark_used(
    r: &mut Reserved,
    (store, batch): (&Store, &mut Batch),
    (client, slot): (u64, usize),
    (ino, used): (u64, bool),
) {
    let k = ino - r.start;
    let w = (k / 64) as usize;
    if used {
        r.used[w] |= 1 << (k % 64);
    } else {
        r.used[w] &= !(1 << (k % 64));
    }
    store.put_meta_u64(
        batch,
        &resv_key(client, slot, &format!("used{w}")),
        r.used[w],
    );
}

/// A range of ids reserved for a client: [start, end), and which were used (a bit each).
#[derive(Clone, Debug, Default)]
struct Reserved {
    start: u64,
    end: u64,
    used: Vec<u64>,
}

fn words(count: u64) -> usize {
    usize::try_from(count.div_ceil(64)).unwrap_or(0)
}

fn resv_key(client: u64, slot: usize, what: &str) -> String {
    format!("resv.{client:016x}.{slot}.{what}")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use myriad_storage::MemKv;

    use super::*;

    fn store() -> Store {
        Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"))
    }

    fn commit(s: &Store, b: Batch) {
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    }

    /// A reserved number claimed by the partition a split moved its name to is used here
    /// once and for that partition only: the same claim again (a retry) passes, another
    /// partition's or a create here is refused; there it is used once.
    /// A number a mkdir answered behind used, released when that mkdir was undone, is
    /// used again (the mkdir sent again), once; another client's release frees nothing.
    #[test]
    fn a_released_number_is_used_once_more() {
        let s = store();
        let mut ids = IdAlloc::load(&s, PartitionId(3)).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        let first = ids
            .reserve(&s, &mut b, 77, 4)
            .unwrap_or_else(|e| panic!("{e}"));
        let n = ids.take(&s, &mut b, Some((77, myriad_proto::InodeId(first))));
        assert_eq!(n.ok(), Some(first), "used");
        commit(&s, b);
        let mut b = Batch::new();
        assert!(
            ids.use_reserved(&s, &mut b, 77, first).is_err(),
            "used once"
        );
        ids.release_reserved(&s, &mut b, 78, first)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            ids.use_reserved(&s, &mut b, 77, first).is_err(),
            "another client's release frees nothing"
        );
        ids.release_reserved(&s, &mut b, 77, first)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&s, b);
        // Read back from the store, as after a restart.
        let mut ids = IdAlloc::load(&s, PartitionId(3)).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        assert!(ids.use_reserved(&s, &mut b, 77, first).is_ok(), "released");
        assert!(ids.use_reserved(&s, &mut b, 77, first).is_err(), "once");
    }

    #[test]
    fn a_reserved_number_is_claimed_once_by_one_partition() {
        let (p, q) = (PartitionId(3), PartitionId(5));
        let s = store();
        let mut ids = IdAlloc::load(&s, p).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        let first = ids
            .reserve(&s, &mut b, 77, 4)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&s, b);
        assert!(ids.is_own(first) && !ids.is_own(q.id_base() | 9));
        let mut b = Batch::new();
        ids.claim_reserved(&s, &mut b, 77, first, q)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&s, b);
        let mut b = Batch::new();
        assert!(
            ids.claim_reserved(&s, &mut b, 77, first, q).is_ok(),
            "a retry"
        );
        assert!(
            ids.claim_reserved(&s, &mut b, 77, first, PartitionId(6))
                .is_err()
        );
        assert!(
            ids.use_reserved(&s, &mut b, 77, first).is_err(),
            "used here too"
        );
        assert!(
            ids.claim_reserved(&s, &mut b, 78, first + 1, q).is_err(),
            "another client's number"
        );

        let there = store();
        let mut qids = IdAlloc::load(&there, q).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        qids.use_claimed(&there, &mut b, first)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&there, b);
        let mut b = Batch::new();
        assert!(
            qids.use_claimed(&there, &mut b, first).is_err(),
            "used once"
        );
    }

    /// A claim moves to a third partition once the second gave the number up unused (the
    /// name moved on again before its create was applied there): the second can then never
    /// use it, a move from a partition that does not hold the claim is refused, and a
    /// number the second used cannot be given up.
    #[test]
    fn a_claim_moves_on_once_the_partition_holding_it_gave_it_up() {
        let (p, q, r) = (PartitionId(3), PartitionId(5), PartitionId(6));
        let s = store();
        let mut ids = IdAlloc::load(&s, p).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        let first = ids
            .reserve(&s, &mut b, 77, 4)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&s, b);
        let mut b = Batch::new();
        ids.claim_reserved(&s, &mut b, 77, first, q)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&s, b);
        assert_eq!(IdAlloc::claimant(&s, first).ok().flatten(), Some(q));
        // q gives it up, unused; then it never uses it.
        let there = store();
        let mut qids = IdAlloc::load(&there, q).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        qids.give_up_claimed(&there, &mut b, first)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&there, b);
        let mut b = Batch::new();
        assert!(qids.use_claimed(&there, &mut b, first).is_err());
        assert!(
            qids.give_up_claimed(&there, &mut b, first).is_ok(),
            "asked again"
        );
        // The claim moves to r, not from a partition that does not hold it.
        let mut b = Batch::new();
        assert!(
            ids.move_claim(&s, &mut b, 77, first, (r, q)).is_err(),
            "r does not hold it"
        );
        ids.move_claim(&s, &mut b, 77, first, (q, r))
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&s, b);
        assert_eq!(IdAlloc::claimant(&s, first).ok().flatten(), Some(r));
        let mut b = Batch::new();
        assert!(ids.claim_reserved(&s, &mut b, 77, first, r).is_ok(), "r's");
        assert!(
            ids.claim_reserved(&s, &mut b, 77, first, q).is_err(),
            "not q's"
        );
        // A number a create used is not given up.
        let mut b = Batch::new();
        let used = q.id_base() | 11;
        qids.use_claimed(&there, &mut b, used)
            .unwrap_or_else(|e| panic!("{e}"));
        commit(&there, b);
        let mut b = Batch::new();
        assert!(matches!(
            qids.give_up_claimed(&there, &mut b, used),
            Err(StateError::Fs(WireError::AlreadyExists))
        ));
    }
}
