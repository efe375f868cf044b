//! Local atomic mutations. Each `Mutation` is validated and turned into one `Batch` on the
//! applier thread, the only writer of the store, so check-then-write is race-free. The batch
//! becomes durable in the next group commit, and only then is the outcome returned.
//!
//! Pure over `Store` (no clock, no network): timestamps come in the mutation.

use myriad_placement::split_parent;
use myriad_proto::{
    DirAction, ExportedEntry, FileKind, FsError, Inode, ROOT_INO, RenameFlags, SetAttr, Shard,
    ShardMap, Xattr, XattrMode, limits,
};
use myriad_storage::{
    BLOCK_BYTES, Batch, DirRecord, EntryRecord, LocalShard, Pending, StorageError, Store,
};

use crate::state::intent::{Decision, DirMove, Intent};
pub use shard_ops::ShardMutation;

mod shard_ops;

/// A change to one inode's attributes, applied in place.
#[derive(Debug)]
pub enum InodeChange {
    Attr(SetAttr),
    /// Set (`Some`) or remove (`None`) one extended attribute.
    Xattr {
        name: String,
        value: Option<Vec<u8>>,
        mode: XattrMode,
    },
}

#[derive(Debug)]
pub enum Mutation {
    /// Changes nothing; its reply comes after the fsync covering everything applied before.
    Barrier,
    /// Puts an intact copy of a block that failed its checksum here or on a backup
    /// (repair.rs). Applied only if the block is still what repair saw: corrupt here, or
    /// intact and equal to `data` (rewritten so that every copy gets it); a block written
    /// or deleted meanwhile is left alone.
    RepairBlock {
        ino: u64,
        block: u64,
        data: Vec<u8>,
    },
    /// First extra name of the regular file at `dir/name`: its inode moves to an inode object
    /// on this node (`me`), with one more link; the entry becomes a reference to it.
    LinkSource {
        dir: String,
        name: String,
        me: u32,
        now: i64,
    },
    /// A new name `dir/name` referring to hard-linked inode `ino` on node `home`.
    PutLinkRef {
        dir: String,
        name: String,
        ino: u64,
        home: u32,
    },
    /// Adds `delta` to the link count of inode object `ino`; at 0 it goes with its data.
    AdjustLinks {
        ino: u64,
        delta: i64,
        now: i64,
    },
    InitRoot {
        now: i64,
        uid: u32,
        gid: u32,
    },
    CreateFile {
        dir: String,
        name: String,
        mode: u32,
        uid: u32,
        gid: u32,
        exclusive: bool,
        data: Vec<u8>,
        now: i64,
    },
    Symlink {
        dir: String,
        name: String,
        target: String,
        uid: u32,
        gid: u32,
        now: i64,
    },
    Unlink {
        dir: String,
        name: String,
    },
    SetAttr {
        dir: String,
        name: String,
        change: InodeChange,
        now: i64,
    },
    /// A metadata-only node (FIFO, socket or device; `rdev` numbers a device).
    Mknod {
        dir: String,
        name: String,
        kind: FileKind,
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        now: i64,
    },
    /// Entries of directory `dir/name` (inode `ino`) changed on the partition holding them:
    /// its mtime and ctime become `now`, its link count `nlink` if given. Nothing happens
    /// if the entry names another inode, or is pending (the directory is being renamed or
    /// removed: its times matter no more, or come with it).
    DirTouch {
        dir: String,
        name: String,
        ino: u64,
        now: i64,
        nlink: Option<u32>,
    },
    Write {
        dir: String,
        name: String,
        ino: u64,
        offset: u64,
        data: Vec<u8>,
        now: i64,
    },
    ExtendSize {
        dir: String,
        name: String,
        ino: u64,
        size: u64,
        now: i64,
    },
    Truncate {
        dir: String,
        name: String,
        ino: u64,
        size: u64,
        now: i64,
    },
    WriteChunk {
        ino: u64,
        chunk: u64,
        offset: u64,
        data: Vec<u8>,
    },
    ChunkTrim {
        ino: u64,
        chunk: u64,
        keep_bytes: u64,
    },
    /// Drops every byte of `ino` held here at or beyond `from_bytes`, in chunks >= 1.
    ChunkTrimFrom {
        ino: u64,
        from_bytes: u64,
    },
    MkdirBegin {
        dir: String,
        name: String,
        mode: u32,
        depth: u8,
        uid: u32,
        gid: u32,
        now: i64,
    },
    RmdirBegin {
        dir: String,
        name: String,
    },
    /// Finish (commit) or undo (abort) the pending state of `dir/name` left by a mkdir/rmdir
    /// with `txid`, and delete the intent.
    ResolveEntry {
        dir: String,
        name: String,
        txid: u64,
        commit: bool,
    },
    /// Record a decision in an intent (so recovery follows it).
    Decide {
        txid: u64,
        decision: Decision,
    },
    DeleteIntent {
        txid: u64,
    },
    /// `shards`: the shards this (home) node holds; `map`: the map of a pre-split directory.
    DirObjectCreate {
        path: String,
        ino: u64,
        shards: Vec<Shard>,
        map: Option<ShardMap>,
    },
    DirObjectRemove {
        path: String,
        ino: u64,
    },
    RenameLocal {
        from: String,
        to: String,
        flags: RenameFlags,
        now: i64,
    },
    RenameSourceBegin {
        from: String,
        to: String,
        dst_node: u32,
        now: i64,
    },
    /// Coordinator: commit deletes the source entry and its chunk-0 blocks; abort restores it.
    /// `moves` (directory renames) is recorded in the intent with the decision.
    RenameSourceDecide {
        txid: u64,
        commit: bool,
        moves: Vec<DirMove>,
    },
    DirFreeze {
        path: String,
        txid: u64,
    },
    DirImport {
        path: String,
        txid: u64,
        ino: u64,
        shards: Vec<Shard>,
        map: Option<ShardMap>,
        entries: Vec<ExportedEntry>,
    },
    DirFinish {
        path: String,
        txid: u64,
        action: DirAction,
    },
    RenamePrepare {
        txid: u64,
        coordinator: u32,
        to: String,
        inode: Inode,
        flags: RenameFlags,
        blocks: Vec<(u64, Vec<u8>)>,
    },
    RenameTargetResolve {
        txid: u64,
        commit: bool,
    },
    /// The split protocol (docs/huge-dirs.md).
    Shard(ShardMutation),
    /// fsck repair: drop every block of `ino` from `from_block` on.
    DropBlocks {
        ino: u64,
        from_block: u64,
    },
}

#[derive(Debug)]
pub enum Outcome {
    Unit,
    Inode(Inode),
    /// A new inode (a create that did not find the name taken).
    Created(Inode),
    /// The inode after the change, plus the txid of a chunk GC intent the caller must run.
    InodeGc(Inode, Option<u64>),
    Gc(Option<u64>),
    Begun {
        txid: u64,
        inode: Inode,
    },
    RenameBegun {
        txid: u64,
        inode: Inode,
        blocks: Vec<(u64, Vec<u8>)>,
    },
    /// A rename; the txid of the replaced file's chunk GC intent, if any, and the replaced
    /// entry if it was a hard-link name (the node then drops a link at its home).
    Renamed(Option<u64>, Option<Inode>),
    SplitBegun {
        txid: u64,
        ino: u64,
    },
}

/// Key of a rename's destination-side record. The destination of a rename can be the
/// coordinator itself (both entries on one node), so its record must not share the
/// coordinator's intent key. Bit 63 is never set in a txid (node ids < 2^23).
#[must_use]
pub fn prepare_key(txid: u64) -> u64 {
    txid | (1 << 63)
}

/// Layout parameters the mutations need (from the cluster map).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub chunk_size_bytes: u64,
}

/// Allocates cluster-unique ids (`node_id << 40 | counter`) for inodes and transactions. The
/// high-water mark is persisted a range at a time, in the same batch as the first id used.
pub struct IdAlloc {
    node_id: u32,
    next: u64,
    limit: u64,
}

const ID_RANGE: u64 = 1 << 16;
const ID_COUNTER_MAX: u64 = (1 << 40) - 1;
const HWM_KEY: &str = "id_hwm";

impl IdAlloc {
    pub fn load(store: &Store, node_id: u32) -> Result<IdAlloc, StorageError> {
        let hwm = store.meta_u64(HWM_KEY)?.unwrap_or(2);
        Ok(IdAlloc {
            node_id,
            next: hwm,
            limit: hwm,
        })
    }

    fn next(&mut self, store: &Store, batch: &mut Batch) -> Result<u64, FsError> {
        if self.next >= self.limit {
            self.limit = self.next + ID_RANGE;
            store.put_meta_u64(batch, HWM_KEY, self.limit);
        }
        if self.next > ID_COUNTER_MAX {
            return Err(FsError::NoSpace);
        }
        let id = (u64::from(self.node_id) << 40) | self.next;
        self.next += 1;
        Ok(id)
    }
}

pub fn storage_err(e: StorageError) -> FsError {
    match e {
        StorageError::NoSpace => FsError::NoSpace,
        StorageError::Checksum { ino, block } => FsError::Corrupt { ino, block },
        other => FsError::Io(other.to_string()),
    }
}

fn chunk0_blocks(layout: Layout) -> u64 {
    layout.chunk_size_bytes / BLOCK_BYTES
}

pub struct Ctx<'a> {
    pub store: &'a Store,
    pub ids: &'a mut IdAlloc,
    pub layout: Layout,
}

pub fn execute(ctx: &mut Ctx<'_>, m: Mutation) -> Result<(Batch, Outcome), FsError> {
    let mut b = Batch::new();
    let out = match m {
        Mutation::Barrier => Outcome::Unit,
        Mutation::RepairBlock { ino, block, data } => {
            let now = ctx.store.block_value(ino, block).map_err(storage_err)?;
            let still = match now.as_deref() {
                None => false,
                Some(v) => myriad_storage::block_data(v).is_none_or(|d| d == data.as_slice()),
            };
            if still {
                ctx.store.put_block(&mut b, ino, block, data);
            }
            Outcome::Unit
        }
        Mutation::Shard(m) => shard_ops::execute(ctx, &mut b, m)?,
        Mutation::DropBlocks { ino, from_block } => {
            ctx.store
                .trim_blocks(
                    &mut b,
                    ino,
                    from_block.saturating_mul(BLOCK_BYTES),
                    from_block,
                    u64::MAX,
                )
                .map_err(storage_err)?;
            Outcome::Unit
        }
        Mutation::LinkSource { dir, name, me, now } => {
            require_writable(ctx.store, &dir, &name)?;
            let mut inode = visible(ctx.store, &dir, &name)?;
            // Directories never get a second name; everything else may (Linux links
            // FIFOs, sockets, devices and symlinks too).
            if matches!(inode.kind, FileKind::Directory | FileKind::HardLink) {
                return Err(FsError::NotPermitted);
            }
            inode.nlink = inode.nlink.saturating_add(1);
            inode.ctime_ns = now;
            if ctx.store.dir(INODE_DIR).map_err(storage_err)?.is_none() {
                ctx.store.put_dir(&mut b, INODE_DIR, &DirRecord::new(0));
            }
            put_visible(ctx.store, &mut b, INODE_DIR, &inode_name(inode.ino), &inode);
            put_visible(ctx.store, &mut b, &dir, &name, &link_ref(inode.ino, me));
            Outcome::Inode(inode)
        }
        Mutation::PutLinkRef {
            dir,
            name,
            ino,
            home,
        } => {
            require_free_name(ctx.store, &dir, &name)?;
            let r = link_ref(ino, home);
            put_visible(ctx.store, &mut b, &dir, &name, &r);
            Outcome::Inode(r)
        }
        Mutation::AdjustLinks { ino, delta, now } => {
            let name = inode_name(ino);
            let mut inode = visible(ctx.store, INODE_DIR, &name)?;
            let n = i64::from(inode.nlink).saturating_add(delta).max(0);
            inode.nlink = u32::try_from(n).unwrap_or(u32::MAX);
            inode.ctime_ns = now;
            if inode.nlink == 0 {
                ctx.store.delete_entry(&mut b, INODE_DIR, &name);
                let gc = drop_file_data(ctx, &mut b, &inode)?;
                Outcome::Gc(gc)
            } else {
                put_visible(ctx.store, &mut b, INODE_DIR, &name, &inode);
                Outcome::Inode(inode)
            }
        }
        Mutation::InitRoot { now, uid, gid } => {
            if ctx.store.dir("/").map_err(storage_err)?.is_none() {
                let mut root = new_inode(ROOT_INO, FileKind::Directory, 0o755, uid, gid, now);
                root.nlink = 2;
                ctx.store.put_dir(
                    &mut b,
                    "/",
                    &DirRecord {
                        root_attrs: Some(root),
                        ..DirRecord::new(ROOT_INO)
                    },
                );
            }
            Outcome::Unit
        }
        Mutation::CreateFile {
            dir,
            name,
            mode,
            uid,
            gid,
            exclusive,
            data,
            now,
        } => {
            require_dir(ctx.store, &dir, &name)?;
            if data.len() as u64 > ctx.layout.chunk_size_bytes {
                return Err(FsError::InvalidArgument(
                    "initial data larger than one chunk".into(),
                ));
            }
            match ctx.store.entry(&dir, &name).map_err(storage_err)? {
                Some(EntryRecord {
                    pending: Some(_), ..
                }) => return Err(FsError::Busy),
                Some(EntryRecord {
                    inode: Some(existing),
                    ..
                }) => {
                    if exclusive {
                        return Err(FsError::AlreadyExists);
                    }
                    if existing.kind == FileKind::Directory {
                        return Err(FsError::IsADirectory);
                    }
                    // Non-exclusive create of an existing file opens it as is.
                    return Ok((b, Outcome::Inode(existing)));
                }
                _ => {}
            }
            let ino = ctx.ids.next(ctx.store, &mut b)?;
            let mut inode = new_inode(ino, FileKind::File, mode & 0o7777, uid, gid, now);
            inode.size = data.len() as u64;
            if !data.is_empty() {
                ctx.store
                    .write_range(&mut b, ino, 0, &data)
                    .map_err(storage_err)?;
            }
            put_visible(ctx.store, &mut b, &dir, &name, &inode);
            Outcome::Created(inode)
        }
        Mutation::Symlink {
            dir,
            name,
            target,
            uid,
            gid,
            now,
        } => {
            require_free_name(ctx.store, &dir, &name)?;
            let ino = ctx.ids.next(ctx.store, &mut b)?;
            let mut inode = new_inode(ino, FileKind::Symlink, 0o777, uid, gid, now);
            inode.size = target.len() as u64;
            inode.symlink_target = Some(target);
            put_visible(ctx.store, &mut b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::Unlink { dir, name } => {
            require_writable(ctx.store, &dir, &name)?;
            let inode = visible(ctx.store, &dir, &name)?;
            if inode.kind == FileKind::Directory {
                return Err(FsError::IsADirectory);
            }
            ctx.store.delete_entry(&mut b, &dir, &name);
            let gc = drop_file_data(ctx, &mut b, &inode)?;
            // The removed inode: a hard-link name tells the node to drop a link at home.
            Outcome::InodeGc(inode, gc)
        }
        Mutation::Mknod {
            dir,
            name,
            kind,
            mode,
            rdev,
            uid,
            gid,
            now,
        } => {
            if !kind.is_special() {
                return Err(FsError::InvalidArgument(
                    "mknod makes only FIFOs, sockets and devices".into(),
                ));
            }
            require_free_name(ctx.store, &dir, &name)?;
            let ino = ctx.ids.next(ctx.store, &mut b)?;
            let mut inode = new_inode(ino, kind, mode & 0o7777, uid, gid, now);
            if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
                inode.rdev = rdev;
            }
            put_visible(ctx.store, &mut b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::DirTouch {
            dir,
            name,
            ino,
            now,
            nlink,
        } => {
            let touch = |i: &mut Inode| {
                i.mtime_ns = now;
                i.ctime_ns = i.ctime_ns.max(now);
                if let Some(n) = nlink {
                    i.nlink = n;
                }
            };
            if dir == "/" && name.is_empty() {
                if let Some(mut rec) = ctx.store.dir("/").map_err(storage_err)?
                    && let Some(mut root) = rec.root_attrs.take()
                    && root.ino == ino
                {
                    touch(&mut root);
                    rec.root_attrs = Some(root.clone());
                    ctx.store.put_dir(&mut b, "/", &rec);
                    Outcome::Inode(root)
                } else {
                    Outcome::Unit
                }
            } else if let Some(EntryRecord {
                inode: Some(mut i),
                pending: None,
            }) = ctx.store.entry(&dir, &name).map_err(storage_err)?
                && i.ino == ino
                && i.kind == FileKind::Directory
            {
                touch(&mut i);
                put_visible(ctx.store, &mut b, &dir, &name, &i);
                Outcome::Inode(i)
            } else {
                Outcome::Unit
            }
        }
        Mutation::SetAttr {
            dir,
            name,
            change,
            now,
        } => {
            if dir == "/" && name.is_empty() {
                let mut rec = ctx
                    .store
                    .dir("/")
                    .map_err(storage_err)?
                    .ok_or(FsError::NotFound)?;
                let mut root = rec.root_attrs.clone().ok_or(FsError::NotFound)?;
                apply_change(&mut root, change, now)?;
                rec.root_attrs = Some(root.clone());
                ctx.store.put_dir(&mut b, "/", &rec);
                Outcome::Inode(root)
            } else {
                require_writable(ctx.store, &dir, &name)?;
                let mut inode = visible(ctx.store, &dir, &name)?;
                apply_change(&mut inode, change, now)?;
                put_visible(ctx.store, &mut b, &dir, &name, &inode);
                Outcome::Inode(inode)
            }
        }
        Mutation::Write {
            dir,
            name,
            ino,
            offset,
            data,
            now,
        } => {
            let mut inode = visible_file(ctx.store, &dir, &name, ino)?;
            let end = offset
                .checked_add(data.len() as u64)
                .ok_or(FsError::TooLarge)?;
            if end > ctx.layout.chunk_size_bytes {
                return Err(FsError::InvalidArgument(
                    "write crosses the end of chunk 0".into(),
                ));
            }
            ctx.store
                .write_range(&mut b, ino, offset, &data)
                .map_err(storage_err)?;
            let size = inode.size.max(end);
            modified(&mut inode, size, now);
            put_visible(ctx.store, &mut b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::ExtendSize {
            dir,
            name,
            ino,
            size,
            now,
        } => {
            if size > limits::FILE_BYTES_MAX {
                return Err(FsError::TooLarge);
            }
            let mut inode = visible_file(ctx.store, &dir, &name, ino)?;
            let size = inode.size.max(size);
            modified(&mut inode, size, now);
            put_visible(ctx.store, &mut b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::Truncate {
            dir,
            name,
            ino,
            size,
            now,
        } => {
            if size > limits::FILE_BYTES_MAX {
                return Err(FsError::TooLarge);
            }
            let mut inode = visible_file(ctx.store, &dir, &name, ino)?;
            let old = inode.size;
            let mut gc = None;
            if size < old {
                let c0 = chunk0_blocks(ctx.layout);
                ctx.store
                    .trim_blocks(&mut b, ino, size, 0, c0)
                    .map_err(storage_err)?;
                if old > ctx.layout.chunk_size_bytes {
                    let txid = ctx.ids.next(ctx.store, &mut b)?;
                    let intent = Intent::ChunkGc {
                        ino,
                        keep_bytes: size,
                        old_size: old,
                    };
                    ctx.store.put_intent(&mut b, txid, intent.encode());
                    gc = Some(txid);
                }
            }
            modified(&mut inode, size, now);
            put_visible(ctx.store, &mut b, &dir, &name, &inode);
            Outcome::InodeGc(inode, gc)
        }
        Mutation::WriteChunk {
            ino,
            chunk,
            offset,
            data,
        } => {
            let cs = ctx.layout.chunk_size_bytes;
            if chunk == 0 || offset.saturating_add(data.len() as u64) > cs {
                return Err(FsError::InvalidArgument("chunk write out of bounds".into()));
            }
            let abs = chunk
                .checked_mul(cs)
                .and_then(|x| x.checked_add(offset))
                .filter(|a| a.saturating_add(data.len() as u64) <= limits::FILE_BYTES_MAX)
                .ok_or(FsError::TooLarge)?;
            ctx.store
                .write_range(&mut b, ino, abs, &data)
                .map_err(storage_err)?;
            Outcome::Unit
        }
        Mutation::ChunkTrim {
            ino,
            chunk,
            keep_bytes,
        } => {
            let c0 = chunk0_blocks(ctx.layout);
            let cs = ctx.layout.chunk_size_bytes;
            // Chunk indexes come off the wire: no arithmetic here may overflow.
            let (Some(start), Some(first_block)) = (chunk.checked_mul(cs), chunk.checked_mul(c0))
            else {
                return Err(FsError::TooLarge);
            };
            ctx.store
                .trim_blocks(
                    &mut b,
                    ino,
                    start.saturating_add(keep_bytes.min(cs)),
                    first_block,
                    first_block.saturating_add(c0),
                )
                .map_err(storage_err)?;
            Outcome::Unit
        }
        Mutation::ChunkTrimFrom { ino, from_bytes } => {
            let c0 = chunk0_blocks(ctx.layout);
            let from = from_bytes.max(ctx.layout.chunk_size_bytes);
            ctx.store
                .trim_blocks(&mut b, ino, from, c0, u64::MAX)
                .map_err(storage_err)?;
            Outcome::Unit
        }
        Mutation::MkdirBegin {
            dir,
            name,
            mode,
            depth,
            uid,
            gid,
            now,
        } => {
            require_free_name(ctx.store, &dir, &name)?;
            let ino = ctx.ids.next(ctx.store, &mut b)?;
            let txid = ctx.ids.next(ctx.store, &mut b)?;
            let mut inode = new_inode(ino, FileKind::Directory, mode & 0o7777, uid, gid, now);
            inode.nlink = 2;
            let rec = EntryRecord {
                inode: None,
                pending: Some(Pending {
                    txid,
                    after: Some(inode.clone()),
                }),
            };
            ctx.store.put_entry(&mut b, &dir, &name, &rec);
            let intent = Intent::Mkdir {
                dir,
                name,
                ino,
                depth,
                decision: Decision::Undecided,
            };
            ctx.store.put_intent(&mut b, txid, intent.encode());
            Outcome::Begun { txid, inode }
        }
        Mutation::RmdirBegin { dir, name } => {
            require_writable(ctx.store, &dir, &name)?;
            let inode = visible(ctx.store, &dir, &name)?;
            if inode.kind != FileKind::Directory {
                return Err(FsError::NotADirectory);
            }
            let txid = ctx.ids.next(ctx.store, &mut b)?;
            let rec = EntryRecord {
                inode: Some(inode.clone()),
                pending: Some(Pending { txid, after: None }),
            };
            ctx.store.put_entry(&mut b, &dir, &name, &rec);
            let intent = Intent::Rmdir {
                dir,
                name,
                ino: inode.ino,
                decision: Decision::Undecided,
            };
            ctx.store.put_intent(&mut b, txid, intent.encode());
            Outcome::Begun { txid, inode }
        }
        Mutation::ResolveEntry {
            dir,
            name,
            txid,
            commit,
        } => {
            if let Some(rec) = ctx.store.entry(&dir, &name).map_err(storage_err)?
                && let Some(p) = rec.pending.filter(|p| p.txid == txid)
            {
                let before = is_dir(rec.inode.as_ref());
                let result = if commit { p.after } else { rec.inode };
                adjust_subdirs(ctx.store, &mut b, &dir, is_dir(result.as_ref()) - before)?;
                match result {
                    Some(i) => put_visible(ctx.store, &mut b, &dir, &name, &i),
                    None => ctx.store.delete_entry(&mut b, &dir, &name),
                }
            }
            ctx.store.delete_intent(&mut b, txid);
            Outcome::Unit
        }
        Mutation::Decide { txid, decision } => {
            if let Some(bytes) = ctx.store.intent(txid).map_err(storage_err)? {
                let updated = match Intent::decode(&bytes) {
                    Some(Intent::Mkdir {
                        dir,
                        name,
                        ino,
                        depth,
                        ..
                    }) => Some(Intent::Mkdir {
                        dir,
                        name,
                        ino,
                        depth,
                        decision,
                    }),
                    Some(Intent::Rmdir { dir, name, ino, .. }) => Some(Intent::Rmdir {
                        dir,
                        name,
                        ino,
                        decision,
                    }),
                    Some(Intent::RenameOut {
                        from_dir,
                        from_name,
                        to,
                        dst_node,
                        ino,
                        moves,
                        ..
                    }) => Some(Intent::RenameOut {
                        from_dir,
                        from_name,
                        to,
                        dst_node,
                        ino,
                        decision,
                        moves,
                    }),
                    _ => None,
                };
                if let Some(i) = updated {
                    ctx.store.put_intent(&mut b, txid, i.encode());
                }
            }
            Outcome::Unit
        }
        Mutation::DeleteIntent { txid } => {
            ctx.store.delete_intent(&mut b, txid);
            Outcome::Unit
        }
        Mutation::DirObjectCreate {
            path,
            ino,
            shards,
            map,
        } => {
            match ctx.store.dir(&path).map_err(storage_err)? {
                Some(rec) if rec.ino == ino => {}
                Some(_) => return Err(FsError::AlreadyExists),
                None => ctx.store.put_dir(
                    &mut b,
                    &path,
                    &DirRecord {
                        shards: shards.into_iter().map(LocalShard::new).collect(),
                        map,
                        ..DirRecord::new(ino)
                    },
                ),
            }
            Outcome::Unit
        }
        Mutation::DirObjectRemove { path, ino } => {
            match ctx.store.dir(&path).map_err(storage_err)? {
                Some(rec) if rec.ino == ino => {
                    if ctx.store.has_entries(&path).map_err(storage_err)? {
                        return Err(FsError::NotEmpty);
                    }
                    ctx.store.delete_dir(&mut b, &path);
                }
                // Already gone, or a different directory now lives there: nothing of ours to remove.
                _ => {}
            }
            Outcome::Unit
        }
        Mutation::RenameLocal {
            from,
            to,
            flags,
            now,
        } => {
            let (fdir, fname) = split_parent(&from);
            let (tdir, tname) = split_parent(&to);
            require_writable(ctx.store, fdir, fname)?;
            let mut inode = visible(ctx.store, fdir, fname)?;
            if inode.kind == FileKind::Directory {
                // Directories move their whole subtree: the node routes them through
                // `dir_rename`; getting here means the entry changed kind under us.
                return Err(FsError::Busy);
            }
            require_dir(ctx.store, tdir, tname)?;
            let replaced = check_rename_target(ctx.store, tdir, tname, &inode, flags)?;
            let mut gc = None;
            let mut dropped_link = None;
            if let Some(old) = replaced {
                if old.ino == inode.ino {
                    return Ok((b, Outcome::Renamed(None, None)));
                }
                gc = drop_file_data(ctx, &mut b, &old)?;
                dropped_link = (old.kind == FileKind::HardLink).then_some(old);
            }
            inode.ctime_ns = now;
            ctx.store.delete_entry(&mut b, fdir, fname);
            put_visible(ctx.store, &mut b, tdir, tname, &inode);
            Outcome::Renamed(gc, dropped_link)
        }
        Mutation::RenameSourceBegin {
            from,
            to,
            dst_node,
            now,
        } => {
            let (fdir, fname) = split_parent(&from);
            require_writable(ctx.store, fdir, fname)?;
            let mut inode = visible(ctx.store, fdir, fname)?;
            let txid = ctx.ids.next(ctx.store, &mut b)?;
            let blocks = if inode.kind == FileKind::File {
                ctx.store
                    .blocks(inode.ino, 0, chunk0_blocks(ctx.layout))
                    .map_err(storage_err)?
            } else {
                Vec::new()
            };
            let rec = EntryRecord {
                inode: Some(inode.clone()),
                pending: Some(Pending { txid, after: None }),
            };
            ctx.store.put_entry(&mut b, fdir, fname, &rec);
            let intent = Intent::RenameOut {
                from_dir: fdir.to_string(),
                from_name: fname.to_string(),
                to,
                dst_node,
                ino: inode.ino,
                decision: Decision::Undecided,
                moves: Vec::new(),
            };
            ctx.store.put_intent(&mut b, txid, intent.encode());
            inode.ctime_ns = now;
            Outcome::RenameBegun {
                txid,
                inode,
                blocks,
            }
        }
        Mutation::RenameSourceDecide {
            txid,
            commit,
            moves,
        } => {
            let Some(Intent::RenameOut {
                from_dir,
                from_name,
                to,
                dst_node,
                ino,
                ..
            }) = ctx
                .store
                .intent(txid)
                .map_err(storage_err)?
                .and_then(|b| Intent::decode(&b))
            else {
                return Ok((b, Outcome::Unit));
            };
            if let Some(rec) = ctx
                .store
                .entry(&from_dir, &from_name)
                .map_err(storage_err)?
                && rec.pending.as_ref().is_some_and(|p| p.txid == txid)
            {
                if commit {
                    ctx.store.delete_entry(&mut b, &from_dir, &from_name);
                    adjust_subdirs(ctx.store, &mut b, &from_dir, -is_dir(rec.inode.as_ref()))?;
                    if rec.inode.as_ref().is_some_and(|i| i.kind == FileKind::File) {
                        let c0 = chunk0_blocks(ctx.layout);
                        ctx.store
                            .trim_blocks(&mut b, ino, 0, 0, c0)
                            .map_err(storage_err)?;
                    }
                } else if let Some(i) = rec.inode {
                    put_visible(ctx.store, &mut b, &from_dir, &from_name, &i);
                }
            }
            let decision = if commit {
                Decision::Commit
            } else {
                Decision::Abort
            };
            let intent = Intent::RenameOut {
                from_dir,
                from_name,
                to,
                dst_node,
                ino,
                decision,
                moves,
            };
            ctx.store.put_intent(&mut b, txid, intent.encode());
            Outcome::Unit
        }
        Mutation::DirFreeze { path, txid } => {
            let mut rec = ctx
                .store
                .dir(&path)
                .map_err(storage_err)?
                .ok_or(FsError::NotFound)?;
            match rec.frozen {
                Some(t) if t == txid => {}
                Some(_) => return Err(FsError::Busy),
                None => {
                    let splitting = rec
                        .shards
                        .iter()
                        .any(|s| s.splitting.is_some() || s.hidden.is_some());
                    if rec.hidden.is_some() || splitting {
                        return Err(FsError::Busy);
                    }
                    rec.frozen = Some(txid);
                    ctx.store.put_dir(&mut b, &path, &rec);
                }
            }
            Outcome::Unit
        }
        Mutation::DirImport {
            path,
            txid,
            ino,
            shards,
            map,
            entries,
        } => {
            let rec = match ctx.store.dir(&path).map_err(storage_err)? {
                Some(rec) if rec.hidden == Some(txid) => rec,
                Some(_) => return Err(FsError::AlreadyExists),
                None => {
                    if shards.iter().any(|s| !s.is_valid())
                        || map.as_ref().is_some_and(|m| !m.is_well_formed())
                    {
                        return Err(FsError::InvalidArgument("bad shards".into()));
                    }
                    let rec = DirRecord {
                        hidden: Some(txid),
                        shards: if shards.is_empty() {
                            vec![LocalShard::new(Shard::ALL)]
                        } else {
                            shards.into_iter().map(LocalShard::new).collect()
                        },
                        map,
                        ..DirRecord::new(ino)
                    };
                    ctx.store.put_dir(&mut b, &path, &rec);
                    rec
                }
            };
            for e in entries {
                if rec.shard_for(myriad_proto::name_hash(&e.name)).is_none() {
                    return Err(FsError::InvalidArgument(format!(
                        "{}: not in a shard of {path} held here",
                        e.name
                    )));
                }
                for (block, data) in e.blocks {
                    ctx.store
                        .put_block(&mut b, e.inode.ino, block, data.into_vec());
                }
                // Staged: readers of the new name wait until the rename is revealed.
                let rec = EntryRecord {
                    inode: None,
                    pending: Some(Pending {
                        txid,
                        after: Some(e.inode),
                    }),
                };
                ctx.store.put_entry(&mut b, &path, &e.name, &rec);
            }
            Outcome::Unit
        }
        Mutation::DirFinish { path, txid, action } => {
            let Some(mut rec) = ctx.store.dir(&path).map_err(storage_err)? else {
                return Ok((b, Outcome::Unit));
            };
            let entries = ctx
                .store
                .entries(&path, None, usize::MAX)
                .map_err(storage_err)?;
            match action {
                DirAction::Reveal if rec.hidden == Some(txid) => {
                    rec.hidden = None;
                    let mut subdirs = 0;
                    for (name, e) in entries {
                        let shown = match e.pending.filter(|p| p.txid == txid) {
                            Some(p) => {
                                match &p.after {
                                    Some(i) => put_visible(ctx.store, &mut b, &path, &name, i),
                                    None => ctx.store.delete_entry(&mut b, &path, &name),
                                }
                                p.after
                            }
                            None => e.inode,
                        };
                        subdirs += is_dir(shown.as_ref());
                    }
                    // The copy arrived whole: count its subdirectories afresh.
                    rec.subdirs = u32::try_from(subdirs.max(0)).unwrap_or(u32::MAX);
                    ctx.store.put_dir(&mut b, &path, &rec);
                }
                DirAction::Thaw if rec.frozen == Some(txid) => {
                    rec.frozen = None;
                    ctx.store.put_dir(&mut b, &path, &rec);
                }
                DirAction::Drop { keep_blocks_of }
                    if rec.frozen == Some(txid) || rec.hidden == Some(txid) =>
                {
                    ctx.store.delete_dir(&mut b, &path);
                    let c0 = chunk0_blocks(ctx.layout);
                    for (name, e) in entries {
                        ctx.store.delete_entry(&mut b, &path, &name);
                        let inode = e.inode.or_else(|| e.pending.and_then(|p| p.after));
                        let Some(i) = inode.filter(|i| i.kind == FileKind::File) else {
                            continue;
                        };
                        // The other copy of a rename, on this node, shares the blocks.
                        let shared = match &keep_blocks_of {
                            Some(other) => ctx
                                .store
                                .entry(other, &name)
                                .map_err(storage_err)?
                                .and_then(|o| o.inode.or_else(|| o.pending.and_then(|p| p.after)))
                                .is_some_and(|o| o.ino == i.ino),
                            None => false,
                        };
                        if !shared {
                            ctx.store
                                .trim_blocks(&mut b, i.ino, 0, 0, c0)
                                .map_err(storage_err)?;
                        }
                    }
                }
                _ => {}
            }
            Outcome::Unit
        }
        Mutation::RenamePrepare {
            txid,
            coordinator,
            to,
            inode,
            flags,
            blocks,
        } => {
            if ctx
                .store
                .intent(prepare_key(txid))
                .map_err(storage_err)?
                .is_some()
            {
                return Ok((b, Outcome::Unit)); // Already prepared (a retried request).
            }
            let (tdir, tname) = split_parent(&to);
            require_dir(ctx.store, tdir, tname)?;
            let replaced = check_rename_target(ctx.store, tdir, tname, &inode, flags)?;
            for (block, data) in blocks {
                ctx.store.put_block(&mut b, inode.ino, block, data);
            }
            let rec = EntryRecord {
                inode: replaced,
                pending: Some(Pending {
                    txid,
                    after: Some(inode.clone()),
                }),
            };
            ctx.store.put_entry(&mut b, tdir, tname, &rec);
            let intent = Intent::RenameIn {
                coordinator,
                dir: tdir.to_string(),
                name: tname.to_string(),
                ino: inode.ino,
            };
            ctx.store
                .put_intent(&mut b, prepare_key(txid), intent.encode());
            Outcome::Unit
        }
        Mutation::RenameTargetResolve { txid, commit } => {
            let Some(Intent::RenameIn { dir, name, ino, .. }) = ctx
                .store
                .intent(prepare_key(txid))
                .map_err(storage_err)?
                .and_then(|b| Intent::decode(&b))
            else {
                return Ok((b, Outcome::Renamed(None, None))); // Already resolved.
            };
            let mut gc = None;
            let mut dropped_link = None;
            if let Some(rec) = ctx.store.entry(&dir, &name).map_err(storage_err)?
                && let Some(p) = rec.pending.filter(|p| p.txid == txid)
            {
                if commit {
                    if let Some(old) = rec.inode.as_ref().filter(|o| o.ino != ino) {
                        gc = drop_file_data(ctx, &mut b, old)?;
                        dropped_link = Some(old.clone()).filter(|o| o.kind == FileKind::HardLink);
                    }
                    let delta = is_dir(p.after.as_ref()) - is_dir(rec.inode.as_ref());
                    adjust_subdirs(ctx.store, &mut b, &dir, delta)?;
                    match p.after {
                        Some(i) => put_visible(ctx.store, &mut b, &dir, &name, &i),
                        None => ctx.store.delete_entry(&mut b, &dir, &name),
                    }
                } else {
                    match rec.inode {
                        Some(i) => put_visible(ctx.store, &mut b, &dir, &name, &i),
                        None => ctx.store.delete_entry(&mut b, &dir, &name),
                    }
                    // Staged chunk-0 blocks came only with a regular file: a hard-link name
                    // brought none, and its inode's blocks may live on this very node.
                    if p.after.as_ref().is_some_and(|i| i.kind == FileKind::File) {
                        let c0 = chunk0_blocks(ctx.layout);
                        ctx.store
                            .trim_blocks(&mut b, ino, 0, 0, c0)
                            .map_err(storage_err)?;
                    }
                }
            }
            ctx.store.delete_intent(&mut b, prepare_key(txid));
            Outcome::Renamed(gc, dropped_link)
        }
    };
    Ok((b, out))
}

/// Where inode objects of hard-linked files live on their home node: a reserved directory
/// that no valid path can name ("//" never passes path validation).
pub const INODE_DIR: &str = "//i";

pub fn inode_name(ino: u64) -> String {
    format!("{ino:016x}")
}

/// The entry of a name of a hard-linked file: only the inode id and where it lives.
fn link_ref(ino: u64, home: u32) -> Inode {
    Inode {
        kind: FileKind::HardLink,
        mode: 0,
        nlink: 0,
        link_home: Some(home),
        ..new_inode(ino, FileKind::HardLink, 0, 0, 0, 0)
    }
}

fn new_inode(ino: u64, kind: FileKind, mode: u32, uid: u32, gid: u32, now: i64) -> Inode {
    Inode {
        ino,
        kind,
        mode,
        uid,
        gid,
        size: 0,
        nlink: 1,
        atime_ns: now,
        mtime_ns: now,
        ctime_ns: now,
        symlink_target: None,
        xattrs: Vec::new(),
        link_home: None,
        rdev: 0,
    }
}

/// 1 for a directory, 0 for anything else or nothing: a directory's entries count toward
/// its link count ("..").
fn is_dir(inode: Option<&Inode>) -> i64 {
    i64::from(inode.is_some_and(|i| i.kind == FileKind::Directory))
}

/// Adds `delta` to the subdirectory count of directory object `dir` held here (its link
/// count is 2 + that), in the batch that adds or removes the entry.
fn adjust_subdirs(store: &Store, b: &mut Batch, dir: &str, delta: i64) -> Result<(), FsError> {
    if delta == 0 {
        return Ok(());
    }
    if let Some(mut rec) = store.dir(dir).map_err(storage_err)? {
        let n = i64::from(rec.subdirs).saturating_add(delta).max(0);
        rec.subdirs = u32::try_from(n).unwrap_or(u32::MAX);
        store.put_dir(b, dir, &rec);
    }
    Ok(())
}

/// A content change: new size, and mtime and ctime now.
fn modified(inode: &mut Inode, size: u64, now: i64) {
    inode.size = size;
    inode.mtime_ns = now;
    inode.ctime_ns = now;
}

fn apply_change(inode: &mut Inode, change: InodeChange, now: i64) -> Result<(), FsError> {
    match change {
        InodeChange::Attr(set) => apply_setattr(inode, &set, now),
        InodeChange::Xattr { name, value, mode } => {
            let at = inode.xattrs.iter().position(|x| x.name == name);
            match (at, mode, value) {
                (Some(_), XattrMode::Create, Some(_)) => return Err(FsError::AlreadyExists),
                (None, XattrMode::Replace, _) | (None, _, None) => return Err(FsError::NoData),
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
                return Err(FsError::NoSpace);
            }
            inode.ctime_ns = now;
        }
    }
    Ok(())
}

fn apply_setattr(inode: &mut Inode, set: &SetAttr, now: i64) {
    if let Some(m) = set.mode {
        inode.mode = m & 0o7777;
    }
    if let Some(u) = set.uid {
        inode.uid = u;
    }
    if let Some(g) = set.gid {
        inode.gid = g;
    }
    if let Some(a) = set.atime_ns {
        inode.atime_ns = a;
    }
    if let Some(m) = set.mtime_ns {
        inode.mtime_ns = m;
    }
    if set.touch {
        inode.atime_ns = now;
        inode.mtime_ns = now;
    }
    inode.ctime_ns = now;
}

fn put_visible(store: &Store, b: &mut Batch, dir: &str, name: &str, inode: &Inode) {
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
fn require_dir(store: &Store, dir: &str, name: &str) -> Result<(), FsError> {
    match store.dir(dir).map_err(storage_err)? {
        None => Err(FsError::NotFound),
        Some(rec) => writable_shard(dir, &rec, name),
    }
}

/// Like `require_dir`, for mutations of existing entries (a missing directory object is
/// reported by the entry lookup that follows).
fn require_writable(store: &Store, dir: &str, name: &str) -> Result<(), FsError> {
    match store.dir(dir).map_err(storage_err)? {
        None => Ok(()),
        Some(rec) => writable_shard(dir, &rec, name),
    }
}

fn writable_shard(dir: &str, rec: &DirRecord, name: &str) -> Result<(), FsError> {
    if rec.frozen.is_some() || rec.hidden.is_some() {
        return Err(FsError::Busy);
    }
    let hash = myriad_proto::name_hash(name);
    match rec.shard_for(hash) {
        None => Err(wrong_shard(dir, rec)),
        Some(s) if s.blocks_write(hash) => Err(FsError::Busy),
        Some(_) => Ok(()),
    }
}

/// The answer for a name of `dir` this node holds no shard for.
pub fn wrong_shard(dir: &str, rec: &DirRecord) -> FsError {
    FsError::WrongShard {
        dir: dir.to_string(),
        map: rec.map.clone().map(Box::new),
    }
}

/// The visible inode of `dir/name`; `Busy` while a multi-node operation holds it.
fn visible(store: &Store, dir: &str, name: &str) -> Result<Inode, FsError> {
    match store.entry(dir, name).map_err(storage_err)? {
        Some(EntryRecord {
            pending: Some(_), ..
        }) => Err(FsError::Busy),
        Some(EntryRecord { inode: Some(i), .. }) => Ok(i),
        _ => Err(FsError::NotFound),
    }
}

/// `dir` is a usable directory without an entry `name`.
fn require_free_name(store: &Store, dir: &str, name: &str) -> Result<(), FsError> {
    require_dir(store, dir, name)?;
    if store.entry(dir, name).map_err(storage_err)?.is_some() {
        return Err(FsError::AlreadyExists);
    }
    Ok(())
}

fn visible_file(store: &Store, dir: &str, name: &str, ino: u64) -> Result<Inode, FsError> {
    require_writable(store, dir, name)?;
    let inode = visible(store, dir, name)?;
    if inode.ino != ino {
        return Err(FsError::Stale);
    }
    match inode.kind {
        FileKind::File => Ok(inode),
        FileKind::Directory => Err(FsError::IsADirectory),
        _ => Err(FsError::InvalidArgument("not a regular file".into())),
    }
}

/// POSIX rename target rules. Returns the inode being replaced, if any.
fn check_rename_target(
    store: &Store,
    dir: &str,
    name: &str,
    incoming: &Inode,
    flags: RenameFlags,
) -> Result<Option<Inode>, FsError> {
    match store.entry(dir, name).map_err(storage_err)? {
        Some(EntryRecord {
            pending: Some(_), ..
        }) => Err(FsError::Busy),
        Some(EntryRecord {
            inode: Some(old), ..
        }) => {
            if flags.no_replace && old.ino != incoming.ino {
                return Err(FsError::AlreadyExists);
            }
            match (
                incoming.kind == FileKind::Directory,
                old.kind == FileKind::Directory,
            ) {
                (false, true) => Err(FsError::IsADirectory),
                (true, false) => Err(FsError::NotADirectory),
                (true, true) if old.ino != incoming.ino => Err(FsError::InvalidArgument(
                    "renaming a directory over an existing directory is not supported yet".into(),
                )),
                _ => Ok(Some(old)),
            }
        }
        _ => Ok(None),
    }
}

/// Deletes the local chunk-0 blocks of a file going away; if it has chunks on other nodes,
/// writes a ChunkGc intent and returns its txid for the caller to run.
fn drop_file_data(ctx: &mut Ctx<'_>, b: &mut Batch, inode: &Inode) -> Result<Option<u64>, FsError> {
    if inode.kind != FileKind::File {
        return Ok(None);
    }
    let c0 = chunk0_blocks(ctx.layout);
    ctx.store
        .trim_blocks(b, inode.ino, 0, 0, c0)
        .map_err(storage_err)?;
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

#[cfg(test)]
mod tests;
