//! Open files and directories of one mount.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use myriad_client::FileHandle;
use myriad_proto::{Caller, DirEntry};

use myriad_placement::join;
use myriad_proto::InodeId;

/// Bytes written through a handle and not yet sent: one contiguous run. Sent when the run
/// would break (a write elsewhere), grows past `WRITE_BUFFER_MAX`, or at flush (every
/// close), fsync, read, truncate and release. A program writing a file in 10 KiB pieces
/// (tar, cp) thus costs one durable request per 4 MiB instead of one per piece.
pub struct Dirty {
    pub offset: u64,
    pub data: Vec<u8>,
}

pub const WRITE_BUFFER_MAX: usize = 4 * 1024 * 1024;

/// The handle the kernel names a file it opened without asking by (zero-message opens,
/// `FsConfig::zero_message_opens`): no handle is ever given this id.
pub const NO_HANDLE: u64 = 0;

/// The `size` bytes of `data` at `offset`, fewer at its end.
pub fn part(data: &[u8], offset: u64, size: u32) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    &data[start..end]
}

pub struct OpenFile {
    pub file: FileHandle,
    /// Who opened it: every byte written through the handle goes to the servers as this
    /// caller, whoever's request happens to send it (another process's open or read of the
    /// file flushes the buffer too, and the kernel writes mapped pages back with the
    /// credentials of whatever task runs the writeback). POSIX checks access at open: a
    /// descriptor keeps the access it was opened with.
    pub opener: Caller,
    pub dirty: Option<Dirty>,
    /// The end of bytes taken from `dirty` and being sent now. Until their reply is in,
    /// they count as unsent: the size the kernel is told includes them, and anything that
    /// must see them (a read, an open, a truncate) waits on the handle's io lock.
    pub sending_end: Option<u64>,
    /// Opened with O_APPEND: the kernel picks write offsets from its cached size, which
    /// another client may have made stale, so buffered appends go to the end of the file as
    /// the servers know it when they are sent.
    pub append: bool,
    /// A failure sending this handle's buffered bytes that happened on behalf of another
    /// operation (an open or read of the same file): reported by this handle's next write,
    /// flush, fsync or release, so the writer learns its data did not arrive.
    pub error: Option<myriad_proto::FsError>,
    /// Created with a non-durable create and not yet covered by a durable write: close
    /// must send a `Sync` barrier to the file's node.
    pub unsynced: bool,
    /// The whole file, when it was small enough to come with the open (one `fetch`) and the
    /// handle is read-only: reads are served from here. Dropped when this mount writes the
    /// inode, so it never hides a write made here.
    pub contents: Option<Arc<Vec<u8>>>,
}

/// A directory being listed: pages fetched as the kernel reads on. Offsets handed to the
/// kernel index this list, so they stay valid however the directory changes meanwhile.
pub struct DirListing {
    pub path: String,
    /// `InodeTable::stamp` before the first page was fetched: entries' attributes are no
    /// newer than this.
    pub since: u64,
    /// The directory's lease mark before the first page was asked for: an entry the
    /// kernel may keep past the moment is one a lease covered since (`Mount::leased_ttl`).
    pub mark: Option<myriad_client::LeaseMark>,
    pub entries: Vec<DirEntry>,
    pub done: bool,
}

/// One open file: its state, and a lock held across each I/O so a handle's writes reach
/// the servers in the order they were made.
pub struct Slot {
    pub state: Mutex<OpenFile>,
    pub io: tokio::sync::Mutex<()>,
}

impl Slot {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, OpenFile> {
        lock(&self.state)
    }
}

impl OpenFile {
    pub fn new(file: FileHandle, opener: Caller, contents: Option<Arc<Vec<u8>>>) -> OpenFile {
        OpenFile {
            file,
            opener,
            dirty: None,
            sending_end: None,
            append: false,
            unsynced: false,
            error: None,
            contents,
        }
    }
}

#[derive(Default)]
pub struct Handles {
    next: AtomicU64,
    files: Mutex<HashMap<u64, Arc<Slot>>>,
    dirs: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<DirListing>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Handles {
    fn id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn open(&self, f: OpenFile) -> u64 {
        let id = self.id();
        lock(&self.files).insert(
            id,
            Arc::new(Slot {
                state: Mutex::new(f),
                io: tokio::sync::Mutex::new(()),
            }),
        );
        id
    }

    pub fn file(&self, fh: u64) -> Option<Arc<Slot>> {
        lock(&self.files).get(&fh).cloned()
    }

    /// A copy of the handle's file (path and inode) to use across an await.
    pub fn snapshot(&self, fh: u64) -> Option<(FileHandle, Option<Arc<Vec<u8>>>)> {
        let f = self.file(fh)?;
        let g = f.lock();
        Some((g.file.clone(), g.contents.clone()))
    }

    pub fn close(&self, fh: u64) -> Option<Arc<Slot>> {
        lock(&self.files).remove(&fh)
    }

    /// Removes `fh` if `pred` holds for it (or it is gone); whether it is closed now.
    pub fn close_if(&self, fh: u64, pred: impl Fn(&OpenFile) -> bool) -> bool {
        let mut files = lock(&self.files);
        let trivial = files
            .get(&fh)
            .is_none_or(|s| pred(&s.lock()) && s.lock().error.is_none());
        if trivial {
            files.remove(&fh);
        }
        trivial
    }

    /// Drops cached whole-file contents of every handle of `ino` (a write was buffered).
    pub fn drop_contents(&self, ino: InodeId) {
        for f in lock(&self.files).values() {
            let mut g = f.lock();
            if g.file.inode.ino == ino {
                g.contents = None;
            }
        }
    }

    /// Whether some handle of `ino` holds written bytes the servers have not acknowledged.
    pub fn has_unsent(&self, ino: InodeId) -> bool {
        lock(&self.files).values().any(|f| {
            let g = f.lock();
            g.file.inode.ino == ino && (g.dirty.is_some() || g.sending_end.is_some())
        })
    }

    /// Every open handle of `ino` (a flush of the inode waits on each one's io lock, so it
    /// also waits for sends already under way).
    pub fn of_ino(&self, ino: InodeId) -> Vec<Arc<Slot>> {
        lock(&self.files)
            .values()
            .filter(|f| f.lock().file.inode.ino == ino)
            .cloned()
            .collect()
    }

    /// The end of this mount's writes to `ino` not yet acknowledged (buffered or being
    /// sent), if any: attributes given to the kernel must not shrink a file below what was
    /// written to it (the kernel would drop the pages beyond and cut reads short there).
    /// Read it *before* the attributes it will bound (see `Mount::pending`).
    pub fn pending_end(&self, ino: InodeId) -> Option<u64> {
        lock(&self.files)
            .values()
            .filter_map(|f| {
                let g = f.lock();
                if g.file.inode.ino != ino {
                    return None;
                }
                let dirty = g.dirty.as_ref().map(|d| d.offset + d.data.len() as u64);
                dirty.max(g.sending_end)
            })
            .max()
    }

    /// After a write through this mount: every handle of `ino` sees the new inode and drops
    /// cached contents.
    pub fn written(&self, inode: &myriad_proto::Inode) {
        for f in lock(&self.files).values() {
            let mut g = f.lock();
            if g.file.inode.ino == inode.ino {
                g.file.inode = inode.clone();
                g.contents = None;
            }
        }
    }

    /// Whether some handle of `ino` was opened for writing.
    pub fn has_writable(&self, ino: InodeId) -> bool {
        lock(&self.files).values().any(|f| {
            let g = f.lock();
            g.file.inode.ino == ino && g.file.opened
        })
    }

    /// Every open file once: (its path, its inode).
    pub fn open_files(&self) -> Vec<(String, InodeId)> {
        let mut seen = std::collections::HashSet::new();
        lock(&self.files)
            .values()
            .filter_map(|f| {
                let g = f.lock();
                seen.insert(g.file.inode.ino)
                    .then(|| (g.file.path.clone(), g.file.inode.ino))
            })
            .collect()
    }

    /// Paths of open files follow renames made through this mount.
    pub fn renamed(&self, from: &str, to: &str) {
        let prefix = format!("{from}/");
        for f in lock(&self.files).values() {
            let mut g = f.lock();
            if g.file.path == from {
                g.file.path = to.to_string();
            } else if let Some(rest) = g.file.path.strip_prefix(&prefix) {
                g.file.path = join(to, rest);
            }
        }
    }

    /// Two names swapped (RENAME_EXCHANGE; never directories).
    pub fn exchanged(&self, a: &str, b: &str) {
        for f in lock(&self.files).values() {
            let mut g = f.lock();
            if g.file.path == a {
                g.file.path = b.to_string();
            } else if g.file.path == b {
                g.file.path = a.to_string();
            }
        }
    }

    pub fn open_dir(&self, d: DirListing) -> u64 {
        let id = self.id();
        lock(&self.dirs).insert(id, Arc::new(tokio::sync::Mutex::new(d)));
        id
    }

    pub fn dir(&self, fh: u64) -> Option<Arc<tokio::sync::Mutex<DirListing>>> {
        lock(&self.dirs).get(&fh).cloned()
    }

    pub fn close_dir(&self, fh: u64) {
        lock(&self.dirs).remove(&fh);
    }
}
