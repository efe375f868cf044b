//! The file locks this client holds, per partition, and the table that granted them
//! (`file_locks.rs` asks for them; docs/fuse.md "File locks between mounts").

use std::collections::HashMap;
use std::sync::Mutex;

use myriad_placement::PartitionId;
use myriad_proto::InodeId;
use myriad_proto::locks::{HeldLock, InodeLocks, LockKind};

/// The locks this client holds on one partition, and the table that granted them.
#[derive(Default)]
pub(crate) struct PartLocks {
    pub(crate) table: u64,
    pub(crate) inodes: HashMap<InodeId, InodeLocks>,
}

#[derive(Default)]
pub(crate) struct HeldLocks {
    parts: Mutex<HashMap<PartitionId, PartLocks>>,
}

impl HeldLocks {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut HashMap<PartitionId, PartLocks>) -> T) -> T {
        let mut g = match self.parts.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Records a granted `set`.
    pub(crate) fn record(
        &self,
        pid: PartitionId,
        table: u64,
        ino: InodeId,
        lock: &HeldLock,
        kind: LockKind,
    ) {
        self.with(|parts| {
            let part = parts.entry(pid).or_default();
            if part.table == 0 {
                part.table = table;
            }
            let locks = part.inodes.entry(ino).or_default();
            locks.set(lock.owner, lock.start, lock.end, kind, lock.pid);
            if locks.is_empty() {
                part.inodes.remove(&ino);
            }
            if part.inodes.is_empty() {
                parts.remove(&pid);
            }
        });
    }
}

#[cfg(test)]
mod tests;
