use std::sync::Arc;

use myriad_proto::fsstats::FsStats;
use myriad_proto::{FileKind, Inode, InodeId, Shard};

use super::*;
use crate::mem_kv::MemKv;
use crate::records::LocalShard;

fn store() -> Store {
    Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"))
}

fn inode(ino: u64, kind: FileKind, size: u64, nlink: u32) -> Inode {
    let mut i = Inode::new(InodeId(ino), kind, 0o644, (0, 0), 0);
    i.size = size;
    i.nlink = nlink;
    i
}

fn visible(i: Inode) -> EntryRecord {
    EntryRecord {
        inode: Some(i),
        pending: None,
    }
}

/// Applies `change` to a batch, accounts it, commits it (with one directory cache for
/// the whole test, as a partition's writer keeps it).
fn change(s: &Store, f: impl FnOnce(&Store, &mut Batch)) {
    thread_local! {
        static CACHE: std::cell::RefCell<super::DirCache> = std::cell::RefCell::default();
    }
    let mut b = Batch::new();
    f(s, &mut b);
    let (n, mut stats) = s
        .load_kept_stats()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no statistics kept"));
    CACHE
        .with_borrow_mut(|cache| s.account_stats(&mut b, &mut stats, cache))
        .unwrap_or_else(|e| panic!("{e}"));
    s.put_kept_stats(&mut b, n + 1, &stats);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
}

fn rebuilt(s: &Store) -> FsStats {
    let b = s.rebuild_stats().unwrap_or_else(|e| panic!("{e}"));
    let v = b
        .ops
        .iter()
        .rev()
        .find(|(sp, k, v)| *sp == Space::Meta && v.is_some() && k.starts_with(STATS_PREFIX))
        .and_then(|(_, _, v)| v.clone())
        .unwrap_or_default();
    let (_, stats): (u64, FsStats) = decode("meta", &v).unwrap_or_else(|e| panic!("{e}"));
    stats
}

#[test]
fn kept_statistics_follow_every_change_and_equal_a_count_from_scratch() {
    let s = store();
    // Nothing is kept before the first build.
    assert_eq!(s.kept_stats().unwrap_or_else(|e| panic!("{e}")), None);
    let b = s.rebuild_stats().unwrap_or_else(|e| panic!("{e}"));
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));

    change(&s, |s, b| {
        s.put_dir(b, "/a", &DirRecord::new(InodeId(2)));
        s.put_entry(b, "/", "a", &visible(inode(2, FileKind::Directory, 0, 2)));
    });
    change(&s, |s, b| {
        for i in 0..10u64 {
            s.put_entry(
                b,
                "/a",
                &format!("f{i}"),
                &visible(inode(10 + i, FileKind::File, i * 5000, 1)),
            );
        }
        s.put_entry(b, "/a", "ln", &visible(inode(30, FileKind::Symlink, 7, 1)));
    });
    // A file grows, another is unlinked, a pending create does not count yet.
    change(&s, |s, b| {
        s.put_entry(
            b,
            "/a",
            "f1",
            &visible(inode(11, FileKind::File, 1 << 20, 1)),
        );
        s.delete_entry(b, "/a", "f2");
        s.put_entry(
            b,
            "/a",
            "new",
            &EntryRecord {
                inode: None,
                pending: Some(crate::records::Pending {
                    txid: 9,
                    after: None,
                }),
            },
        );
    });
    // A split directory's piece here, and an inode object of a hard-linked file.
    change(&s, |s, b| {
        let mut piece = DirRecord::new(InodeId(40));
        let (lo, _) = Shard::ALL.halves();
        piece.shards = vec![LocalShard::new(lo)];
        s.put_dir(b, "/huge", &piece);
        for i in 0..3u64 {
            s.put_entry(
                b,
                "/huge",
                &format!("h{i}"),
                &visible(inode(50 + i, FileKind::File, 10, 1)),
            );
        }
        s.put_entry(b, "//i", "60", &visible(inode(60, FileKind::File, 4096, 2)));
        // A file whose last name went, waiting for its last open to close: gone.
        s.put_entry(b, "//o", "61", &visible(inode(61, FileKind::File, 9999, 0)));
    });
    // An empty directory, made and removed again, and one kept.
    change(&s, |s, b| {
        s.put_dir(b, "/gone", &DirRecord::new(InodeId(70)))
    });
    change(&s, |s, b| s.delete_dir(b, "/gone"));
    change(&s, |s, b| {
        s.put_dir(b, "/empty", &DirRecord::new(InodeId(71)))
    });

    let kept = s
        .kept_stats()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_default();
    let scratch = rebuilt(&s);
    assert!(
        kept.stats.same_counts(&scratch),
        "kept {:?}\nscratch {:?}",
        kept.stats,
        scratch
    );
    assert_eq!(s.kept_stats_drift().unwrap_or_else(|e| panic!("{e}")), None);
    // And what was made, counted independently: 9 files in /a, 3 in /huge, the inode
    // object; one symlink; /a (11 visible entries) and /empty (0) are whole directories.
    assert_eq!(kept.stats.size.count, 13);
    assert_eq!(kept.stats.symlinks.count, 1);
    assert_eq!(kept.stats.hard_links.count, 1);
    assert_eq!(kept.stats.dir_entries.count, 2);
    assert_eq!(kept.stats.dir_entries.sum, 10);
    assert_eq!(kept.split_dirs, vec![("/huge".to_string(), 3)]);
    // Names of user entries only: "a", f0..f9 less f2, "ln", h0..h2.
    assert_eq!(kept.stats.name_len.count, 1 + 9 + 1 + 3);
}

#[test]
fn damaged_records_never_refuse_a_change_and_a_damaged_statistics_record_is_as_none() {
    let s = store();
    let b = s.rebuild_stats().unwrap_or_else(|e| panic!("{e}"));
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    change(&s, |s, b| {
        s.put_dir(b, "/d", &DirRecord::new(InodeId(2)));
        s.put_entry(b, "/d", "f", &visible(inode(3, FileKind::File, 10, 1)));
    });
    // The entry's and the directory's records are damaged on disk...
    let mut raw = Batch::new();
    raw.put(
        Space::Entries,
        crate::keys::entry_key("/d", "f"),
        vec![9, 9, 9],
    );
    raw.put(Space::Dirs, b"/d".to_vec(), vec![9, 9]);
    s.commit(raw).unwrap_or_else(|e| panic!("{e}"));
    // ...and their repair, which writes good records over them, is counted, not refused.
    let (n, mut stats) = s
        .load_kept_stats()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no statistics kept"));
    let mut b = Batch::new();
    s.put_dir(&mut b, "/d", &DirRecord::new(InodeId(2)));
    s.put_entry(&mut b, "/d", "f", &visible(inode(3, FileKind::File, 10, 1)));
    assert!(
        s.account_stats(&mut b, &mut stats, &mut super::DirCache::new())
            .unwrap_or_else(|e| panic!("a repair was refused: {e}"))
    );
    s.put_kept_stats(&mut b, n + 1, &stats);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    // A damaged statistics record reads as none (counted again at the next opening).
    let mut raw = Batch::new();
    let mut slot = STATS_PREFIX.to_vec();
    slot.push(u8::try_from((n + 1) % STATS_SLOTS).unwrap_or(0));
    raw.put(Space::Meta, slot, vec![1, 2, 3]);
    s.commit(raw).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.load_kept_stats().unwrap_or_else(|e| panic!("{e}")), None);
    assert_eq!(s.kept_stats().unwrap_or_else(|e| panic!("{e}")), None);
}
