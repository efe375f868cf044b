//! What the mount keeps alive at the servers for others to respect: `fcntl` and `flock`
//! locks (docs/fuse.md "File locks between mounts": the kernel hands every lock call here,
//! FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS, and the client library asks the partition
//! keeping the inode's locks), and the files it has open (`start_keeping_open`).

use std::sync::Arc;
use std::time::Duration;

use fuser::Errno;
use myriad_client::proto::limits::KEEP_OPEN_EVERY;
use myriad_client::proto::locks::{LOCK_RENEW_EVERY, LockAnswer, LockKind};
use myriad_proto::InodeId;

use crate::attr::errno;
use crate::mount::Mount;

/// How long one try of a blocking lock waits at the server before the mount looks at the
/// waiting thread's signals again.
const BLOCKING_TRY: Duration = Duration::from_secs(1);

fn kind_of(typ: i32) -> Result<LockKind, Errno> {
    match typ {
        libc::F_RDLCK => Ok(LockKind::Read),
        libc::F_WRLCK => Ok(LockKind::Write),
        libc::F_UNLCK => Ok(LockKind::Unlock),
        _ => Err(Errno::EINVAL),
    }
}

/// A lock answered F_GETLK: (start, end, type, pid).
pub type LockReport = (u64, u64, i32, u32);

impl Mount {
    /// F_GETLK: the first conflicting lock, or the request's range with F_UNLCK. The pid
    /// is reported only for a lock held through this mount.
    pub async fn getlk(
        &self,
        ino: InodeId,
        owner: u64,
        start: u64,
        end: u64,
        typ: i32,
    ) -> Result<LockReport, Errno> {
        let kind = kind_of(typ)?;
        let by = self
            .client
            .test_lock(ino, owner, start, end, kind)
            .await
            .map_err(|e| errno(&e))?;
        Ok(match by {
            None => (start, end, libc::F_UNLCK, 0),
            Some(h) => {
                let typ = if h.write {
                    libc::F_WRLCK
                } else {
                    libc::F_RDLCK
                };
                let mine = h.owner.holder == self.client.holder_id();
                (h.start, h.end, typ, if mine { h.pid } else { 0 })
            }
        })
    }

    /// F_SETLK, F_SETLKW and flock. `sleep`: wait for a conflicting lock to go, until it
    /// does or thread `tid` has a signal to take (EINTR).
    #[allow(clippy::too_many_arguments)]
    pub async fn setlk(
        &self,
        ino: InodeId,
        owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        tid: u32,
    ) -> Result<(), Errno> {
        let kind = kind_of(typ)?;
        let wait = if sleep && kind != LockKind::Unlock {
            BLOCKING_TRY
        } else {
            Duration::ZERO
        };
        loop {
            let answer = self
                .client
                .set_lock(ino, owner, start, end, kind, pid, wait)
                .await
                .map_err(|e| errno(&e))?;
            match answer {
                LockAnswer::Done { .. } => return Ok(()),
                LockAnswer::TooMany { .. } => return Err(Errno::ENOLCK),
                LockAnswer::Blocked { .. } if !sleep => return Err(Errno::EAGAIN),
                LockAnswer::Blocked { .. } if signal_pending(tid) => return Err(Errno::EINTR),
                LockAnswer::Blocked { .. } => {}
                LockAnswer::Tested { .. } => return Err(Errno::EIO),
            }
        }
    }

    /// Whether a close by lock owner `owner` has locks to release on `ino`.
    pub fn holds_locks(&self, ino: InodeId, owner: u64) -> bool {
        self.client.holds_locks(ino, owner)
    }

    /// Releases lock owner `owner`'s locks on `ino` (a close; the last close of a flock).
    pub async fn release_locks(&self, ino: InodeId, owner: u64) {
        if let Err(e) = self.client.release_locks_of(ino, owner).await {
            tracing::warn!(
                ino = ino.0,
                "file locks not released at close (they expire when this mount stops renewing them): {e}"
            );
        }
    }
}

/// Runs `work` every `period` for as long as the mount lives.
pub(crate) fn every<F, Fut>(
    inner: &Arc<Mount>,
    rt: &tokio::runtime::Handle,
    period: Duration,
    work: F,
) where
    F: Fn(Arc<Mount>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let inner = Arc::downgrade(inner);
    rt.spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            work(inner).await;
        }
    });
}

/// Keeps the mount's file locks alive and reclaims them after a failover.
pub fn start_renewal(inner: &Arc<Mount>, rt: &tokio::runtime::Handle) {
    every(inner, rt, LOCK_RENEW_EVERY, |inner| async move {
        if inner.client.holds_any_lock() {
            inner.client.renew_locks().await;
        }
    });
}

/// Tells the servers which files this mount has open, every `KEEP_OPEN_EVERY`, so that a
/// file another client unlinks stays readable here until it is closed (docs/fuse.md
/// "Open files unlinked elsewhere").
pub fn start_keeping_open(inner: &Arc<Mount>, rt: &tokio::runtime::Handle) {
    every(inner, rt, KEEP_OPEN_EVERY, |inner| async move {
        let open = inner.handles.open_files();
        if !open.is_empty()
            && let Err(e) = inner.client.keep_open(&open).await
        {
            tracing::warn!("could not tell the servers which files are open: {e}");
        }
    });
}

/// Whether thread `tid` has a pending signal it does not block: a blocking lock call it
/// made is then ended with EINTR, as the kernel would end a local one (fuser does not
/// pass the kernel's FUSE_INTERRUPT on). A thread that is gone counts as signalled.
fn signal_pending(tid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return true;
    };
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = field("SigPnd:") | field("ShdPnd:");
    pending & !field("SigBlk:") != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_without_signals_is_not_interrupted_and_a_gone_one_is() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        assert!(!signal_pending(me));
        assert!(signal_pending(u32::MAX - 1));
    }

    #[test]
    fn lock_types_map_to_kinds() {
        assert_eq!(kind_of(libc::F_RDLCK), Ok(LockKind::Read));
        assert_eq!(kind_of(libc::F_WRLCK), Ok(LockKind::Write));
        assert_eq!(kind_of(libc::F_UNLCK), Ok(LockKind::Unlock));
        assert_eq!(kind_of(99), Err(Errno::EINVAL));
    }
}
