//! The file locks this client holds, per partition, and the table that granted them
//! (`file_locks.rs` asks for them; docs/fuse.md "File locks between mounts").

use std::collections::HashMap;
use std::sync::Mutex;

use myriad_placement::PartitionId;
use myriad_proto::InodeId;
use myriad_proto::locks::{HeldLock, InodeLocks, LOCK_LEASE, LockKind};
use tokio::time::Instant;

/// The locks this client holds on one partition, and the table that granted them.
#[derive(Default)]
pub(crate) struct PartLocks {
    pub(crate) table: u64,
    pub(crate) inodes: HashMap<InodeId, InodeLocks>,
    /// Until when the locks are surely still held at the server: a lock lease from the
    /// sending of the last request that table `table` answered for this holder (the
    /// server counts from its arrival, later). Past it, another client may have them.
    pub(crate) valid_until: Option<Instant>,
}

impl PartLocks {
    pub(crate) fn extend(&mut self, sent: Instant) {
        let until = sent + LOCK_LEASE;
        self.valid_until = Some(self.valid_until.map_or(until, |u| u.max(until)));
    }
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

    /// Records a granted `set`, sent at `sent`.
    pub(crate) fn record(
        &self,
        pid: PartitionId,
        table: u64,
        ino: InodeId,
        lock: &HeldLock,
        kind: LockKind,
        sent: Instant,
    ) {
        self.with(|parts| {
            let part = parts.entry(pid).or_default();
            if part.table == 0 {
                part.table = table;
            }
            if part.table == table {
                part.extend(sent);
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

    /// Forgets partition `pid`'s locks if their lease had lapsed by `now` (no request a
    /// table answered for a whole lock lease), and returns them: another client may
    /// have taken them meanwhile (a primary in between that never heard of them granted
    /// them after its grace), so they must not be reclaimed from a new primary.
    pub(crate) fn take_lapsed(&self, pid: PartitionId, now: Instant) -> Vec<(InodeId, HeldLock)> {
        self.with(|parts| {
            let lapsed = parts
                .get(&pid)
                .is_some_and(|p| p.valid_until.is_none_or(|u| u <= now));
            if !lapsed {
                return Vec::new();
            }
            parts.remove(&pid).map_or_else(Vec::new, |p| {
                p.inodes
                    .iter()
                    .flat_map(|(ino, l)| l.iter().map(|h| (*ino, *h)))
                    .collect()
            })
        })
    }

    /// Table `table` of partition `pid` answered a renewal or reclaim sent at `sent`.
    pub(crate) fn renewed(&self, pid: PartitionId, table: u64, sent: Instant) {
        self.with(|parts| {
            if let Some(p) = parts.get_mut(&pid)
                && p.table == table
            {
                p.extend(sent);
            }
        });
    }
}

#[cfg(test)]
mod tests;
