//! The trash's directories a partition saw made (`trash.rs`, docs/trash.md "As built"):
//! a file is moved only into a directory whose mkdir was answered, never into the object
//! of a mkdir still undecided.

use std::collections::HashSet;
use std::sync::Mutex;

/// At most this many trash directories remembered (then forgotten all at once: each is
/// made again, answered `AlreadyExists`, when next needed).
const TRASH_DIRS_MAX: usize = 4096;

/// The trash's directories whose mkdir this partition saw answered (made, or there
/// already): a move into one of them cannot land in an undecided directory.
#[derive(Default)]
pub(crate) struct TrashDirs(Mutex<HashSet<String>>);

impl TrashDirs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn knows(&self, dir: &str) -> bool {
        self.lock().contains(dir)
    }

    pub(crate) fn add(&self, dir: &str) {
        let mut known = self.lock();
        if known.len() >= TRASH_DIRS_MAX {
            known.clear();
        }
        known.insert(dir.to_string());
    }

    /// Forgets `dir` and every directory below it (it was found gone: purged).
    pub(crate) fn forget(&self, dir: &str) {
        let below = format!("{dir}/");
        self.lock().retain(|d| d != dir && !d.starts_with(&below));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_directory_takes_the_ones_below_it_and_the_bound_holds() {
        let dirs = TrashDirs::default();
        for d in ["/.trash", "/.trash/d/1", "/.trash/d/1/a", "/.trash/d/10"] {
            dirs.add(d);
        }
        dirs.forget("/.trash/d/1");
        assert!(dirs.knows("/.trash") && dirs.knows("/.trash/d/10"));
        assert!(!dirs.knows("/.trash/d/1") && !dirs.knows("/.trash/d/1/a"));
        for i in 0..TRASH_DIRS_MAX + 1 {
            dirs.add(&format!("/.trash/x/{i}"));
        }
        assert!(dirs.lock().len() <= TRASH_DIRS_MAX);
    }
}
