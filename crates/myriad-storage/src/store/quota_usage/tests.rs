use std::sync::Arc;

use myriad_proto::{Inode, InodeId};

use super::*;
use crate::mem_kv::MemKv;

fn store() -> Store {
    Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"))
}

fn visible(ino: u64, kind: FileKind, size: u64) -> EntryRecord {
    let mut i = Inode::new(InodeId(ino), kind, 0o644, (0, 0), 0);
    i.size = size;
    EntryRecord {
        inode: Some(i),
        pending: None,
    }
}

fn root(id: u64, path: &str) -> QuotaRoot {
    QuotaRoot {
        id,
        path: path.into(),
        max_files: 0,
        max_bytes: 0,
        trash_apart: false,
    }
}

/// Applies `f`'s batch with the usage of `set` accounted and written, as a partition's
/// writer does.
fn change(s: &Store, f: impl FnOnce(&Store, &mut Batch)) {
    let mut b = Batch::new();
    f(s, &mut b);
    let (_, set) = s.quota_set().unwrap_or_else(|e| panic!("{e}"));
    let mut usage = BTreeMap::new();
    let changed = s
        .account_quotas(&b, &set, &mut usage)
        .unwrap_or_else(|e| panic!("{e}"));
    for id in changed {
        s.put_quota_usage(&mut b, id, &usage[&id]);
    }
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
}

fn sync(s: &Store, epoch: u64, roots: &[QuotaRoot]) {
    let b = s
        .sync_quotas(epoch, roots)
        .unwrap_or_else(|e| panic!("{e}"));
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
}

fn usage(s: &Store, id: u64) -> (u64, u64) {
    let u = s.quota_usage(id).unwrap_or_else(|e| panic!("{e}"));
    (u.files, u.bytes)
}

#[test]
fn usage_is_counted_from_scratch_then_kept_by_every_change_and_never_drifts() {
    let s = store();
    change(&s, |s, b| {
        s.put_entry(b, "/", "lab", &visible(2, FileKind::Directory, 0));
        s.put_entry(b, "/lab", "a", &visible(3, FileKind::File, 100));
        s.put_entry(b, "/lab", "d", &visible(4, FileKind::Directory, 0));
        s.put_entry(b, "/lab/d", "b", &visible(5, FileKind::File, 50));
        s.put_entry(b, "/labx", "c", &visible(6, FileKind::File, 7));
        s.put_entry(b, "//i", "5", &visible(5, FileKind::File, 999));
    });
    // Set on a tree that exists: counted from scratch (/labx and the link home are out).
    sync(&s, 10, &[root(10, "/lab"), root(11, "/")]);
    assert_eq!(usage(&s, 10), (3, 150));
    assert_eq!(usage(&s, 11), (5, 157));
    change(&s, |s, b| {
        s.put_entry(b, "/lab", "a", &visible(3, FileKind::File, 4000));
        s.delete_entry(b, "/lab/d", "b");
        s.put_entry(b, "/lab/d", "ln", &visible(7, FileKind::Symlink, 30));
        // A pending name (an mkdir's, a rename's) counts from its first step.
        s.put_entry(
            b,
            "/lab/d",
            "p",
            &EntryRecord {
                inode: None,
                pending: Some(crate::records::Pending {
                    txid: 1,
                    after: None,
                }),
            },
        );
        // Two changes of one key in one batch: the second counts against the first.
        s.put_entry(b, "/lab", "twice", &visible(8, FileKind::File, 10));
        s.put_entry(b, "/lab", "twice", &visible(8, FileKind::File, 20));
    });
    assert_eq!(usage(&s, 10), (5, 4020));
    assert_eq!(s.quota_drift().unwrap_or_else(|e| panic!("{e}")), None);

    // An older map changes nothing; a newer one without /lab drops its usage.
    sync(&s, 9, &[]);
    assert_eq!(usage(&s, 10), (5, 4020));
    sync(&s, 12, &[root(11, "/")]);
    assert_eq!(usage(&s, 10), (0, 0), "dropped");
    assert_eq!(s.quota_set().ok().map(|(e, r)| (e, r.len())), Some((12, 1)));
    assert_eq!(s.quota_drift().unwrap_or_else(|e| panic!("{e}")), None);
}

#[test]
fn a_wrong_usage_is_found_by_the_drift_check() {
    let s = store();
    sync(&s, 3, &[root(3, "/q")]);
    // Written without accounting: the kept usage no longer matches.
    let mut b = Batch::new();
    s.put_entry(&mut b, "/q", "f", &visible(2, FileKind::File, 5));
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    let drift = s.quota_drift().unwrap_or_else(|e| panic!("{e}"));
    assert!(drift.is_some_and(|d| d.contains("quota 3 on /q")));
}

#[test]
fn a_sync_batch_names_the_set_it_writes() {
    let s = store();
    let b = s
        .sync_quotas(4, &[root(4, "/a")])
        .unwrap_or_else(|e| panic!("{e}"));
    let set = Store::quota_set_in(&b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set, Some(vec![root(4, "/a")]));
    assert_eq!(Store::quota_set_in(&Batch::new()).ok(), Some(None));
}

#[test]
fn a_quota_holds_the_entries_of_its_tree_only() {
    let q = root(1, "/a");
    assert!(q.holds_entries_of("/a"));
    assert!(q.holds_entries_of("/a/b/c"));
    assert!(!q.holds_entries_of("/ab"));
    assert!(!q.holds_entries_of("/"));
    let r = root(2, "/");
    assert!(r.holds_entries_of("/") && r.holds_entries_of("/x/y"));
    assert!(
        !r.holds_entries_of("//i"),
        "hard links' homes are in no tree"
    );
    assert!(!r.holds_entries_of("//o"));
}

#[test]
fn with_the_trash_apart_only_a_quota_set_in_the_trash_holds_it() {
    let apart = |id, path: &str| QuotaRoot {
        trash_apart: true,
        ..root(id, path)
    };
    assert!(root(1, "/").holds_entries_of("/.trash/2026-12-07/0"));
    let r = apart(1, "/");
    assert!(r.holds_entries_of("/") && r.holds_entries_of("/.trashcan"));
    assert!(!r.holds_entries_of("/.trash") && !r.holds_entries_of("/.trash/d/0/a"));
    let t = apart(2, "/.trash");
    assert!(t.holds_entries_of("/.trash") && t.holds_entries_of("/.trash/d/0/a"));
    assert!(apart(3, "/.trash/d").holds_entries_of("/.trash/d/0"));
}

#[test]
fn a_map_that_leaves_the_trash_out_recounts_the_quotas_it_changes_and_no_other() {
    let s = store();
    change(&s, |s, b| {
        s.put_entry(b, "/", "lab", &visible(2, FileKind::Directory, 0));
        s.put_entry(b, "/lab", "a", &visible(3, FileKind::File, 100));
        s.put_entry(b, "/", ".trash", &visible(5, FileKind::Directory, 0));
        s.put_entry(b, "/.trash/d/0/lab", "b", &visible(4, FileKind::File, 50));
    });
    sync(
        &s,
        10,
        &[root(10, "/"), root(11, "/lab"), root(12, "/.trash")],
    );
    assert_eq!(usage(&s, 10), (4, 150));
    let apart = |r: QuotaRoot| QuotaRoot {
        trash_apart: true,
        ..r
    };
    let next = [
        apart(root(10, "/")),
        apart(root(11, "/lab")),
        apart(root(12, "/.trash")),
    ];
    let b = s.sync_quotas(13, &next).unwrap_or_else(|e| panic!("{e}"));
    // The root's usage is written afresh by the sync; the others' are left as kept.
    assert!(Store::writes_quota_usage(&b, 10));
    assert!(!Store::writes_quota_usage(&b, 11) && !Store::writes_quota_usage(&b, 12));
    let set = Store::quota_set_in(&b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.as_deref(), Some(&next[..]));
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(usage(&s, 10), (2, 100));
    assert_eq!((usage(&s, 11), usage(&s, 12)), ((1, 100), (1, 50)));
    // The rule is read back with the set, and every change after counts by it.
    assert_eq!(s.quota_set().ok().map(|(_, r)| r), Some(next.to_vec()));
    change(&s, |s, b| {
        s.delete_entry(b, "/lab", "a");
        s.put_entry(b, "/.trash/d/0/lab", "a", &visible(3, FileKind::File, 100));
    });
    assert_eq!(usage(&s, 10), (1, 0));
    assert_eq!(usage(&s, 12), (2, 150));
    assert_eq!(s.quota_drift().unwrap_or_else(|e| panic!("{e}")), None);
}

/// A hard-linked file's bytes count once, in the quotas of the directory its first name
/// was in when the second was made (its anchor), however its size changes at its home
/// and wherever its names go; freed with its object. Objects without an anchor (made
/// before anchors) count nowhere. A count from scratch agrees at every step.
#[test]
fn a_linked_file_s_bytes_count_where_its_anchor_is() {
    let s = store();
    sync(&s, 10, &[root(10, "/lab"), root(11, "/")]);
    let drift = |s: &Store| s.quota_drift().unwrap_or_else(|e| panic!("{e}"));
    change(&s, |s, b| {
        s.put_entry(b, "/", "lab", &visible(2, FileKind::Directory, 0));
        s.put_entry(b, "/lab", "f", &visible(3, FileKind::File, 100));
        s.put_entry(b, "//i", "old", &visible(9, FileKind::File, 555));
    });
    assert_eq!((usage(&s, 10), usage(&s, 11)), ((1, 100), (2, 100)));
    // The second name made: the inode moves into its object, the name becomes a
    // reference, and the bytes stay where they were.
    change(&s, |s, b| {
        s.put_entry(b, "//i", "3", &visible(3, FileKind::File, 100));
        s.put_quota_anchor(b, "3", "/lab");
        s.put_entry(b, "/lab", "f", &visible(3, FileKind::HardLink, 0));
        s.put_entry(b, "/", "g", &visible(3, FileKind::HardLink, 0));
    });
    assert_eq!((usage(&s, 10), usage(&s, 11)), ((1, 100), (3, 100)));
    assert_eq!(drift(&s), None);
    // Written through either name, at its home.
    change(&s, |s, b| {
        s.put_entry(b, "//i", "3", &visible(3, FileKind::File, 4096));
    });
    assert_eq!((usage(&s, 10), usage(&s, 11)), ((1, 4096), (3, 4096)));
    assert_eq!(drift(&s), None);
    // Its first name gone: the bytes stay with the anchor, as long as the object lives.
    change(&s, |s, b| s.delete_entry(b, "/lab", "f"));
    assert_eq!((usage(&s, 10), usage(&s, 11)), ((0, 4096), (2, 4096)));
    assert_eq!(drift(&s), None);
    // The last link dropped: the object and its anchor go, and the bytes with them.
    change(&s, |s, b| {
        s.delete_entry(b, "/", "g");
        s.delete_entry(b, "//i", "3");
        s.delete_quota_anchor(b, "3");
    });
    assert_eq!((usage(&s, 10), usage(&s, 11)), ((0, 0), (1, 0)));
    assert_eq!(drift(&s), None);
}
