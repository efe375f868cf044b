//! Messages. A connection starts with `Hello`/`HelloReply`; then the client sends
//! `RequestFrame`s and the server answers each with a `ResponseFrame` carrying the same id, in
//! any order (many requests in flight per connection).

use myriad_placement::ClusterMap;
use serde::{Deserialize, Serialize};

use crate::auth::{KeyId, Nonce, Proof};
use crate::{Caller, CounterSnapshot, DirEntry, FileKind, FsError, Inode, Shard, ShardMap, StatFs};

/// "MYRD": first field of every hello, so a stray connection is recognised at once.
pub const MAGIC: u32 = 0x4d59_5244;
/// Bumped on any incompatible change of a message. Peers must match exactly for now.
/// 5: authenticated handshake and tagged frames (issue 7).
/// 6: devices (`Inode::rdev`), `SetAttr::touch`, `opened` writes, `ChunkTrimFrom`,
/// `DirTouch` (issue 16).
pub const PROTOCOL_VERSION: u16 = 6;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerKind {
    Client,
    Server { node_id: u32 },
}

/// First message of a connection (auth.rs has the whole handshake).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub magic: u32,
    pub version: u16,
    pub peer: PeerKind,
    /// Public id of the key the client will prove; None: the client has no key (refused).
    pub key_id: Option<KeyId>,
    pub nonce: Nonce,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloReply {
    pub version: u16,
    pub node_id: u32,
    pub epoch: u64,
    /// Set when the server refuses the connection; it closes right after.
    pub refused: Option<String>,
    pub nonce: Nonce,
    /// The server's proof that it holds the key the client named (zero when refused).
    pub proof: Proof,
}

/// The client's proof, third message of a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Auth {
    pub proof: Proof,
}

/// The server's verdict on `Auth`; after it (when not refused) every frame carries a tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthReply {
    pub refused: Option<String>,
}

/// Which partition a request is for, and which partition sent it. 0 is "the server itself"
/// as a target (admin requests) and "not a partition" (a client, a CLI) as a source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    pub target: u32,
    pub source: u32,
}

impl Endpoints {
    /// A request from a client (or a server acting as one) to partition `target`.
    #[must_use]
    pub fn to(target: u32) -> Endpoints {
        Endpoints { target, source: 0 }
    }

    /// A request to the server itself rather than one of its partitions.
    pub const SERVER: Endpoints = Endpoints {
        target: 0,
        source: 0,
    };
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFrame {
    pub id: u64,
    /// Epoch of the sender's cluster map, so the receiver can redirect or ask for the newer map.
    pub epoch: u64,
    pub ends: Endpoints,
    pub caller: Caller,
    pub body: Request,
}

/// `RequestFrame` by reference, for encoding without copying the caller or the body (a write
/// carries up to 4 MiB). Its encoding is byte-for-byte that of `RequestFrame`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RequestFrameRef<'a> {
    pub id: u64,
    pub epoch: u64,
    pub ends: Endpoints,
    pub caller: &'a Caller,
    pub body: &'a Request,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseFrame {
    pub id: u64,
    pub result: Result<Response, FsError>,
}

/// Attribute changes; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime_ns: Option<i64>,
    pub mtime_ns: Option<i64>,
    /// Both times to the server's now (utimensat with UTIME_NOW twice, utime(NULL)): POSIX
    /// lets anyone who may write the file do this, not only its owner.
    pub touch: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenameFlags {
    /// Fail with `AlreadyExists` instead of replacing the destination (RENAME_NOREPLACE).
    pub no_replace: bool,
}

/// How `SetXattr` treats an existing attribute (XATTR_CREATE / XATTR_REPLACE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrMode {
    #[default]
    Either,
    /// Fail with `AlreadyExists` if it exists.
    Create,
    /// Fail with `NoData` if it does not exist.
    Replace,
}

/// Every request. Paths are absolute and normalized (`validate_path`). The comment on each
/// variant says which node it must be sent to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Any node. Measures the transport floor.
    Echo(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Owner of the entry (the parent directory's node; "/" -> its own node).
    Stat { path: String },
    /// Owner of directory `dir`: attributes of many names in one round trip.
    StatMany { dir: String, names: Vec<String> },
    /// Owner of the entry: attributes plus the first `max_bytes` of data, in one round trip.
    Fetch { path: String, max_bytes: u64 },
    /// Node of the shard of `path` holding position (`from`, or `after` if given): up to
    /// `limit` entries with attributes, in hash order, from that position to the shard's end
    /// (docs/huge-dirs.md "Listings").
    ReadDir {
        path: String,
        /// Start at this name hash (inclusive) ...
        from: u64,
        /// ... or after this name (its hash must be at least `from`).
        after: Option<String>,
        limit: u32,
    },
    /// Home of directory `dir`: its shard map (unsplit if it is not split).
    GetShardMap { dir: String },
    /// Owner of the entry. Creates a file, optionally with its first bytes (one atomic write).
    Create {
        path: String,
        mode: u32,
        exclusive: bool,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        /// false: reply once applied (visible to everyone), durable with the node's next
        /// group commit, which follows at once; a client that promises durability later
        /// (the FUSE mount, at close) ends with a durable write or `Sync` to the same node.
        durable: bool,
    },
    /// Owner of the entry (the coordinator of the two-node mkdir). `shards` > 1 creates the
    /// directory split into that many shards (rounded up to a power of two, at most 256).
    Mkdir {
        path: String,
        mode: u32,
        shards: u32,
    },
    /// Owner of the entry (the coordinator of the two-node rmdir).
    Rmdir { path: String },
    /// Owner of the entry.
    Unlink { path: String },
    /// Owner of the entry.
    Symlink { path: String, target: String },
    /// Owner of the entry.
    Readlink { path: String },
    /// Owner of the entry.
    SetAttr { path: String, set: SetAttr },
    /// Owner of the source entry (the coordinator if the destination lives elsewhere).
    Rename {
        from: String,
        to: String,
        flags: RenameFlags,
    },
    /// Owner of the entry: write into chunk 0 (offset + len <= chunk size); updates size, mtime.
    /// `opened`: through a descriptor whose open checked access (see `InodeOp::Write`).
    Write {
        path: String,
        ino: u64,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        opened: bool,
    },
    /// Owner of the entry: read from chunk 0; returns the current inode too.
    Read {
        path: String,
        ino: u64,
        offset: u64,
        len: u64,
    },
    /// Owner of the entry `dst`: copy up to `len` bytes of file `src` (inode `src_ino`) at
    /// `src_off` into `dst` (inode `dst_ino`) at `dst_off`, server to server: the bytes
    /// never pass through the client (copy_file_range). Short at the source's end and at
    /// `limits::COPY_BYTES_MAX`; answers `Copied`. `opened`: as for `Write`.
    CopyRange(CopyRange),
    /// Owner of the entry: set the size; trims chunks beyond it on their nodes before replying.
    Truncate {
        path: String,
        ino: u64,
        size: u64,
        opened: bool,
    },
    /// Owner of the entry: raise the size to at least `size` after chunk writes elsewhere.
    ExtendSize {
        path: String,
        ino: u64,
        size: u64,
        opened: bool,
    },
    /// Owner of chunk `chunk` (>= 1) of `ino`.
    WriteChunk {
        ino: u64,
        chunk: u64,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Owner of chunk `chunk` (>= 1) of `ino`. Missing bytes read as zeros.
    ReadChunk {
        ino: u64,
        chunk: u64,
        offset: u64,
        len: u64,
    },
    /// Owner of the entry: create a metadata-only node (`Fifo`, `Socket`, or, as root, a
    /// `CharDevice` or `BlockDevice` numbered `rdev`).
    Mknod {
        path: String,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    },
    /// Owner of the entry: set (`value: Some`) or remove (`None`) a `user.` extended attribute.
    SetXattr {
        path: String,
        name: String,
        value: Option<serde_bytes::ByteBuf>,
        mode: XattrMode,
    },
    /// Owner of the entry of `from`: give the regular file at `from` the additional name `to`
    /// (a hard link; `to` must not exist).
    Link { from: String, to: String },
    /// Owner of the entry of `path`: returns once everything that node applied before it
    /// is durable (a barrier after non-durable creates), then checks that `path` still
    /// names inode `ino` (`Stale` if a crash lost it, `NotFound` if it was removed).
    Sync { path: String, ino: u64 },
    /// Any node: that node's capacity and usage.
    StatFs,
    /// Any node: its request counters.
    GetCounters,
    /// Any node: reset its request counters.
    ResetCounters,
    /// Any node: its cluster map.
    GetMap,
    /// Any node: adopt `map` if its epoch is newer.
    InstallMap(Box<ClusterMap>),
    /// Any node, as root: the directory objects it holds (fsck), after path `after`.
    FsckDirs { after: Option<String>, limit: u32 },
    /// Any node, as root: raw entries of its parts of `dir` (all shards, pending ones too).
    FsckEntries {
        dir: String,
        after: Option<String>,
        limit: u32,
    },
    /// Any node, as root: inodes with blocks here (after `after`), each with its first block.
    FsckBlocks { after: Option<u64>, limit: u32 },
    /// Any node, as root: the first block of `ino` at or after `block`.
    FsckBlockFrom { ino: u64, block: u64 },
    /// Any node, as root: one repair (`myriad fsck --repair`).
    FsckRepair(FsckRepair),
    /// A server holding a copy (primary or backup) of the target partition, as root: the
    /// copy's last applied batch and a digest of its whole contents (`ReplicaDigest`).
    FsckReplica,
    /// Primary to a backup of the same partition: the backup's copy of one block, if intact
    /// (repairing a block that failed its checksum on the primary).
    ReplicaBlock { ino: u64, block: u64 },

    // ---- server to server ----
    /// Owner of directory `path`: create its directory object (idempotent for the same `ino`),
    /// split into 2^`depth` shards (it creates the other shards on their nodes first).
    DirObjectCreate { path: String, ino: u64, depth: u8 },
    /// Node of shards `shards` of directory `dir`: hold them (empty; pre-split mkdir).
    ShardCreate {
        dir: String,
        ino: u64,
        shards: Vec<Shard>,
    },
    /// Node of the upper half `child` of a splitting shard: stage these entries, hidden.
    ShardImport {
        dir: String,
        ino: u64,
        txid: u64,
        child: Shard,
        entries: Vec<ExportedEntry>,
    },
    /// Node of `child`: make it visible (`reveal`) or drop it with its entries (idempotent).
    ShardFinish {
        dir: String,
        txid: u64,
        child: Shard,
        reveal: bool,
    },
    /// Home of `dir`: leaf `shard` splits (`split`) or the split was abandoned (idempotent).
    ShardMapChange {
        dir: String,
        ino: u64,
        shard: Shard,
        split: bool,
    },
    /// Owner of directory `path`: remove its (empty) directory object (idempotent).
    DirObjectRemove { path: String, ino: u64 },
    /// Owner of the destination entry: stage `inode` under `to` (invisible until commit) with
    /// the chunk-0 blocks that move with it.
    RenamePrepare {
        txid: u64,
        coordinator: u32,
        to: String,
        inode: Inode,
        flags: RenameFlags,
        blocks: Vec<(u64, serde_bytes::ByteBuf)>,
    },
    /// Owner of the destination entry: make the staged entry visible (idempotent).
    RenameCommit { txid: u64 },
    /// Owner of the destination entry: drop the staged entry (idempotent).
    RenameAbort { txid: u64 },
    /// Owner of chunk `chunk`: drop its bytes at and beyond `keep_bytes` (chunk-relative).
    ChunkTrim {
        ino: u64,
        chunk: u64,
        keep_bytes: u64,
    },
    /// Any partition: drop every byte of `ino` it holds at or beyond `from_bytes` in chunks
    /// 1 and up (a truncate or unlink of a file with many chunks: one request per
    /// partition instead of one per chunk, so a huge sparse file goes in bounded time).
    ChunkTrimFrom { ino: u64, from_bytes: u64 },
    /// Owner of the entry of directory `path` (inode `ino`): entries were added or removed
    /// in it, by the partition holding them, at `now_ns`: set its mtime and ctime, and its
    /// link count to `nlink` if given.
    DirTouch {
        path: String,
        ino: u64,
        now_ns: i64,
        nlink: Option<u32>,
    },
    /// Owner of directory `path`: freeze it for directory rename `txid` (writes get `Busy`).
    DirFreeze { path: String, txid: u64 },
    /// Owner of directory `path` (frozen by `txid`): a page of entries with their chunk-0 data.
    DirExport {
        path: String,
        txid: u64,
        after: Option<String>,
    },
    /// Node of shards `shards` of directory `path` (its home if `shards` is empty or holds
    /// shard 0): create its part hidden (if new) with these shards and, on the home, `map`;
    /// add staged entries.
    DirImport {
        path: String,
        txid: u64,
        ino: u64,
        shards: Vec<Shard>,
        map: Option<ShardMap>,
        entries: Vec<ExportedEntry>,
    },
    /// Owner of directory `path`: finish its part in directory rename `txid` (idempotent).
    DirFinish {
        path: String,
        txid: u64,
        action: DirAction,
    },
    /// Owner of the entry of directory `path`: its attributes (for permission checks), and if
    /// `subscribe`, a lease during which every change is pushed to the sender first.
    /// `seq` orders this subscriber's subscribe/unsubscribe requests (they may be handled
    /// out of order): an unsubscribe older than the subscription held is ignored.
    GetAttrs {
        path: String,
        subscribe: bool,
        seq: u64,
    },
    /// Like `GetAttrs { subscribe: true }` for a replica already held: extends its lease.
    RenewAttrs { path: String, seq: u64 },
    /// Owner of the entry of `path`: stop pushing changes to the sender.
    Unsubscribe { path: String, seq: u64 },
    /// To a subscriber: the attributes of `path` changed (`None`: it is gone).
    AttrUpdate { path: String, inode: Option<Inode> },
    /// To every node: drop replicas of `prefix` and everything under it (directory rename).
    InvalidatePrefix { prefix: String },
    /// Owner of the entry of `path`: create a hard-link name for inode `ino` living on `home`.
    PutLinkRef { path: String, ino: u64, home: u32 },
    /// Home of hard-linked inode `ino`: add `delta` to its link count (the object and its
    /// data go away at 0). Replies with the inode after the change (`Unit` when removed).
    AdjustLinks { ino: u64, delta: i64 },
    /// Home of hard-linked inode `ino`: `op` (from a path request whose path names a link
    /// to it; ancestors already checked by the sender) applied to the inode object, as
    /// `caller`. A flat operation, not a nested `Request`: a decoder must never recurse on
    /// what a peer sends.
    AtInode {
        ino: u64,
        caller: Caller,
        op: InodeOp,
    },
    // ---- replication (docs/replication.md); target = the partition, sent by its primary ----
    /// A backup of the target partition: apply batch `seq` (after every lower one), durably,
    /// then answer. `acked`: every batch up to it was acknowledged by this backup before (a
    /// backup that lacks one of them lost its disk: `ReplicaGap`).
    Replicate {
        seq: u64,
        acked: u64,
        ops: Vec<ReplOp>,
    },
    /// A backup of the target partition: the last batch it applied (`Response::Seq`).
    ReplicaSeq,
    /// A backup of the target partition: a whole copy begins; drop everything held.
    ReplicaReset,
    /// A backup of the target partition: one page of a whole copy.
    ReplicaCopy { ops: Vec<ReplOp> },
    /// A backup of the target partition: the copy is complete and reflects every batch up
    /// to `seq`; batches after it follow.
    ReplicaCopyDone { seq: u64 },
    /// A backup of the target partition: one page of its keys in `space` after `after`
    /// (a primary that restarted behind its backups copies from the most advanced one).
    ReplicaRead {
        space: u8,
        after: Option<serde_bytes::ByteBuf>,
    },
    // ---- membership (docs/replication.md); target = the server itself ----
    /// A message of the cluster-map Raft group (openraft's request, postcard-encoded; the
    /// answer is `Response::Raft`).
    Raft {
        rpc: RaftRpc,
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
    },
    /// The Raft leader: "I am alive and at map `epoch`; may I serve?" (`Response::Lease`).
    /// The sender serves its partitions only while it holds a lease (docs/replication.md).
    Lease,
    /// Any server: the last batch of every partition copy it holds (`Response::Seqs`); the
    /// leader completes a move once the new copy has caught up with its primary.
    PartitionSeqs,
}

/// Which openraft RPC a `Request::Raft` carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaftRpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
    /// A map change forwarded to the leader (payload: the `ClusterMap`).
    Propose,
}

/// One put (`value` set) or delete of a replicated batch, in a space of the partition's store
/// (`myriad_storage::Space::code`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplOp {
    pub space: u8,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub value: Option<serde_bytes::ByteBuf>,
}

/// `Request::CopyRange`: copy up to `len` bytes of file `src` (inode `src_ino`) at
/// `src_off` into `dst` (inode `dst_ino`) at `dst_off`. `opened`: as for `Write`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyRange {
    pub src: String,
    pub src_ino: u64,
    pub src_off: u64,
    pub dst: String,
    pub dst_ino: u64,
    pub dst_off: u64,
    pub len: u64,
    pub opened: bool,
}

/// A path request without its path, applied to a hard-linked inode at its home. The `ino`
/// of handle operations is the inode the handle was opened on (`Stale` if it differs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InodeOp {
    Stat,
    Fetch {
        max_bytes: u64,
    },
    Read {
        ino: u64,
        offset: u64,
        len: u64,
    },
    /// `opened` (here and below): sent through a descriptor whose open checked access, so
    /// the file's owner may go on writing without a write bit (a file made by
    /// open(O_CREAT, 0) is written through its descriptor; POSIX checks access at open).
    Write {
        ino: u64,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        opened: bool,
    },
    ExtendSize {
        ino: u64,
        size: u64,
        opened: bool,
    },
    Truncate {
        ino: u64,
        size: u64,
        opened: bool,
    },
    SetAttr {
        set: SetAttr,
    },
    SetXattr {
        name: String,
        value: Option<serde_bytes::ByteBuf>,
        mode: XattrMode,
    },
}

/// A directory object as fsck sees it on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsckDir {
    pub path: String,
    pub ino: u64,
    pub shards: Vec<Shard>,
    pub map: Option<ShardMap>,
    /// Frozen, hidden or splitting: an operation is in flight.
    pub busy: bool,
}

/// An entry as stored (hard-link names unresolved).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsckEntry {
    pub name: String,
    pub inode: Option<Inode>,
    pub pending: bool,
}

/// What `fsck --repair` may do; each is safe on its own and idempotent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FsckRepair {
    /// A directory entry without its directory object: create the (empty) object.
    CreateDirObject { path: String, ino: u64 },
    /// A directory object without an entry naming it, and empty: remove it.
    DropEmptyDirObject { path: String, ino: u64 },
    /// Set a hard-linked inode's link count to the number of names found.
    SetLinks { ino: u64, nlink: u32 },
    /// Blocks of an inode no file has, or beyond its size: drop blocks from `from_block`.
    DropBlocks { ino: u64, from_block: u64 },
    /// A block failing its checksum on some copy: make every copy intact again from one
    /// that is (sent to the partition's primary).
    RepairBlock { ino: u64, block: u64 },
}

/// One entry moved by a directory rename, with the chunk-0 blocks that live with its inode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedEntry {
    pub name: String,
    pub inode: Inode,
    pub blocks: Vec<(u64, serde_bytes::ByteBuf)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirAction {
    /// New copy: make the directory object and its staged entries visible.
    Reveal,
    /// Old copy after an abort: accept writes again.
    Thaw,
    /// Remove the object with its entries and the chunk-0 blocks of its files, except the
    /// blocks of files that (same name, same inode) also sit under path `keep_blocks_of` on
    /// this node: the other copy of a directory rename shares them.
    Drop { keep_blocks_of: Option<String> },
}

impl Request {
    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Echo(_) => "echo",
            Request::Stat { .. } => "stat",
            Request::StatMany { .. } => "stat_many",
            Request::Fetch { .. } => "fetch",
            Request::ReadDir { .. } => "readdir",
            Request::GetShardMap { .. } => "get_shard_map",
            Request::ShardCreate { .. } => "shard_create",
            Request::ShardImport { .. } => "shard_import",
            Request::ShardFinish { .. } => "shard_finish",
            Request::ShardMapChange { .. } => "shard_map_change",
            Request::Create { .. } => "create",
            Request::Mkdir { .. } => "mkdir",
            Request::Rmdir { .. } => "rmdir",
            Request::Unlink { .. } => "unlink",
            Request::Symlink { .. } => "symlink",
            Request::Readlink { .. } => "readlink",
            Request::SetAttr { .. } => "setattr",
            Request::Rename { .. } => "rename",
            Request::Write { .. } => "write",
            Request::Read { .. } => "read",
            Request::Truncate { .. } => "truncate",
            Request::CopyRange(_) => "copy_range",
            Request::ExtendSize { .. } => "extend_size",
            Request::WriteChunk { .. } => "write_chunk",
            Request::ReadChunk { .. } => "read_chunk",
            Request::Mknod { .. } => "mknod",
            Request::SetXattr { .. } => "setxattr",
            Request::Sync { .. } => "sync",
            Request::Link { .. } => "link",
            Request::PutLinkRef { .. } => "put_link_ref",
            Request::AdjustLinks { .. } => "adjust_links",
            Request::AtInode { .. } => "at_inode",
            Request::StatFs => "statfs",
            Request::GetCounters => "get_counters",
            Request::ResetCounters => "reset_counters",
            Request::GetMap => "get_map",
            Request::InstallMap(_) => "install_map",
            Request::FsckDirs { .. } => "fsck_dirs",
            Request::FsckEntries { .. } => "fsck_entries",
            Request::FsckBlocks { .. } => "fsck_blocks",
            Request::FsckBlockFrom { .. } => "fsck_block_from",
            Request::FsckRepair(_) => "fsck_repair",
            Request::FsckReplica => "fsck_replica",
            Request::ReplicaBlock { .. } => "replica_block",
            Request::DirObjectCreate { .. } => "dirobj_create",
            Request::DirObjectRemove { .. } => "dirobj_remove",
            Request::RenamePrepare { .. } => "rename_prepare",
            Request::RenameCommit { .. } => "rename_commit",
            Request::RenameAbort { .. } => "rename_abort",
            Request::ChunkTrim { .. } => "chunk_trim",
            Request::ChunkTrimFrom { .. } => "chunk_trim_from",
            Request::DirTouch { .. } => "dir_touch",
            Request::DirFreeze { .. } => "dir_freeze",
            Request::DirExport { .. } => "dir_export",
            Request::DirImport { .. } => "dir_import",
            Request::DirFinish { .. } => "dir_finish",
            Request::GetAttrs { .. } => "get_attrs",
            Request::RenewAttrs { .. } => "renew_attrs",
            Request::Unsubscribe { .. } => "unsubscribe",
            Request::AttrUpdate { .. } => "attr_update",
            Request::InvalidatePrefix { .. } => "invalidate_prefix",
            Request::Replicate { .. } => "replicate",
            Request::ReplicaSeq => "replica_seq",
            Request::ReplicaReset => "replica_reset",
            Request::ReplicaCopy { .. } => "replica_copy",
            Request::ReplicaCopyDone { .. } => "replica_copy_done",
            Request::ReplicaRead { .. } => "replica_read",
            Request::Raft { .. } => "raft",
            Request::Lease => "lease",
            Request::PartitionSeqs => "partition_seqs",
        }
    }

    /// The path of a request that, when it names a hard link, is applied at the inode's
    /// home (reads and changes of the file's contents or attributes; see `into_inode_op`).
    #[must_use]
    pub fn link_resolved_path(&self) -> Option<&str> {
        match self {
            Request::Read { path, .. }
            | Request::Write { path, .. }
            | Request::ExtendSize { path, .. }
            | Request::Truncate { path, .. }
            | Request::SetAttr { path, .. }
            | Request::SetXattr { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The inode operation of a request `link_resolved_path` names (`None` for others).
    #[must_use]
    pub fn into_inode_op(self) -> Option<InodeOp> {
        Some(match self {
            Request::Read {
                ino, offset, len, ..
            } => InodeOp::Read { ino, offset, len },
            Request::Write {
                ino,
                offset,
                data,
                opened,
                ..
            } => InodeOp::Write {
                ino,
                offset,
                data,
                opened,
            },
            Request::ExtendSize {
                ino, size, opened, ..
            } => InodeOp::ExtendSize { ino, size, opened },
            Request::Truncate {
                ino, size, opened, ..
            } => InodeOp::Truncate { ino, size, opened },
            Request::SetAttr { set, .. } => InodeOp::SetAttr { set },
            Request::SetXattr {
                name, value, mode, ..
            } => InodeOp::SetXattr { name, value, mode },
            _ => return None,
        })
    }

    /// Requests only servers may send (the peer kind is self-declared until connections are
    /// authenticated, issue 7; this keeps ordinary clients out of the internal protocol).
    #[must_use]
    pub fn is_server_only(&self) -> bool {
        matches!(
            self,
            Request::DirObjectCreate { .. }
                | Request::DirObjectRemove { .. }
                | Request::ShardCreate { .. }
                | Request::ShardImport { .. }
                | Request::ShardFinish { .. }
                | Request::ShardMapChange { .. }
                | Request::RenamePrepare { .. }
                | Request::RenameCommit { .. }
                | Request::RenameAbort { .. }
                | Request::ChunkTrim { .. }
                | Request::ChunkTrimFrom { .. }
                | Request::DirTouch { .. }
                | Request::DirFreeze { .. }
                | Request::DirExport { .. }
                | Request::DirImport { .. }
                | Request::DirFinish { .. }
                | Request::GetAttrs { .. }
                | Request::RenewAttrs { .. }
                | Request::Unsubscribe { .. }
                | Request::AttrUpdate { .. }
                | Request::InvalidatePrefix { .. }
                | Request::PutLinkRef { .. }
                | Request::AdjustLinks { .. }
                | Request::AtInode { .. }
                | Request::Raft { .. }
                | Request::Lease
                | Request::PartitionSeqs
        ) || self.is_replication()
    }

    /// Requests for the backup copy of a partition rather than its primary.
    #[must_use]
    pub fn is_replication(&self) -> bool {
        matches!(
            self,
            Request::Replicate { .. }
                | Request::ReplicaSeq
                | Request::ReplicaReset
                | Request::ReplicaCopy { .. }
                | Request::ReplicaCopyDone { .. }
                | Request::ReplicaRead { .. }
                | Request::ReplicaBlock { .. }
        )
    }

    /// Client requests that may need more disk: refused with `NoSpace` while the server's
    /// free space is below its reserve (myriad-server space.rs). `AtInode` carries a client's
    /// operation on a hard-linked file to the server holding its inode, which may be another
    /// server with a fuller disk, so it counts too.
    #[must_use]
    pub fn grows_storage(&self) -> bool {
        matches!(
            self,
            Request::Create { .. }
                | Request::Mkdir { .. }
                | Request::Symlink { .. }
                | Request::Rename { .. }
                | Request::Write { .. }
                | Request::CopyRange(_)
                | Request::ExtendSize { .. }
                | Request::WriteChunk { .. }
                | Request::Mknod { .. }
                | Request::SetXattr { .. }
                | Request::Link { .. }
                | Request::AtInode {
                    op: InodeOp::Write { .. }
                        | InodeOp::ExtendSize { .. }
                        | InodeOp::SetXattr { .. },
                    ..
                }
        )
    }

    /// Client requests that write anything at all, frees included: refused too once the
    /// disk is all but full, so that the storage engine itself never runs out of space.
    #[must_use]
    pub fn writes_storage(&self) -> bool {
        self.grows_storage()
            || matches!(
                self,
                Request::Rmdir { .. }
                    | Request::Unlink { .. }
                    | Request::SetAttr { .. }
                    | Request::Truncate { .. }
                    | Request::AtInode {
                        op: InodeOp::Truncate { .. } | InodeOp::SetAttr { .. },
                        ..
                    }
            )
    }

    /// Requests only holders of the cluster secret may send (SECURITY.md): they read or
    /// change everything regardless of permissions. A client key gets `PermissionDenied`.
    #[must_use]
    pub fn needs_cluster_secret(&self) -> bool {
        matches!(self, Request::ResetCounters)
            || self.is_fsck()
            || self.is_server_only()
            || self.is_replication()
    }

    /// fsck's requests: every node's raw state, and its repairs.
    #[must_use]
    pub fn is_fsck(&self) -> bool {
        matches!(
            self,
            Request::FsckDirs { .. }
                | Request::FsckEntries { .. }
                | Request::FsckBlocks { .. }
                | Request::FsckBlockFrom { .. }
                | Request::FsckRepair(_)
                | Request::FsckReplica
        )
    }

    /// Admin requests are not counted as file system traffic.
    #[must_use]
    pub fn is_admin(&self) -> bool {
        self.is_fsck()
            || matches!(
                self,
                Request::GetCounters
                    | Request::ResetCounters
                    | Request::GetMap
                    | Request::InstallMap(_)
                    | Request::Raft { .. }
                    | Request::Lease
                    | Request::PartitionSeqs
            )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Echo(#[serde(with = "serde_bytes")] Vec<u8>),
    Unit,
    Attr(Inode),
    Attrs(Vec<Result<Inode, FsError>>),
    Fetched {
        inode: Inode,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    DirPage {
        entries: Vec<DirEntry>,
        /// More entries in this shard after this name.
        next: Option<String>,
        /// The serving shard ends before this hash (`None`: at the end of the hash space);
        /// a listing continues there once `next` is `None`.
        shard_end: Option<u64>,
        /// The directory's map, from its home once it is split.
        map: Option<Box<ShardMap>>,
    },
    ShardMap(Box<ShardMap>),
    Data {
        inode: Option<Inode>,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    Link(String),
    StatFs(StatFs),
    /// Attributes with the lease granted (0: not subscribed).
    AttrLease {
        inode: Inode,
        lease_ms: u64,
    },
    Exported {
        entries: Vec<ExportedEntry>,
        next: Option<String>,
    },
    Counters(CounterSnapshot),
    Map(Box<ClusterMap>),
    FsckDirs(Vec<FsckDir>),
    FsckEntries {
        entries: Vec<FsckEntry>,
        next: Option<String>,
    },
    FsckBlocks(Vec<(u64, u64)>),
    Block(Option<u64>),
    /// A replica's last applied batch; None while it is receiving a whole copy.
    Seq(Option<u64>),
    /// A page of a replica's keys (empty: no more).
    ReplicaPage(Vec<ReplOp>),
    ReplicaDigest {
        /// Last applied batch (None: receiving a whole copy).
        seq: Option<u64>,
        keys: u64,
        /// xxh3 of every (space, key, value) but the sequence number itself.
        digest: u64,
        /// Blocks of this copy that fail their checksum (ino, block), at most 64.
        corrupt: Vec<(u64, u64)>,
    },
    /// A backup's intact copy of a block (None: it has no such block).
    BlockCopy(Option<serde_bytes::ByteBuf>),
    /// openraft's response, postcard-encoded.
    Raft(#[serde(with = "serde_bytes")] Vec<u8>),
    /// After a change of entries (create, symlink, mknod, mkdir, unlink, rmdir): the new
    /// inode, if one was made, and the parent directory's attributes after the change (its
    /// new times and link count) when its partition sent them back, so a client may cache
    /// them instead of asking again.
    Changed {
        inode: Option<Inode>,
        parent: Option<Inode>,
    },
    /// The destination after a `CopyRange`, and how many bytes were copied.
    Copied {
        inode: Inode,
        bytes: u64,
    },
    /// `granted`: the sender may serve for the lease period counted from when it sent the
    /// request. `epoch`: the leader's map epoch (a sender behind it is not granted).
    Lease {
        granted: bool,
        epoch: u64,
    },
    /// (partition, last applied batch; None while a whole copy is arriving) of every copy a
    /// server holds, primary or backup.
    Seqs(Vec<(u32, Option<u64>)>),
}

impl Response {
    /// Bytes the encoded response needs, roughly: payload plus room for headers.
    #[must_use]
    pub fn size_hint(&self) -> usize {
        const HEADERS: usize = 256;
        match self {
            Response::Echo(d)
            | Response::Fetched { data: d, .. }
            | Response::Data { data: d, .. } => d.len() + HEADERS,
            Response::DirPage { entries, .. } => entries.len() * 96 + HEADERS,
            _ => HEADERS,
        }
    }
}
