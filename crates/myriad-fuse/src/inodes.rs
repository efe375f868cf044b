//! The kernel names files by inode number; Myriad by path (placement follows the path). This
//! table maps each inode number the kernel holds (looked up and not yet forgotten) to the
//! path it was last seen under, with the kernel's lookup count.
//!
//! Kernel inode numbers are Myriad inode ids (unique cluster-wide; the root is 1 in both), so
//! every operation can check that the path still names the same inode and answer `ENOENT`
//! instead of touching a file that replaced it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use myriad_proto::{Inode, ROOT_INO};

struct Node {
    path: String,
    lookups: u64,
    /// (size, mtime) last told to the kernel: an open that sees other values drops the
    /// kernel's cached pages and attributes (close-to-open consistency).
    seen: Option<(u64, i64)>,
    /// The last attributes a server gave for this inode, and when. A getattr within the
    /// attribute TTL is answered from here: the kernel drops its own copy after every write
    /// (mtime changed), and asking the server again would only repeat what its write reply
    /// said. The same staleness bound as the kernel's cache.
    fresh: Option<(Inode, Instant)>,
}

pub struct InodeTable {
    nodes: Mutex<HashMap<u64, Node>>,
}

pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl InodeTable {
    pub fn new() -> InodeTable {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_INO,
            Node {
                path: "/".to_string(),
                lookups: 1,
                seen: None,
                fresh: None,
            },
        );
        InodeTable {
            nodes: Mutex::new(nodes),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Node>> {
        match self.nodes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn path(&self, ino: u64) -> Option<String> {
        self.lock().get(&ino).map(|n| n.path.clone())
    }

    /// The kernel learned `inode` under `path` (one more lookup to be forgotten later).
    pub fn add(&self, path: &str, inode: &Inode) {
        let mut g = self.lock();
        let n = g.entry(inode.ino).or_insert_with(|| Node {
            path: path.to_string(),
            lookups: 0,
            seen: None,
            fresh: None,
        });
        n.path = path.to_string();
        n.lookups += 1;
        n.seen = Some((inode.size, inode.mtime_ns));
        n.fresh = Some((inode.clone(), Instant::now()));
    }

    /// Records attributes handed to the kernel; returns whether they differ from the last ones
    /// (so cached pages may be stale).
    pub fn observe(&self, inode: &Inode) -> bool {
        let mut g = self.lock();
        match g.get_mut(&inode.ino) {
            Some(n) => {
                let now = Some((inode.size, inode.mtime_ns));
                let changed = n.seen.is_some() && n.seen != now;
                n.seen = now;
                n.fresh = Some((inode.clone(), Instant::now()));
                changed
            }
            None => false,
        }
    }

    /// Attributes a server gave less than `ttl` ago.
    pub fn fresh(&self, ino: u64, ttl: Duration) -> Option<Inode> {
        let g = self.lock();
        let (i, at) = g.get(&ino)?.fresh.as_ref()?;
        (at.elapsed() < ttl).then(|| i.clone())
    }

    pub fn forget(&self, ino: u64, count: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut g = self.lock();
        if let Some(n) = g.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(count);
            if n.lookups == 0 {
                g.remove(&ino);
            }
        }
    }

    /// After a rename: everything at `from` or under it now lives under `to`.
    pub fn renamed(&self, from: &str, to: &str) {
        let prefix = format!("{from}/");
        for n in self.lock().values_mut() {
            if n.path == from {
                n.path = to.to_string();
                n.fresh = None; // ctime changed
            } else if let Some(rest) = n.path.strip_prefix(&prefix) {
                n.path = join(to, rest);
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(ino: u64) -> Inode {
        Inode {
            ino,
            ..crate::ops::placeholder()
        }
    }

    #[test]
    fn rename_moves_subtree_and_forget_drops_at_zero() {
        let t = InodeTable::new();
        t.add("/a", &inode(10));
        t.add("/a/b", &inode(11));
        t.add("/ab", &inode(12));
        t.add("/a/b", &inode(11));
        t.renamed("/a", "/z");
        assert_eq!(t.path(10).as_deref(), Some("/z"));
        assert_eq!(t.path(11).as_deref(), Some("/z/b"));
        assert_eq!(
            t.path(12).as_deref(),
            Some("/ab"),
            "a sibling with the same prefix stays"
        );
        t.forget(11, 1);
        assert_eq!(t.path(11).as_deref(), Some("/z/b"), "one lookup left");
        t.forget(11, 1);
        assert_eq!(t.path(11), None);
        t.forget(1, 100);
        assert_eq!(t.path(1).as_deref(), Some("/"), "root is never forgotten");
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn fresh_attributes_expire_and_renames_drop_them() {
        let t = InodeTable::new();
        t.add("/f", &inode(9));
        assert_eq!(t.fresh(9, Duration::from_secs(60)).map(|i| i.ino), Some(9));
        assert!(t.fresh(9, Duration::ZERO).is_none(), "expired");
        t.renamed("/f", "/g");
        assert!(
            t.fresh(9, Duration::from_secs(60)).is_none(),
            "ctime changed"
        );
        assert!(t.fresh(12345, Duration::from_secs(60)).is_none());
    }

    #[test]
    fn observe_reports_changes_only_after_a_first_sighting() {
        let t = InodeTable::new();
        let mut i = inode(7);
        t.add("/f", &i);
        assert!(!t.observe(&i));
        i.size = 5;
        assert!(t.observe(&i));
        assert!(!t.observe(&i));
    }
}
