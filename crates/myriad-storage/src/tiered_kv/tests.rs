use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::mem_kv::{MemKv, Table, scan_table};

/// A store that keeps what was synced apart from what was only committed, and can crash:
/// the copy after a crash holds what was synced and any prefix of the batches since.
#[derive(Default)]
struct CrashKv {
    /// (visible, durable, committed since the last sync)
    state: Mutex<(Table, Table, Vec<Ops>)>,
    /// Every sync fails (a crash during it) once set.
    failing: std::sync::atomic::AtomicBool,
}

type Ops = Vec<(Space, Vec<u8>, Option<Vec<u8>>)>;

fn apply(t: &mut Table, ops: &Ops) {
    for (s, k, v) in ops {
        match v {
            Some(v) => t.insert((*s, k.clone()), v.clone()),
            None => t.remove(&(*s, k.clone())),
        };
    }
}

impl CrashKv {
    /// The store after a crash that kept `kept` of the unsynced batches.
    fn crash(&self, kept: usize) -> CrashKv {
        let st = self.state.lock().unwrap_or_else(|e| panic!("{e}"));
        let mut durable = st.1.clone();
        for ops in st.2.iter().take(kept) {
            apply(&mut durable, ops);
        }
        CrashKv {
            state: Mutex::new((durable.clone(), durable, Vec::new())),
            failing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn unsynced(&self) -> usize {
        self.state.lock().map_or(0, |s| s.2.len())
    }

    fn table(&self) -> Table {
        self.state.lock().map(|s| s.0.clone()).unwrap_or_default()
    }
}

impl Kv for CrashKv {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.table().get(&(space, key.to_vec())).cloned())
    }
    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        Ok(scan_table(&self.table(), space, prefix, after, limit))
    }
    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        let mut st = self.state.lock().map_err(poisoned)?;
        apply(&mut st.0, &batch.ops);
        st.2.push(batch.ops);
        Ok(())
    }
    fn sync(&self) -> Result<(), StorageError> {
        if self.failing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StorageError::Engine("crashed".into()));
        }
        let mut st = self.state.lock().map_err(poisoned)?;
        let batches = std::mem::take(&mut st.2);
        for ops in &batches {
            apply(&mut st.1, ops);
        }
        Ok(())
    }
    fn disk_bytes(&self) -> u64 {
        0
    }
}

/// Blocks per chunk in these tests: blocks 0-3 are the first chunk.
const FAST_BLOCKS: u64 = 4;

fn block(pid: u32, ino: u64, block: u64) -> Vec<u8> {
    let mut k = pid.to_be_bytes().to_vec();
    k.extend_from_slice(&ino.to_be_bytes());
    k.extend_from_slice(&block.to_be_bytes());
    k
}

fn tiered(fast: Arc<dyn Kv>, capacity: Arc<dyn Kv>) -> TieredKv {
    TieredKv::open(fast, capacity, FAST_BLOCKS).unwrap_or_else(|e| panic!("{e}"))
}

fn put(kv: &dyn Kv, space: Space, key: Vec<u8>, value: &[u8]) {
    let mut b = Batch::new();
    b.put(space, key, value.to_vec());
    kv.commit(b).unwrap_or_else(|e| panic!("{e}"));
}

fn get(kv: &dyn Kv, space: Space, key: &[u8]) -> Option<Vec<u8>> {
    kv.get(space, key).unwrap_or_else(|e| panic!("{e}"))
}

fn all(kv: &dyn Kv, space: Space) -> Pairs {
    let mut out = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        // Pages of 2 cross the overlay/store boundaries often.
        let page = kv
            .scan(space, b"", after.as_deref(), 2)
            .unwrap_or_else(|e| panic!("{e}"));
        let Some((k, _)) = page.last() else {
            return out;
        };
        after = Some(k.clone());
        out.extend(page);
    }
}

#[test]
fn first_chunks_stay_fast_and_later_chunks_reach_capacity_after_a_sync() {
    let fast = Arc::new(MemKv::new());
    let cap = Arc::new(MemKv::new());
    let t = tiered(fast.clone(), cap.clone());
    let mut b = Batch::new();
    b.put(Space::Blocks, block(1, 7, 0), b"head".to_vec());
    b.put(Space::Blocks, block(1, 7, 9), b"tail".to_vec());
    b.put(Space::Entries, b"1/a".to_vec(), b"entry".to_vec());
    t.commit(b).unwrap_or_else(|e| panic!("{e}"));
    // Visible at once, though the capacity store has nothing before the sync.
    assert_eq!(
        get(&t, Space::Blocks, &block(1, 7, 9)),
        Some(b"tail".to_vec())
    );
    assert_eq!(get(cap.as_ref(), Space::Blocks, &block(1, 7, 9)), None);
    assert_eq!(all(&t, Space::Blocks).len(), 2);
    t.sync().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        get(cap.as_ref(), Space::Blocks, &block(1, 7, 9)),
        Some(b"tail".to_vec())
    );
    assert_eq!(get(fast.as_ref(), Space::Blocks, &block(1, 7, 9)), None);
    assert_eq!(
        get(fast.as_ref(), Space::Blocks, &block(1, 7, 0)),
        Some(b"head".to_vec())
    );
    assert_eq!(
        get(fast.as_ref(), Space::Entries, b"1/a"),
        Some(b"entry".to_vec())
    );
    assert_eq!(get(cap.as_ref(), Space::Entries, b"1/a"), None);
    // The redo record is gone once the capacity store has the change.
    t.sync().unwrap_or_else(|e| panic!("{e}"));
    assert!(all(fast.as_ref(), Space::TierRedo).is_empty());
    // Fragments are the capacity tier's only.
    put(&t, Space::Fragments, b"frag".to_vec(), b"f");
    assert_eq!(
        get(cap.as_ref(), Space::Fragments, b"frag"),
        Some(b"f".to_vec())
    );
    assert_eq!(get(fast.as_ref(), Space::Fragments, b"frag"), None);
}

#[test]
fn an_overflowing_fast_tier_sends_new_first_chunks_to_capacity_and_they_move_back() {
    let fast = Arc::new(MemKv::new());
    let cap = Arc::new(MemKv::new());
    let t = tiered(fast.clone(), cap.clone());
    put(&t, Space::Blocks, block(1, 1, 0), b"old file");
    t.set_overflowing(true);
    put(&t, Space::Blocks, block(1, 2, 0), b"new file");
    // A key already fast stays fast (it is never in both with different values).
    put(&t, Space::Blocks, block(1, 1, 0), b"old file, changed");
    t.sync().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        get(cap.as_ref(), Space::Blocks, &block(1, 2, 0)),
        Some(b"new file".to_vec())
    );
    assert_eq!(get(fast.as_ref(), Space::Blocks, &block(1, 2, 0)), None);
    assert_eq!(
        get(fast.as_ref(), Space::Blocks, &block(1, 1, 0)),
        Some(b"old file, changed".to_vec())
    );
    assert_eq!(t.counts().overflowed_blocks, 1);
    assert_eq!(
        all(fast.as_ref(), Space::Overflowed).len(),
        1,
        "the overflowed block is listed"
    );
    // Nothing moves while the fast tier overflows.
    assert_eq!(t.move_back(100).unwrap_or_else(|e| panic!("{e}")), 0);
    t.set_overflowing(false);
    assert_eq!(t.move_back(100).unwrap_or_else(|e| panic!("{e}")), 1);
    assert_eq!(
        get(&t, Space::Blocks, &block(1, 2, 0)),
        Some(b"new file".to_vec())
    );
    t.sync().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(get(cap.as_ref(), Space::Blocks, &block(1, 2, 0)), None);
    assert_eq!(
        get(fast.as_ref(), Space::Blocks, &block(1, 2, 0)),
        Some(b"new file".to_vec())
    );
    // A delete reaches both stores.
    t.set_overflowing(true);
    put(&t, Space::Blocks, block(1, 3, 1), b"x");
    t.sync().unwrap_or_else(|e| panic!("{e}"));
    let mut b = Batch::new();
    b.delete(Space::Blocks, block(1, 3, 1));
    t.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(get(&t, Space::Blocks, &block(1, 3, 1)), None);
    t.sync().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(get(cap.as_ref(), Space::Blocks, &block(1, 3, 1)), None);
    assert_eq!(t.counts().moved_back_blocks, 1);
}

#[test]
fn scans_merge_both_tiers_and_pending_deletes_in_key_order() {
    let t = tiered(Arc::new(MemKv::new()), Arc::new(MemKv::new()));
    let mut b = Batch::new();
    for blk in 0..12 {
        b.put(Space::Blocks, block(1, 5, blk), vec![blk as u8]);
    }
    t.commit(b).unwrap_or_else(|e| panic!("{e}"));
    t.sync().unwrap_or_else(|e| panic!("{e}"));
    // Pending (not yet synced) deletes and puts over synced capacity blocks.
    let mut b = Batch::new();
    for blk in [5, 6, 7, 8] {
        b.delete(Space::Blocks, block(1, 5, blk));
    }
    b.put(Space::Blocks, block(1, 5, 20), vec![20]);
    b.put(Space::Blocks, block(1, 6, 9), vec![99]);
    t.commit(b).unwrap_or_else(|e| panic!("{e}"));
    let keys: Vec<u64> = all(&t, Space::Blocks)
        .iter()
        .map(|(k, _)| block_number(k).unwrap_or(u64::MAX))
        .collect();
    assert_eq!(keys, vec![0, 1, 2, 3, 4, 9, 10, 11, 20, 9]);
    let one_file = t
        .scan(Space::Blocks, &block(1, 5, 0)[..12], None, 100)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(one_file.len(), 9);
}

#[test]
fn a_crash_at_any_point_leaves_a_prefix_of_the_batches_in_both_tiers() {
    // Batches alternate fast and capacity keys; key k's value is the number of the last
    // batch that wrote it. After a crash that keeps any prefix of each store's unsynced
    // batches, the reopened store must equal the state after some prefix of the batches
    // that includes every batch synced before the crash.
    // The crash comes between batches, or during a sync: in the fast store's, or in the
    // capacity store's.
    for crash_after in 1..12 {
        for crash_in in [None, Some(0), Some(1)] {
            for fast_kept in 0..6 {
                for cap_kept in 0..3 {
                    let fast = Arc::new(CrashKv::default());
                    let cap = Arc::new(CrashKv::default());
                    let t = tiered(fast.clone(), cap.clone());
                    let mut model: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new()];
                    let mut synced = 0usize;
                    for n in 1..=crash_after {
                        // The fast tier overflows every other pair of batches, and the
                        // mover runs between (a move changes where a block is, never
                        // its value).
                        t.set_overflowing(n % 4 < 2);
                        if n % 4 == 3 {
                            t.move_back(8).unwrap_or_else(|e| panic!("{e}"));
                        }
                        let mut state = model.last().cloned().unwrap_or_default();
                        let mut b = Batch::new();
                        for key in [block(1, 1, n % 3), block(1, 2, 8 + n % 4)] {
                            if n % 5 == 0 {
                                b.delete(Space::Blocks, key.clone());
                                state.remove(&key);
                            } else {
                                b.put(Space::Blocks, key.clone(), vec![n as u8]);
                                state.insert(key, vec![n as u8]);
                            }
                        }
                        let meta = b"seq".to_vec();
                        b.put(Space::Meta, meta.clone(), vec![n as u8]);
                        state.insert(meta, vec![n as u8]);
                        t.commit(b).unwrap_or_else(|e| panic!("{e}"));
                        model.push(state);
                        if n % 3 == 0 {
                            t.sync().unwrap_or_else(|e| panic!("{e}"));
                            synced = usize::try_from(n).unwrap_or(0);
                        }
                    }
                    if let Some(store) = crash_in {
                        let failing = if store == 0 {
                            &fast.failing
                        } else {
                            &cap.failing
                        };
                        failing.store(true, std::sync::atomic::Ordering::Relaxed);
                        assert!(t.sync().is_err());
                    }
                    let fast_kept = fast_kept.min(fast.unsynced());
                    let cap_kept = cap_kept.min(cap.unsynced());
                    let f2: Arc<dyn Kv> = Arc::new(fast.crash(fast_kept));
                    let c2: Arc<dyn Kv> = Arc::new(cap.crash(cap_kept));
                    let back = tiered(f2, c2);
                    let mut seen: BTreeMap<Vec<u8>, Vec<u8>> =
                        all(&back, Space::Blocks).into_iter().collect();
                    if let Some(v) = get(&back, Space::Meta, b"seq") {
                        seen.insert(b"seq".to_vec(), v);
                    }
                    let matches: Vec<usize> = (synced..model.len())
                        .filter(|&j| model[j] == seen)
                        .collect();
                    assert!(
                        !matches.is_empty(),
                        "crash after batch {crash_after} (synced {synced}, in sync {crash_in:?}), fast kept {fast_kept}, capacity kept {cap_kept}: {seen:?} is no prefix"
                    );
                }
            }
        }
    }
}

#[test]
fn a_store_used_without_tiers_is_refused_as_a_tier_and_roles_stick() {
    let single = Arc::new(MemKv::new());
    put(single.as_ref(), Space::Entries, b"1/x".to_vec(), b"e");
    let err = TieredKv::open(Arc::new(MemKv::new()), single.clone(), FAST_BLOCKS);
    assert!(
        err.is_err(),
        "a store with metadata opened as the capacity tier"
    );
    let fast = Arc::new(MemKv::new());
    let cap = Arc::new(MemKv::new());
    drop(tiered(fast.clone(), cap.clone()));
    assert!(TierRole::Single.claim(cap.as_ref()).is_err());
    assert!(TierRole::Capacity.claim(fast.as_ref()).is_err());
    assert!(TieredKv::open(fast, cap, FAST_BLOCKS).is_ok());
}

#[test]
fn a_torn_redo_record_is_an_error_not_a_guess() {
    let mut ops = encode(&[(Space::Blocks, block(1, 1, 9), Some(Arc::new(vec![1, 2, 3])))]);
    assert_eq!(decode(&ops).map(|d| d.len()).unwrap_or(0), 1);
    ops.pop();
    assert!(decode(&ops).is_err());
    assert!(decode(&[200, 0, 0, 0, 0, 0]).is_err());
}
