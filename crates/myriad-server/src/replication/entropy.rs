//! What anti-entropy compares (`partition/anti_entropy.rs` drives it): a copy's keys in
//! buckets, by a hash of the key, each bucket summed up by one number. Two copies at the
//! same batch whose bucket sums agree hold the same keys and values there (but for a hash
//! collision); a bucket that differs is listed key by key, with a hash of each value, to
//! find the keys that differ. Sums are order-free, so one scan in key order fills every
//! bucket of a space. Scans let other tasks run between pages: a big partition takes a
//! while, and a server has two worker threads.

use myriad_proto::WireError;
use myriad_storage::{Space, Store};

use crate::replication::wire::{Pages, is_bookkeeping, page_limit};

/// Buckets per space: a difference is listed a 1/64th of a space at a time.
pub(crate) const BUCKETS_PER_SPACE: usize = 64;

/// The bucket of `key` within its space.
pub(crate) fn bucket_of(key: &[u8]) -> usize {
    // The modulus fits: BUCKETS_PER_SPACE is small.
    (xxhash_rust::xxh3::xxh3_64(key) % BUCKETS_PER_SPACE as u64) as usize
}

/// One key and value as anti-entropy sees them.
fn item_hash(space: Space, key: &[u8], value: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&[space.code()]);
    h.update(&(key.len() as u64).to_be_bytes());
    h.update(key);
    h.update(value);
    h.digest()
}

/// Every bucket's sum, `Space::PARTITION` order, `BUCKETS_PER_SPACE` each.
pub(crate) async fn bucket_sums(store: &Store) -> Result<Vec<u64>, WireError> {
    let mut sums = vec![0u64; Space::PARTITION.len() * BUCKETS_PER_SPACE];
    for (s, space) in Space::PARTITION.into_iter().enumerate() {
        let mut pages = Pages::new(store.kv().as_ref(), space, page_limit(space));
        while let Some(page) = pages.next_page()? {
            tokio::task::yield_now().await;
            for (k, v) in &page {
                if is_bookkeeping(space, k) {
                    continue;
                }
                let i = s * BUCKETS_PER_SPACE + bucket_of(k);
                sums[i] = sums[i].wrapping_add(item_hash(space, k, v));
            }
        }
    }
    Ok(sums)
}

/// The keys of bucket `bucket` of `space`, each with its item hash, in key order.
pub(crate) async fn bucket_keys(
    store: &Store,
    space: Space,
    bucket: usize,
) -> Result<Vec<(Vec<u8>, u64)>, WireError> {
    let mut out = Vec::new();
    let mut pages = Pages::new(store.kv().as_ref(), space, page_limit(space));
    while let Some(page) = pages.next_page()? {
        tokio::task::yield_now().await;
        for (k, v) in page {
            if !is_bookkeeping(space, &k) && bucket_of(&k) == bucket {
                let h = item_hash(space, &k, &v);
                out.push((k, h));
            }
        }
    }
    Ok(out)
}

/// The keys on which two listings of one bucket disagree (a different value, or held by
/// one side only).
pub(crate) fn differing(mine: &[(Vec<u8>, u64)], theirs: &[(Vec<u8>, u64)]) -> Vec<Vec<u8>> {
    let theirs: std::collections::BTreeMap<&[u8], u64> =
        theirs.iter().map(|(k, h)| (k.as_slice(), *h)).collect();
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (k, h) in mine {
        seen.insert(k.as_slice());
        if theirs.get(k.as_slice()) != Some(h) {
            out.push(k.clone());
        }
    }
    for k in theirs.keys() {
        if !seen.contains(k) {
            out.push(k.to_vec());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use myriad_placement::PartitionId;
    use myriad_storage::{Batch, Kv, MemKv};

    use super::*;
    use crate::replication::wire::partition_store;

    fn store_with(pairs: &[(Space, &str, &str)]) -> Store {
        let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
        let store = partition_store(kv, PartitionId(3)).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        for (space, k, v) in pairs {
            b.put(*space, k.as_bytes().to_vec(), v.as_bytes().to_vec());
        }
        store.commit(b).unwrap_or_else(|e| panic!("{e}"));
        store
    }

    #[tokio::test]
    async fn equal_copies_sum_alike_and_a_difference_is_found_to_its_key() {
        let base = [
            (Space::Entries, "/\0a", "1"),
            (Space::Entries, "/\0b", "2"),
            (Space::Blocks, "blk", "data"),
            (Space::Meta, "once/x", "y"),
        ];
        let a = store_with(&base);
        let b = store_with(&base);
        assert_eq!(bucket_sums(&a).await.ok(), bucket_sums(&b).await.ok());
        // One value changed, one key missing, one key extra.
        let c = store_with(&[
            (Space::Entries, "/\0a", "1"),
            (Space::Entries, "/\0b", "3"),
            (Space::Blocks, "blk", "data"),
            (Space::Meta, "once/x", "y"),
            (Space::Meta, "once/z", "w"),
        ]);
        let (sa, sc) = (
            bucket_sums(&a).await.unwrap_or_default(),
            bucket_sums(&c).await.unwrap_or_default(),
        );
        let differ: Vec<usize> = (0..sa.len()).filter(|&i| sa[i] != sc[i]).collect();
        let mut keys = Vec::new();
        for i in differ {
            let space = Space::PARTITION[i / BUCKETS_PER_SPACE];
            let bucket = i % BUCKETS_PER_SPACE;
            let mine = bucket_keys(&a, space, bucket).await.unwrap_or_default();
            let theirs = bucket_keys(&c, space, bucket).await.unwrap_or_default();
            for k in differing(&mine, &theirs) {
                keys.push((space, String::from_utf8_lossy(&k).into_owned()));
            }
        }
        keys.sort();
        assert_eq!(
            keys,
            vec![
                (Space::Entries, "/\0b".to_string()),
                (Space::Meta, "once/z".to_string())
            ]
        );
    }
}
