//! Erasure-coded fragments kept on this server (docs/redundancy.md): one copy each, by
//! design (the code is the redundancy), so they live in the server's own records (partition
//! 0 of `Space::Fragments`), never replicated or copied with a partition.
//!
//! Key: `ino (8 BE) chunk (8 BE) index (1) gen (4 BE)`; value: `gen (4 LE) data crc32c (4
//! LE)`, the checksum over the generation and the data, checked on every read: a flipped
//! byte is an error (the reader rebuilds the fragment from the others), never wrong bytes.
//! The generation is in the key so that a new coding of a chunk never overwrites the
//! fragment of the coding still in use that has the same index on the same server (it
//! did: a coding that then failed dropped its fragments, the old one's with them).

use std::sync::Arc;

use myriad_proto::InodeId;

use crate::StorageError;
use crate::kv::{Batch, Kv, Space};
use crate::partition_kv::PartitionKv;

const KEY_BYTES: usize = 21;

/// Where a fragment is: chunk `chunk` of file `ino`, fragment number `index` (data first,
/// then parity), of the coding with generation `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FragmentId {
    pub ino: InodeId,
    pub chunk: u64,
    pub index: u8,
    pub generation: u32,
}

impl FragmentId {
    fn key(&self) -> [u8; KEY_BYTES] {
        let mut k = [0u8; KEY_BYTES];
        k[..8].copy_from_slice(&self.ino.0.to_be_bytes());
        k[8..16].copy_from_slice(&self.chunk.to_be_bytes());
        k[16] = self.index;
        k[17..].copy_from_slice(&self.generation.to_be_bytes());
        k
    }

    fn from_key(k: &[u8]) -> Option<FragmentId> {
        let k: &[u8; KEY_BYTES] = k.try_into().ok()?;
        Some(FragmentId {
            ino: InodeId(u64::from_be_bytes(k[..8].try_into().ok()?)),
            chunk: u64::from_be_bytes(k[8..16].try_into().ok()?),
            index: k[16],
            generation: u32::from_be_bytes(k[17..].try_into().ok()?),
        })
    }
}

/// A fragment as stored: the layout generation it was written for, and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub generation: u32,
    pub data: Vec<u8>,
}

fn seal(f: &Fragment) -> Vec<u8> {
    let mut v = Vec::with_capacity(f.data.len() + 8);
    v.extend_from_slice(&f.generation.to_le_bytes());
    v.extend_from_slice(&f.data);
    let crc = crc32c::crc32c(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}

fn open(mut v: Vec<u8>) -> Option<Fragment> {
    let body = v.len().checked_sub(4)?;
    if body < 4 {
        return None;
    }
    let stored = u32::from_le_bytes(v[body..].try_into().ok()?);
    if crc32c::crc32c(&v[..body]) != stored {
        return None;
    }
    let generation = u32::from_le_bytes(v[..4].try_into().ok()?);
    v.truncate(body);
    v.drain(..4);
    Some(Fragment {
        generation,
        data: v,
    })
}

/// This server's fragments.
pub struct FragmentStore {
    kv: PartitionKv,
}

impl FragmentStore {
    #[must_use]
    pub fn new(kv: Arc<dyn Kv>) -> FragmentStore {
        FragmentStore {
            kv: PartitionKv::new(kv, 0),
        }
    }

    /// Stores `f` as `id` (replacing what was there), in one batch made durable by the
    /// engine's next sync.
    pub fn put(&self, id: FragmentId, f: &Fragment) -> Result<(), StorageError> {
        let mut b = Batch::new();
        b.put(Space::Fragments, id.key().to_vec(), seal(f));
        self.kv.commit(b)
    }

    /// Makes every fragment stored so far durable.
    pub fn sync(&self) -> Result<(), StorageError> {
        self.kv.sync()
    }

    /// Fragment `id`, checked against its checksum.
    pub fn get(&self, id: FragmentId) -> Result<Option<Fragment>, StorageError> {
        match self.kv.get(Space::Fragments, &id.key())? {
            None => Ok(None),
            Some(v) => open(v).map(Some).ok_or(StorageError::Corrupt {
                space: Space::Fragments.name(),
                detail: format!(
                    "fragment {} of chunk {} of inode {} failed its checksum",
                    id.index, id.chunk, id.ino.0
                ),
            }),
        }
    }

    /// Drops every fragment of file `ino` here; returns how many.
    pub fn drop_file(&self, ino: InodeId) -> Result<usize, StorageError> {
        let mut dropped = 0;
        loop {
            let keys = self
                .kv
                .scan(Space::Fragments, &ino.0.to_be_bytes(), None, 1024)?;
            if keys.is_empty() {
                return Ok(dropped);
            }
            let mut b = Batch::new();
            for (k, _) in &keys {
                b.delete(Space::Fragments, k.clone());
            }
            dropped += keys.len();
            self.kv.commit(b)?;
        }
    }

    /// Drops the fragments of chunk `chunk` of `ino` written for generation `generation`;
    /// returns how many.
    pub fn drop_chunk(
        &self,
        ino: InodeId,
        chunk: u64,
        generation: u32,
    ) -> Result<usize, StorageError> {
        let mut prefix = ino.0.to_be_bytes().to_vec();
        prefix.extend_from_slice(&chunk.to_be_bytes());
        let mut b = Batch::new();
        for (k, _) in self.kv.scan(Space::Fragments, &prefix, None, 1024)? {
            if FragmentId::from_key(&k).is_none_or(|id| id.generation == generation) {
                b.delete(Space::Fragments, k);
            }
        }
        let dropped = b.ops.len();
        self.kv.commit(b)?;
        Ok(dropped)
    }

    /// Fault injection for tests: flips one byte of a stored fragment behind its checksum,
    /// as a failing disk would. Never called by the server.
    pub fn corrupt_for_test(&self, id: FragmentId) -> Result<bool, StorageError> {
        let Some(mut v) = self.kv.get(Space::Fragments, &id.key())? else {
            return Ok(false);
        };
        let Some(b) = v.get_mut(4) else {
            return Ok(false);
        };
        *b ^= 0x01;
        let mut batch = Batch::new();
        batch.put(Space::Fragments, id.key().to_vec(), v);
        self.kv.commit(batch)?;
        self.kv.sync()?;
        Ok(true)
    }

    /// Drops one fragment.
    pub fn drop_one(&self, id: FragmentId) -> Result<(), StorageError> {
        let mut b = Batch::new();
        b.delete(Space::Fragments, id.key().to_vec());
        self.kv.commit(b)
    }

    /// The fragments held here after `after`, at most `limit`, with their generation and
    /// whether their checksum holds (repair, verification after a restart, fsck).
    pub fn list(
        &self,
        after: Option<FragmentId>,
        limit: usize,
    ) -> Result<Vec<(FragmentId, Option<u32>)>, StorageError> {
        let after = after.map(|a| a.key());
        let pairs = self
            .kv
            .scan(Space::Fragments, &[], after.as_ref().map(|a| &a[..]), limit)?;
        Ok(pairs
            .into_iter()
            .filter_map(|(k, v)| Some((FragmentId::from_key(&k)?, open(v).map(|f| f.generation))))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemKv;

    fn id(ino: u64, chunk: u64, index: u8) -> FragmentId {
        FragmentId {
            ino: InodeId(ino),
            chunk,
            index,
            generation: 3,
        }
    }

    /// A new coding of a chunk puts a fragment with the same index on the same server
    /// beside the old one, and dropping either generation leaves the other.
    #[test]
    fn two_generations_of_one_fragment_live_side_by_side() {
        let s = FragmentStore::new(Arc::new(MemKv::new()));
        let old = id(7, 1, 0);
        let new = FragmentId {
            generation: 9,
            ..old
        };
        let f = |generation, byte| Fragment {
            generation,
            data: vec![byte; 64],
        };
        s.put(old, &f(3, 1)).unwrap_or_else(|e| panic!("{e}"));
        s.put(new, &f(9, 2)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.get(old).ok().flatten(), Some(f(3, 1)));
        assert_eq!(s.drop_chunk(InodeId(7), 1, 9).unwrap_or(0), 1);
        assert_eq!(
            s.get(old).ok().flatten(),
            Some(f(3, 1)),
            "the old coding's stays"
        );
        assert_eq!(s.get(new).ok().flatten(), None);
    }

    #[test]
    fn fragments_come_back_as_stored_and_a_flipped_byte_is_an_error() {
        let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
        let s = FragmentStore::new(kv.clone());
        let f = Fragment {
            generation: 3,
            data: (0..1000u32).map(|i| i as u8).collect(),
        };
        s.put(id(7, 1, 2), &f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.get(id(7, 1, 2)).ok().flatten(), Some(f.clone()));
        assert_eq!(s.get(id(7, 1, 3)).ok().flatten(), None);
        // Flip one byte of what is stored.
        let raw = PartitionKv::new(kv.clone(), 0);
        let mut v = raw
            .get(Space::Fragments, &id(7, 1, 2).key())
            .ok()
            .flatten()
            .unwrap_or_default();
        v[10] ^= 0x20;
        let mut b = Batch::new();
        b.put(Space::Fragments, id(7, 1, 2).key().to_vec(), v);
        raw.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            s.get(id(7, 1, 2)),
            Err(StorageError::Corrupt { .. })
        ));
        assert_eq!(
            s.list(None, 10).unwrap_or_default(),
            vec![(id(7, 1, 2), None)],
            "listed as failing its checksum"
        );
    }

    #[test]
    fn a_file_s_fragments_go_together_and_others_stay() {
        let s = FragmentStore::new(Arc::new(MemKv::new()));
        let f = Fragment {
            generation: 1,
            data: vec![1; 64],
        };
        for chunk in 1..4 {
            for index in 0..6 {
                s.put(id(7, chunk, index), &f)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        s.put(id(8, 1, 0), &f).unwrap_or_else(|e| panic!("{e}"));
        // Inode 7 * 256 + 1 shares no prefix with 7: keys are whole 8-byte numbers.
        s.put(id(7 << 8, 1, 0), &f)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.drop_file(InodeId(7)).unwrap_or(0), 18);
        let left: Vec<FragmentId> = s
            .list(None, 100)
            .unwrap_or_default()
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        assert_eq!(left, vec![id(8, 1, 0), id(7 << 8, 1, 0)]);
        s.drop_one(id(8, 1, 0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.list(Some(id(8, 1, 0)), 100).unwrap_or_default().len(), 1);
    }
}
