use std::sync::Arc;

use myriad_proto::{FileKind, Inode};

use crate::{BLOCK_BYTES, Batch, EntryRecord, FjallKv, Kv, MemKv, Store};
use myriad_proto::InodeId;

fn inode(ino: u64) -> Inode {
    Inode {
        ino: InodeId(ino),
        kind: FileKind::File,
        mode: 0o644,
        uid: 1,
        gid: 1,
        size: 0,
        nlink: 1,
        atime_ns: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        symlink_target: None,
        xattrs: Vec::new(),
        link_home: None,
        rdev: 0,
    }
}

fn stores() -> Vec<(Store, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let fj: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
    let mem: Arc<dyn Kv> = Arc::new(MemKv::new());
    vec![
        (Store::open(mem, 1).unwrap_or_else(|e| panic!("{e}")), None),
        (
            Store::open(fj, 1).unwrap_or_else(|e| panic!("{e}")),
            Some(dir),
        ),
    ]
}

#[test]
fn entries_are_listed_per_directory_in_hash_order() {
    for (s, _d) in stores() {
        let mut b = Batch::new();
        for (dir, name) in [
            ("/a", "z"),
            ("/a", "b"),
            ("/ab", "c"),
            ("/a", "m"),
            ("/", "a"),
        ] {
            s.put_entry(
                &mut b,
                dir,
                name,
                &EntryRecord {
                    inode: Some(inode(1)),
                    pending: None,
                },
            );
        }
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = s
            .entries("/a", None, 10)
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.0)
            .collect();
        let mut want = vec!["b", "m", "z"];
        want.sort_by_key(|n| myriad_proto::name_hash(n));
        assert_eq!(names, want);
        let page: Vec<String> = s
            .entries("/a", Some(want[0]), 1)
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(page, [want[1]]);
        assert!(s.has_entries("/ab").unwrap_or(false));
        assert!(!s.has_entries("/q").unwrap_or(true));
    }
}

#[test]
fn block_writes_and_reads_at_any_offset_with_holes() {
    for (s, _d) in stores() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let offset = 3 * BLOCK_BYTES + 1000;
        let mut b = Batch::new();
        s.write_range(&mut b, InodeId(9), offset, &data)
            .unwrap_or_else(|e| panic!("{e}"));
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let size = offset + data.len() as u64;
        let back = s
            .read_range(InodeId(9), offset, data.len() as u64, size)
            .unwrap_or_default();
        assert_eq!(back, data);
        // The hole before the data reads as zeros.
        let hole = s
            .read_range(InodeId(9), 0, offset, size)
            .unwrap_or_default();
        assert_eq!(hole.len() as u64, offset);
        assert!(hole.iter().all(|&x| x == 0));
        // Overwrite a small piece in the middle (read-modify-write of one block).
        let mut b = Batch::new();
        s.write_range(&mut b, InodeId(9), offset + 10, b"hello")
            .unwrap_or_else(|e| panic!("{e}"));
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let back = s
            .read_range(InodeId(9), offset + 8, 9, size)
            .unwrap_or_default();
        assert_eq!(&back[2..7], b"hello");
        assert_eq!(back[0], data[8]);
        // Reads clip at size.
        assert_eq!(
            s.read_range(InodeId(9), size - 3, 100, size)
                .unwrap_or_default()
                .len(),
            3
        );
        // Trim keeps exactly keep_bytes.
        let keep = offset + 70_000;
        let mut b = Batch::new();
        s.trim_blocks(&mut b, InodeId(9), keep, 0, u64::MAX)
            .unwrap_or_else(|e| panic!("{e}"));
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let after = s.read_range(InodeId(9), 0, size, size).unwrap_or_default();
        assert!(
            after[usize::try_from(keep).unwrap_or(0)..]
                .iter()
                .all(|&x| x == 0)
        );
        assert_eq!(after[usize::try_from(keep - 1).unwrap_or(0)], data[69_999]);
        // Whether every byte came from a block: the data yes, a hole or bytes past a trim
        // (a size read before the trim) no.
        let whole = |o: u64, l: u64, size: u64| {
            s.read_range_whole(InodeId(9), o, l, size)
                .map(|(_, w)| w)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(whole(offset, 60_000, size));
        assert!(whole(offset + 100, 5, size), "inside one block");
        assert!(!whole(0, offset + 10, size), "the hole before the data");
        assert!(whole(keep - 10, 10, size));
        assert!(
            !whole(keep - 10, 20, size),
            "past the trim, with the old size"
        );
        assert!(whole(size, 10, size), "nothing to read");
    }
}

#[test]
fn reopen_checks_node_id_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    {
        let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
        let s = Store::open(kv, 3).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        s.put_entry(
            &mut b,
            "/",
            "x",
            &EntryRecord {
                inode: Some(inode(5)),
                pending: None,
            },
        );
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        s.sync().unwrap_or_else(|e| panic!("{e}"));
    }
    let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
    assert!(
        Store::open(kv.clone(), 4).is_err(),
        "a store must refuse to open as another node"
    );
    let s = Store::open(kv, 3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.entry("/", "x")
            .ok()
            .flatten()
            .and_then(|e| e.inode)
            .map(|i| i.ino),
        Some(InodeId(5))
    );
}

/// A hash range of a directory (a shard) is listed and counted alone; names outside it and
/// other directories never leak in.
#[test]
fn entries_in_a_hash_range() {
    for (s, _d) in stores() {
        let mut b = Batch::new();
        let names: Vec<String> = (0..200).map(|i| format!("n{i}")).collect();
        for n in &names {
            let rec = EntryRecord {
                inode: Some(inode(1)),
                pending: None,
            };
            s.put_entry(&mut b, "/big", n, &rec);
            s.put_entry(&mut b, "/big2", n, &rec);
        }
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let (lo, hi) = myriad_proto::Shard::ALL.halves();
        let upper: Vec<String> = s
            .entries_in("/big", hi.start(), None, hi.end(), 1000)
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.1)
            .collect();
        let lower = s
            .entries_in("/big", lo.start(), None, lo.end(), 1000)
            .unwrap_or_default();
        let want_upper = names
            .iter()
            .filter(|n| hi.contains(myriad_proto::name_hash(n)))
            .count();
        assert_eq!(upper.len(), want_upper);
        assert_eq!(upper.len() + lower.len(), 200);
        assert!(lower.iter().all(|e| lo.contains(e.0)));
        assert_eq!(
            s.count_entries_in("/big", hi.start(), hi.end(), 1000).ok(),
            Some(want_upper)
        );
        assert_eq!(s.count_entries_in("/big", 0, None, 50).ok(), Some(50));
        // Resuming after a name continues in hash order within the range.
        let first = &upper[0];
        let rest = s
            .entries_in("/big", hi.start(), Some(first), hi.end(), 1000)
            .unwrap_or_default();
        assert_eq!(rest.len(), want_upper - 1);
    }
}

/// A flipped bit anywhere in a stored record is found when it is read (the record's
/// checksum), not decoded into another record; records written before checksums (version
/// 1) still read.
#[test]
fn a_damaged_record_fails_its_checksum() {
    let (s, _dir) = stores().remove(0);
    let rec = EntryRecord {
        inode: Some(inode(7)),
        pending: None,
    };
    let mut b = Batch::new();
    s.put_entry(&mut b, "/d", "f", &rec);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.entry("/d", "f").ok().flatten(), Some(rec.clone()));
    let (key, good) = s
        .kv()
        .scan(crate::Space::Entries, b"", None, 10)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0);
    for i in 1..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[i] ^= bit;
            let mut b = Batch::new();
            b.put(crate::Space::Entries, key.clone(), bad);
            s.commit(b).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                matches!(s.entry("/d", "f"), Err(crate::StorageError::Corrupt { .. })),
                "byte {i} bit {bit:#x} flipped and not caught"
            );
        }
    }
    // Version 1: no checksum.
    let mut plain = vec![crate::records::RECORD_VERSION_PLAIN];
    plain.extend_from_slice(&good[1..good.len() - 4]);
    let mut b = Batch::new();
    b.put(crate::Space::Entries, key, plain);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.entry("/d", "f").ok().flatten(), Some(rec));
}

#[test]
fn directory_records_of_record_version_2_read_as_not_read_only() {
    use crate::records::{DirRecordV2, RECORD_VERSION_CHECKED_V2, RECORD_VERSION_PLAIN};
    use myriad_proto::ReadOnlyMark;
    let (s, _dir) = stores().remove(0);
    let old = DirRecordV2 {
        ino: InodeId(9),
        root_attrs: None,
        frozen: Some(4),
        hidden: None,
        shards: crate::DirRecord::new(InodeId(9)).shards,
        map: None,
        subdirs: 3,
    };
    let body = myriad_proto::codec::encode(&old).unwrap_or_else(|e| panic!("{e}"));
    let mut v2 = vec![RECORD_VERSION_CHECKED_V2];
    v2.extend_from_slice(&body);
    v2.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    let mut v1 = vec![RECORD_VERSION_PLAIN];
    v1.extend_from_slice(&body);
    for (path, bytes) in [("/old2", v2), ("/old1", v1)] {
        let mut b = Batch::new();
        b.put(crate::Space::Dirs, path.as_bytes().to_vec(), bytes);
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let rec = s.dir(path).unwrap_or_else(|e| panic!("{e}"));
        let rec = rec.unwrap_or_else(|| panic!("{path} missing"));
        assert_eq!(rec.ino, InodeId(9), "{path}");
        assert_eq!(rec.frozen, Some(4), "{path}");
        assert_eq!(rec.subdirs, 3, "{path}");
        assert_eq!(rec.read_only, None, "{path}");
        assert!(crate::store::damage::record_intact(
            &s.kv()
                .get(crate::Space::Dirs, path.as_bytes())
                .ok()
                .flatten()
                .unwrap_or_default()
        ));
    }
    // Written now (the current version), the mark is kept; a listing decodes both versions.
    let marked = crate::DirRecord {
        read_only: Some(ReadOnlyMark {
            root: InodeId(2),
            version: 7,
        }),
        ..crate::DirRecord::new(InodeId(11))
    };
    let mut b = Batch::new();
    s.put_dir(&mut b, "/new", &marked);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.dir("/new").ok().flatten(), Some(marked));
    let raw = s
        .kv()
        .get(crate::Space::Dirs, b"/new")
        .ok()
        .flatten()
        .unwrap_or_default();
    assert_eq!(raw.first(), Some(&crate::records::RECORD_VERSION));
    let listed = s.dirs(None, 10).unwrap_or_else(|e| panic!("{e}"));
    let marks: Vec<_> = listed
        .iter()
        .map(|(p, r)| (p.as_str(), r.read_only.map(|m| m.version)))
        .collect();
    assert_eq!(
        marks,
        vec![("/new", Some(7)), ("/old1", None), ("/old2", None)]
    );
}

#[test]
fn directory_records_of_record_version_3_keep_their_freeze_and_have_no_automatic_index() {
    use crate::records::{DirRecordV3, RECORD_VERSION_V3};
    use myriad_proto::ReadOnlyMark;
    let (s, _dir) = stores().remove(0);
    let mark = ReadOnlyMark {
        root: InodeId(2),
        version: 5,
    };
    let old = DirRecordV3 {
        ino: InodeId(9),
        root_attrs: None,
        frozen: None,
        hidden: None,
        shards: crate::DirRecord::new(InodeId(9)).shards,
        map: None,
        subdirs: 1,
        read_only: Some(mark),
    };
    let body = myriad_proto::codec::encode(&old).unwrap_or_else(|e| panic!("{e}"));
    let mut v3 = vec![RECORD_VERSION_V3];
    v3.extend_from_slice(&body);
    v3.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    // Intact as fsck sees it (it was listed as damaged until record version 5).
    assert!(crate::record_intact(&v3));
    let mut b = Batch::new();
    b.put(crate::Space::Dirs, b"/old3".to_vec(), v3);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    let rec = s.dir("/old3").ok().flatten();
    let rec = rec.unwrap_or_else(|| panic!("/old3 missing"));
    assert_eq!(
        (rec.read_only, rec.auto_index, rec.subdirs),
        (Some(mark), None, 1)
    );
    // Written now, an automatic index's mark is kept.
    let auto = crate::DirRecord {
        auto_index: Some(mark),
        ..crate::DirRecord::new(InodeId(12))
    };
    let mut b = Batch::new();
    s.put_dir(&mut b, "/auto", &auto);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.dir("/auto").ok().flatten(), Some(auto));
}

#[test]
fn an_undecided_directory_record_is_version_5_and_every_other_stays_version_4() {
    use crate::records::{DirRecordV4, RECORD_VERSION, RECORD_VERSION_DIR_UNDECIDED};
    let (s, _dir) = stores().remove(0);
    let plain = crate::DirRecord {
        subdirs: 3,
        ..crate::DirRecord::new(InodeId(21))
    };
    let undecided = crate::DirRecord {
        undecided: true,
        ..crate::DirRecord::new(InodeId(22))
    };
    let mut b = Batch::new();
    s.put_dir(&mut b, "/plain", &plain);
    s.put_dir(&mut b, "/undecided", &undecided);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    let raw = |path: &str| {
        s.kv()
            .get(crate::Space::Dirs, path.as_bytes())
            .ok()
            .flatten()
            .unwrap_or_default()
    };
    // A release that reads version 4 only reads every record not marked: the body is
    // version 4's layout, byte for byte.
    let plain_raw = raw("/plain");
    assert_eq!(plain_raw.first(), Some(&RECORD_VERSION));
    let body = &plain_raw[1..plain_raw.len() - 4];
    let as_v4: DirRecordV4 = myriad_proto::codec::decode(body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((as_v4.ino, as_v4.subdirs), (InodeId(21), 3));
    assert_eq!(
        raw("/undecided").first(),
        Some(&RECORD_VERSION_DIR_UNDECIDED)
    );
    assert!(crate::store::damage::record_intact(&raw("/undecided")));
    assert!(crate::store::damage::record_intact(&plain_raw));
    // Each reads back as written, the mark with it.
    assert_eq!(s.dir("/plain").ok().flatten(), Some(plain));
    assert_eq!(s.dir("/undecided").ok().flatten(), Some(undecided.clone()));
    // Cleared, the record is written as version 4 again.
    let mut b = Batch::new();
    let decided = crate::DirRecord {
        undecided: false,
        ..undecided
    };
    s.put_dir(&mut b, "/undecided", &decided);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw("/undecided").first(), Some(&RECORD_VERSION));
    assert_eq!(s.dir("/undecided").ok().flatten(), Some(decided));
}
