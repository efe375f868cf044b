//! Two stores seen as one `Kv`: a fast tier (metadata, the first chunk of every file) and a
//! capacity tier (later chunks, erasure-coded fragments, and first chunks that overflowed
//! while the fast tier was past its high-water mark). docs/redundancy.md "Tiers".
//!
//! Invariants:
//! * **Fast shadows capacity.** A block key present in the fast store has its current value
//!   there; the capacity store's value of the same key (a copy the mover left behind) is
//!   never read. A put goes to the fast store when the key is already there; a delete goes to
//!   both.
//! * **One batch, one outcome, across two stores.** A batch's fast part and a *redo record*
//!   holding its capacity part commit as one fast-store batch; the capacity part is kept in
//!   memory (the overlay, read before the capacity store) and written to the capacity store
//!   only after the fast store is synced, so the capacity store never holds a change whose
//!   batch a crash could lose. After a crash, the redo records still in the fast store are
//!   applied to the capacity store again (puts and deletes by key: idempotent, in order).
//!   Redo records are deleted only after the capacity store is synced.
//! * Readers and batches are serialized by one lock, so a reader never sees a batch's fast
//!   part without its capacity part.
//!
//! Fragment-only batches (the server's own erasure-coded fragments) go to the capacity store
//! directly: they touch one store only.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::StorageError;
use crate::kv::{Batch, Kv, Pairs, Space, prefix_end};

/// Raw key of a block: partition (4 BE) ino (8 BE) block (8 BE).
const BLOCK_KEY_BYTES: usize = 20;
/// The role each store of a tiered server records, so that a data directory is never opened
/// in the other role (the capacity store of a tiered server holds no metadata).
const ROLE_KEY: &[u8] = b"\xff\xff\xff\xfftier-role";
/// Redo records replayed per page at open.
const REDO_PAGE: usize = 64;

type Value = Option<Arc<Vec<u8>>>;
type Op = (Space, Vec<u8>, Value);

/// Which tier a server's store is (recorded in the store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierRole {
    /// The only store of a server without `--fast-dir`.
    Single,
    Fast,
    Capacity,
}

impl TierRole {
    fn tag(self) -> &'static [u8] {
        match self {
            TierRole::Single => b"single",
            TierRole::Fast => b"fast",
            TierRole::Capacity => b"capacity",
        }
    }

    /// Records `role` in a new store, or checks that an existing store has it: a data
    /// directory used before without `--fast-dir` holds metadata a capacity store must not.
    pub fn claim(self, kv: &dyn Kv) -> Result<(), StorageError> {
        match kv.get(Space::Meta, ROLE_KEY)? {
            Some(found) if found == self.tag() => Ok(()),
            Some(found) => Err(StorageError::Engine(format!(
                "this store was used as the {} tier and cannot be opened as the {} tier (was --fast-dir added or removed?)",
                String::from_utf8_lossy(&found),
                String::from_utf8_lossy(self.tag())
            ))),
            None => {
                // A store with data but no role is a single store from before roles.
                let used = Space::ALL
                    .into_iter()
                    .filter(|s| *s != Space::Fragments && *s != Space::Blocks)
                    .any(|s| kv.scan(s, b"", None, 1).is_ok_and(|p| !p.is_empty()));
                if used && self != TierRole::Single {
                    return Err(StorageError::Engine(format!(
                        "this store holds a server's data from before tiers; it cannot become the {} tier (start without --fast-dir)",
                        String::from_utf8_lossy(self.tag())
                    )));
                }
                let mut b = Batch::new();
                b.put(Space::Meta, ROLE_KEY.to_vec(), self.tag().to_vec());
                kv.commit(b)?;
                kv.sync()
            }
        }
    }
}

/// Counters of one tiered store, for `statfs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierCounts {
    /// First-chunk blocks written to the capacity tier because the fast tier was full.
    pub overflowed_blocks: u64,
    /// Such blocks moved back to the fast tier since.
    pub moved_back_blocks: u64,
}

#[derive(Default)]
struct Overlay {
    /// Capacity-tier changes committed (their redo records are in the fast store) and not
    /// yet written to the capacity store, by key: the newest wins.
    pending: BTreeMap<(Space, Vec<u8>), (u64, Value)>,
    /// The same changes by redo record, in order.
    redo: BTreeMap<u64, Vec<Op>>,
    next_redo: u64,
    /// False while the capacity store and the overlay hold no block: reads of a missing
    /// block then skip them.
    capacity_has_blocks: bool,
}

pub struct TieredKv {
    fast: Arc<dyn Kv>,
    capacity: Arc<dyn Kv>,
    /// Blocks numbered below this (the first chunk) belong in the fast tier.
    fast_blocks: u64,
    overflowing: AtomicBool,
    overlay: RwLock<Overlay>,
    /// One sync at a time.
    syncing: Mutex<()>,
    /// Where the mover goes on from (a key of `Space::Overflowed`).
    move_cursor: Mutex<Option<Vec<u8>>>,
    overflowed: AtomicU64,
    moved_back: AtomicU64,
}

enum Route {
    Fast,
    Capacity,
    /// The fast store, and a delete of the capacity store's copy.
    FastAndDropCapacity,
}

impl TieredKv {
    /// The two stores as one, after replaying the redo records a crash left.
    /// `fast_blocks`: blocks per chunk (the first chunk's blocks stay fast).
    pub fn open(
        fast: Arc<dyn Kv>,
        capacity: Arc<dyn Kv>,
        fast_blocks: u64,
    ) -> Result<TieredKv, StorageError> {
        TierRole::Fast.claim(fast.as_ref())?;
        TierRole::Capacity.claim(capacity.as_ref())?;
        replay(fast.as_ref(), capacity.as_ref())?;
        let capacity_has_blocks = !capacity.scan(Space::Blocks, b"", None, 1)?.is_empty();
        Ok(TieredKv {
            fast,
            capacity,
            fast_blocks: fast_blocks.max(1),
            overflowing: AtomicBool::new(false),
            overlay: RwLock::new(Overlay {
                capacity_has_blocks,
                ..Overlay::default()
            }),
            syncing: Mutex::new(()),
            move_cursor: Mutex::new(None),
            overflowed: AtomicU64::new(0),
            moved_back: AtomicU64::new(0),
        })
    }

    /// New first chunks go to the capacity tier while `on` (the fast tier is past its mark).
    pub fn set_overflowing(&self, on: bool) {
        self.overflowing.store(on, Ordering::Relaxed);
    }

    #[must_use]
    pub fn overflowing(&self) -> bool {
        self.overflowing.load(Ordering::Relaxed)
    }

    #[must_use]
    pub fn counts(&self) -> TierCounts {
        TierCounts {
            overflowed_blocks: self.overflowed.load(Ordering::Relaxed),
            moved_back_blocks: self.moved_back.load(Ordering::Relaxed),
        }
    }

    /// Bytes on disk of (fast, capacity).
    #[must_use]
    pub fn tier_bytes(&self) -> (u64, u64) {
        (self.fast.disk_bytes(), self.capacity.disk_bytes())
    }

    /// Moves up to `limit` overflowed first-chunk blocks back to the fast tier (unless it
    /// is overflowing); returns how many moved. Each move is one batch (a put in the fast
    /// store, a delete of the capacity copy), so a crash leaves at worst a shadowed copy.
    pub fn move_back(&self, limit: usize) -> Result<usize, StorageError> {
        if self.overflowing() {
            return Ok(0);
        }
        let mut ov = self.write()?;
        let mut cursor = self.move_cursor.lock().map_err(poisoned)?;
        let page = self
            .fast
            .scan(Space::Overflowed, b"", cursor.as_deref(), limit)?;
        if page.len() < limit {
            *cursor = None; // from the start next time
        } else {
            *cursor = page.last().map(|(k, _)| k.clone());
        }
        let mut fast = Batch::new();
        let mut capacity: Vec<Op> = Vec::new();
        let mut moved = 0;
        for (k, _) in page {
            fast.delete(Space::Overflowed, k.clone());
            if self.fast.contains(Space::Blocks, &k)? {
                // Written again since, in the fast tier: only the shadowed copy is left.
                capacity.push((Space::Blocks, k, None));
                continue;
            }
            let held = match ov.pending.get(&(Space::Blocks, k.clone())) {
                Some((_, v)) => v.as_deref().cloned(),
                None => self.capacity.get(Space::Blocks, &k)?,
            };
            if let Some(v) = held {
                fast.put(Space::Blocks, k.clone(), v);
                capacity.push((Space::Blocks, k, None));
                moved += 1;
            }
        }
        if !fast.is_empty() {
            self.commit_parts(&mut ov, fast, capacity)?;
            self.moved_back.fetch_add(moved as u64, Ordering::Relaxed);
        }
        Ok(moved)
    }

    fn write(&self) -> Result<std::sync::RwLockWriteGuard<'_, Overlay>, StorageError> {
        self.overlay.write().map_err(poisoned)
    }

    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Overlay>, StorageError> {
        self.overlay.read().map_err(poisoned)
    }

    fn is_first_chunk(&self, key: &[u8]) -> bool {
        block_number(key).is_none_or(|b| b < self.fast_blocks)
    }

    /// Whether the capacity tier (overlay first) holds `key`.
    fn capacity_contains(
        &self,
        ov: &Overlay,
        space: Space,
        key: &[u8],
    ) -> Result<bool, StorageError> {
        match ov.pending.get(&(space, key.to_vec())) {
            Some((_, v)) => Ok(v.is_some()),
            None => self.capacity.contains(space, key),
        }
    }

    fn route(
        &self,
        ov: &Overlay,
        space: Space,
        key: &[u8],
        put: bool,
        overflowing: bool,
    ) -> Result<Route, StorageError> {
        match space {
            Space::Fragments => Ok(Route::Capacity),
            Space::Blocks => {
                let first = self.is_first_chunk(key);
                let in_capacity =
                    ov.capacity_has_blocks && self.capacity_contains(ov, space, key)?;
                if put {
                    if (first && !overflowing) || self.fast.contains(space, key)? {
                        Ok(if in_capacity {
                            Route::FastAndDropCapacity
                        } else {
                            Route::Fast
                        })
                    } else {
                        if first {
                            self.overflowed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Route::Capacity)
                    }
                } else if !first && !self.fast.contains(space, key)? {
                    // Later chunks live in the capacity tier: no tombstone in the fast one.
                    Ok(Route::Capacity)
                } else if in_capacity {
                    Ok(Route::FastAndDropCapacity)
                } else {
                    Ok(Route::Fast)
                }
            }
            _ => Ok(Route::Fast),
        }
    }

    fn commit_locked(&self, ov: &mut Overlay, batch: Batch) -> Result<(), StorageError> {
        let overflowing = self.overflowing();
        let mut fast = Batch::new();
        let mut capacity: Vec<Op> = Vec::new();
        for (space, key, value) in batch.ops {
            // Overflowed first-chunk blocks are listed in the fast store (in the batch that
            // sends them to capacity), so that the mover finds them without a walk of the
            // capacity tier.
            let first_block = space == Space::Blocks && self.is_first_chunk(&key);
            match self.route(ov, space, &key, value.is_some(), overflowing)? {
                Route::Fast => fast.ops.push((space, key, value)),
                Route::Capacity => {
                    if first_block {
                        match value {
                            Some(_) => fast.put(Space::Overflowed, key.clone(), Vec::new()),
                            None => fast.delete(Space::Overflowed, key.clone()),
                        }
                    }
                    capacity.push((space, key, value.map(Arc::new)));
                }
                Route::FastAndDropCapacity => {
                    if first_block {
                        fast.delete(Space::Overflowed, key.clone());
                    }
                    capacity.push((space, key.clone(), None));
                    fast.ops.push((space, key, value));
                }
            }
        }
        self.commit_parts(ov, fast, capacity)
    }

    /// Commits a fast part and a capacity part as one outcome (the module's second rule).
    fn commit_parts(
        &self,
        ov: &mut Overlay,
        mut fast: Batch,
        capacity: Vec<Op>,
    ) -> Result<(), StorageError> {
        if capacity.is_empty() {
            return self.fast.commit(fast);
        }
        let only_fragments = fast.is_empty()
            && capacity.iter().all(|(s, k, _)| {
                *s == Space::Fragments && !ov.pending.contains_key(&(*s, k.clone()))
            });
        if only_fragments {
            let mut b = Batch::new();
            for (s, k, v) in capacity {
                b.ops.push((s, k, v.map(Arc::unwrap_or_clone)));
            }
            return self.capacity.commit(b);
        }
        let id = ov.next_redo;
        fast.put(
            Space::TierRedo,
            id.to_be_bytes().to_vec(),
            encode(&capacity),
        );
        self.fast.commit(fast)?;
        ov.next_redo += 1;
        for (s, k, v) in &capacity {
            if *s == Space::Blocks && v.is_some() {
                ov.capacity_has_blocks = true;
            }
            ov.pending.insert((*s, k.clone()), (id, v.clone()));
        }
        ov.redo.insert(id, capacity);
        Ok(())
    }

    /// The capacity tier's pairs (overlay over store) after `after`, up to `limit`.
    fn capacity_scan(
        &self,
        ov: &Overlay,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        let mut out: Pairs = Vec::new();
        let mut cursor = after.map(<[u8]>::to_vec);
        let end = prefix_end(prefix);
        loop {
            let page = self
                .capacity
                .scan(space, prefix, cursor.as_deref(), limit.max(1))?;
            let exhausted = page.len() < limit.max(1);
            // The overlay's keys up to the page's last key (all of them once the store has
            // no more) replace or remove the store's.
            let page_last = page.last().map(|(k, _)| k.clone());
            let hi = match (&page_last, exhausted) {
                (Some(k), false) => {
                    let mut k = k.clone();
                    k.push(0);
                    std::ops::Bound::Excluded((space, k))
                }
                _ => std::ops::Bound::Unbounded,
            };
            let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = page.into_iter().collect();
            let lo = match &cursor {
                Some(c) if c.as_slice() >= prefix => std::ops::Bound::Excluded((space, c.clone())),
                _ => std::ops::Bound::Included((space, prefix.to_vec())),
            };
            for ((s, k), (_, v)) in ov.pending.range((lo, hi)) {
                if *s != space || end.as_ref().is_some_and(|e| k >= e) {
                    break;
                }
                if !k.starts_with(prefix) {
                    continue;
                }
                match v {
                    Some(v) => merged.insert(k.clone(), v.as_ref().clone()),
                    None => merged.remove(k),
                };
            }
            out.extend(merged);
            if out.len() >= limit || exhausted {
                out.truncate(limit);
                return Ok(out);
            }
            cursor = page_last;
        }
    }
}

fn poisoned<T>(_: T) -> StorageError {
    StorageError::Engine("tiered store lock poisoned".into())
}

fn block_number(key: &[u8]) -> Option<u64> {
    if key.len() != BLOCK_KEY_BYTES {
        return None;
    }
    key[12..].try_into().ok().map(u64::from_be_bytes)
}

/// Applies every redo record left in `fast` to `capacity`, in order, then forgets them.
fn replay(fast: &dyn Kv, capacity: &dyn Kv) -> Result<(), StorageError> {
    let mut done = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = fast.scan(Space::TierRedo, b"", after.as_deref(), REDO_PAGE)?;
        let Some((last, _)) = page.last() else { break };
        after = Some(last.clone());
        for (k, v) in page {
            let mut b = Batch::new();
            for (s, key, value) in decode(&v)? {
                b.ops.push((s, key, value));
            }
            capacity.commit(b)?;
            done.push(k);
        }
    }
    if done.is_empty() {
        return Ok(());
    }
    tracing::info!(records = done.len(), "capacity tier: redo records replayed");
    capacity.sync()?;
    let mut forget = Batch::new();
    for k in done {
        forget.delete(Space::TierRedo, k);
    }
    fast.commit(forget)?;
    fast.sync()
}

fn encode(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    for (s, k, v) in ops {
        out.push(s.code());
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        match v {
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
            None => out.push(0),
        }
    }
    out
}

type Decoded = Vec<(Space, Vec<u8>, Option<Vec<u8>>)>;

fn decode(mut b: &[u8]) -> Result<Decoded, StorageError> {
    let bad = || StorageError::Corrupt {
        space: Space::TierRedo.name(),
        detail: "a redo record of the capacity tier is cut short or names an unknown space".into(),
    };
    let take = |n: usize, b: &mut &[u8]| -> Result<Vec<u8>, StorageError> {
        if b.len() < n {
            return Err(bad());
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h.to_vec())
    };
    let len = |v: Vec<u8>| -> usize { u32::from_le_bytes(v.try_into().unwrap_or([0; 4])) as usize };
    let mut out = Vec::new();
    while !b.is_empty() {
        let code = take(1, &mut b)?[0];
        let space = Space::ALL
            .into_iter()
            .find(|s| s.code() == code)
            .ok_or_else(bad)?;
        let klen = len(take(4, &mut b)?);
        let key = take(klen, &mut b)?;
        let value = match take(1, &mut b)?[0] {
            0 => None,
            _ => {
                let vlen = len(take(4, &mut b)?);
                Some(take(vlen, &mut b)?)
            }
        };
        out.push((space, key, value));
    }
    Ok(out)
}

impl Kv for TieredKv {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        match space {
            Space::Blocks => {
                let ov = self.read()?;
                if let Some(v) = self.fast.get(space, key)? {
                    return Ok(Some(v));
                }
                if !ov.capacity_has_blocks {
                    return Ok(None);
                }
                match ov.pending.get(&(space, key.to_vec())) {
                    Some((_, v)) => Ok(v.as_deref().cloned()),
                    None => self.capacity.get(space, key),
                }
            }
            Space::Fragments => {
                let ov = self.read()?;
                match ov.pending.get(&(space, key.to_vec())) {
                    Some((_, v)) => Ok(v.as_deref().cloned()),
                    None => self.capacity.get(space, key),
                }
            }
            _ => self.fast.get(space, key),
        }
    }

    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        match space {
            Space::Blocks => {
                let ov = self.read()?;
                let fast = self.fast.scan(space, prefix, after, limit)?;
                if !ov.capacity_has_blocks {
                    return Ok(fast);
                }
                let capacity = self.capacity_scan(&ov, space, prefix, after, limit)?;
                // Fast shadows capacity: insert capacity first, fast over it.
                let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = capacity.into_iter().collect();
                merged.extend(fast);
                Ok(merged.into_iter().take(limit).collect())
            }
            Space::Fragments => {
                let ov = self.read()?;
                self.capacity_scan(&ov, space, prefix, after, limit)
            }
            _ => self.fast.scan(space, prefix, after, limit),
        }
    }

    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        let mut ov = self.write()?;
        self.commit_locked(&mut ov, batch)
    }

    fn sync(&self) -> Result<(), StorageError> {
        let _one = self.syncing.lock().map_err(poisoned)?;
        // Redo records numbered below `upto` are in the fast store's journal...
        let upto = self.read()?.next_redo;
        // ...and durable after this.
        self.fast.sync()?;
        let applied: Vec<u64> = {
            let mut ov = self.write()?;
            let ids: Vec<u64> = ov.redo.range(..upto).map(|(id, _)| *id).collect();
            if !ids.is_empty() {
                let mut b = Batch::new();
                for id in &ids {
                    for (s, k, v) in ov.redo.remove(id).unwrap_or_default() {
                        b.ops.push((s, k, v.map(Arc::unwrap_or_clone)));
                    }
                }
                self.capacity.commit(b)?;
                ov.pending.retain(|_, (id, _)| *id >= upto);
            }
            ids
        };
        self.capacity.sync()?;
        if !applied.is_empty() {
            // Durable with the next sync; until then a crash replays them (idempotent).
            let mut forget = Batch::new();
            for id in applied {
                forget.delete(Space::TierRedo, id.to_be_bytes().to_vec());
            }
            self.fast.commit(forget)?;
        }
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        self.fast
            .disk_bytes()
            .saturating_add(self.capacity.disk_bytes())
    }
}

#[cfg(test)]
mod tests;
