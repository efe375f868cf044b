//! One partition's view of a server's store: every key gets the partition's 4-byte prefix,
//! so a partition's data is one key range per space, copied, compared or dropped as a whole,
//! while all partitions of a server share one engine (and one fsync).

use std::sync::Arc;

use crate::StorageError;
use crate::kv::{Batch, Kv, Pairs, Space};

pub struct PartitionKv {
    inner: Arc<dyn Kv>,
    prefix: [u8; 4],
}

impl PartitionKv {
    /// The view of partition `pid` (0: the server's own records) of `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Kv>, pid: u32) -> PartitionKv {
        PartitionKv {
            inner,
            prefix: pid.to_be_bytes(),
        }
    }

    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(4 + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k
    }
}

impl Kv for PartitionKv {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(space, &self.key(key))
    }

    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        let after = after.map(|a| self.key(a));
        let mut pairs = self
            .inner
            .scan(space, &self.key(prefix), after.as_deref(), limit)?;
        for (k, _) in &mut pairs {
            k.drain(..self.prefix.len().min(k.len()));
        }
        Ok(pairs)
    }

    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        let mut out = Batch::new();
        out.ops.reserve(batch.ops.len());
        for (space, key, value) in batch.ops {
            out.ops.push((space, self.key(&key), value));
        }
        self.inner.commit(out)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        self.inner.disk_bytes()
    }

    fn contains(&self, space: Space, key: &[u8]) -> Result<bool, StorageError> {
        self.inner.contains(space, &self.key(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemKv;

    #[test]
    fn partitions_do_not_see_each_other() -> Result<(), StorageError> {
        let raw: Arc<dyn Kv> = Arc::new(MemKv::default());
        let a = PartitionKv::new(raw.clone(), 1);
        let b = PartitionKv::new(raw.clone(), 2);
        let mut batch = Batch::new();
        batch.put(Space::Entries, b"/x".to_vec(), b"1".to_vec());
        batch.put(Space::Entries, b"/y".to_vec(), b"2".to_vec());
        a.commit(batch)?;
        let mut batch = Batch::new();
        batch.put(Space::Entries, b"/x".to_vec(), b"3".to_vec());
        b.commit(batch)?;
        assert_eq!(a.get(Space::Entries, b"/x")?, Some(b"1".to_vec()));
        assert_eq!(b.get(Space::Entries, b"/x")?, Some(b"3".to_vec()));
        assert_eq!(b.get(Space::Entries, b"/y")?, None);
        let all = a.scan(Space::Entries, &[], None, 10)?;
        assert_eq!(
            all,
            vec![
                (b"/x".to_vec(), b"1".to_vec()),
                (b"/y".to_vec(), b"2".to_vec())
            ]
        );
        assert_eq!(
            a.scan(Space::Entries, b"/", Some(b"/x"), 10)?,
            vec![(b"/y".to_vec(), b"2".to_vec())]
        );
        assert_eq!(b.scan(Space::Entries, &[], None, 10)?.len(), 1);
        // Raw keys carry the big-endian partition id.
        assert_eq!(
            raw.get(Space::Entries, &[0, 0, 0, 2, b'/', b'x'])?,
            Some(b"3".to_vec())
        );
        Ok(())
    }
}
