//! Open files and directories of one mount.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use myriad_client::FileHandle;
use myriad_proto::DirEntry;

use crate::inodes::join;

pub struct OpenFile {
    pub file: FileHandle,
    /// The whole file, when it was small enough to come with the open (one `fetch`) and the
    /// handle is read-only: reads are served from here. Dropped when this mount writes the
    /// inode, so it never hides a write made here.
    pub contents: Option<Arc<Vec<u8>>>,
    /// Unlinked while open: renamed to this hidden name, removed at the last release (as NFS
    /// does), so the open handle keeps working as POSIX requires.
    pub hidden: bool,
}

/// A directory being listed: pages fetched as the kernel reads on. Offsets handed to the
/// kernel index this list, so they stay valid however the directory changes meanwhile.
pub struct DirListing {
    pub path: String,
    pub entries: Vec<DirEntry>,
    pub done: bool,
}

type Shared<T> = Arc<Mutex<T>>;

#[derive(Default)]
pub struct Handles {
    next: AtomicU64,
    files: Mutex<HashMap<u64, Shared<OpenFile>>>,
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
        lock(&self.files).insert(id, Arc::new(Mutex::new(f)));
        id
    }

    pub fn file(&self, fh: u64) -> Option<Shared<OpenFile>> {
        lock(&self.files).get(&fh).cloned()
    }

    /// A copy of the handle's file (path and inode) to use across an await.
    pub fn snapshot(&self, fh: u64) -> Option<(FileHandle, Option<Arc<Vec<u8>>>)> {
        let f = self.file(fh)?;
        let g = lock(&f);
        Some((g.file.clone(), g.contents.clone()))
    }

    pub fn close(&self, fh: u64) -> Option<OpenFile> {
        let f = lock(&self.files).remove(&fh)?;
        let g = lock(&f);
        Some(OpenFile {
            file: g.file.clone(),
            contents: None,
            hidden: g.hidden,
        })
    }

    /// After a write through this mount: every handle of `ino` sees the new inode and drops
    /// cached contents.
    pub fn written(&self, inode: &myriad_proto::Inode) {
        for f in lock(&self.files).values() {
            let mut g = lock(f);
            if g.file.inode.ino == inode.ino {
                g.file.inode = inode.clone();
                g.contents = None;
            }
        }
    }

    /// The inode id of a file open under `path`, if any.
    pub fn open_at(&self, path: &str) -> Option<u64> {
        lock(&self.files).values().find_map(|f| {
            let g = lock(f);
            (g.file.path == path).then_some(g.file.inode.ino)
        })
    }

    pub fn is_open(&self, ino: u64) -> bool {
        lock(&self.files)
            .values()
            .any(|f| lock(f).file.inode.ino == ino)
    }

    /// Paths of open files follow renames made through this mount.
    pub fn renamed(&self, from: &str, to: &str, hidden: bool) {
        let prefix = format!("{from}/");
        for f in lock(&self.files).values() {
            let mut g = lock(f);
            if g.file.path == from {
                g.file.path = to.to_string();
                g.hidden |= hidden;
            } else if let Some(rest) = g.file.path.strip_prefix(&prefix) {
                g.file.path = join(to, rest);
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
