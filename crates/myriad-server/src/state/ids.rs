//! Cluster-unique ids for inodes and transactions, allocated by a partition.

use std::collections::HashMap;

use myriad_proto::{FsError, PartitionId, limits};
use myriad_storage::{Batch, StorageError, Store};

/// Allocates cluster-unique ids (`partition << 40 | counter`) for inodes and transactions.
/// The high-water mark is persisted a range at a time, in the same batch as the first id
/// used.
pub struct IdAlloc {
    pid: PartitionId,
    next: u64,
    limit: u64,
    /// Per client, its reserved ranges (`reserve`) as the store holds them, read on first
    /// use: [next unused, end) each, at most two, in ids.
    reserved: HashMap<u64, [(u64, u64); 2]>,
}

const ID_RANGE: u64 = 1 << 16;
const ID_COUNTER_MAX: u64 = (1 << 40) - 1;
const HWM_KEY: &str = "id_hwm";

impl IdAlloc {
    pub fn load(store: &Store, pid: PartitionId) -> Result<IdAlloc, StorageError> {
        let hwm = store.meta_u64(HWM_KEY)?.unwrap_or(2);
        Ok(IdAlloc {
            pid,
            next: hwm,
            limit: hwm,
            reserved: HashMap::new(),
        })
    }

    pub(crate) fn next(&mut self, store: &Store, batch: &mut Batch) -> Result<u64, FsError> {
        if self.next >= self.limit {
            self.limit = self.next + ID_RANGE;
            store.put_meta_u64(batch, HWM_KEY, self.limit);
        }
        if self.next > ID_COUNTER_MAX {
            return Err(FsError::NoSpace);
        }
        let id = self.pid.id_base() | self.next;
        self.next += 1;
        Ok(id)
    }

    /// Reserves `count` ids for `client`'s creates (docs/fuse.md "Write-behind"): they are
    /// never handed out otherwise, and `use_reserved` lets each be used once. The range
    /// replaces the client's older one if it holds two. Returns the first id.
    pub(crate) fn reserve(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        client: u64,
        count: u32,
    ) -> Result<u64, FsError> {
        if count == 0 || count > limits::RESERVE_IDS_MAX {
            return Err(FsError::InvalidArgument(format!(
                "reserve 1..={} inode numbers",
                limits::RESERVE_IDS_MAX
            )));
        }
        let first = self.next;
        let end = first + u64::from(count);
        if end > ID_COUNTER_MAX {
            return Err(FsError::NoSpace);
        }
        self.next = end;
        if self.next > self.limit {
            self.limit = self.next + ID_RANGE;
            store.put_meta_u64(batch, HWM_KEY, self.limit);
        }
        let base = self.pid.id_base();
        let ranges = self.ranges(store, client)?;
        // The older range (lower ids) goes.
        let slot = usize::from(ranges[0].1 > ranges[1].1);
        ranges[slot] = (base | first, base | end);
        let (n, e) = ranges[slot];
        store.put_meta_u64(batch, &resv_key(client, slot, "next"), n);
        store.put_meta_u64(batch, &resv_key(client, slot, "end"), e);
        Ok(base | first)
    }

    /// `client` uses reserved id `ino` for a create: it must lie in one of its ranges at
    /// or past that range's next unused id, which then moves past it.
    pub(crate) fn use_reserved(
        &mut self,
        store: &Store,
        batch: &mut Batch,
        client: u64,
        ino: u64,
    ) -> Result<(), FsError> {
        let ranges = self.ranges(store, client)?;
        let Some(slot) = ranges.iter().position(|(n, e)| *n <= ino && ino < *e) else {
            return Err(FsError::InvalidArgument(format!(
                "inode number {ino:#x} is not one reserved for this client, or was used"
            )));
        };
        ranges[slot].0 = ino + 1;
        store.put_meta_u64(batch, &resv_key(client, slot, "next"), ino + 1);
        Ok(())
    }

    fn ranges(&mut self, store: &Store, client: u64) -> Result<&mut [(u64, u64); 2], FsError> {
        if !self.reserved.contains_key(&client) {
            let mut r = [(0, 0); 2];
            for (slot, range) in r.iter_mut().enumerate() {
                let get = |what| {
                    store
                        .meta_u64(&resv_key(client, slot, what))
                        .map_err(|e| FsError::Io(e.to_string()))
                };
                *range = (get("next")?.unwrap_or(0), get("end")?.unwrap_or(0));
            }
            self.reserved.insert(client, r);
        }
        self.reserved
            .get_mut(&client)
            .ok_or_else(|| FsError::Io("reservations not loaded".into()))
    }
}

fn resv_key(client: u64, slot: usize, what: &str) -> String {
    format!("resv.{client:016x}.{slot}.{what}")
}
