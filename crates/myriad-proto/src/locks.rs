//! File locks between mounts (docs/fuse.md "File locks between mounts"): the requests, and
//! the POSIX rules for one inode's locks, which the server's tables and the holders' own
//! records both follow. Pure: no clock, no I/O.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::types::InodeId;

/// A holder silent this long loses its locks to the next request they are in the way of.
pub const LOCK_LEASE: Duration = Duration::from_secs(6);
/// Holders with locks renew this often (three renewals fit in a lease).
pub const LOCK_RENEW_EVERY: Duration = Duration::from_secs(2);

/// What a lock request asks of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockKind {
    Read,
    Write,
    Unlock,
}

/// Who holds a lock: a client (`holder`, the client's random id) and, within it, the
/// kernel's lock owner (a process's file table for POSIX locks, an open file for flock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockOwner {
    pub holder: u64,
    pub owner: u64,
}

/// One held lock: bytes `start..=end` (`end == u64::MAX`: to the end of the file, wherever
/// that is), read or write, with the pid that took it (reported by F_GETLK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLock {
    pub owner: LockOwner,
    pub start: u64,
    pub end: u64,
    pub write: bool,
    pub pid: u32,
}

/// Lock (`kind` Read or Write) or unlock `start..=end` of `ino` for `owner`, as process
/// `pid`. `reclaim`: a lock the holder had from an earlier primary (accepted during the
/// grace after a failover).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetLock {
    pub ino: InodeId,
    pub owner: LockOwner,
    pub start: u64,
    pub end: u64,
    pub kind: LockKind,
    pub pid: u32,
    pub reclaim: bool,
}

impl SetLock {
    /// The lock this grants (`kind` Read or Write).
    #[must_use]
    pub fn held(&self) -> HeldLock {
        HeldLock {
            owner: self.owner,
            start: self.start,
            end: self.end,
            write: self.kind == LockKind::Write,
            pid: self.pid,
        }
    }
}

/// `ClientRequest::Lock`: to the primary of `Ring::owner_of_locks(ino)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockRequest {
    /// Lock or unlock a range (`SetLock`). `wait_ms` > 0: wait up to that long for a
    /// conflict to clear.
    Set { set: SetLock, wait_ms: u64 },
    /// F_GETLK: the first lock of another owner that a `kind` lock of `start..=end` would
    /// conflict with.
    Test {
        ino: InodeId,
        owner: LockOwner,
        start: u64,
        end: u64,
        kind: LockKind,
    },
    /// `holder` is alive: its locks here stay.
    Renew { holder: u64 },
    /// Drops every lock of `holder` here (unmount).
    ReleaseAll { holder: u64 },
}

/// `Response::Lock`. `table` names the primary's lock table (its incarnation): a holder
/// that sees it change reclaims the locks it holds on that partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockAnswer {
    /// Set: done. Renew: `known` says whether this table knows the holder.
    Done { table: u64, known: bool },
    /// Set: another owner's lock is in the way (EAGAIN, or keep waiting).
    Blocked { table: u64, by: HeldLock },
    /// Test: the conflicting lock, if any.
    Tested { table: u64, by: Option<HeldLock> },
    /// Set: the table is full (ENOLCK).
    TooMany { table: u64 },
}

impl LockAnswer {
    #[must_use]
    pub fn table(&self) -> u64 {
        match self {
            LockAnswer::Done { table, .. }
            | LockAnswer::Blocked { table, .. }
            | LockAnswer::Tested { table, .. }
            | LockAnswer::TooMany { table } => *table,
        }
    }
}

fn overlaps(a: &HeldLock, start: u64, end: u64) -> bool {
    a.start <= end && start <= a.end
}

/// The locks held on one inode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InodeLocks {
    held: Vec<HeldLock>,
}

impl InodeLocks {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &HeldLock> {
        self.held.iter()
    }

    /// The first lock of another owner that a `kind` lock on `start..=end` by `owner`
    /// conflicts with (two locks conflict when they overlap and one of them writes).
    #[must_use]
    pub fn conflict(
        &self,
        owner: LockOwner,
        start: u64,
        end: u64,
        kind: LockKind,
    ) -> Option<HeldLock> {
        if kind == LockKind::Unlock {
            return None;
        }
        let write = kind == LockKind::Write;
        self.held
            .iter()
            .find(|h| h.owner != owner && overlaps(h, start, end) && (write || h.write))
            .copied()
    }

    /// Applies `kind` to `start..=end` for `owner`, as POSIX says: the owner's own locks in
    /// the range are replaced (split where they stick out), then touching or overlapping
    /// locks of the same kind merge. The caller checked for conflicts first.
    pub fn set(&mut self, owner: LockOwner, start: u64, end: u64, kind: LockKind, pid: u32) {
        let mut kept = Vec::with_capacity(self.held.len() + 2);
        for h in self.held.drain(..) {
            if h.owner != owner || !overlaps(&h, start, end) {
                kept.push(h);
                continue;
            }
            if h.start < start {
                kept.push(HeldLock {
                    end: start - 1,
                    ..h
                });
            }
            if h.end > end {
                kept.push(HeldLock {
                    start: end + 1,
                    ..h
                });
            }
        }
        self.held = kept;
        if kind == LockKind::Unlock {
            return;
        }
        let write = kind == LockKind::Write;
        let (mut start, mut end) = (start, end);
        // Merge with this owner's locks of the same kind that touch the new one.
        self.held.retain(|h| {
            let touches = h.owner == owner
                && h.write == write
                && h.start <= end.saturating_add(1)
                && start <= h.end.saturating_add(1);
            if touches {
                start = start.min(h.start);
                end = end.max(h.end);
            }
            !touches
        });
        self.held.push(HeldLock {
            owner,
            start,
            end,
            write,
            pid,
        });
        self.held.sort_by_key(|h| (h.start, h.owner));
    }

    /// Drops every lock of `holder`; returns how many there were.
    pub fn drop_holder(&mut self, holder: u64) -> usize {
        let before = self.held.len();
        self.held.retain(|h| h.owner.holder != holder);
        before - self.held.len()
    }

    /// Whether `owner` holds any lock here.
    #[must_use]
    pub fn holds(&self, owner: LockOwner) -> bool {
        self.held.iter().any(|h| h.owner == owner)
    }
}

#[cfg(test)]
mod tests;
