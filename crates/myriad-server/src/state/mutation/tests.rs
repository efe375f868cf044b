use std::sync::Arc;

use myriad_proto::{FileKind, RenameFlags, WireError};
use myriad_storage::{MemKv, Store};

use myriad_proto::{Inode, ROOT_INO};
use myriad_storage::DirRecord;

use super::*;
use crate::state::ops::replace_key;
use crate::state::records::visible;
use myriad_proto::InodeId;

struct T {
    store: Store,
    ids: IdAlloc,
    outcomes: crate::state::outcomes::Outcomes,
}

impl T {
    fn new() -> T {
        let store = Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"));
        let ids =
            IdAlloc::load(&store, myriad_proto::PartitionId(1)).unwrap_or_else(|e| panic!("{e}"));
        let mut t = T {
            store,
            ids,
            outcomes: crate::state::outcomes::Outcomes::default(),
        };
        t.run(Mutation::InitRoot {
            now: 1,
            uid: 0,
            gid: 0,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        t
    }

    fn run(&mut self, m: Mutation) -> Result<Outcome, WireError> {
        let mut ctx = Ctx {
            store: &self.store,
            ids: &mut self.ids,
            outcomes: &mut self.outcomes,
            layout: Layout {
                chunk_size_bytes: 4 << 20,
                kept_stats: true,
            },
        };
        let (batch, out) = execute(&mut ctx, m)?;
        self.store.commit(batch).map_err(storage_err)?;
        Ok(out)
    }

    fn create(&mut self, dir: &str, name: &str, data: &[u8]) -> Result<Inode, WireError> {
        match self.run(Mutation::CreateFile {
            dir: dir.into(),
            name: name.into(),
            mode: 0o644,
            uid: 5,
            gid: 6,
            exclusive: true,
            data: data.to_vec(),
            now: 10,
            ino: None,
            then: None,
        })? {
            Outcome::Created(i) | Outcome::Inode(i) => Ok(i),
            o => panic!("unexpected {o:?}"),
        }
    }
}

#[test]
fn create_is_exclusive_and_stores_inline_data() {
    let mut t = T::new();
    let i = t
        .create("/", "a", b"hello")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((i.size, i.uid, i.kind), (5, 5, FileKind::File));
    assert_eq!(
        t.store
            .read_range(i.ino, 0, 100, i.size)
            .unwrap_or_default(),
        b"hello"
    );
    assert_eq!(t.create("/", "a", b""), Err(WireError::AlreadyExists));
    assert_eq!(t.create("/nodir", "a", b""), Err(WireError::NotFound));
}

/// A setattr folded into a create (`tar -x`'s times and mode of a file it just wrote)
/// lands on the new file as that setattr would: its mode and mtime, its ctime the
/// setattr's; the data as written.
#[test]
fn a_setattr_folded_into_a_create_is_applied_to_the_new_file() {
    let mut t = T::new();
    let set = myriad_proto::SetAttr {
        mode: Some(0o600),
        mtime_ns: Some(3),
        atime_ns: Some(4),
        ..myriad_proto::SetAttr::default()
    };
    let out = t.run(Mutation::CreateFile {
        dir: "/".into(),
        name: "f".into(),
        mode: 0o644,
        uid: 5,
        gid: 6,
        exclusive: true,
        data: b"tar".to_vec(),
        now: 10,
        ino: None,
        then: Some((set, 12)),
    });
    let Ok(Outcome::Created(i)) = out else {
        panic!("{out:?}");
    };
    assert_eq!(
        (i.mode, i.mtime_ns, i.atime_ns, i.ctime_ns, i.size),
        (0o600, 3, 4, 12, 3)
    );
    let stored = t.store.entry("/", "f").ok().flatten().and_then(|e| e.inode);
    assert_eq!(stored, Some(i));
}

#[test]
fn ids_are_unique_and_carry_the_node_id() {
    let mut t = T::new();
    let a = t
        .create("/", "a", b"")
        .unwrap_or_else(|e| panic!("{e}"))
        .ino;
    let b = t
        .create("/", "b", b"")
        .unwrap_or_else(|e| panic!("{e}"))
        .ino;
    assert_ne!(a, b);
    assert_eq!(a.0 >> 40, 1);
    // A reload continues after the persisted high-water mark: no reuse.
    let mut ids =
        IdAlloc::load(&t.store, myriad_proto::PartitionId(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut batch = myriad_storage::Batch::new();
    let c = ids.next(&t.store, &mut batch).unwrap_or(0);
    assert!(c > b.0);
}

#[test]
fn mkdir_entry_stays_pending_until_resolved() {
    let mut t = T::new();
    let Ok(Outcome::Begun { txid, inode }) = t.run(mkdir_begin("d")) else {
        panic!("mkdir begin failed")
    };
    assert!(t.store.intent(txid).ok().flatten().is_some());
    assert_eq!(
        t.create("/", "d", b""),
        Err(WireError::Busy),
        "a pending name is taken"
    );
    t.run(Mutation::ResolveEntry {
        dir: "/".into(),
        name: "d".into(),
        txid,
        commit: true,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let rec = t.store.entry("/", "d").ok().flatten();
    assert_eq!(rec.and_then(|r| r.inode).map(|i| i.ino), Some(inode.ino));
    assert!(t.store.intent(txid).ok().flatten().is_none());
}

#[test]
fn aborted_mkdir_leaves_nothing() {
    let mut t = T::new();
    let Ok(Outcome::Begun { txid, .. }) = t.run(mkdir_begin("d")) else {
        panic!("mkdir begin failed")
    };
    t.run(Mutation::ResolveEntry {
        dir: "/".into(),
        name: "d".into(),
        txid,
        commit: false,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(t.store.entry("/", "d").ok().flatten().is_none());
}

#[test]
fn dir_object_remove_refuses_non_empty() {
    let mut t = T::new();
    t.run(dir_object("/d", 77))
        .unwrap_or_else(|e| panic!("{e}"));
    t.create("/d", "f", b"x").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        t.run(Mutation::DirObjectRemove {
            path: "/d".into(),
            ino: InodeId(77)
        })
        .err(),
        Some(WireError::NotEmpty)
    );
    // Idempotent create with the same ino; conflict with another.
    assert!(t.run(dir_object("/d", 77)).is_ok());
    assert_eq!(
        t.run(dir_object("/d", 78)).err(),
        Some(WireError::AlreadyExists)
    );
}

/// With the trash on, the file a rename replaces is kept at the name given, in the
/// rename's batch, its data and inode whole (no orphan, nothing to free); a taken name
/// keeps it beside (`<name>.<inode>`); a target that changed since the caller looked is
/// `Busy`, nothing changed.
#[test]
fn a_rename_keeps_the_file_it_replaces_where_the_trash_says() {
    let mut t = T::new();
    t.run(dir_object("/t", 90))
        .unwrap_or_else(|e| panic!("{e}"));
    t.create("/", "a", b"aaa").unwrap_or_else(|e| panic!("{e}"));
    let b = t
        .create("/", "b", b"bbbb")
        .unwrap_or_else(|e| panic!("{e}"));
    let rename = |from: &str, keep: Option<(&str, InodeId)>| Mutation::RenameLocal {
        from: from.into(),
        to: "/b".into(),
        flags: RenameFlags::default(),
        now: 3,
        keep: keep.map(|(k, i)| (k.to_string(), i)),
    };
    let out = t.run(rename("/a", Some(("/t/b", b.ino))));
    assert!(matches!(out, Ok(Outcome::Renamed(None, None))), "{out:?}");
    let kept = entry(&t, "/t", "b");
    assert_eq!(
        (kept.ino, kept.size, kept.nlink, kept.ctime_ns),
        (b.ino, 4, 1, 3)
    );
    assert_eq!(
        t.store.read_range(b.ino, 0, 4, 10).unwrap_or_default(),
        b"bbbb"
    );
    assert!(
        t.store
            .entry(ORPHAN_DIR, &inode_name(b.ino))
            .ok()
            .flatten()
            .is_none()
    );
    assert_eq!(entry(&t, "/", "b").size, 3);
    // Again under the same kept name: beside it.
    let b2 = entry(&t, "/", "b");
    t.create("/", "c", b"cc").unwrap_or_else(|e| panic!("{e}"));
    t.run(rename("/c", Some(("/t/b", b2.ino))))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entry(&t, "/t", &format!("b.{}", b2.ino.0)).ino, b2.ino);
    // Meant for another file than `/b` holds now: refused, nothing moved.
    t.create("/", "d", b"d").unwrap_or_else(|e| panic!("{e}"));
    let stale = t.run(rename("/d", Some(("/t/x", b.ino))));
    assert_eq!(stale.err(), Some(WireError::Busy));
    assert_eq!(entry(&t, "/", "d").size, 1);
    assert!(t.store.entry("/t", "x").ok().flatten().is_none());
}

/// The destination of a rename between partitions, with the trash on: the prepare stages
/// the new entry and checks the trash's name; the commit moves the file it replaces there
/// (data whole, nothing to free); an abort leaves it where it was; a prepare meant for
/// another file than the name holds now is `Busy`; a commit whose trash directory went
/// since (a day purged) frees the file as before.
#[test]
fn a_rename_from_another_partition_keeps_the_file_it_replaces_once_it_commits() {
    let mut t = T::new();
    t.run(dir_object("/t", 90))
        .unwrap_or_else(|e| panic!("{e}"));
    let old = t
        .create("/", "b", b"bbbb")
        .unwrap_or_else(|e| panic!("{e}"));
    let incoming = |ino: u64| Inode {
        ino: InodeId(ino),
        kind: FileKind::File,
        size: 0,
        ..old.clone()
    };
    let prepare = |txid, ino, keep: Option<(&str, InodeId)>| {
        Mutation::RenamePrepare(RenamePrepare {
            txid,
            coordinator: myriad_proto::PartitionId(2),
            to: "/b".into(),
            inode: incoming(ino),
            flags: RenameFlags::default(),
            blocks: Vec::new(),
            replaces: None,
            keep: keep.map(|(k, i)| (k.to_string(), i)),
        })
    };
    let resolve = |txid, commit| Mutation::RenameTargetResolve {
        txid,
        commit,
        now: 7,
        staged: Some("/".into()),
        kept: Some("/t".into()),
    };
    // Meant for another file: refused, nothing staged.
    let stale = t.run(prepare(30, 700, Some(("/t/b", InodeId(5)))));
    assert_eq!(stale.err(), Some(WireError::Busy));
    // Aborted: the old file stays, nothing kept.
    t.run(prepare(31, 701, Some(("/t/b", old.ino))))
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(resolve(31, false)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entry(&t, "/", "b").ino, old.ino);
    assert!(t.store.entry("/t", "b").ok().flatten().is_none());
    // Committed: the new file at the name, the old one kept whole.
    t.run(prepare(32, 702, Some(("/t/b", old.ino))))
        .unwrap_or_else(|e| panic!("{e}"));
    let out = t.run(resolve(32, true));
    assert!(matches!(out, Ok(Outcome::Renamed(None, None))), "{out:?}");
    assert_eq!(entry(&t, "/", "b").ino, InodeId(702));
    let kept = entry(&t, "/t", "b");
    assert_eq!((kept.ino, kept.size, kept.ctime_ns), (old.ino, 4, 7));
    assert_eq!(
        t.store.read_range(old.ino, 0, 4, 10).unwrap_or_default(),
        b"bbbb"
    );
    // Again under the same kept name: beside it (`<name>.<inode>`).
    t.run(prepare(33, 703, Some(("/t/b", InodeId(702)))))
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(resolve(33, true)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entry(&t, "/", "b").ino, InodeId(703));
    assert_eq!(entry(&t, "/t", "b.702").ino, InodeId(702));
    // The trash's directory gone before the commit (a day purged): freed, as with the
    // trash off; the rename itself still commits.
    t.run(dir_object("/u", 91))
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(prepare(34, 704, Some(("/u/b", InodeId(703)))))
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::DirObjectRemove {
        path: "/u".into(),
        ino: InodeId(91),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let out = t.run(Mutation::RenameTargetResolve {
        txid: 34,
        commit: true,
        now: 8,
        staged: Some("/".into()),
        kept: Some("/u".into()),
    });
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(entry(&t, "/", "b").ino, InodeId(704));
    assert!(t.store.entry("/u", "b").ok().flatten().is_none());
    // A second copy of the last prepare (the network sent it twice; this copy waited on
    // the trash's directories) after its rename committed, asking to keep the file now
    // there: nothing staged (simulation seed 20038: the name stayed pending for good).
    t.run(prepare(34, 704, Some(("/t/b", InodeId(704)))))
        .unwrap_or_else(|e| panic!("{e}"));
    let rec = t.store.entry("/", "b").ok().flatten();
    assert!(rec.as_ref().is_some_and(|r| r.pending.is_none()), "{rec:?}");
    assert_eq!(entry(&t, "/", "b").ino, InodeId(704));
}

#[test]
fn local_rename_replaces_files_but_not_directories() {
    let mut t = T::new();
    t.create("/", "a", b"aaa").unwrap_or_else(|e| panic!("{e}"));
    let b = t
        .create("/", "b", b"bbbb")
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::RenameLocal {
        from: "/a".into(),
        to: "/b".into(),
        flags: RenameFlags::default(),
        now: 3,
        keep: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(t.store.entry("/", "a").ok().flatten().is_none());
    let now_b = t
        .store
        .entry("/", "b")
        .ok()
        .flatten()
        .and_then(|r| r.inode)
        .unwrap_or_else(|| panic!("b missing"));
    assert_eq!(now_b.size, 3);
    // The replaced file waits as an orphan with its data (a client may have it open),
    // until the partition drops it.
    let orphan = t
        .store
        .entry(ORPHAN_DIR, &inode_name(b.ino))
        .ok()
        .flatten()
        .and_then(|r| r.inode)
        .unwrap_or_else(|| panic!("no orphan"));
    assert_eq!((orphan.nlink, orphan.ctime_ns, orphan.size), (0, 3, 4));
    assert_eq!(
        t.store.read_range(b.ino, 0, 4, 10).unwrap_or_default(),
        b"bbbb",
        "an orphan keeps its data"
    );
    t.run(Mutation::DropOrphans { inos: vec![b.ino] })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        t.store
            .read_range(b.ino, 0, 10, 10)
            .unwrap_or_default()
            .iter()
            .all(|&x| x == 0),
        "a dropped orphan's data is gone"
    );
    assert!(
        t.store
            .entry(ORPHAN_DIR, &inode_name(b.ino))
            .ok()
            .flatten()
            .is_none()
    );
    t.create("/", "c", b"").unwrap_or_else(|e| panic!("{e}"));
    let no_replace = RenameFlags {
        no_replace: true,
        ..RenameFlags::default()
    };
    assert_eq!(
        t.run(Mutation::RenameLocal {
            from: "/c".into(),
            to: "/b".into(),
            flags: no_replace,
            now: 3,
            keep: None,
        })
        .err(),
        Some(WireError::AlreadyExists)
    );
}

#[test]
fn an_exchange_swaps_two_names_and_refuses_a_missing_one() {
    let mut t = T::new();
    let a = t.create("/", "a", b"aaa").unwrap_or_else(|e| panic!("{e}"));
    let b = t
        .create("/", "b", b"bbbbb")
        .unwrap_or_else(|e| panic!("{e}"));
    let exchange = RenameFlags {
        exchange: true,
        ..RenameFlags::default()
    };
    let swap = |from: &str, to: &str| Mutation::RenameLocal {
        from: from.into(),
        to: to.into(),
        flags: exchange,
        now: 9,
        keep: None,
    };
    t.run(swap("/a", "/b")).unwrap_or_else(|e| panic!("{e}"));
    let at = |t: &T, name: &str| {
        t.store
            .entry("/", name)
            .ok()
            .flatten()
            .and_then(|r| r.inode)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let (now_a, now_b) = (at(&t, "a"), at(&t, "b"));
    assert_eq!((now_a.ino, now_b.ino), (b.ino, a.ino), "the names swapped");
    assert_eq!(
        (now_a.ctime_ns, now_b.ctime_ns),
        (9, 9),
        "both ctimes changed"
    );
    assert_eq!(
        t.store.read_range(a.ino, 0, 3, 10).unwrap_or_default(),
        b"aaa",
        "the data stays with its inode"
    );
    // Both names must exist.
    assert_eq!(t.run(swap("/a", "/zz")).err(), Some(WireError::NotFound));
}

#[test]
fn writes_extend_size_and_truncate_drops_bytes() {
    let mut t = T::new();
    let i = t.create("/", "f", b"").unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::Write {
        dir: "/".into(),
        name: "f".into(),
        ino: i.ino,
        offset: 100_000,
        data: vec![7; 10],
        now: 2,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let Ok(Outcome::InodeGc(after, gc)) = t.run(Mutation::Truncate {
        dir: "/".into(),
        name: "f".into(),
        ino: i.ino,
        size: 100_005,
        now: 3,
    }) else {
        panic!("truncate failed")
    };
    assert_eq!((after.size, gc), (100_005, None));
    t.run(Mutation::ExtendSize {
        dir: "/".into(),
        name: "f".into(),
        ino: i.ino,
        size: 100_010,
        now: 4,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let data = t
        .store
        .read_range(i.ino, 100_000, 10, 100_010)
        .unwrap_or_default();
    assert_eq!(data, [7, 7, 7, 7, 7, 0, 0, 0, 0, 0]);
    assert_eq!(
        t.run(Mutation::Write {
            dir: "/".into(),
            name: "f".into(),
            ino: InodeId(999),
            offset: 0,
            data: vec![1],
            now: 5
        })
        .err(),
        Some(WireError::Stale)
    );
}

#[test]
fn chunk_operations_on_absurd_chunk_indexes_are_errors() {
    let mut t = T::new();
    let huge = u64::MAX / 2;
    let trim = Mutation::ChunkTrim {
        ino: InodeId(1),
        chunk: huge,
        keep_bytes: u64::MAX,
    };
    assert_eq!(t.run(trim).err(), Some(WireError::TooLarge));
    let write = Mutation::WriteChunk {
        ino: InodeId(1),
        chunk: huge,
        offset: 0,
        data: vec![1],
    };
    assert_eq!(t.run(write).err(), Some(WireError::TooLarge));
}

/// The first step of `mkdir /<name>` (mode 755, by root).
fn mkdir_begin(name: &str) -> Mutation {
    Mutation::MkdirBegin {
        depth: 0,
        dir: "/".into(),
        name: name.into(),
        mode: 0o755,
        uid: 0,
        gid: 0,
        now: 1,
        once: None,
        ino: None,
    }
}

/// The mutation that makes directory object `path` (unsplit) with inode `ino`.
fn dir_object(path: &str, ino: u64) -> Mutation {
    Mutation::DirObjectCreate {
        shards: vec![myriad_proto::Shard::ALL],
        map: None,
        path: path.into(),
        ino: InodeId(ino),
        undecided: false,
    }
}

/// An object made for a mkdir not decided yet takes no name, by any change that adds one,
/// until it is confirmed; so an undone mkdir's removal always finds it empty (simulation
/// seed 186 with `--trash`: a file made in such an object kept the undo from removing it,
/// forever). Repeating its creation does not confirm it; confirming another inode's does not.
#[test]
fn an_undecided_directory_object_takes_no_name_until_confirmed() {
    let mut t = T::new();
    let undecided = |path: &str, ino: u64| Mutation::DirObjectCreate {
        shards: vec![myriad_proto::Shard::ALL],
        map: None,
        path: path.into(),
        ino: InodeId(ino),
        undecided: true,
    };
    t.run(undecided("/d", 77)).unwrap_or_else(|e| panic!("{e}"));
    let met = Some(WireError::DirUndecided {
        dir: "/d".into(),
        ino: InodeId(77),
    });
    assert_eq!(t.create("/d", "f", b"x").err(), met);
    let sub = Mutation::MkdirBegin {
        dir: "/d".into(),
        name: "e".into(),
        mode: 0o755,
        depth: 0,
        uid: 0,
        gid: 0,
        now: 2,
        once: None,
        ino: None,
    };
    assert_eq!(t.run(sub).err(), met);
    let link = Mutation::Symlink {
        dir: "/d".into(),
        name: "l".into(),
        target: "x".into(),
        uid: 0,
        gid: 0,
        now: 1,
    };
    assert_eq!(t.run(link).err(), met);
    t.create("/", "g", b"y").unwrap_or_else(|e| panic!("{e}"));
    let rename_in = || Mutation::RenameLocal {
        from: "/g".into(),
        to: "/d/g".into(),
        flags: myriad_proto::RenameFlags::default(),
        now: 3,
        keep: None,
    };
    assert_eq!(t.run(rename_in()).err(), met);
    // Made again (recovery repeats it): still undecided. Another inode's confirm: too.
    t.run(undecided("/d", 77)).unwrap_or_else(|e| panic!("{e}"));
    let confirm = |ino: u64| Mutation::DirObjectConfirm {
        path: "/d".into(),
        ino: InodeId(ino),
    };
    t.run(confirm(78)).unwrap_or_else(|e| panic!("{e}"));
    assert!(dir_record(&t, "/d").undecided);
    assert_eq!(t.create("/d", "f", b"x").err(), met);
    // Undone while undecided: empty, removed.
    let remove = Mutation::DirObjectRemove {
        path: "/d".into(),
        ino: InodeId(77),
    };
    t.run(remove).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        t.store
            .dir("/d")
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );
    // Made and confirmed: it takes names.
    t.run(undecided("/d", 79)).unwrap_or_else(|e| panic!("{e}"));
    t.run(confirm(79)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!dir_record(&t, "/d").undecided);
    t.create("/d", "f", b"x").unwrap_or_else(|e| panic!("{e}"));
    t.run(rename_in()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entry(&t, "/d", "g").kind, myriad_proto::FileKind::File);
    // A confirm arriving late changes nothing.
    t.run(confirm(79)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!dir_record(&t, "/d").undecided);
}

fn dir_record(t: &T, path: &str) -> DirRecord {
    t.store
        .dir(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no record for {path}"))
}

fn entry(t: &T, dir: &str, name: &str) -> Inode {
    visible(&t.store, dir, name).unwrap_or_else(|e| panic!("{e}"))
}

/// A mkdir's first step of `/name`, made as client change `once` (if any).
fn mkdir_in_root(name: &str, once: Option<Awaited>) -> Mutation {
    mkdir_numbered_in_root(name, once, None)
}

/// `mkdir_in_root` with inode number `ino` reserved by a client (a mkdir answered behind).
fn mkdir_numbered_in_root(
    name: &str,
    once: Option<Awaited>,
    ino: Option<(u64, InodeId)>,
) -> Mutation {
    Mutation::MkdirBegin {
        dir: "/".into(),
        name: name.into(),
        mode: 0o755,
        depth: 0,
        uid: 0,
        gid: 0,
        now: 2,
        once,
        ino,
    }
}

/// The resolution of `/name`'s pending entry left by intent `txid`.
fn resolve_in_root(name: &str, txid: u64, commit: bool) -> Mutation {
    Mutation::ResolveEntry {
        dir: "/".into(),
        name: name.into(),
        txid,
        commit,
    }
}

/// A mkdir or rmdir sent once records its outcome in the batch that resolves its intent,
/// whoever resolves it (recovery too: simulation seed 12, chaos_long), so a retry after a
/// crash answers it; one undone records nothing (its retry runs again).
#[test]
fn an_entry_resolved_for_good_records_the_outcome_of_its_change() {
    use myriad_proto::{OnceId, Response};
    let mut t = T::new();
    let once = |seq| {
        Some(Awaited {
            id: OnceId {
                client: 7,
                seq,
                low: 1,
            },
            at_ns: 5,
        })
    };
    let (mkdir, resolve) = (mkdir_in_root, resolve_in_root);
    let recorded = |t: &T, seq| {
        crate::state::outcomes::recorded(&t.store, 7, seq).unwrap_or_else(|e| panic!("{e}"))
    };
    let Ok(Outcome::Begun { txid: a, inode }) = t.run(mkdir("a", once(1))) else {
        panic!("mkdir a")
    };
    assert_eq!(recorded(&t, 1), None, "not before it resolves");
    t.run(resolve("a", a, true))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        recorded(&t, 1),
        Some(Response::Changed {
            inode: Some(inode),
            parent: None
        })
    );
    assert_eq!(t.store.awaited_outcome(a).ok().flatten(), None, "forgotten");

    let Ok(Outcome::Begun { txid: b, .. }) = t.run(mkdir("b", once(2))) else {
        panic!("mkdir b")
    };
    t.run(resolve("b", b, false))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(recorded(&t, 2), None, "undone: nothing recorded");
    assert_eq!(t.store.awaited_outcome(b).ok().flatten(), None);

    let Ok(Outcome::Begun { txid: r, .. }) = t.run(Mutation::RmdirBegin {
        dir: "/".into(),
        name: "a".into(),
        once: once(3),
    }) else {
        panic!("rmdir a")
    };
    t.run(resolve("a", r, true))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        recorded(&t, 3),
        Some(Response::Changed {
            inode: None,
            parent: None
        })
    );
}

#[test]
fn subdirectory_counts_follow_mkdir_rmdir_and_touches_set_times_and_links() {
    let mut t = T::new();
    let begin = |name: &str| mkdir_in_root(name, None);
    let resolve = resolve_in_root;
    let Ok(Outcome::Begun { txid: a, .. }) = t.run(begin("a")) else {
        panic!("mkdir a")
    };
    assert_eq!(
        dir_record(&t, "/").subdirs,
        0,
        "a pending mkdir is not counted"
    );
    t.run(resolve("a", a, true))
        .unwrap_or_else(|e| panic!("{e}"));
    let Ok(Outcome::Begun { txid: b, .. }) = t.run(begin("b")) else {
        panic!("mkdir b")
    };
    t.run(resolve("b", b, false))
        .unwrap_or_else(|e| panic!("{e}"));
    t.create("/", "f", b"").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        dir_record(&t, "/").subdirs,
        1,
        "a committed, b undone, f no dir"
    );
    let Ok(Outcome::Begun { txid: r, .. }) = t.run(Mutation::RmdirBegin {
        dir: "/".into(),
        name: "a".into(),
        once: None,
    }) else {
        panic!("rmdir a")
    };
    assert_eq!(dir_record(&t, "/").subdirs, 1, "still there while pending");
    t.run(resolve("a", r, true))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dir_record(&t, "/").subdirs, 0);

    // A touch of the root's attributes, and of a directory entry.
    let Ok(Outcome::Begun { txid: c, inode }) = t.run(begin("c")) else {
        panic!("mkdir c")
    };
    t.run(resolve("c", c, true))
        .unwrap_or_else(|e| panic!("{e}"));
    let touch = |dir: &str, name: &str, ino| Mutation::DirTouch {
        dir: dir.into(),
        name: name.into(),
        ino,
        now: 50,
        nlink: Some(7),
    };
    t.run(touch("/", "", ROOT_INO))
        .unwrap_or_else(|e| panic!("{e}"));
    let root = dir_record(&t, "/")
        .root_attrs
        .unwrap_or_else(|| panic!("root attrs"));
    assert_eq!((root.mtime_ns, root.ctime_ns, root.nlink), (50, 50, 7));
    t.run(touch("/", "c", inode.ino))
        .unwrap_or_else(|e| panic!("{e}"));
    let c_now = entry(&t, "/", "c");
    assert_eq!((c_now.mtime_ns, c_now.nlink), (50, 7));
    t.run(touch("/", "c", InodeId(inode.ino.0 + 1)))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        entry(&t, "/", "c"),
        c_now,
        "another inode's touch changes nothing"
    );
}

#[test]
fn touches_in_one_batch_are_each_applied_as_alone_and_the_last_of_a_directory_wins() {
    let mut t = T::new();
    let mut dirs = Vec::new();
    for name in ["p", "q"] {
        let Ok(Outcome::Begun { txid, inode }) = t.run(mkdir_begin(name)) else {
            panic!("mkdir {name}")
        };
        t.run(Mutation::ResolveEntry {
            dir: "/".into(),
            name: name.into(),
            txid,
            commit: true,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        dirs.push(inode);
    }
    let one = |name: &str, ino, now, nlink| crate::state::mutation::DirTouchOne {
        dir: "/".into(),
        name: name.into(),
        ino,
        now,
        nlink: Some(nlink),
    };
    let (p, q) = (dirs[0].ino, dirs[1].ino);
    let Ok(Outcome::Touched(out)) = t.run(Mutation::DirTouches(vec![
        one("p", p, 60, 3),
        one("q", InodeId(q.0 + 1), 61, 9),
        one("q", q, 62, 4),
        one("p", p, 63, 5),
        one("absent", p, 64, 6),
    ])) else {
        panic!("touches")
    };
    let got: Vec<Option<(i64, u32)>> = out
        .iter()
        .map(|i| i.as_ref().map(|i| (i.mtime_ns, i.nlink)))
        .collect();
    assert_eq!(
        got,
        vec![Some((60, 3)), None, Some((62, 4)), Some((63, 5)), None],
        "each touch answers as if alone; another inode or no entry changes nothing"
    );
    let (p_now, q_now) = (entry(&t, "/", "p"), entry(&t, "/", "q"));
    assert_eq!((p_now.mtime_ns, p_now.ctime_ns, p_now.nlink), (63, 63, 5));
    assert_eq!((q_now.mtime_ns, q_now.nlink), (62, 4));
}

#[test]
fn devices_keep_their_number_and_symlinks_can_get_a_second_name() {
    let mut t = T::new();
    let Ok(Outcome::Inode(dev)) = t.run(Mutation::Mknod {
        dir: "/".into(),
        name: "null".into(),
        kind: FileKind::CharDevice,
        mode: 0o666,
        rdev: 0x103,
        uid: 0,
        gid: 0,
        now: 2,
    }) else {
        panic!("mknod")
    };
    assert_eq!((dev.kind, dev.rdev), (FileKind::CharDevice, 0x103));
    t.run(Mutation::Symlink {
        dir: "/".into(),
        name: "s".into(),
        target: "null".into(),
        uid: 0,
        gid: 0,
        now: 3,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let Ok(Outcome::Inode(linked)) = t.run(Mutation::LinkSource {
        dir: "/".into(),
        name: "s".into(),
        me: myriad_proto::PartitionId(1),
        now: 4,
        anchored: true,
    }) else {
        panic!("link source")
    };
    assert_eq!((linked.kind, linked.nlink), (FileKind::Symlink, 2));
    assert_eq!(entry(&t, "/", "s").kind, FileKind::HardLink);
}

#[test]
fn trimming_from_an_offset_drops_only_chunks_past_the_first() {
    let mut t = T::new();
    let cs = 4u64 << 20;
    for chunk in [1u64, 5, 1_000_000] {
        t.run(Mutation::WriteChunk {
            ino: InodeId(9),
            chunk,
            offset: 0,
            data: vec![1; 10],
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    t.store
        .write_range(&mut Batch::new(), InodeId(9), 0, &[1; 10])
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::ChunkTrimFrom {
        ino: InodeId(9),
        from_bytes: 5 * cs + 5,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let read = |t: &T, at: u64| {
        t.store
            .read_range(InodeId(9), at, 10, at + 10)
            .unwrap_or_default()
    };
    assert_eq!(read(&t, cs), vec![1; 10], "chunk 1 is before the cut");
    assert_eq!(read(&t, 5 * cs), [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]);
    assert_eq!(read(&t, 1_000_000 * cs), vec![0; 10], "far chunk gone");
    assert_eq!(
        t.run(Mutation::Truncate {
            dir: "/".into(),
            name: "x".into(),
            ino: InodeId(1),
            size: u64::MAX,
            now: 1,
        })
        .err(),
        Some(WireError::TooLarge)
    );
}

/// Found by the simulation (seed 1016): recovery undid a split whose owner was still
/// waiting for its first step to be durable; the owner's commit then did nothing and it
/// went on to reveal the child, which overlapped the shard restored here. A split that was
/// undone must refuse to commit.
#[test]
fn a_split_undone_by_recovery_cannot_commit() {
    let mut t = T::new();
    let shard = dir_record(&t, "/").shards[0].shard;
    let Ok(Outcome::SplitBegun { txid, .. }) = t.run(Mutation::Shard(ShardMutation::SplitBegin {
        dir: "/".into(),
        shard,
    })) else {
        panic!("split begin failed")
    };
    t.run(Mutation::Shard(ShardMutation::SplitAbort { txid }))
        .unwrap_or_else(|e| panic!("{e}"));
    let commit = t.run(Mutation::Shard(ShardMutation::SplitCommit { txid }));
    assert!(commit.is_err(), "an undone split committed: {commit:?}");
    let rec = dir_record(&t, "/");
    assert_eq!(rec.shards.len(), 1);
    assert_eq!(rec.shards[0].shard, shard, "the shard stays whole");
    assert!(rec.shards[0].splitting.is_none(), "and takes writes again");
    // Once the undone split's intent is gone: a decided split commits once, and repeating
    // the step changes nothing.
    t.run(Mutation::DeleteIntent { txid })
        .unwrap_or_else(|e| panic!("{e}"));
    let Ok(Outcome::SplitBegun { txid, .. }) = t.run(Mutation::Shard(ShardMutation::SplitBegin {
        dir: "/".into(),
        shard,
    })) else {
        panic!("split begin failed")
    };
    t.run(Mutation::Shard(ShardMutation::SplitCommit { txid }))
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::Shard(ShardMutation::SplitCommit { txid }))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dir_record(&t, "/").shards[0].shard, shard.halves().0);
}

/// Found by the simulation (seed 1031): a split undone by recovery is cleaned up in steps
/// (the home's map, the child's copy) that name the shard, not the split; a second split
/// of the same shard begun in between had its map entry undone by the first one's cleanup.
/// No split of a shard begins while an earlier one's intent is still here.
#[test]
fn a_shard_does_not_split_again_while_an_earlier_split_is_being_undone() {
    let mut t = T::new();
    let shard = dir_record(&t, "/").shards[0].shard;
    let begin = || {
        Mutation::Shard(ShardMutation::SplitBegin {
            dir: "/".into(),
            shard,
        })
    };
    let Ok(Outcome::SplitBegun { txid, .. }) = t.run(begin()) else {
        panic!("split begin failed")
    };
    t.run(Mutation::Shard(ShardMutation::SplitAbort { txid }))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(t.run(begin()), Err(WireError::Busy)));
    // Nor its lower half.
    let lower = Mutation::Shard(ShardMutation::SplitBegin {
        dir: "/".into(),
        shard: shard.halves().0,
    });
    assert!(t.run(lower).is_err());
    t.run(Mutation::DeleteIntent { txid })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(t.run(begin()), Ok(Outcome::SplitBegun { .. })));
}

/// Found by the simulation (seed 3001): a name held by a mkdir not yet decided is `Busy`
/// for a new mkdir, create or symlink, not `AlreadyExists` (that mkdir may be undone and
/// leave the name free); once it is decided, the answer is the name's.
#[test]
fn a_name_held_by_an_undecided_mkdir_is_busy_not_taken() {
    let mut t = T::new();
    let mkdir = || mkdir_begin("d");
    let Ok(Outcome::Begun { txid, .. }) = t.run(mkdir()) else {
        panic!("mkdir begin failed")
    };
    assert!(matches!(t.run(mkdir()), Err(WireError::Busy)));
    let symlink = Mutation::Symlink {
        dir: "/".into(),
        name: "d".into(),
        target: "x".into(),
        uid: 0,
        gid: 0,
        now: 1,
    };
    assert!(matches!(t.run(symlink), Err(WireError::Busy)));
    t.run(Mutation::ResolveEntry {
        dir: "/".into(),
        name: "d".into(),
        txid,
        commit: false,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(t.run(mkdir()), Ok(Outcome::Begun { .. })));
}

/// Simulation seed 80090: a rename's prepare that reaches its destination after the rename
/// was aborted there (resent by a deposed coordinator's task) must not stage an entry that
/// nobody will ever resolve: the abort leaves a tombstone that refuses it.
#[test]
fn a_prepare_arriving_after_its_abort_is_refused() {
    let mut t = T::new();
    let inode = Inode {
        ino: InodeId(77),
        kind: FileKind::File,
        ..t.create("/", "src", b"x").unwrap_or_else(|e| panic!("{e}"))
    };
    let prepare = |txid| {
        Mutation::RenamePrepare(RenamePrepare {
            txid,
            coordinator: myriad_proto::PartitionId(2),
            to: "/dst".into(),
            inode: inode.clone(),
            flags: RenameFlags::default(),
            blocks: Vec::new(),
            replaces: None,
            keep: None,
        })
    };
    // The abort arrives first (the prepare never came, or was lost): a tombstone.
    t.run(Mutation::RenameTargetResolve {
        txid: 9,
        commit: false,
        now: 5,
        staged: None,
        kept: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(t.run(prepare(9)), Err(WireError::Stale)));
    assert!(t.store.entry("/", "dst").ok().flatten().is_none());
    // Prepared, then aborted: the same.
    t.run(prepare(10)).unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::RenameTargetResolve {
        txid: 10,
        commit: false,
        now: 6,
        staged: Some("/".into()),
        kept: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(t.store.entry("/", "dst").ok().flatten().is_none());
    assert!(matches!(t.run(prepare(10)), Err(WireError::Stale)));
    assert!(t.store.entry("/", "dst").ok().flatten().is_none());
    // A committed rename leaves none: the name is the renamed file's now.
    t.run(prepare(11)).unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::RenameTargetResolve {
        txid: 11,
        commit: true,
        now: 7,
        staged: Some("/".into()),
        kept: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entry(&t, "/", "dst").ino, InodeId(77));
    assert!(t.store.intent(prepare_key(11)).ok().flatten().is_none());
}

impl T {
    fn reserve(&mut self, client: u64, count: u32) -> u64 {
        match self.run(Mutation::ReserveIds { client, count }) {
            Ok(Outcome::Ids(first, n)) if n == count => first,
            o => panic!("unexpected {o:?}"),
        }
    }

    fn create_as(&mut self, client: u64, name: &str, ino: u64) -> Result<Inode, WireError> {
        match self.run(Mutation::CreateFile {
            dir: "/".into(),
            name: name.into(),
            mode: 0o644,
            uid: 5,
            gid: 6,
            exclusive: true,
            data: Vec::new(),
            now: 10,
            ino: Some((client, InodeId(ino))),
            then: None,
        })? {
            Outcome::Created(i) => Ok(i),
            o => panic!("unexpected {o:?}"),
        }
    }
}

/// A file `/a` made here, then an exchange's prepare (txid 20, unresolved) staging `/a`
/// to become another file (77): the file made, which the exchange takes away from here.
fn exchange_taking_away(t: &mut T) -> Inode {
    let leaving = t
        .create("/", "a", b"mine")
        .unwrap_or_else(|e| panic!("{e}"));
    let exchange = RenameFlags {
        exchange: true,
        ..RenameFlags::default()
    };
    t.run(Mutation::RenamePrepare(RenamePrepare {
        txid: 20,
        coordinator: myriad_proto::PartitionId(2),
        to: "/a".into(),
        inode: Inode {
            ino: InodeId(77),
            kind: FileKind::File,
            ..leaving.clone()
        },
        flags: exchange,
        blocks: Vec::new(),
        replaces: None,
        keep: None,
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    leaving
}

/// Simulation seed 5211: an exchange into this partition whose commit is not resolved yet
/// will drop the chunk-0 blocks of the file it takes away from here; that file may not
/// come back here (with its blocks) before, or its commit drops them.
#[test]
fn a_file_an_unresolved_exchange_takes_away_does_not_come_back_before_it_resolves() {
    let mut t = T::new();
    let leaving = exchange_taking_away(&mut t);
    // Unresolved: `leaving` coming back (to another name) is refused, for now.
    let back = |txid| {
        Mutation::RenamePrepare(RenamePrepare {
            txid,
            coordinator: myriad_proto::PartitionId(2),
            to: "/b".into(),
            inode: leaving.clone(),
            flags: RenameFlags::default(),
            blocks: vec![(0, b"again".to_vec())],
            replaces: None,
            keep: None,
        })
    };
    assert!(matches!(t.run(back(21)), Err(WireError::Busy)));
    // Resolved: it comes back, and keeps the blocks it came with.
    t.run(Mutation::RenameTargetResolve {
        txid: 20,
        commit: true,
        now: 5,
        staged: Some("/".into()),
        kept: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    t.run(back(22)).unwrap_or_else(|e| panic!("{e}"));
    let blocks = t
        .store
        .blocks(leaving.ino, 0, 1)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(blocks, vec![(0, b"again".to_vec())]);
}

/// Simulation seed 3095: the same file coming back by a split of its new directory's
/// shard (or by a directory's rename) is refused as well until the exchange taking it
/// away resolves; before, the split staged it here with its blocks and the exchange's
/// commit dropped them (a read of the file got an empty first chunk).
#[test]
fn a_file_an_unresolved_exchange_takes_away_does_not_come_back_by_a_split_or_a_move() {
    let mut t = T::new();
    let leaving = exchange_taking_away(&mut t);
    let child = myriad_proto::Shard::ALL.halves().1;
    let name = (0..)
        .map(|i| format!("f{i}"))
        .find(|n| child.contains(myriad_proto::name_hash(n)))
        .unwrap_or_default();
    let moved = || {
        vec![myriad_proto::ExportedEntry {
            name: name.clone(),
            inode: leaving.clone(),
            blocks: vec![(0, serde_bytes::ByteBuf::from(b"again".to_vec()))],
        }]
    };
    let split = |txid| {
        Mutation::Shard(ShardMutation::Import {
            dir: "/big".into(),
            ino: InodeId(500),
            txid,
            child,
            entries: moved(),
        })
    };
    let rename = |txid| {
        Mutation::DirImport(DirImport {
            path: "/moved".into(),
            txid,
            ino: InodeId(600),
            shards: vec![myriad_proto::Shard::ALL],
            map: None,
            entries: moved(),
            replaces: None,
        })
    };
    assert!(matches!(t.run(split(30)), Err(WireError::Busy)));
    assert!(matches!(t.run(rename(31)), Err(WireError::Busy)));
    assert!(
        t.store.dir("/big").ok().flatten().is_none(),
        "nothing staged"
    );
    t.run(Mutation::RenameTargetResolve {
        txid: 20,
        commit: true,
        now: 5,
        staged: Some("/".into()),
        kept: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    t.run(split(32)).unwrap_or_else(|e| panic!("{e}"));
    t.run(rename(33)).unwrap_or_else(|e| panic!("{e}"));
    let blocks = t
        .store
        .blocks(leaving.ino, 0, 1)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        blocks,
        vec![(0, b"again".to_vec())],
        "the blocks it came with"
    );
}

#[test]
fn reserved_inode_numbers_are_used_once_by_their_client_only() {
    let mut t = T::new();
    let a = t.reserve(1, 4);
    assert_eq!(a >> 40, 1, "numbers of this partition");
    // Never handed out otherwise.
    let other = t
        .create("/", "plain", b"")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!(a..a + 4).contains(&other.ino.0));
    // Used in any order, each once; another client's, a used or an unreserved one refused.
    let i = t
        .create_as(1, "f1", a + 1)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(i.ino, InodeId(a + 1));
    assert!(matches!(
        t.create_as(2, "f2", a + 2),
        Err(WireError::InvalidArgument(_))
    ));
    assert!(matches!(
        t.create_as(1, "f2", a + 1),
        Err(WireError::InvalidArgument(_))
    ));
    assert!(matches!(
        t.create_as(1, "f2", a + 4),
        Err(WireError::InvalidArgument(_))
    ));
    t.create_as(1, "f0", a).unwrap_or_else(|e| panic!("{e}"));
    // A name taken uses no number.
    assert!(matches!(
        t.create_as(1, "f1", a + 2),
        Err(WireError::AlreadyExists)
    ));
    t.create_as(1, "f2", a + 2)
        .unwrap_or_else(|e| panic!("{e}"));
    // Two ranges at once; a third replaces the older.
    let b = t.reserve(1, 2);
    t.create_as(1, "g1", b).unwrap_or_else(|e| panic!("{e}"));
    let c = t.reserve(1, 2);
    t.create_as(1, "g2", b + 1)
        .unwrap_or_else(|e| panic!("{e}"));
    // The reservations are in the store: a new primary loading it agrees.
    t.ids = IdAlloc::load(&t.store, myriad_proto::PartitionId(1)).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        t.create_as(1, "g3", b + 1),
        Err(WireError::InvalidArgument(_))
    ));
    assert!(
        matches!(
            t.create_as(1, "g3", a + 3),
            Err(WireError::InvalidArgument(_))
        ),
        "the older range was replaced, its unused numbers with it"
    );
    t.create_as(1, "h1", c + 1)
        .unwrap_or_else(|e| panic!("{e}"));
    let fresh = t
        .create("/", "plain2", b"")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        fresh.ino.0 >= c + 2,
        "nothing reserved is handed out after a reload"
    );
}

/// A directory rename's copy takes over an empty directory's object only if it is still
/// the one its coordinator found, whole and empty; dropping the copy gives the place back,
/// revealing it forgets what it replaced.
#[test]
fn a_moved_directory_takes_over_only_the_empty_directory_it_was_sent_for() {
    let mut t = T::new();
    for (path, ino) in [("/d", 77), ("/full", 78)] {
        t.run(dir_object(path, ino))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    t.create("/full", "f", b"x")
        .unwrap_or_else(|e| panic!("{e}"));
    let moved = t
        .create("/", "src-file", b"moved")
        .unwrap_or_else(|e| panic!("{e}"));
    let import = |path: &str, txid: u64, replaces: Option<u64>| {
        Mutation::DirImport(DirImport {
            path: path.into(),
            txid,
            ino: InodeId(88),
            shards: Vec::new(),
            map: None,
            entries: vec![myriad_proto::ExportedEntry {
                name: "g".into(),
                inode: moved.clone(),
                blocks: Vec::new(),
            }],
            replaces: replaces.map(InodeId),
        })
    };
    let finish = |txid: u64, action: myriad_proto::DirAction| Mutation::DirFinish {
        path: "/d".into(),
        txid,
        action,
    };
    let drop = || myriad_proto::DirAction::Drop {
        keep_blocks_of: None,
    };
    assert_eq!(
        t.run(import("/d", 9, None)).err(),
        Some(WireError::AlreadyExists),
        "an existing directory is never taken unasked"
    );
    assert_eq!(
        t.run(import("/d", 9, Some(76))).err(),
        Some(WireError::Busy),
        "another directory than the coordinator found"
    );
    assert_eq!(
        t.run(import("/full", 9, Some(78))).err(),
        Some(WireError::NotEmpty)
    );
    assert_eq!(
        dir_record(&t, "/full").hidden,
        None,
        "a refusal changes nothing"
    );

    t.run(import("/d", 9, Some(77)))
        .unwrap_or_else(|e| panic!("{e}"));
    let rec = dir_record(&t, "/d");
    assert_eq!((rec.ino, rec.hidden), (InodeId(88), Some(9)));
    assert_eq!(
        t.run(import("/d", 10, Some(77))).err(),
        Some(WireError::Busy),
        "one rename at a time takes a place"
    );
    assert_eq!(
        t.run(Mutation::DirObjectRemove {
            path: "/d".into(),
            ino: InodeId(77)
        })
        .err(),
        Some(WireError::Busy),
        "an rmdir of the replaced directory waits for the rename"
    );
    // Aborted: the empty directory is back, the copy's entries are gone.
    t.run(finish(9, drop())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dir_record(&t, "/d"), DirRecord::new(InodeId(77)));
    assert!(!t.store.has_entries("/d").unwrap_or(true));
    assert_eq!(t.store.intent(replace_key(9)).ok().flatten(), None);
    // A dropped place is not restored twice (a retried drop is idempotent).
    t.run(finish(9, drop())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dir_record(&t, "/d"), DirRecord::new(InodeId(77)));

    // Committed: the copy stays, revealed, and nothing remembers the old one.
    t.run(import("/d", 11, Some(77)))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(t.store.intent(replace_key(11)).ok().flatten().is_some());
    t.run(finish(11, myriad_proto::DirAction::Reveal))
        .unwrap_or_else(|e| panic!("{e}"));
    let rec = dir_record(&t, "/d");
    assert_eq!((rec.ino, rec.hidden), (InodeId(88), None));
    assert_eq!(entry(&t, "/d", "g").ino, moved.ino);
    assert_eq!(t.store.intent(replace_key(11)).ok().flatten(), None);
    t.run(finish(11, drop())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        dir_record(&t, "/d").ino,
        InodeId(88),
        "a late drop finds no copy"
    );
}

/// The object of a directory renamed away lingers, frozen, until its rename finishes: a
/// mkdir of the old name meanwhile is told to try again, not that the name is taken
/// (simulation seeds 116 with --behind and 5007, --dir-moves).
#[test]
fn a_mkdir_over_a_moved_directory_s_lingering_object_is_busy_not_taken() {
    let mut t = T::new();
    t.run(dir_object("/d", 77))
        .unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::DirFreeze {
        path: "/d".into(),
        txid: 9,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let create = |ino| dir_object("/d", ino);
    assert_eq!(t.run(create(88)).err(), Some(WireError::Busy));
    t.run(Mutation::DirFinish {
        path: "/d".into(),
        txid: 9,
        action: myriad_proto::DirAction::Drop {
            keep_blocks_of: None,
        },
    })
    .unwrap_or_else(|e| panic!("{e}"));
    t.run(create(88)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dir_record(&t, "/d").ino, InodeId(88));
    assert_eq!(
        t.run(create(99)).err(),
        Some(WireError::AlreadyExists),
        "a live directory's object is taken"
    );
}

#[test]
fn a_read_only_directory_refuses_changes_moves_and_removal_before_anything_else() {
    let mut t = T::new();
    t.run(dir_object("/t", 70))
        .unwrap_or_else(|e| panic!("{e}"));
    t.create("/t", "f", b"kept")
        .unwrap_or_else(|e| panic!("{e}"));
    let mark = |t: &T, frozen: Option<u64>| {
        let rec = DirRecord {
            read_only: Some(myriad_proto::ReadOnlyMark {
                root: InodeId(70),
                version: 1,
            }),
            frozen,
            ..dir_record(t, "/t")
        };
        let mut b = myriad_storage::Batch::new();
        t.store.put_dir(&mut b, "/t", &rec);
        t.store.commit(b).unwrap_or_else(|e| panic!("{e}"));
    };
    mark(&t, None);
    assert_eq!(t.create("/t", "g", b"").err(), Some(WireError::ReadOnly));
    assert_eq!(
        t.run(Mutation::Unlink {
            dir: "/t".into(),
            name: "f".into(),
            now: 20,
        })
        .err(),
        Some(WireError::ReadOnly)
    );
    let mkdir = Mutation::MkdirBegin {
        depth: 1,
        dir: "/t".into(),
        name: "sub".into(),
        mode: 0o755,
        uid: 0,
        gid: 0,
        now: 1,
        once: None,
        ino: None,
    };
    assert_eq!(t.run(mkdir).err(), Some(WireError::ReadOnly));
    // Nor does it move (a rename of it or above it), get removed, or get taken over by a
    // moved directory (were it empty).
    assert_eq!(
        t.run(Mutation::DirFreeze {
            path: "/t".into(),
            txid: 5,
        })
        .err(),
        Some(WireError::ReadOnly)
    );
    t.run(dir_object("/e", 71))
        .unwrap_or_else(|e| panic!("{e}"));
    let mark_e = DirRecord {
        read_only: Some(myriad_proto::ReadOnlyMark {
            root: InodeId(71),
            version: 1,
        }),
        ..dir_record(&t, "/e")
    };
    let mut b = myriad_storage::Batch::new();
    t.store.put_dir(&mut b, "/e", &mark_e);
    t.store.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        t.run(Mutation::DirObjectRemove {
            path: "/e".into(),
            ino: InodeId(71),
        })
        .err(),
        Some(WireError::ReadOnly)
    );
    let take_over = Mutation::DirImport(DirImport {
        path: "/e".into(),
        txid: 9,
        ino: InodeId(88),
        shards: Vec::new(),
        map: None,
        entries: Vec::new(),
        replaces: Some(InodeId(71)),
    });
    assert_eq!(t.run(take_over).err(), Some(WireError::ReadOnly));
    assert_eq!(dir_record(&t, "/e"), mark_e, "refusals change nothing");
    // A rename's freeze on top (a client would retry `Busy`): still read-only.
    mark(&t, Some(5));
    assert_eq!(t.create("/t", "g", b"").err(), Some(WireError::ReadOnly));
    assert_eq!(
        myriad_proto::FsError::from(WireError::ReadOnly).errno(),
        libc::EROFS
    );
    // Unmarked, the directory takes changes again, and nothing was lost meanwhile.
    let mut b = myriad_storage::Batch::new();
    let rec = DirRecord {
        read_only: None,
        frozen: None,
        ..dir_record(&t, "/t")
    };
    t.store.put_dir(&mut b, "/t", &rec);
    t.store.commit(b).unwrap_or_else(|e| panic!("{e}"));
    t.create("/t", "g", b"").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(entry(&t, "/t", "f").size, 4);
}

/// A part is marked and unmarked in place, but not while a rename or split moves it (it
/// would carry the mark away or miss it): the home marks it again once it has settled.
#[test]
fn a_mark_is_set_and_taken_only_on_a_settled_part() {
    let mut t = T::new();
    t.run(dir_object("/m", 60))
        .unwrap_or_else(|e| panic!("{e}"));
    let mark = |m: Option<u64>| Mutation::MarkReadOnly {
        path: "/m".into(),
        mark: m.map(|version| myriad_proto::ReadOnlyMark {
            root: InodeId(60),
            version,
        }),
        auto: false,
    };
    t.run(mark(Some(3))).unwrap_or_else(|e| panic!("{e}"));
    t.run(mark(Some(3)))
        .unwrap_or_else(|e| panic!("again: {e}"));
    assert_eq!(dir_record(&t, "/m").read_only.map(|m| m.version), Some(3));
    assert_eq!(t.create("/m", "f", b"").err(), Some(WireError::ReadOnly));
    t.run(mark(None)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dir_record(&t, "/m").read_only, None);
    t.create("/m", "f", b"").unwrap_or_else(|e| panic!("{e}"));
    t.run(Mutation::DirFreeze {
        path: "/m".into(),
        txid: 4,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.run(mark(Some(3))).err(), Some(WireError::Busy));
    assert_eq!(dir_record(&t, "/m").read_only, None);
    assert_eq!(
        t.run(Mutation::MarkReadOnly {
            path: "/nowhere".into(),
            mark: None,
            auto: false,
        })
        .err(),
        Some(WireError::NotFound)
    );
}

/// A directory in an automatic index's tree is not frozen: every change of it (entries,
/// a move, its removal) answers `AutoIndexed` (the applier unregisters the index, clears
/// the mark, and the change is sent again), and the mark is cleared only for its own
/// index (a newer build's mark stays).
#[test]
fn an_automatic_index_mark_stops_each_change_until_cleared() {
    let mut t = T::new();
    t.run(dir_object("/a", 80))
        .unwrap_or_else(|e| panic!("{e}"));
    t.create("/a", "f", b"x").unwrap_or_else(|e| panic!("{e}"));
    let v = |version| myriad_proto::ReadOnlyMark {
        root: InodeId(80),
        version,
    };
    t.run(Mutation::MarkReadOnly {
        path: "/a".into(),
        mark: Some(v(1)),
        auto: true,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let met = Some(WireError::AutoIndexed {
        dir: "/a".into(),
        mark: v(1),
    });
    assert_eq!(dir_record(&t, "/a").read_only, None, "not frozen");
    assert_eq!(t.create("/a", "g", b"").err(), met);
    let unlink = || Mutation::Unlink {
        dir: "/a".into(),
        name: "f".into(),
        now: 20,
    };
    assert_eq!(t.run(unlink()).err(), met);
    let freeze = || Mutation::DirFreeze {
        path: "/a".into(),
        txid: 5,
    };
    assert_eq!(t.run(freeze()).err(), met);
    assert_eq!(
        t.run(Mutation::DirObjectRemove {
            path: "/a".into(),
            ino: InodeId(80),
        })
        .err(),
        met
    );
    // Another build's mark is not cleared by this one's clearing.
    t.run(Mutation::ClearAutoIndex {
        path: "/a".into(),
        mark: v(2),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.create("/a", "g", b"").err(), met);
    t.run(Mutation::ClearAutoIndex {
        path: "/a".into(),
        mark: v(1),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dir_record(&t, "/a").auto_index, None);
    t.create("/a", "g", b"").unwrap_or_else(|e| panic!("{e}"));
    t.run(unlink()).unwrap_or_else(|e| panic!("{e}"));
    t.run(freeze()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        crate::state::changed_dirs::changed_dirs(&Mutation::ClearAutoIndex {
            path: "/a".into(),
            mark: v(1),
        }),
        crate::state::changed_dirs::ChangedDirs::None
    );
}

/// A change of attributes meant for one inode is refused, and nothing changed, when the
/// name holds another (`SetAttr::of`: a descriptor's file replaced at its name).
#[test]
fn a_setattr_meant_for_another_inode_is_refused_and_changes_nothing() {
    let mut t = T::new();
    let i = t.create("/", "a", b"x").unwrap_or_else(|e| panic!("{e}"));
    let set = |of: u64| Mutation::SetAttr {
        dir: "/".into(),
        name: "a".into(),
        change: InodeChange::Attr(myriad_proto::SetAttr {
            mode: Some(0o600),
            of: Some(InodeId(of)),
            ..myriad_proto::SetAttr::default()
        }),
        now: 20,
    };
    assert_eq!(t.run(set(i.ino.0 + 1)).err(), Some(WireError::Stale));
    assert_eq!(entry(&t, "/", "a"), i, "untouched");
    assert!(t.run(set(i.ino.0)).is_ok());
    assert_eq!(entry(&t, "/", "a").mode & 0o777, 0o600);
}

/// A mkdir answered behind takes its client's reserved number; undone (its entry resolved
/// aborted), the number is given back in the same batch, so the mkdir sent again takes it
/// once more; committed, it stays used.
#[test]
fn an_undone_mkdir_behind_gives_its_number_back() {
    let mut t = T::new();
    let first = t.reserve(7, 4);
    let once = |seq| {
        Some(Awaited {
            id: myriad_proto::OnceId {
                client: 7,
                seq,
                low: 1,
            },
            at_ns: 5,
        })
    };
    let begin =
        |seq, name: &str| mkdir_numbered_in_root(name, once(seq), Some((7, InodeId(first))));
    let Ok(Outcome::Begun { txid, inode }) = t.run(begin(1, "d")) else {
        panic!("mkdir d")
    };
    assert_eq!(inode.ino, InodeId(first), "the reserved number");
    t.run(Mutation::ResolveEntry {
        dir: "/".into(),
        name: "d".into(),
        txid,
        commit: false,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let Ok(Outcome::Begun { txid, .. }) = t.run(begin(2, "d")) else {
        panic!("the mkdir sent again takes the number again")
    };
    t.run(Mutation::ResolveEntry {
        dir: "/".into(),
        name: "d".into(),
        txid,
        commit: true,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        t.create_as(7, "f", first).is_err(),
        "committed: the number stays used"
    );
}
