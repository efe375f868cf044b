//! Cluster-unique ids for inodes and transactions, allocated by a partition.

use myriad_proto::{FsError, PartitionId};
use myriad_storage::{Batch, StorageError, Store};

/// Allocates cluster-unique ids (`partition << 40 | counter`) for inodes and transactions.
/// The high-water mark is persisted a range at a time, in the same batch as the first id
/// used.
pub struct IdAlloc {
    pid: PartitionId,
    next: u64,
    limit: u64,
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
}
