//! Free space of a server's data disk, and the rule that keeps the storage engine from ever
//! running out of it.
//!
//! fjall treats a failed write (ENOSPC included) as fatal: the database refuses every later
//! write until it is reopened (measured with fjall 3.1: SECURITY.md "Full disks"). So the
//! server refuses first, while the engine still has room for what is already under way:
//!
//! ```text
//! free < reserve       client requests that may grow the store get NoSpace (ENOSPC);
//!                      deletes, truncates and chmods go on and free space
//! free < reserve / 4   every client write gets NoSpace
//! ```
//! "Client requests" include a client's operation on a hard-linked file that another server
//! forwards here (`AtInode`). Reads are never refused; server-to-server work (replication,
//! two-node operations already begun, recovery) is not refused either: it lives in the
//! reserve.
//!
//! Free space is read with statvfs at most every `REFRESH`, on demand, so a disk filled from
//! outside is seen within that time.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use myriad_proto::{ClientPart, Request, WireError};

/// How stale the free-space figure may be.
const REFRESH: Duration = Duration::from_millis(50);

/// Default reserve: room for the engine's memtables to flush (up to 64 MiB per keyspace),
/// a compaction's new tables, and the journal of writes under way.
pub const DEFAULT_RESERVE_BYTES: u64 = 1024 * 1024 * 1024;

pub(crate) struct DiskSpace {
    /// The data directory, and the fast tier's when there is one: the least free counts.
    dirs: Vec<PathBuf>,
    reserve_bytes: u64,
    last: Mutex<(Instant, u64)>,
}

impl DiskSpace {
    pub(crate) fn new(dirs: Vec<PathBuf>, reserve_bytes: u64) -> DiskSpace {
        let free = least_free(&dirs).unwrap_or(u64::MAX);
        DiskSpace {
            dirs,
            reserve_bytes,
            last: Mutex::new((Instant::now(), free)),
        }
    }

    /// The free space below which client requests that may grow the store get NoSpace.
    pub(crate) fn reserve_bytes(&self) -> u64 {
        self.reserve_bytes
    }

    /// Free bytes of the data disk (refreshed if older than `REFRESH`).
    pub(crate) fn free(&self) -> u64 {
        let Ok(mut last) = self.last.lock() else {
            return u64::MAX;
        };
        if last.0.elapsed() >= REFRESH {
            // If statvfs fails, keep the last figure rather than refuse or allow blindly.
            if let Some(f) = least_free(&self.dirs) {
                last.1 = f;
            }
            last.0 = Instant::now();
        }
        last.1
    }

    /// `NoSpace` if the client request `req` may not run with the disk as it is.
    pub(crate) fn admit<C: ClientPart>(&self, req: &Request<C>) -> Result<(), WireError> {
        if !req.writes_storage() {
            return Ok(());
        }
        let free = self.free();
        if free < self.reserve_bytes / 4 || (free < self.reserve_bytes && req.grows_storage()) {
            tracing::warn!(
                free_bytes = free,
                reserve_bytes = self.reserve_bytes,
                op = req.op_name(),
                "data disk full: refusing a write"
            );
            return Err(WireError::NoSpace);
        }
        Ok(())
    }
}

/// The least free bytes over `dirs` (None if statvfs fails for any).
fn least_free(dirs: &[PathBuf]) -> Option<u64> {
    dirs.iter()
        .map(|d| disk_space(d).map(|(_, f)| f))
        .try_fold(u64::MAX, |m, f| f.map(|f| m.min(f)))
}

/// (total, available to unprivileged writers) bytes of the file system holding `dir`.
pub(crate) fn disk_space(dir: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        let frsize = st.f_frsize as u64;
        Some((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
    }
}
