//! In-memory `Kv` for unit tests of the layers above. Not durable, by design.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

use crate::StorageError;
use crate::kv::{Batch, Kv, Pairs, Space, prefix_end};

/// A whole engine's keys in memory, by space.
pub type Table = BTreeMap<(Space, Vec<u8>), Vec<u8>>;

/// `Kv::scan` over a `Table` (also used by the simulation's disk).
#[must_use]
pub fn scan_table(
    table: &Table,
    space: Space,
    prefix: &[u8],
    after: Option<&[u8]>,
    limit: usize,
) -> Pairs {
    let start = match after {
        Some(a) if a >= prefix => Bound::Excluded((space, a.to_vec())),
        _ => Bound::Included((space, prefix.to_vec())),
    };
    let end = match prefix_end(prefix) {
        Some(e) => Bound::Excluded((space, e)),
        None => Bound::Unbounded,
    };
    table
        .range((start, end))
        .filter(|((s, _), _)| *s == space)
        .take(limit)
        .map(|((_, k), v)| (k.clone(), v.clone()))
        .collect()
}

#[derive(Default)]
pub struct MemKv {
    data: Mutex<Table>,
}

impl MemKv {
    #[must_use]
    pub fn new() -> MemKv {
        MemKv::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Table>, StorageError> {
        self.data
            .lock()
            .map_err(|_| StorageError::Engine("memkv lock poisoned".into()))
    }
}

impl Kv for MemKv {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.lock()?.get(&(space, key.to_vec())).cloned())
    }

    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        let data = self.lock()?;
        Ok(scan_table(&data, space, prefix, after, limit))
    }

    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        let mut data = self.lock()?;
        for (space, key, value) in batch.ops {
            match value {
                Some(v) => data.insert((space, key), v),
                None => data.remove(&(space, key)),
            };
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        self.lock()
            .map(|d| d.values().map(|v| v.len() as u64).sum())
            .unwrap_or(0)
    }
}
