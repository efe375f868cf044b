//! The outcomes of clients' changes (docs/write-path.md, "Exactly once"): under
//! `once/<client 8 BE><seq 8 BE>` in the partition's `Meta` space, so that they are
//! replicated and copied with the partition, in the batch of the change itself. Values are
//! opaque here (the server encodes the answer and when it was recorded).
//!
//! A change whose work spans partitions (mkdir, rmdir) also leaves, with its intent, the
//! change it belongs to under `once-of/<txid 8 BE>`, so that whoever resolves the intent
//! (its coordinator, or recovery after a crash) records the outcome in the same batch.

use crate::StorageError;
use crate::kv::{Batch, Space};
use crate::store::Store;

const ONCE_PREFIX: &[u8] = b"once/";

fn once_key(client: u64, seq: u64) -> Vec<u8> {
    let mut k = ONCE_PREFIX.to_vec();
    k.extend_from_slice(&client.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// (client, seq) of a key under `ONCE_PREFIX`.
fn split_once_key(key: &[u8]) -> Option<(u64, u64)> {
    let rest = key.strip_prefix(ONCE_PREFIX)?;
    let client = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let seq = u64::from_be_bytes(rest.get(8..16)?.try_into().ok()?);
    Some((client, seq))
}

const AWAITED_PREFIX: &[u8] = b"once-of/";

fn awaited_key(txid: u64) -> Vec<u8> {
    let mut k = AWAITED_PREFIX.to_vec();
    k.extend_from_slice(&txid.to_be_bytes());
    k
}

impl Store {
    /// The change (opaque: the server's encoding) whose outcome intent `txid` records
    /// when it resolves, if any.
    pub fn awaited_outcome(&self, txid: u64) -> Result<Option<Vec<u8>>, StorageError> {
        self.kv().get(Space::Meta, &awaited_key(txid))
    }

    pub fn put_awaited_outcome(&self, batch: &mut Batch, txid: u64, value: Vec<u8>) {
        batch.put(Space::Meta, awaited_key(txid), value);
    }

    pub fn delete_awaited_outcome(&self, batch: &mut Batch, txid: u64) {
        batch.delete(Space::Meta, awaited_key(txid));
    }

    /// The outcome recorded for change `seq` of `client`, if any.
    pub fn outcome(&self, client: u64, seq: u64) -> Result<Option<Vec<u8>>, StorageError> {
        self.kv().get(Space::Meta, &once_key(client, seq))
    }

    pub fn put_outcome(&self, batch: &mut Batch, client: u64, seq: u64, value: Vec<u8>) {
        batch.put(Space::Meta, once_key(client, seq), value);
    }

    pub fn delete_outcome(&self, batch: &mut Batch, client: u64, seq: u64) {
        batch.delete(Space::Meta, once_key(client, seq));
    }

    /// Every recorded outcome: (client, seq, value), in key order, up to `limit`, after
    /// `after` if given.
    pub fn outcomes(
        &self,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> Result<Vec<(u64, u64, Vec<u8>)>, StorageError> {
        let after = after.map(|(c, s)| once_key(c, s));
        let pairs = self
            .kv()
            .scan(Space::Meta, ONCE_PREFIX, after.as_deref(), limit)?;
        Ok(pairs
            .into_iter()
            .filter_map(|(k, v)| split_once_key(&k).map(|(c, s)| (c, s, v)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::MemKv;

    #[test]
    fn outcomes_are_kept_per_client_in_order() {
        let store = Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        for (client, seq) in [(7, 1), (7, 2), (7, 5), (8, 1), (u64::MAX, 3)] {
            store.put_outcome(&mut b, client, seq, vec![seq as u8]);
        }
        store.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.outcome(7, 2).ok().flatten(), Some(vec![2]));
        assert_eq!(store.outcome(7, 3).ok().flatten(), None);
        let all = store.outcomes(None, 100).unwrap_or_else(|e| panic!("{e}"));
        let keys: Vec<(u64, u64)> = all.iter().map(|(c, s, _)| (*c, *s)).collect();
        assert_eq!(keys, vec![(7, 1), (7, 2), (7, 5), (8, 1), (u64::MAX, 3)]);
        let rest = store
            .outcomes(Some((7, 5)), 100)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rest.len(), 2);
        // Other meta records are not outcomes.
        assert_eq!(
            store.meta_u64("format_version").ok().flatten(),
            Some(u64::from(crate::FORMAT_VERSION))
        );
        let mut b = Batch::new();
        store.delete_outcome(&mut b, 7, 1);
        store.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.outcome(7, 1).ok().flatten(), None);
        assert_eq!(store.outcomes(None, 100).map(|v| v.len()).ok(), Some(4));
    }

    #[test]
    fn an_awaited_outcome_is_kept_by_txid_apart_from_the_outcomes() {
        let store = Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        store.put_awaited_outcome(&mut b, 9, vec![1, 2]);
        store.put_outcome(&mut b, 7, 1, vec![3]);
        store.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.awaited_outcome(9).ok().flatten(), Some(vec![1, 2]));
        assert_eq!(store.awaited_outcome(8).ok().flatten(), None);
        // Not listed among the outcomes.
        assert_eq!(store.outcomes(None, 100).map(|v| v.len()).ok(), Some(1));
        let mut b = Batch::new();
        store.delete_awaited_outcome(&mut b, 9);
        store.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.awaited_outcome(9).ok().flatten(), None);
    }
}
