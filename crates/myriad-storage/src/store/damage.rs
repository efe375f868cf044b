//! Metadata records that fail their checksum (record versions 2 to 5, `store.rs`): listed for
//! fsck, read raw for repair from an intact copy, and damaged on purpose by tests.

use crate::StorageError;
use crate::kv::{Batch, Space};
use crate::records::{RECORD_VERSION_PLAIN, checksummed};
use crate::store::Store;

/// The spaces whose values are checksummed records.
pub const RECORD_SPACES: [Space; 3] = [Space::Entries, Space::Dirs, Space::Coded];

/// Records read per page while looking for damaged ones.
const PAGE: usize = 4096;

/// Whether a stored record is intact: a record of version 2 or later whose checksum holds,
/// or a version-1 record (which has none to check). (Version 3, then 5, were missing here
/// until 5 came: a directory record of version 3 was listed as damaged.)
#[must_use]
pub fn record_intact(bytes: &[u8]) -> bool {
    match bytes.split_first() {
        Some((&v, rest)) if checksummed(v) => {
            rest.len() >= 4 && {
                let (body, crc) = rest.split_at(rest.len() - 4);
                crc32c::crc32c(body).to_le_bytes() == crc
            }
        }
        Some((&RECORD_VERSION_PLAIN, _)) => true,
        _ => false,
    }
}

impl Store {
    /// Up to `limit` records (space, key) that fail their checksum.
    pub fn corrupt_records(&self, limit: usize) -> Result<Vec<(Space, Vec<u8>)>, StorageError> {
        let mut out = Vec::new();
        for space in RECORD_SPACES {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = self.kv().scan(space, b"", after.as_deref(), PAGE)?;
                let full = page.len() == PAGE;
                for (k, v) in &page {
                    if !record_intact(v) {
                        out.push((space, k.clone()));
                        if out.len() >= limit {
                            return Ok(out);
                        }
                    }
                }
                match page.into_iter().last() {
                    Some((k, _)) if full => after = Some(k),
                    _ => break,
                }
            }
        }
        Ok(out)
    }

    /// The stored bytes of a record, as they are.
    pub fn raw_record(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.kv().get(space, key)
    }

    /// Puts a record's stored bytes as they are (a repair from an intact copy).
    pub fn put_raw_record(&self, batch: &mut Batch, space: Space, key: Vec<u8>, value: Vec<u8>) {
        batch.put(space, key, value);
    }

    /// Tests: flips one bit in the body of the record at `key`, behind its checksum.
    /// False if there is no such record.
    pub fn corrupt_record_for_test(&self, space: Space, key: &[u8]) -> Result<bool, StorageError> {
        let Some(mut v) = self.kv().get(space, key)? else {
            return Ok(false);
        };
        if let Some(b) = v.get_mut(1) {
            *b ^= 0x10;
        }
        let mut batch = Batch::new();
        batch.put(space, key.to_vec(), v);
        self.kv().commit(batch)?;
        self.kv().sync()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{EntryRecord, MemKv};

    #[test]
    fn damaged_records_are_listed_and_intact_ones_are_not() {
        let s = Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        for name in ["a", "b", "c"] {
            s.put_entry(
                &mut b,
                "/d",
                name,
                &EntryRecord {
                    inode: None,
                    pending: None,
                },
            );
        }
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.corrupt_records(10).ok(), Some(vec![]));
        let keys: Vec<Vec<u8>> = s
            .kv()
            .scan(Space::Entries, b"", None, 10)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let good = s
            .raw_record(Space::Entries, &keys[1])
            .ok()
            .flatten()
            .unwrap_or_default();
        assert!(record_intact(&good));
        assert!(
            s.corrupt_record_for_test(Space::Entries, &keys[1])
                .unwrap_or(false)
        );
        assert_eq!(
            s.corrupt_records(10).ok(),
            Some(vec![(Space::Entries, keys[1].clone())])
        );
        let mut b = Batch::new();
        s.put_raw_record(&mut b, Space::Entries, keys[1].clone(), good);
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.corrupt_records(10).ok(), Some(vec![]));
    }
}
