use std::sync::Arc;

use myriad_proto::{FileKind, FsError, RenameFlags};
use myriad_storage::{MemKv, Store};

use super::*;

struct T {
    store: Store,
    ids: IdAlloc,
}

impl T {
    fn new() -> T {
        let store = Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"));
        let ids = IdAlloc::load(&store, 1).unwrap_or_else(|e| panic!("{e}"));
        let mut t = T { store, ids };
        t.run(Mutation::InitRoot {
            now: 1,
            uid: 0,
            gid: 0,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        t
    }

    fn run(&mut self, m: Mutation) -> Result<Outcome, FsError> {
        let mut ctx = Ctx {
            store: &self.store,
            ids: &mut self.ids,
            layout: Layout {
                chunk_size_bytes: 4 << 20,
            },
        };
        let (batch, out) = execute(&mut ctx, m)?;
        self.store.commit(batch).map_err(storage_err)?;
        Ok(out)
    }

    fn create(&mut self, dir: &str, name: &str, data: &[u8]) -> Result<Inode, FsError> {
        match self.run(Mutation::CreateFile {
            dir: dir.into(),
            name: name.into(),
            mode: 0o644,
            uid: 5,
            gid: 6,
            exclusive: true,
            data: data.to_vec(),
            now: 10,
        })? {
            Outcome::Inode(i) => Ok(i),
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
    assert_eq!(t.create("/", "a", b""), Err(FsError::AlreadyExists));
    assert_eq!(t.create("/nodir", "a", b""), Err(FsError::NotFound));
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
    assert_eq!(a >> 40, 1);
    // A reload continues after the persisted high-water mark: no reuse.
    let mut ids = IdAlloc::load(&t.store, 1).unwrap_or_else(|e| panic!("{e}"));
    let mut batch = myriad_storage::Batch::new();
    let c = ids.next(&t.store, &mut batch).unwrap_or(0);
    assert!(c > b);
}

#[test]
fn mkdir_entry_stays_pending_until_resolved() {
    let mut t = T::new();
    let Ok(Outcome::Begun { txid, inode }) = t.run(Mutation::MkdirBegin {
        depth: 0,
        dir: "/".into(),
        name: "d".into(),
        mode: 0o755,
        uid: 0,
        gid: 0,
        now: 1,
    }) else {
        panic!("mkdir begin failed")
    };
    assert!(t.store.intent(txid).ok().flatten().is_some());
    assert_eq!(
        t.create("/", "d", b""),
        Err(FsError::Busy),
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
    let Ok(Outcome::Begun { txid, .. }) = t.run(Mutation::MkdirBegin {
        depth: 0,
        dir: "/".into(),
        name: "d".into(),
        mode: 0o755,
        uid: 0,
        gid: 0,
        now: 1,
    }) else {
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
    t.run(Mutation::DirObjectCreate {
        shards: vec![myriad_proto::Shard::ALL],
        map: None,
        path: "/d".into(),
        ino: 77,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    t.create("/d", "f", b"x").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        t.run(Mutation::DirObjectRemove {
            path: "/d".into(),
            ino: 77
        })
        .err(),
        Some(FsError::NotEmpty)
    );
    // Idempotent create with the same ino; conflict with another.
    assert!(
        t.run(Mutation::DirObjectCreate {
            shards: vec![myriad_proto::Shard::ALL],
            map: None,
            path: "/d".into(),
            ino: 77
        })
        .is_ok()
    );
    assert_eq!(
        t.run(Mutation::DirObjectCreate {
            shards: vec![myriad_proto::Shard::ALL],
            map: None,
            path: "/d".into(),
            ino: 78
        })
        .err(),
        Some(FsError::AlreadyExists)
    );
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
    assert!(
        t.store
            .read_range(b.ino, 0, 10, 10)
            .unwrap_or_default()
            .iter()
            .all(|&x| x == 0),
        "replaced data dropped"
    );
    t.create("/", "c", b"").unwrap_or_else(|e| panic!("{e}"));
    let no_replace = RenameFlags { no_replace: true };
    assert_eq!(
        t.run(Mutation::RenameLocal {
            from: "/c".into(),
            to: "/b".into(),
            flags: no_replace,
            now: 3
        })
        .err(),
        Some(FsError::AlreadyExists)
    );
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
            ino: 999,
            offset: 0,
            data: vec![1],
            now: 5
        })
        .err(),
        Some(FsError::Stale)
    );
}

#[test]
fn chunk_operations_on_absurd_chunk_indexes_are_errors() {
    let mut t = T::new();
    let huge = u64::MAX / 2;
    let trim = Mutation::ChunkTrim {
        ino: 1,
        chunk: huge,
        keep_bytes: u64::MAX,
    };
    assert_eq!(t.run(trim).err(), Some(FsError::TooLarge));
    let write = Mutation::WriteChunk {
        ino: 1,
        chunk: huge,
        offset: 0,
        data: vec![1],
    };
    assert_eq!(t.run(write).err(), Some(FsError::TooLarge));
}
