//! `Kv` on fjall 3: one database per node, one fjall keyspace per `Space`. Batches are fjall
//! write batches (atomic across keyspaces); `sync` is `persist(SyncAll)` of the journal.

use std::ops::Bound;
use std::path::Path;

use fjall::config::CompressionPolicy;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::StorageError;
use crate::kv::{Batch, Kv, Pairs, Space, prefix_end};

pub struct FjallKv {
    db: Database,
    spaces: Vec<Keyspace>,
}

/// Block cache size. Metadata working sets of the benchmarks fit; tune per node later.
const CACHE_BYTES: u64 = 256 * 1024 * 1024;
/// fjall's default journal bound.
pub const MAX_JOURNAL_BYTES: u64 = 512 * 1024 * 1024;
/// fjall refuses a smaller journal bound.
const MIN_JOURNAL_BYTES: u64 = 64 * 1024 * 1024;

impl FjallKv {
    pub fn open(dir: &Path) -> Result<FjallKv, StorageError> {
        FjallKv::open_with_journal(dir, MAX_JOURNAL_BYTES)
    }

    /// As `open`, with the journal kept under `journal_bytes` (a small fast tier: the
    /// journal may not take its room; fjall flushes memtables sooner instead).
    pub fn open_with_journal(dir: &Path, journal_bytes: u64) -> Result<FjallKv, StorageError> {
        let db = Database::builder(dir)
            .max_journaling_size(journal_bytes.max(MIN_JOURNAL_BYTES))
            .cache_size(CACHE_BYTES)
            // One background worker (flushes and compactions in turn). With two, fjall 3.1's
            // worker 0 hands every compaction request back to the pool for worker 1 and
            // takes it again at once while worker 1 is busy: a spin that took 23% of all
            // CPU while copies were being remade (perf: `worker_tick` and `flume` send).
            .worker_threads(1)
            // Batches stay in the journal's buffer until `sync` (the group commit) writes and
            // fsyncs them: one write syscall per group instead of one per mutation. Nothing
            // is acknowledged before `sync`, so durability of acknowledged writes is unchanged.
            .manual_journal_persist(true)
            .open()?;
        let mut spaces = Vec::new();
        for space in Space::ALL {
            spaces.push(db.keyspace(space.name(), || options(space))?);
        }
        Ok(FjallKv { db, spaces })
    }

    fn ks(&self, space: Space) -> &Keyspace {
        // Space::ALL order == index order.
        &self.spaces[space as usize]
    }
}

/// Per-space engine options.
fn options(space: Space) -> KeyspaceCreateOptions {
    let opts = KeyspaceCreateOptions::default();
    match space {
        // File data: most of it is already compressed or incompressible, and a cold read of
        // a small file would pay decompression on every cache miss. Reads of blocks are
        // nearly always of blocks that exist, so last-level bloom filters are skipped.
        Space::Blocks | Space::Fragments => opts
            .data_block_compression_policy(CompressionPolicy::disabled())
            .expect_point_read_hits(true),
        _ => opts,
    }
}

impl Kv for FjallKv {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.ks(space).get(key)?.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        let start: Bound<Vec<u8>> = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_vec()),
            _ => Bound::Included(prefix.to_vec()),
        };
        let end: Bound<Vec<u8>> = match prefix_end(prefix) {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for guard in self.ks(space).range::<Vec<u8>, _>((start, end)) {
            if out.len() >= limit {
                break;
            }
            let (k, v) = guard.into_inner()?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        let mut wb = self.db.batch();
        for (space, key, value) in batch.ops {
            match value {
                Some(v) => wb.insert(self.ks(space), key, v),
                None => wb.remove(self.ks(space), key),
            }
        }
        wb.commit()?;
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }

    fn contains(&self, space: Space, key: &[u8]) -> Result<bool, StorageError> {
        Ok(self.ks(space).contains_key(key)?)
    }
}
