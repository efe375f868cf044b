//! The names this mount let the kernel keep under directory leases, and the thread that
//! takes them back from the kernel (docs/fuse.md "Directory leases").
//!
//! With leases the kernel keeps a name (or its absence) and its attributes for as long as
//! the lease on its directory lasts, which renewals make as long as it is used. So every
//! such name is noted here before the kernel is told, and invalidated when the lease is
//! dropped (a recall, a failed renewal, idleness) or when this mount moves or removes the
//! directory (the kernel then holds the names under another path). The kernel takes a
//! directory's lock to drop one of its entries, and a request of this mount may hold that
//! lock while it waits for the servers, so notifications go through a thread of their own
//! and a caller waits for them a bounded time at most. The kernel orders them after any
//! reply it is still waiting for in that directory (both need the lock), so a reply in
//! flight cannot outlive the notification that was meant to drop it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use fuser::{INodeNo, Notifier};

/// One kernel notification.
pub(crate) enum Inval {
    Entry(INodeNo, String),
    Attrs(INodeNo),
    /// The listing of a directory the kernel keeps (`FOPEN_CACHE_DIR`): dropped once any
    /// listing of it in progress has ended (`BARRIER`).
    Listing(INodeNo),
}

/// Noted in place of a name: the kernel keeps the directory's listing (no file has an
/// empty name).
pub(crate) const LISTING: &str = "";

/// A name whose invalidation is sent before a listing's only for the directory's lock it
/// takes in the kernel: a listing in progress holds that lock shared, and adds what it
/// read to the kernel's copy before it lets go, so the copy is dropped after that. (If a
/// file has this name, its entry is only looked up again.)
const BARRIER: &str = ".myriad-listing-barrier";

type Batch = (Vec<Inval>, Option<mpsc::Sender<()>>);

/// How long the kernel was told it may keep a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    /// Until the lease is dropped (a file, a symlink, a missing name).
    Long,
    /// No longer than the lease lasted when told (a directory, whose entry the kernel
    /// drops with everything below it: not worth dropping when nothing changed).
    Short,
}

#[derive(Default)]
pub(crate) struct KernelNames {
    names: Mutex<HashMap<String, HashMap<String, Kept>>>,
    queue: OnceLock<Mutex<mpsc::Sender<Batch>>>,
}

impl KernelNames {
    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Kept>>> {
        match self.names.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// `dir/name` is about to be given to the kernel to keep.
    pub(crate) fn note(&self, dir: &str, name: &str, kept: Kept) {
        let mut g = self.names();
        let k = g
            .entry(dir.to_string())
            .or_default()
            .entry(name.to_string())
            .or_insert(kept);
        if kept == Kept::Long {
            *k = Kept::Long;
        }
    }

    /// The names of `dir` the kernel may keep (all forgotten here): every one, or with
    /// `long_only` those it may keep past their lease's trusted end.
    pub(crate) fn take(&self, dir: &str, long_only: bool) -> Vec<String> {
        self.names()
            .remove(dir)
            .map(|s| {
                s.into_iter()
                    .filter(|(_, k)| !long_only || *k == Kept::Long)
                    .map(|(n, _)| n)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The names the kernel may keep in `top` and every directory below it, by directory.
    pub(crate) fn take_subtree(&self, top: &str) -> Vec<(String, Vec<String>)> {
        let below = if top == "/" {
            "/".to_string()
        } else {
            format!("{top}/")
        };
        let mut g = self.names();
        let dirs: Vec<String> = g
            .keys()
            .filter(|d| *d == top || d.starts_with(&below))
            .cloned()
            .collect();
        dirs.into_iter()
            .filter_map(|d| g.remove(&d).map(|s| (d, s.into_keys().collect())))
            .collect()
    }

    /// Starts the notification thread.
    pub(crate) fn start(&self, notifier: Notifier) -> std::io::Result<()> {
        let (tx, rx) = mpsc::channel::<Batch>();
        std::thread::Builder::new()
            .name("myriad-inval".into())
            .spawn(move || {
                while let Ok((invals, done)) = rx.recv() {
                    for i in invals {
                        let r = match &i {
                            Inval::Entry(parent, name) => {
                                notifier.inval_entry(*parent, OsStr::new(name))
                            }
                            Inval::Attrs(ino) => notifier.inval_inode(*ino, -1, 0),
                            Inval::Listing(ino) => {
                                let _ = notifier.inval_entry(*ino, OsStr::new(BARRIER));
                                // Offset 0, length 0: every page of the listing.
                                notifier.inval_inode(*ino, 0, 0)
                            }
                        };
                        // ENOENT (the kernel had no such entry) is the common answer.
                        if let Err(e) = r
                            && e.raw_os_error() != Some(libc::ENOENT)
                        {
                            tracing::warn!("the kernel refused an invalidation: {e}");
                        }
                    }
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
            })?;
        let _ = self.queue.set(Mutex::new(tx));
        Ok(())
    }

    /// Sends `invals` to the kernel; with `wait`, returns once they were sent or after
    /// that long.
    pub(crate) fn send(&self, invals: Vec<Inval>, wait: Option<Duration>) {
        if invals.is_empty() {
            return;
        }
        let Some(queue) = self.queue.get() else {
            return;
        };
        let (done, finished) = mpsc::channel();
        let sent = queue
            .lock()
            .map(|t| t.send((invals, wait.is_some().then_some(done))).is_ok())
            .unwrap_or(false);
        if let (true, Some(wait)) = (sent, wait) {
            let wait = || {
                let _ = finished.recv_timeout(wait);
            };
            // On a worker of the mount's (multi-thread) runtime: let it move other tasks
            // off this thread while this waits. Elsewhere, just wait.
            match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                    tokio::task::block_in_place(wait);
                }
                _ => wait(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_taken_by_directory_and_by_subtree() {
        let k = KernelNames::default();
        k.note("/a", "x", Kept::Long);
        k.note("/a", "y", Kept::Short);
        k.note("/a/b", "z", Kept::Short);
        k.note("/ab", "w", Kept::Long);
        let mut a = k.take("/a", false);
        a.sort();
        assert_eq!(a, vec!["x".to_string(), "y".to_string()]);
        assert!(k.take("/a", false).is_empty(), "taken once");
        k.note("/a", "x", Kept::Short);
        k.note("/a", "x", Kept::Long);
        k.note("/a", "y", Kept::Short);
        assert_eq!(k.take("/a", true), vec!["x".to_string()], "long wins");
        assert!(k.take("/a", false).is_empty(), "the short ones went too");
        k.note("/a", "x", Kept::Long);
        let mut sub = k.take_subtree("/a");
        sub.sort();
        assert_eq!(
            sub,
            vec![
                ("/a".to_string(), vec!["x".to_string()]),
                ("/a/b".to_string(), vec!["z".to_string()])
            ]
        );
        assert_eq!(
            k.take("/ab", true),
            vec!["w".to_string()],
            "a sibling stays"
        );
    }
}
