//! The file locks a partition's primary keeps for the inodes `Ring::owner_of_locks` gives it
//! (docs/fuse.md "File locks between mounts"): in memory only, for this primary's term.
//!
//! Invariants: two owners never hold conflicting locks here; a holder silent for
//! `LOCK_LEASE` holds nothing that another owner's request meets; during the grace after
//! an opening that may have followed a primary with locks, only reclaims and unlocks are
//! served, so every lock the old table held is back before anything new is granted.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use myriad_proto::locks::{
    HeldLock, InodeLocks, LOCK_LEASE, LockAnswer, LockKind, LockOwner, SetLock,
};
use myriad_proto::{InodeId, WireError};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::unpoisoned::lock;

/// After an opening that may follow a primary with locks: reclaims only, this long.
pub(crate) const LOCK_GRACE: Duration = Duration::from_secs(8);
/// Locks one partition keeps at most (ENOLCK beyond).
pub(crate) const LOCKS_MAX: usize = 100_000;

#[derive(Default)]
struct Holder {
    last_seen: Option<Instant>,
    inodes: HashSet<InodeId>,
}

#[derive(Default)]
struct Inner {
    inodes: HashMap<InodeId, InodeLocks>,
    holders: HashMap<u64, Holder>,
    count: usize,
}

pub(crate) struct LockTable {
    /// This table's name in answers: the primary's incarnation.
    pub(crate) id: u64,
    grace_until: Instant,
    inner: Mutex<Inner>,
    /// Woken whenever a lock goes away (waiters try again).
    released: Notify,
}

impl LockTable {
    /// `grace`: an earlier primary of this partition granted locks (its marker is in the
    /// store), so their holders get `LOCK_GRACE` to reclaim them first.
    pub(crate) fn new(id: u64, grace: bool, now: Instant) -> LockTable {
        LockTable {
            id,
            grace_until: if grace { now + LOCK_GRACE } else { now },
            inner: Mutex::new(Inner::default()),
            released: Notify::new(),
        }
    }

    pub(crate) fn in_grace(&self, now: Instant) -> bool {
        now < self.grace_until
    }

    /// A future that completes at the next release; created before a check so that a
    /// release between the check and the wait is not missed.
    pub(crate) fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    /// Locks or unlocks a range. `Err(Busy)`: a new lock during the grace.
    pub(crate) fn set(&self, req: &SetLock, now: Instant) -> Result<LockAnswer, WireError> {
        if req.start > req.end {
            return Err(WireError::InvalidArgument(
                "lock range ends before it starts".into(),
            ));
        }
        if req.kind != LockKind::Unlock && !req.reclaim && self.in_grace(now) {
            return Err(WireError::Busy);
        }
        let mut g = lock(&self.inner);
        self.expire(&mut g, now);
        seen(&mut g, req.owner.holder, now);
        let table = self.id;
        let current = g.inodes.get(&req.ino);
        if let Some(by) = current.and_then(|l| l.conflict(req.owner, req.start, req.end, req.kind))
        {
            return Ok(LockAnswer::Blocked { table, by });
        }
        // A set splits at most one lock in two.
        if req.kind != LockKind::Unlock && g.count + 2 > LOCKS_MAX {
            return Ok(LockAnswer::TooMany { table });
        }
        let mut locks = g.inodes.remove(&req.ino).unwrap_or_default();
        let before = locks.len();
        locks.set(req.owner, req.start, req.end, req.kind, req.pid);
        let still_holds = locks.iter().any(|h| h.owner.holder == req.owner.holder);
        g.count = g.count + locks.len() - before;
        if !locks.is_empty() {
            g.inodes.insert(req.ino, locks);
        }
        let holder = g.holders.entry(req.owner.holder).or_default();
        if still_holds {
            holder.inodes.insert(req.ino);
        } else {
            holder.inodes.remove(&req.ino);
        }
        drop(g);
        if req.kind != LockKind::Write {
            // An unlock, or a write lock turned read: waiters may now get in.
            self.released.notify_waiters();
        }
        Ok(LockAnswer::Done { table, known: true })
    }

    /// F_GETLK. `Err(Busy)` during the grace (the answer may be missing reclaims).
    pub(crate) fn test(
        &self,
        ino: InodeId,
        owner: LockOwner,
        start: u64,
        end: u64,
        kind: LockKind,
        now: Instant,
    ) -> Result<LockAnswer, WireError> {
        if self.in_grace(now) {
            return Err(WireError::Busy);
        }
        let mut g = lock(&self.inner);
        self.expire(&mut g, now);
        seen(&mut g, owner.holder, now);
        let by: Option<HeldLock> = g
            .inodes
            .get(&ino)
            .and_then(|l| l.conflict(owner, start, end, kind));
        Ok(LockAnswer::Tested { table: self.id, by })
    }

    /// `holder` is alive; `known`: whether it holds any lock in this table.
    pub(crate) fn renew(&self, holder: u64, now: Instant) -> LockAnswer {
        let mut g = lock(&self.inner);
        let known = g.holders.get(&holder).is_some_and(|h| !h.inodes.is_empty());
        if known {
            seen(&mut g, holder, now);
        }
        LockAnswer::Done {
            table: self.id,
            known,
        }
    }

    /// Drops every lock of `holder` (its unmount).
    pub(crate) fn release_all(&self, holder: u64) -> LockAnswer {
        let mut g = lock(&self.inner);
        drop_holder(&mut g, holder);
        drop(g);
        self.released.notify_waiters();
        LockAnswer::Done {
            table: self.id,
            known: false,
        }
    }

    /// Drops the locks of holders silent for `LOCK_LEASE`.
    fn expire(&self, g: &mut Inner, now: Instant) {
        let gone: Vec<u64> = g
            .holders
            .iter()
            .filter(|(_, h)| h.last_seen.is_some_and(|t| now >= t + LOCK_LEASE))
            .map(|(id, _)| *id)
            .collect();
        if gone.is_empty() {
            return;
        }
        for holder in gone {
            tracing::info!(holder, "file locks of a silent holder dropped");
            drop_holder(g, holder);
        }
        self.released.notify_waiters();
    }

    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        lock(&self.inner).count
    }
}

fn seen(g: &mut Inner, holder: u64, now: Instant) {
    g.holders.entry(holder).or_default().last_seen = Some(now);
}

fn drop_holder(g: &mut Inner, holder: u64) {
    let Some(h) = g.holders.remove(&holder) else {
        return;
    };
    for ino in h.inodes {
        if let Some(locks) = g.inodes.get_mut(&ino) {
            g.count -= locks.drop_holder(holder);
            if locks.is_empty() {
                g.inodes.remove(&ino);
            }
        }
    }
}

#[cfg(test)]
mod tests;
