//! File locks between clients (docs/fuse.md "File locks between mounts"): requests to the
//! partition keeping an inode's locks, and this client's record of what it holds there,
//! so that a close with nothing held costs no request and a failover's new primary gets
//! every lock back (reclaim) before it grants anyone else's.
//!
//! The holder calls `renew_locks` every `LOCK_RENEW_EVERY` while it holds any (the mount
//! does): that keeps its locks alive and notices a new primary.

use std::time::Duration;

use myriad_placement::PartitionId;
use myriad_proto::locks::{HeldLock, LockAnswer, LockKind, LockOwner, LockRequest, SetLock};
use myriad_proto::{FsError, InodeId};

use crate::client::{Client, Route};

impl Client {
    /// This client's id as a lock holder (and a lease holder).
    #[must_use]
    pub fn holder_id(&self) -> u64 {
        self.config.id
    }

    fn lock_owner(&self, owner: u64) -> LockOwner {
        LockOwner {
            holder: self.config.id,
            owner,
        }
    }

    async fn lock_call(&self, route: Route, req: LockRequest) -> Result<LockAnswer, FsError> {
        self.ask(route, myriad_proto::ask::lock(req)).await
    }

    /// Locks (`Read`, `Write`) or unlocks `start..=end` of `ino` for the caller's lock
    /// `owner` (a process, or an open file for flock). `wait` > 0: wait that long at the
    /// server for a conflicting lock to go (at most half the request timeout; ask again
    /// to wait longer). `Blocked` and `TooMany` are answers, not errors.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_lock(
        &self,
        ino: InodeId,
        owner: u64,
        start: u64,
        end: u64,
        kind: LockKind,
        pid: u32,
        wait: Duration,
    ) -> Result<LockAnswer, FsError> {
        let owner = self.lock_owner(owner);
        let wait = wait.min(self.config.request_timeout / 2);
        let pid_part = self.locks_partition(ino);
        let sent = tokio::time::Instant::now();
        let set = SetLock {
            ino,
            owner,
            start,
            end,
            kind,
            pid,
            reclaim: false,
        };
        let wait_ms = wait.as_millis() as u64;
        let answer = self
            .lock_call(Route::Locks(ino), LockRequest::Set { set, wait_ms })
            .await?;
        if let LockAnswer::Done { table, .. } = answer {
            self.held_locks
                .record(pid_part, table, ino, &set.held(), kind, sent);
        }
        Ok(answer)
    }

    /// F_GETLK: the first lock of another owner that a `kind` lock would meet.
    pub async fn test_lock(
        &self,
        ino: InodeId,
        owner: u64,
        start: u64,
        end: u64,
        kind: LockKind,
    ) -> Result<Option<HeldLock>, FsError> {
        let owner = self.lock_owner(owner);
        let test = myriad_proto::ask::lock_test(ino, owner, (start, end), kind);
        Ok(self.ask(Route::Locks(ino), test).await?.0)
    }

    /// Whether lock `owner` of this client holds any lock on `ino` (a close releases them).
    #[must_use]
    pub fn holds_locks(&self, ino: InodeId, owner: u64) -> bool {
        // Every close asks: no ring lookup when nothing is held at all.
        if !self.holds_any_lock() {
            return false;
        }
        let owner = self.lock_owner(owner);
        let pid = self.locks_partition(ino);
        self.held_locks.with(|parts| {
            parts
                .get(&pid)
                .and_then(|p| p.inodes.get(&ino))
                .is_some_and(|l| l.holds(owner))
        })
    }

    /// Whether this client holds any lock at all (its holder must keep renewing).
    #[must_use]
    pub fn holds_any_lock(&self) -> bool {
        self.held_locks.with(|parts| !parts.is_empty())
    }

    /// Releases every lock of `owner` on `ino` (a close), if it holds any.
    pub async fn release_locks_of(&self, ino: InodeId, owner: u64) -> Result<(), FsError> {
        if !self.holds_locks(ino, owner) {
            return Ok(());
        }
        self.set_lock(ino, owner, 0, u64::MAX, LockKind::Unlock, 0, Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// Keeps this client's locks alive on every partition holding some, and takes them
    /// back from a new primary (after a failover or restart) before its grace ends.
    /// Returns the locks lost: taken by someone else before this client could reclaim
    /// them (logged too).
    pub async fn renew_locks(&self) -> Vec<(InodeId, HeldLock)> {
        let holder = self.config.id;
        let parts: Vec<(PartitionId, u64)> = self
            .held_locks
            .with(|parts| parts.iter().map(|(p, l)| (*p, l.table)).collect());
        let mut lost = Vec::new();
        for (pid, table) in parts {
            let sent = tokio::time::Instant::now();
            let answer = self
                .lock_call(Route::Partition(pid), LockRequest::Renew { holder })
                .await;
            match answer {
                Ok(LockAnswer::Done { table: now, known }) if now == table && known => {
                    self.held_locks.renewed(pid, table, sent);
                }
                // A new table (a new primary): reclaim, unless the locks have lapsed by
                // now. Not by the renewal's sending: it may have been answered only after
                // a failover of many seconds, and the old table may have given the locks
                // to another client once it stopped hearing from us (simulation seed
                // 60141 with --locks --dir-moves: a renewal answered 10 s after it was
                // sent reclaimed a lock two other clients had held since).
                Ok(a) => {
                    let lapsed = self
                        .held_locks
                        .take_lapsed(pid, tokio::time::Instant::now());
                    if lapsed.is_empty() {
                        lost.extend(self.reclaim(pid, a.table()).await);
                    } else {
                        for (ino, h) in &lapsed {
                            tracing::error!(
                                ino = ino.0,
                                start = h.start,
                                end = h.end,
                                "a file lock was lost: not renewed for a whole lock lease, and the server that kept it changed meanwhile"
                            );
                        }
                        lost.extend(lapsed);
                    }
                }
                Err(e) => tracing::debug!(partition = %pid, "file lock renewal failed: {e}"),
            }
        }
        lost
    }

    /// Asks the new table `table` of partition `pid` for every lock held there.
    async fn reclaim(&self, pid: PartitionId, table: u64) -> Vec<(InodeId, HeldLock)> {
        let sent = tokio::time::Instant::now();
        let held: Vec<(InodeId, HeldLock)> = self.held_locks.with(|parts| {
            let Some(part) = parts.get_mut(&pid) else {
                return Vec::new();
            };
            part.table = table;
            part.inodes
                .iter()
                .flat_map(|(ino, l)| l.iter().map(|h| (*ino, *h)))
                .collect()
        });
        let mut lost = Vec::new();
        let mut all = true;
        for (ino, h) in held {
            // Each reclaim is safe only while the old table cannot have given the lock
            // away: before our lease there lapses.
            let lapsed = self
                .held_locks
                .take_lapsed(pid, tokio::time::Instant::now());
            if !lapsed.is_empty() {
                tracing::error!(
                    partition = %pid,
                    "{} file locks were lost: their lease lapsed while they were being reclaimed after a failover",
                    lapsed.len()
                );
                lost.extend(lapsed);
                return lost;
            }
            let kind = if h.write {
                LockKind::Write
            } else {
                LockKind::Read
            };
            let set = SetLock {
                ino,
                owner: h.owner,
                start: h.start,
                end: h.end,
                kind,
                pid: h.pid,
                reclaim: true,
            };
            let req = LockRequest::Set { set, wait_ms: 0 };
            match self.lock_call(Route::Locks(ino), req).await {
                Ok(LockAnswer::Done { .. }) => {}
                Ok(other) => {
                    tracing::error!(
                        ino = ino.0,
                        start = h.start,
                        end = h.end,
                        "a file lock was lost after a server failover (taken by another client before it could be reclaimed): {other:?}"
                    );
                    self.held_locks
                        .record(pid, table, ino, &h, LockKind::Unlock, sent);
                    lost.push((ino, h));
                }
                // Not reached now: the next renewal tries again.
                Err(e) => {
                    tracing::warn!(ino = ino.0, "file lock reclaim failed, will retry: {e}");
                    all = false;
                    self.held_locks.with(|parts| {
                        if let Some(p) = parts.get_mut(&pid) {
                            p.table = 0;
                        }
                    });
                }
            }
        }
        if all {
            self.held_locks.renewed(pid, table, sent);
        }
        lost
    }

    /// Until when this client surely still holds its locks on `ino` (`None`: it holds
    /// none): a lock lease from the last request the server answered about them.
    #[must_use]
    pub fn lock_valid_until(&self, ino: InodeId) -> Option<tokio::time::Instant> {
        let pid = self.locks_partition(ino);
        self.held_locks.with(|parts| {
            parts
                .get(&pid)
                .filter(|p| p.inodes.contains_key(&ino))
                .and_then(|p| p.valid_until)
        })
    }

    /// Drops every lock this client holds (unmount).
    pub async fn release_all_locks(&self) {
        let holder = self.config.id;
        let parts: Vec<PartitionId> = self
            .held_locks
            .with(|parts| parts.drain().map(|(p, _)| p).collect());
        for pid in parts {
            let req = LockRequest::ReleaseAll { holder };
            if let Err(e) = self.lock_call(Route::Partition(pid), req).await {
                tracing::warn!(partition = %pid, "file locks not released (they expire): {e}");
            }
        }
    }
}
