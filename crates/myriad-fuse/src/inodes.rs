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

use myriad_placement::join;
use myriad_proto::{Inode, InodeId, ROOT_INO};

struct Node {
    /// Names this mount knows for the inode (several for a hard-linked file); the last is
    /// the one used. Renames and unlinks through the mount keep the list true.
    paths: Vec<String>,
    lookups: u64,
    /// (size, mtime) last told to the kernel: an open that sees other values drops the
    /// kernel's cached pages and attributes (close-to-open consistency).
    seen: Option<(u64, i64)>,
    /// Attributes seen since the kernel cached pages differ from those pages' version (a
    /// change by another client, noticed by a lookup or getattr): the next open drops them.
    pages_stale: bool,
    /// The last attributes a server gave for this inode, and when. A getattr within the
    /// attribute TTL is answered from here: the kernel drops its own copy after every write
    /// (mtime changed), and asking the server again would only repeat what its write reply
    /// said. The same staleness bound as the kernel's cache.
    fresh: Option<(Inode, Instant)>,
    /// `fresh` no longer answers getattr (an unlink or rename changed link count or
    /// ctime); its size still beats an older listing's (`newer_than`).
    expired: bool,
    /// `Tables::clock` at this mount's last acknowledged change of the inode whose new
    /// attributes it was told (`observe_own`): those beat a listing read before it.
    changed_at: u64,
    /// `Tables::clock` at this mount's last change of the inode of any kind, also those
    /// whose new attributes it was not told (a name added or removed, a rename: `touched`).
    /// Attributes a server read before then (a stat that crossed our write on the wire, a
    /// lookup's prefetched contents and attributes) are older than what the kernel was
    /// told and are not kept (as the kernel's own attr_version).
    touched_at: u64,
}

pub struct InodeTable {
    inner: Mutex<Tables>,
    /// The kernel's root (never forgotten): the cluster's root, or the directory a
    /// subdirectory mount shows.
    top: InodeId,
}

struct Tables {
    /// Counts this mount's acknowledged changes (`observe_own`); `stamp` reads it before a
    /// request so its answer can be judged against changes made meanwhile.
    clock: u64,
    nodes: HashMap<InodeId, Node>,
    /// path -> inode, for changes that name a path only (unlink).
    by_path: HashMap<String, InodeId>,
}

impl InodeTable {
    /// The table of a mount of the whole file system.
    pub fn new() -> InodeTable {
        InodeTable::with_top("/", ROOT_INO)
    }

    /// The table of a mount whose root is the directory `top` at `path`: every path
    /// the kernel reaches starts there.
    pub fn with_top(path: &str, top: InodeId) -> InodeTable {
        let mut nodes = HashMap::new();
        nodes.insert(
            top,
            Node {
                paths: vec![path.to_string()],
                lookups: 1,
                seen: None,
                pages_stale: false,
                fresh: None,
                expired: false,
                changed_at: 0,
                touched_at: 0,
            },
        );
        let by_path = HashMap::from([(path.to_string(), top)]);
        InodeTable {
            inner: Mutex::new(Tables {
                clock: 0,
                nodes,
                by_path,
            }),
            top,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Every name this mount knows for `ino`, the one seen last first.
    pub fn paths(&self, ino: InodeId) -> Vec<String> {
        self.lock()
            .nodes
            .get(&ino)
            .map(|n| n.paths.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// The inode this mount last saw at `path`.
    pub fn ino_of(&self, path: &str) -> Option<InodeId> {
        self.lock().by_path.get(path).copied()
    }

    pub fn path(&self, ino: InodeId) -> Option<String> {
        self.lock()
            .nodes
            .get(&ino)
            .and_then(|n| n.paths.last().cloned())
    }

    /// The clock, to take before a request whose answer carries attributes: pass it to
    /// `add`, `observe_remote` or `open_check` with that answer.
    pub fn stamp(&self) -> u64 {
        self.lock().clock
    }

    /// Whether this mount changed `ino` (and the servers acknowledged it) after `since`.
    pub fn changed_since(&self, ino: InodeId, since: u64) -> bool {
        self.lock()
            .nodes
            .get(&ino)
            .is_some_and(|n| n.changed_at > since)
    }

    /// Whether this mount changed the inode in any way after stamp `since` (`touched_at`).
    pub fn touched_since(&self, ino: InodeId, since: u64) -> bool {
        self.lock()
            .nodes
            .get(&ino)
            .is_some_and(|n| n.touched_at > since)
    }

    /// The kernel learned `inode` under `path` (one more lookup to be forgotten later);
    /// `since`: the stamp taken before the request that brought `inode`.
    pub fn add(&self, path: &str, inode: &Inode, since: u64) {
        let mut g = self.lock();
        let t = &mut *g;
        let n = t.nodes.entry(inode.ino).or_insert_with(|| Node {
            paths: Vec::new(),
            lookups: 0,
            seen: None,
            pages_stale: false,
            fresh: None,
            expired: false,
            changed_at: 0,
            touched_at: 0,
        });
        n.paths.retain(|p| p != path);
        n.paths.push(path.to_string());
        n.lookups += 1;
        if n.touched_at <= since {
            note_remote(n, inode);
        }
        t.by_path.insert(path.to_string(), inode.ino);
    }

    /// Attributes from the reply to this mount's own change (its pages already hold it).
    pub fn observe_own(&self, inode: &Inode) {
        let mut g = self.lock();
        g.clock += 1;
        let clock = g.clock;
        if let Some(n) = g.nodes.get_mut(&inode.ino) {
            n.seen = Some((inode.size, inode.mtime_ns));
            n.fresh = Some((inode.clone(), Instant::now()));
            n.expired = false;
            n.changed_at = clock;
            n.touched_at = clock;
        }
    }

    /// Attributes read from a server (getattr) by a request sent at `since`: a
    /// difference means another client changed the file.
    pub fn observe_remote(&self, inode: &Inode, since: u64) {
        if let Some(n) = self.lock().nodes.get_mut(&inode.ino)
            && n.touched_at <= since
        {
            note_remote(n, inode);
        }
    }

    /// At open, with attributes read at `since`: whether the kernel's cached pages must
    /// be dropped (the file changed since they were cached, noticed now or by an earlier
    /// lookup).
    pub fn open_check(&self, inode: &Inode, since: u64) -> bool {
        match self.lock().nodes.get_mut(&inode.ino) {
            Some(n) => {
                if n.touched_at <= since {
                    note_remote(n, inode);
                }
                std::mem::take(&mut n.pages_stale)
            }
            None => false,
        }
    }

    /// Attributes newer than a listing fetched at `since`: the last a server gave after
    /// this mount's own change, if it changed the inode since.
    pub fn newer_than(&self, ino: InodeId, since: u64) -> Option<Inode> {
        let g = self.lock();
        let n = g.nodes.get(&ino)?;
        if n.changed_at <= since {
            return None;
        }
        n.fresh.as_ref().map(|(i, _)| i.clone())
    }

    /// The inode's cached attributes no longer answer getattr (a directory whose entries
    /// this mount changed: its times and link count changed on the servers).
    pub fn expire(&self, ino: InodeId) {
        let mut g = self.lock();
        let t = &mut *g;
        if let Some(n) = t.nodes.get_mut(&ino) {
            touched(n, &mut t.clock);
        }
    }

    /// The size and mtime this mount last saw of `ino`, from wherever they came (what it
    /// last told the kernel, but for its own changes since).
    pub fn seen(&self, ino: InodeId) -> Option<(u64, i64)> {
        self.lock().nodes.get(&ino)?.seen
    }

    /// The last attributes a server gave, however old (for a read or stat by inode of
    /// a file no name of this mount's names any more).
    pub fn last_seen(&self, ino: InodeId) -> Option<Inode> {
        let g = self.lock();
        g.nodes.get(&ino)?.fresh.as_ref().map(|(i, _)| i.clone())
    }

    /// Attributes a server gave less than `ttl` ago.
    pub fn fresh(&self, ino: InodeId, ttl: Duration) -> Option<Inode> {
        let g = self.lock();
        let n = g.nodes.get(&ino)?;
        let (i, at) = n.fresh.as_ref()?;
        (!n.expired && at.elapsed() < ttl).then(|| i.clone())
    }

    /// `path` was unlinked: the inode's cached attributes (link count, ctime) are stale,
    /// and the name is no longer one of its paths (the last one stays, for open handles).
    pub fn unlinked(&self, path: &str) {
        let mut g = self.lock();
        let t = &mut *g;
        if let Some(ino) = t.by_path.remove(path)
            && let Some(n) = t.nodes.get_mut(&ino)
        {
            touched(n, &mut t.clock);
            drop_name(n, path);
        }
    }

    pub fn forget(&self, ino: InodeId, count: u64) {
        if ino == self.top {
            return;
        }
        let mut g = self.lock();
        let t = &mut *g;
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(count);
            if n.lookups == 0 {
                for p in &n.paths {
                    if t.by_path.get(p) == Some(&ino) {
                        t.by_path.remove(p);
                    }
                }
                t.nodes.remove(&ino);
            }
        }
    }

    /// After a rename: everything at `from` or under it now lives under `to`.
    pub fn renamed(&self, from: &str, to: &str) {
        let prefix = format!("{from}/");
        let mut g = self.lock();
        let t = &mut *g;
        // Whatever `to` named before lost a name: its link count and ctime changed.
        if let Some(old) = t.by_path.remove(to)
            && let Some(n) = t.nodes.get_mut(&old)
        {
            touched(n, &mut t.clock);
            drop_name(n, to);
        }
        for (ino, n) in &mut t.nodes {
            let mut moved = false;
            for p in &mut n.paths {
                let new = if p == from {
                    moved = true;
                    to.to_string()
                } else if let Some(rest) = p.strip_prefix(&prefix) {
                    join(to, rest)
                } else {
                    continue;
                };
                if t.by_path.get(p.as_str()) == Some(ino) {
                    t.by_path.remove(p.as_str());
                }
                t.by_path.insert(new.clone(), *ino);
                *p = new;
            }
            if moved {
                touched(n, &mut t.clock); // ctime changed
            }
        }
    }

    /// Two names swapped (RENAME_EXCHANGE; never directories): each inode takes the
    /// other's name, and both ctimes changed.
    pub fn exchanged(&self, a: &str, b: &str) {
        let mut g = self.lock();
        let t = &mut *g;
        let (ia, ib) = (t.by_path.get(a).copied(), t.by_path.get(b).copied());
        if ia == ib {
            // Two names of one file: nothing moves but its ctime.
            if let Some(n) = ia.and_then(|i| t.nodes.get_mut(&i)) {
                touched(n, &mut t.clock);
            }
            return;
        }
        t.by_path.remove(a);
        t.by_path.remove(b);
        for (ino, old, new) in [(ia, a, b), (ib, b, a)] {
            let Some(ino) = ino else { continue };
            if let Some(n) = t.nodes.get_mut(&ino) {
                touched(n, &mut t.clock);
                for p in &mut n.paths {
                    if p == old {
                        *p = new.to_string();
                    }
                }
            }
            t.by_path.insert(new.to_string(), ino);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().nodes.len()
    }
}

/// This mount changed the inode without being told its new attributes (a name added or
/// removed, a rename: link count or ctime): its cached ones no longer answer getattr, and
/// what a server read before is older (`touched_since`).
fn touched(n: &mut Node, clock: &mut u64) {
    *clock += 1;
    n.touched_at = *clock;
    n.expired = true;
}

fn note_remote(n: &mut Node, inode: &Inode) {
    let now = Some((inode.size, inode.mtime_ns));
    if n.seen.is_some() && n.seen != now {
        n.pages_stale = true;
    }
    n.seen = now;
    n.fresh = Some((inode.clone(), Instant::now()));
    n.expired = false;
}

/// Removes `path` from a node's names, unless it is the only one left.
fn drop_name(n: &mut Node, path: &str) {
    if n.paths.len() > 1 {
        n.paths.retain(|p| p != path);
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

    fn inode(ino: InodeId) -> Inode {
        Inode {
            ino,
            ..crate::mount::placeholder()
        }
    }

    #[test]
    fn rename_moves_subtree_and_forget_drops_at_zero() {
        let t = InodeTable::new();
        t.add("/a", &inode(InodeId(10)), 0);
        t.add("/a/b", &inode(InodeId(11)), 0);
        t.add("/ab", &inode(InodeId(12)), 0);
        t.add("/a/b", &inode(InodeId(11)), 0);
        t.renamed("/a", "/z");
        assert_eq!(t.path(InodeId(10)).as_deref(), Some("/z"));
        assert_eq!(t.path(InodeId(11)).as_deref(), Some("/z/b"));
        assert_eq!(
            t.path(InodeId(12)).as_deref(),
            Some("/ab"),
            "a sibling with the same prefix stays"
        );
        t.forget(InodeId(11), 1);
        assert_eq!(
            t.path(InodeId(11)).as_deref(),
            Some("/z/b"),
            "one lookup left"
        );
        t.forget(InodeId(11), 1);
        assert_eq!(t.path(InodeId(11)), None);
        t.forget(InodeId(1), 100);
        assert_eq!(
            t.path(InodeId(1)).as_deref(),
            Some("/"),
            "root is never forgotten"
        );
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn fresh_attributes_expire_and_renames_drop_them() {
        let t = InodeTable::new();
        t.add("/f", &inode(InodeId(9)), 0);
        assert_eq!(
            t.fresh(InodeId(9), Duration::from_secs(60)).map(|i| i.ino),
            Some(InodeId(9))
        );
        assert!(t.fresh(InodeId(9), Duration::ZERO).is_none(), "expired");
        t.renamed("/f", "/g");
        assert!(
            t.fresh(InodeId(9), Duration::from_secs(60)).is_none(),
            "ctime changed"
        );
        assert!(t.fresh(InodeId(12345), Duration::from_secs(60)).is_none());
    }

    #[test]
    fn unlink_of_a_known_path_drops_its_cached_attributes() {
        let t = InodeTable::new();
        t.add("/a", &inode(InodeId(3)), 0);
        t.add("/b", &inode(InodeId(3)), 0);
        t.unlinked("/b");
        assert!(t.fresh(InodeId(3), Duration::from_secs(60)).is_none());
        assert_eq!(
            t.path(InodeId(3)).as_deref(),
            Some("/a"),
            "the other name is used"
        );
        t.unlinked("/zzz");
    }

    #[test]
    fn a_linked_inode_keeps_its_other_names_when_one_goes() {
        let t = InodeTable::new();
        t.add("/p1", &inode(InodeId(8)), 0);
        t.add("/d/p2", &inode(InodeId(8)), 0);
        t.add("/e/p3", &inode(InodeId(8)), 0);
        assert_eq!(t.path(InodeId(8)).as_deref(), Some("/e/p3"));
        t.add("/e/q", &inode(InodeId(9)), 0);
        t.renamed("/e/q", "/e/p3"); // another file replaces a name of inode 8
        assert_eq!(t.path(InodeId(9)).as_deref(), Some("/e/p3"));
        assert_eq!(t.path(InodeId(8)).as_deref(), Some("/d/p2"));
        t.unlinked("/d/p2");
        assert_eq!(t.path(InodeId(8)).as_deref(), Some("/p1"));
        t.unlinked("/p1");
        assert_eq!(
            t.path(InodeId(8)).as_deref(),
            Some("/p1"),
            "the last name stays for open handles"
        );
        t.renamed("/", "/x"); // nothing is "under" a rename of "/" in practice; no panic
    }

    #[test]
    fn a_remote_change_seen_by_a_lookup_still_drops_pages_at_the_next_open() {
        let t = InodeTable::new();
        let mut i = inode(InodeId(7));
        t.add("/f", &i, t.stamp());
        assert!(!t.open_check(&i, t.stamp()));
        // Same size, new mtime, noticed by a lookup before the open.
        i.mtime_ns = 99;
        t.add("/f", &i, t.stamp());
        assert!(t.open_check(&i, t.stamp()), "pages from before the change");
        assert!(!t.open_check(&i, t.stamp()), "dropped once");
        // This mount's own write does not make its pages stale.
        i.size = 5;
        i.mtime_ns = 100;
        t.observe_own(&i);
        assert!(!t.open_check(&i, t.stamp()));
    }

    #[test]
    fn attributes_read_before_an_own_change_are_not_kept() {
        let t = InodeTable::new();
        let mut i = inode(InodeId(5));
        t.add("/f", &i, t.stamp());
        let before = t.stamp();
        // This mount's write is acknowledged while a stat sent earlier is on the wire.
        i.size = 100;
        i.mtime_ns = 10;
        t.observe_own(&i);
        assert!(t.changed_since(InodeId(5), before));
        let mut old = inode(InodeId(5));
        old.size = 0;
        t.observe_remote(&old, before);
        let fresh = t.fresh(InodeId(5), Duration::from_secs(60)).map(|i| i.size);
        assert_eq!(fresh, Some(100), "the older answer is dropped");
        assert!(!t.open_check(&old, before), "and does not mark pages stale");
        assert_eq!(t.newer_than(InodeId(5), before).map(|i| i.size), Some(100));
        assert!(t.newer_than(InodeId(5), t.stamp()).is_none());
    }

    /// A hard link made here changes the file's link count under every name, and the
    /// mount is not told the new count for each: attributes a lookup read before it (the
    /// prefetched ones an open takes) must not come back (`bench soak`: a stat of the new
    /// name said 1 link after the open of the old one used its lookup's prefetch).
    #[test]
    fn a_link_or_unlink_here_outdates_what_was_read_before() {
        let t = InodeTable::new();
        let mut i = inode(InodeId(8));
        t.add("/a", &i, t.stamp());
        let looked_up = t.stamp();
        i.nlink = 2;
        t.add("/b", &i, looked_up);
        t.expire(InodeId(8));
        assert!(t.touched_since(InodeId(8), looked_up));
        assert!(
            !t.changed_since(InodeId(8), looked_up),
            "no attributes told"
        );
        let mut old = inode(InodeId(8));
        old.nlink = 1;
        t.observe_remote(&old, looked_up);
        assert!(
            t.fresh(InodeId(8), Duration::from_secs(60)).is_none(),
            "the count read before the link does not answer getattr"
        );
        let after = t.stamp();
        t.unlinked("/b");
        assert!(t.touched_since(InodeId(8), after));
        t.observe_remote(&i, after);
        assert!(t.fresh(InodeId(8), Duration::from_secs(60)).is_none());
        assert!(!t.touched_since(InodeId(8), t.stamp()));
    }
}
