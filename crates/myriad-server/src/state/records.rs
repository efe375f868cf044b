//! What the families share: reading and writing entries and inodes in a store with the
//! checks every mutation makes (names free, directories writable, shards owned), new inodes,
//! attribute changes, dropping a file's data.

use crate::state::failure::StateError;
use myriad_proto::{
    FileKind, Inode, PartitionId, RenameFlags, WireError, Xattr, XattrMode, limits,
};
use myriad_storage::{Batch, DirRecord, EntryRecord, Store};

use crate::state::intent::Intent;
use crate::state::ops::{Ctx, InodeChange, chunk0_blocks};
use myriad_proto::InodeId;
use myriad_proto::access::apply_setattr;

/// Where inode objects of hard-linked files live on their home node: a reserved directory
/// that no valid path can name ("//" never passes path validation). Defined by the store,
/// whose kept fsstats count the files in it.
pub use myriad_storage::INODE_DIR;

/// Where files whose last name went wait, with their data, until no client has them open
/// (docs/fuse.md "Open files unlinked elsewhere"): another reserved directory.
pub const ORPHAN_DIR: &str = "//o";

pub fn inode_name(ino: InodeId) -> String {
    format!("{ino:016x}")
}

/// The entry of a name of a hard-linked file: only the inode id and where it lives.
pub(crate) fn link_ref(ino: InodeId, home: PartitionId) -> Inode {
    Inode {
        kind: FileKind::HardLink,
        mode: 0,
        nlink: 0,
        link_home: Some(home),
        ..new_inode(ino, FileKind::HardLink, 0, 0, 0, 0)
    }
}

pub(crate) fn new_inode(
    ino: InodeId,
    kind: FileKind,
    mode: u32,
    uid: u32,
    gid: u32,
    now: i64,
) -> Inode {
    Inode::new(ino, kind, mode, (uid, gid), now)
}

/// 1 for a directory, 0 for anything else or nothing: a directory's entries count toward
/// its link count ("..").
pub(crate) fn is_dir(inode: Option<&Inode>) -> i64 {
    i64::from(inode.is_some_and(|i| i.kind == FileKind::Directory))
}

/// Adds `delta` to the subdirectory count of directory object `dir` held here (its link
/// count is 2 + that), in the batch that adds or removes the entry.
pub(crate) fn adjust_subdirs(
    store: &Store,
    b: &mut Batch,
    dir: &str,
    delta: i64,
) -> Result<(), StateError> {
    if delta == 0 {
        return Ok(());
    }
    if let Some(mut rec) = store.dir(dir)? {
        let n = i64::from(rec.subdirs).saturating_add(delta).max(0);
        rec.subdirs = u32::try_from(n).unwrap_or(u32::MAX);
        store.put_dir(b, dir, &rec);
    }
    Ok(())
}

/// A content change: new size, and mtime and ctime now.
pub(crate) fn modified(inode: &mut Inode, size: u64, now: i64) {
    inode.size = size;
    inode.mtime_ns = now;
    inode.ctime_ns = now;
}

pub(crate) fn apply_change(
    inode: &mut Inode,
    change: InodeChange,
    now: i64,
) -> Result<(), StateError> {
    match change {
        // Meant for another inode than the name holds now (a descriptor's file, since
        // replaced at its name by another client): refused, the name's file untouched.
        InodeChange::Attr(set) if set.of.is_some_and(|of| of != inode.ino) => {
            return Err(WireError::Stale.into());
        }
        InodeChange::Attr(set) => apply_setattr(inode, &set, now),
        InodeChange::Xattr { name, value, mode } => {
            let at = inode.xattrs.iter().position(|x| x.name == name);
            match (at, mode, value) {
                (Some(_), XattrMode::Create, Some(_)) => {
                    return Err(WireError::AlreadyExists.into());
                }
                (None, XattrMode::Replace, _) | (None, _, None) => {
                    return Err(WireError::NoData.into());
                }
                (Some(i), _, None) => {
                    inode.xattrs.remove(i);
                }
                (Some(i), _, Some(v)) => inode.xattrs[i].value = v,
                (None, _, Some(v)) => inode.xattrs.push(Xattr { name, value: v }),
            }
            let total: usize = inode
                .xattrs
                .iter()
                .map(|x| x.name.len() + x.value.len())
                .sum();
            if total > limits::XATTR_TOTAL_BYTES_MAX {
                return Err(WireError::NoSpace.into());
            }
            inode.ctime_ns = now;
        }
    }
    Ok(())
}

pub(crate) fn put_visible(store: &Store, b: &mut Batch, dir: &str, name: &str, inode: &Inode) {
    store.put_entry(
        b,
        dir,
        name,
        &EntryRecord {
            inode: Some(inode.clone()),
            pending: None,
        },
    );
}

/// The directory object `dir` exists here, holds the shard for `name`, and accepts writes
/// there (no directory rename is moving it, no split is moving that name).
pub(crate) fn require_dir(store: &Store, dir: &str, name: &str) -> Result<(), StateError> {
    match store.dir(dir)? {
        None => Err(WireError::NotFound.into()),
        Some(rec) => writable_shard(dir, &rec, name),
    }
}

/// Like `require_dir`, for mutations of existing entries (a missing directory object is
/// reported by the entry lookup that follows).
pub(crate) fn require_writable(store: &Store, dir: &str, name: &str) -> Result<(), StateError> {
    match store.dir(dir)? {
        None => Ok(()),
        Some(rec) => writable_shard(dir, &rec, name),
    }
}

/// This node's record of directory object `path`: `NotFound` if it holds none.
pub(crate) fn dir_here(store: &Store, path: &str) -> Result<DirRecord, StateError> {
    store.dir(path)?.ok_or(WireError::NotFound.into())
}

pub(crate) fn writable_shard(dir: &str, rec: &DirRecord, name: &str) -> Result<(), StateError> {
    // Before `Busy`: a frozen tree stays read-only however long a client would retry.
    if rec.read_only.is_some() {
        return Err(WireError::ReadOnly.into());
    }
    not_auto_indexed(dir, rec)?;
    if rec.frozen.is_some() || rec.hidden.is_some() {
        return Err(WireError::Busy.into());
    }
    // Its mkdir may still be undone: the partition asks its entry first
    // (ARCHITECTURE.md "Undecided directory objects").
    if rec.undecided {
        return Err(WireError::DirUndecided {
            dir: dir.to_string(),
            ino: rec.ino,
        }
        .into());
    }
    let hash = myriad_proto::name_hash(name);
    match rec.shard_for(hash) {
        None => Err(wrong_shard(dir, rec).into()),
        Some(s) if s.blocks_write(hash) => Err(WireError::Busy.into()),
        Some(_) => Ok(()),
    }
}

/// `AutoIndexed` if `dir` is in the tree of an automatic index: the applier unregisters
/// it before any change there applies (docs/metadata-index.md "Automatic indexes").
pub(crate) fn not_auto_indexed(dir: &str, rec: &DirRecord) -> Result<(), StateError> {
    match rec.auto_index {
        Some(mark) => Err((WireError::AutoIndexed {
            dir: dir.to_string(),
            mark,
        })
        .into()),
        None => Ok(()),
    }
}

/// The answer for a name of `dir` this node holds no shard for.
pub fn wrong_shard(dir: &str, rec: &DirRecord) -> WireError {
    WireError::WrongShard {
        dir: dir.to_string(),
        map: rec.map.clone().map(Box::new),
    }
}

/// The visible inode of `dir/name`; `Busy` while a multi-node operation holds it.
pub(crate) fn visible(store: &Store, dir: &str, name: &str) -> Result<Inode, StateError> {
    match store.entry(dir, name)? {
        Some(EntryRecord {
            pending: Some(_), ..
        }) => Err(WireError::Busy.into()),
        Some(EntryRecord { inode: Some(i), .. }) => Ok(i),
        _ => Err(WireError::NotFound.into()),
    }
}

/// `dir` is a usable directory without an entry `name`.
/// A name held by an operation still under way (a mkdir not yet decided, a rmdir or rename
/// in progress) is `Busy`, not `AlreadyExists`: that operation may yet leave the name free.
/// (Found by the simulation, seed 3001: a mkdir that failed and was being undone made the
/// client's retry answer "exists" for a directory that never came to be.)
pub(crate) fn require_free_name(store: &Store, dir: &str, name: &str) -> Result<(), StateError> {
    require_dir(store, dir, name)?;
    match store.entry(dir, name)? {
        None => Ok(()),
        Some(EntryRecord {
            pending: Some(_), ..
        }) => Err(WireError::Busy.into()),
        Some(_) => Err(WireError::AlreadyExists.into()),
    }
}

pub(crate) fn visible_file(
    store: &Store,
    dir: &str,
    name: &str,
    ino: InodeId,
) -> Result<Inode, StateError> {
    require_writable(store, dir, name)?;
    let inode = visible(store, dir, name)?;
    if inode.ino != ino {
        return Err(WireError::Stale.into());
    }
    match inode.kind {
        FileKind::File => Ok(inode),
        FileKind::Directory => Err(WireError::IsADirectory.into()),
        _ => Err(WireError::InvalidArgument("not a regular file".into()).into()),
    }
}

/// POSIX rename target rules. Returns the inode being replaced, if any.
pub(crate) fn check_rename_target(
    store: &Store,
    dir: &str,
    name: &str,
    incoming: &Inode,
    flags: RenameFlags,
    replaces: Option<InodeId>,
) -> Result<Option<Inode>, StateError> {
    match store.entry(dir, name)? {
        Some(EntryRecord {
            pending: Some(_), ..
        }) => Err(WireError::Busy.into()),
        Some(EntryRecord {
            inode: Some(old), ..
        }) => {
            if flags.no_replace && old.ino != incoming.ino {
                return Err(WireError::AlreadyExists.into());
            }
            match (
                incoming.kind == FileKind::Directory,
                old.kind == FileKind::Directory,
            ) {
                (false, true) => Err(WireError::IsADirectory.into()),
                (true, false) => Err(WireError::NotADirectory.into()),
                // A directory replaces only the (empty) directory its coordinator found
                // there and whose object it took over; another one came meanwhile.
                (true, true) if old.ino != incoming.ino && replaces != Some(old.ino) => {
                    Err(WireError::Busy.into())
                }
                _ => Ok(Some(old)),
            }
        }
        _ => Ok(None),
    }
}

/// The entry an exchange (`RenameFlags::exchange`) swaps with `incoming`: it must exist
/// and be idle, and neither may be a directory (they would move subtrees).
pub(crate) fn check_exchange_target(
    store: &Store,
    dir: &str,
    name: &str,
    incoming: &Inode,
) -> Result<Inode, StateError> {
    match store.entry(dir, name)? {
        Some(EntryRecord {
            pending: Some(_), ..
        }) => Err(WireError::Busy.into()),
        Some(EntryRecord {
            inode: Some(other), ..
        }) => {
            if other.kind == FileKind::Directory || incoming.kind == FileKind::Directory {
                return Err(WireError::InvalidArgument(
                    "exchanging directories (RENAME_EXCHANGE) is not supported".into(),
                )
                .into());
            }
            Ok(other)
        }
        _ => Err(WireError::NotFound.into()),
    }
}

/// Deletes the local chunk-0 blocks of a file going away; if it has chunks on other nodes,
/// writes a ChunkGc intent and returns its txid for the caller to run.
/// A regular file's last name is gone (`now`): its inode becomes an orphan in
/// `ORPHAN_DIR` with all its data, readable by inode by clients that still have it open,
/// until the partition drops it (`drop_orphan`) once nobody keeps it open. Other kinds
/// have no data to keep. Never a chunk GC here: `Ok(None)`.
pub(crate) fn drop_file_data(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    inode: &Inode,
    now: i64,
) -> Result<Option<u64>, StateError> {
    if inode.kind != FileKind::File {
        return Ok(None);
    }
    if ctx.store.dir(ORPHAN_DIR)?.is_none() {
        ctx.store
            .put_dir(b, ORPHAN_DIR, &myriad_storage::DirRecord::new(InodeId(0)));
    }
    let orphan = Inode {
        nlink: 0,
        ctime_ns: now,
        ..inode.clone()
    };
    put_visible(ctx.store, b, ORPHAN_DIR, &inode_name(inode.ino), &orphan);
    Ok(None)
}

/// Deletes orphan `ino` and its data: its chunk-0 blocks here, and a chunk GC intent
/// (returned) for chunks on other partitions.
pub(crate) fn drop_orphan(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    ino: InodeId,
) -> Result<Option<u64>, StateError> {
    let name = inode_name(ino);
    let Some(inode) = ctx.store.entry(ORPHAN_DIR, &name)?.and_then(|r| r.inode) else {
        return Ok(None);
    };
    ctx.store.delete_entry(b, ORPHAN_DIR, &name);
    let c0 = chunk0_blocks(ctx.layout);
    ctx.store.trim_blocks(b, inode.ino, 0, 0, c0)?;
    if inode.size > ctx.layout.chunk_size_bytes {
        let txid = ctx.ids.next(ctx.store, b)?;
        let intent = Intent::ChunkGc {
            ino: inode.ino,
            keep_bytes: 0,
            old_size: inode.size,
        };
        ctx.store.put_intent(b, txid, intent.encode());
        return Ok(Some(txid));
    }
    Ok(None)
}
