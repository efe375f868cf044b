//! What replication sends and how a partition's store is read and cleared for it: batches
//! in wire form, a store's spaces page by page (whole copies), the bookkeeping keys of a copy,
//! and the protocol's bounds.

use std::sync::Arc;

use myriad_placement::PartitionId;
use myriad_proto::{ReplOp, WireError};
use myriad_storage::{Batch, Kv, Space, Store};

use crate::commit::SEQ_KEY;
use crate::state::mutation::storage_err;

/// Meta key of the last batch applied to a partition's store (written with the batch).
/// Meta key present while a whole copy is being received: the store is incomplete.
pub(crate) const COPYING_KEY: &str = "repl_copying";

/// Batches in flight to one backup.
pub(crate) const WINDOW: usize = 64;

/// How far ahead of the next batch a backup parks out-of-order arrivals: the primary has
/// at most WINDOW in flight, so anything further is refused (`Busy`) rather than held in
/// memory (a batch can be 4 MiB).
pub(crate) const PARK_AHEAD_MAX: u64 = 2 * WINDOW as u64;

/// Keys per page of a whole copy; blocks are up to 64 KiB, so 48 stay under 4 MiB.
pub(crate) const COPY_PAGE: usize = 512;

pub(crate) const COPY_PAGE_BLOCKS: usize = 48;

/// Partition `pid`'s store on this server's engine.
pub(crate) fn partition_store(
    kv: Arc<dyn Kv>,
    pid: PartitionId,
) -> Result<Store, myriad_storage::StorageError> {
    Store::open(Arc::new(myriad_storage::PartitionKv::new(kv, pid.0)), pid.0)
}

/// The ops of `batch` in wire form.
pub(crate) fn to_wire(batch: &Batch) -> Vec<ReplOp> {
    batch
        .ops
        .iter()
        .map(|(space, key, value)| ReplOp {
            space: space.code(),
            key: key.clone(),
            value: value.clone().map(serde_bytes::ByteBuf::from),
        })
        .collect()
}

/// A batch from the wire; refuses spaces that are not a partition's.
/// The bytes of keys and values `ops` carry.
pub(crate) fn ops_bytes(ops: &[ReplOp]) -> usize {
    ops.iter()
        .map(|o| o.key.len() + o.value.as_ref().map_or(0, |v| v.len()))
        .sum()
}

pub(crate) fn from_wire(ops: Vec<ReplOp>) -> Result<Batch, WireError> {
    let mut batch = Batch::new();
    for op in ops {
        let space = Space::partition_space(op.space).ok_or_else(|| {
            WireError::Protocol(format!("replicated op in unknown space {}", op.space))
        })?;
        batch
            .ops
            .push((space, op.key, op.value.map(serde_bytes::ByteBuf::into_vec)));
    }
    Ok(batch)
}

/// A space of a partition's store read page by page, in key order.
pub(crate) struct Pages<'a> {
    kv: &'a dyn Kv,
    space: Space,
    limit: usize,
    after: Option<Vec<u8>>,
}

impl<'a> Pages<'a> {
    pub(crate) fn new(kv: &'a dyn Kv, space: Space, limit: usize) -> Pages<'a> {
        Pages {
            kv,
            space,
            limit,
            after: None,
        }
    }

    /// The next page; `None` once the space is exhausted.
    pub(crate) fn next_page(&mut self) -> Result<Option<myriad_storage::Pairs>, WireError> {
        let page = self
            .kv
            .scan(self.space, &[], self.after.as_deref(), self.limit)
            .map_err(storage_err)?;
        Ok(page.last().map(|(k, _)| k.clone()).map(|last| {
            self.after = Some(last);
            page
        }))
    }
}

/// Keys per page when a space is copied: blocks are up to 64 KiB each.
pub(crate) fn page_limit(space: Space) -> usize {
    if space == Space::Blocks {
        COPY_PAGE_BLOCKS
    } else {
        COPY_PAGE
    }
}

/// A page of keys and values as replication ops (puts).
pub(crate) fn to_ops(space: Space, page: myriad_storage::Pairs) -> Vec<ReplOp> {
    page.into_iter()
        .map(|(key, value)| ReplOp {
            space: space.code(),
            key,
            value: Some(serde_bytes::ByteBuf::from(value)),
        })
        .collect()
}

/// The replication bookkeeping of a copy (its seq, the copying marker): not part of what
/// is copied or compared.
pub(crate) fn is_bookkeeping(space: Space, key: &[u8]) -> bool {
    space == Space::Meta && (key == SEQ_KEY.as_bytes() || key == COPYING_KEY.as_bytes())
}

/// Deletes every key of `space` in `kv` but `keep`; true if there was anything.
pub(crate) fn clear_space(
    kv: &dyn Kv,
    space: Space,
    keep: Option<&[u8]>,
) -> Result<bool, WireError> {
    let mut any = false;
    // Deleted pages are gone from the next scan, but `keep` is not: page past it.
    let mut pages = Pages::new(kv, space, COPY_PAGE);
    while let Some(page) = pages.next_page()? {
        let mut b = Batch::new();
        for (key, _) in page {
            if keep != Some(key.as_slice()) {
                any = true;
                b.delete(space, key);
            }
        }
        kv.commit(b).map_err(storage_err)?;
    }
    Ok(any)
}

/// Marks `store` incomplete (`COPYING_KEY`, committed first) and deletes every other key of
/// its partition. The marker comes first so that a crash part-way (losing any suffix of the
/// page commits) leaves a copy that says it is incomplete, never one that keeps its seq and
/// chain over part of its keys (sim seed 110007: a dropped copy cut short by a crash kept
/// `repl_seq`, was given back the partition later, and its primary found it up to date).
pub(crate) fn empty_marked(store: &Store) -> Result<bool, WireError> {
    let mut b = Batch::new();
    store.put_meta_u64(&mut b, COPYING_KEY, 1);
    store.commit(b).map_err(storage_err)?;
    let mut any = false;
    for space in Space::PARTITION {
        any |= clear_space(store.kv().as_ref(), space, Some(COPYING_KEY.as_bytes()))?;
    }
    Ok(any)
}

/// Deletes every key of partition `pid` on this server: a copy the map no longer gives it
/// (moved away; the servers the map lists hold every acknowledged write). True if there
/// was anything.
pub(crate) fn drop_copy(kv: Arc<dyn Kv>, pid: PartitionId) -> Result<bool, WireError> {
    let store = partition_store(kv, pid).map_err(storage_err)?;
    let any = empty_marked(&store)?;
    // Empty now: the marker goes last.
    let mut b = Batch::new();
    b.delete(Space::Meta, COPYING_KEY.as_bytes().to_vec());
    store.commit(b).map_err(storage_err)?;
    Ok(any)
}

/// The digest `FsckReplica` reports: every key and value of the partition's copy, in key
/// order, except the sequence-number bookkeeping.
/// Every key of a partition's store but the bookkeeping, with a hash of its value (for
/// finding what two copies disagree on).
pub(crate) fn key_hashes(store: &Store) -> Result<Vec<(u8, Vec<u8>, u64)>, WireError> {
    let mut out = Vec::new();
    for space in Space::PARTITION {
        let mut pages = Pages::new(store.kv().as_ref(), space, page_limit(space));
        while let Some(page) = pages.next_page()? {
            for (k, v) in page {
                if !is_bookkeeping(space, &k) {
                    out.push((space.code(), k, xxhash_rust::xxh3::xxh3_64(&v)));
                }
            }
        }
    }
    Ok(out)
}

pub(crate) fn digest(store: &Store) -> Result<(Option<u64>, u64, u64), WireError> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut keys = 0u64;
    for space in Space::PARTITION {
        let mut pages = Pages::new(store.kv().as_ref(), space, page_limit(space));
        while let Some(page) = pages.next_page()? {
            for (k, v) in &page {
                if is_bookkeeping(space, k) {
                    continue;
                }
                keys += 1;
                h.update(&[space.code()]);
                h.update(&(k.len() as u64).to_be_bytes());
                h.update(k);
                h.update(&(v.len() as u64).to_be_bytes());
                h.update(v);
            }
        }
    }
    let copying = store.meta_u64(COPYING_KEY).map_err(storage_err)?.is_some();
    let seq = store.meta_u64(SEQ_KEY).map_err(storage_err)?.unwrap_or(0);
    Ok(((!copying).then_some(seq), keys, h.digest()))
}
