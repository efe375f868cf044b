//! Directories whose mkdir this partition was told is committed, not yet cleared of their
//! `undecided` mark (ARCHITECTURE.md "Undecided directory objects"): the mkdir's
//! coordinator tells the object's home once it can no longer undo the mkdir, and the home
//! keeps that here instead of applying a change of its own at once (which would cost a
//! replicated round per mkdir while the home is otherwise idle). The first change of the
//! directory's names meets the mark, finds the directory here, and clears the mark in the
//! round that applies it, without asking the entry.

use std::collections::HashSet;
use std::sync::Mutex;

use myriad_proto::InodeId;

/// At most this many remembered (then forgotten all at once: a directory forgotten before
/// its first change costs that change one question to its entry).
const CONFIRMED_MAX: usize = 8192;

#[derive(Default)]
pub(crate) struct ConfirmedDirs(Mutex<HashSet<(String, InodeId)>>);

impl ConfirmedDirs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, InodeId)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Directory `path` (inode `ino`) is committed.
    pub(crate) fn add(&self, path: &str, ino: InodeId) {
        let mut known = self.lock();
        if known.len() >= CONFIRMED_MAX {
            known.clear();
        }
        known.insert((path.to_string(), ino));
    }

    /// Whether directory `path` (inode `ino`) was said committed; forgets it.
    pub(crate) fn take(&self, path: &str, ino: InodeId) -> bool {
        self.lock().remove(&(path.to_string(), ino))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_taken_once_for_its_inode_only_and_the_bound_holds() {
        let dirs = ConfirmedDirs::default();
        dirs.add("/a", InodeId(7));
        assert!(
            !dirs.take("/a", InodeId(8)),
            "another directory at the path"
        );
        assert!(dirs.take("/a", InodeId(7)));
        assert!(!dirs.take("/a", InodeId(7)), "taken once");
        for i in 0..=CONFIRMED_MAX as u64 {
            dirs.add("/b", InodeId(i));
        }
        assert!(dirs.lock().len() <= CONFIRMED_MAX);
    }
}
