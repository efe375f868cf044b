//! Requests, grouped by who may send them (`Request`'s audiences), and the types they carry.

use myriad_placement::{ClusterMap, NodeId, PartitionId};
use serde::{Deserialize, Serialize};

use crate::auth::Capability;
use crate::{Caller, FileKind, Inode, InodeId, Shard, ShardMap};

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
    /// Swap the two names, both of which must exist (RENAME_EXCHANGE; not directories).
    pub exchange: bool,
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

/// Every request, by audience. What a connection may send is decided by the type its frames
/// decode to: a connection with a client key decodes `FromClient` (a prefix of this enum:
/// same variant indices, so the bytes agree), which has no way to say a peer, replica or
/// administration request; such a frame fails to decode and is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Client(ClientRequest),
    Server(ServerRequest),
    Admin(AdminRequest),
    Peer(PeerRequest),
    Replica(ReplicaRequest),
}

/// What a client-key connection may send: the first two audiences of `Request`, with the
/// same variant indices (checked by a test).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromClient {
    Client(ClientRequest),
    Server(ServerRequest),
}

impl From<FromClient> for Request {
    fn from(r: FromClient) -> Request {
        match r {
            FromClient::Client(c) => Request::Client(c),
            FromClient::Server(s) => Request::Server(s),
        }
    }
}

impl From<ClientRequest> for Request {
    fn from(r: ClientRequest) -> Request {
        Request::Client(r)
    }
}

impl From<ServerRequest> for Request {
    fn from(r: ServerRequest) -> Request {
        Request::Server(r)
    }
}

impl From<AdminRequest> for Request {
    fn from(r: AdminRequest) -> Request {
        Request::Admin(r)
    }
}

impl From<PeerRequest> for Request {
    fn from(r: PeerRequest) -> Request {
        Request::Peer(r)
    }
}

impl From<ReplicaRequest> for Request {
    fn from(r: ReplicaRequest) -> Request {
        Request::Replica(r)
    }
}

/// File system requests: what any authenticated client may send, to the partition the
/// comment on each variant names. Paths are absolute and normalized (`validate_path`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Any node. Measures the transport floor.
    Echo(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Owner of the entry (the parent directory's node; "/" -> its own node).
    Stat { path: String },
    /// Owner of the entry: `path`'s attributes for an open that will write it, as `Stat`,
    /// but `ReadOnly` in a frozen tree (so the open fails, not a later write).
    OpenWrite { path: String },
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
        /// The new file's inode number, from a range this partition reserved for the
        /// sending client (`ReserveIds`); `None`: the partition picks one. A number not
        /// in the client's reservations, or used already, is refused (`InvalidArgument`).
        ino: Option<InodeId>,
    },
    /// Owner of the entry (the coordinator of the two-node mkdir). `shards` > 1 creates the
    /// directory split into that many shards (rounded up to a power of two, at most 4,096).
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
        ino: InodeId,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        opened: bool,
    },
    /// Owner of the entry: read from chunk 0; returns the current inode too.
    Read {
        path: String,
        ino: InodeId,
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
        ino: InodeId,
        size: u64,
        opened: bool,
    },
    /// Owner of the entry: raise the size to at least `size` after chunk writes elsewhere.
    ExtendSize {
        path: String,
        ino: InodeId,
        size: u64,
        opened: bool,
    },
    /// Owner of chunk `chunk` (>= 1) of `ino`.
    /// From a client, `cap` must grant writing `ino` (`Grant`); servers send none.
    WriteChunk {
        ino: InodeId,
        chunk: u64,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        cap: Option<Capability>,
    },
    /// Owner of chunk `chunk` (>= 1) of `ino`. Missing bytes read as zeros. From a client,
    /// `cap` must grant reading `ino` (`Grant`); servers send none.
    ReadChunk {
        ino: InodeId,
        chunk: u64,
        offset: u64,
        len: u64,
        cap: Option<Capability>,
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
    Sync { path: String, ino: InodeId },
    /// Owner of the entry: after checking that the caller may read (`write`: also write)
    /// file `path`, inode `ino`, a capability for its chunks past the first (`Granted`).
    /// `opened`: as for `Write`.
    Grant {
        path: String,
        ino: InodeId,
        write: bool,
        opened: bool,
    },
    /// Where `request` goes: a change (`is_change`) with the id that makes it happen once
    /// (docs/write-path.md, "Exactly once"). A retry of it, after a timeout or a failover,
    /// answers the first outcome instead of applying it again.
    Once {
        id: OnceId,
        request: Box<ClientRequest>,
        /// Answer once the change is applied on the primary (visible to all), not once it
        /// is durable on every copy: the answer is then `Response::Applied`, and
        /// `SyncPartition` later makes it durable (a mount's changes, docs/fuse.md
        /// "Durability"). Changes spanning partitions are durable whatever this says.
        visible: bool,
    },
    /// The partition targeted: returns once everything it applied before is durable on
    /// every copy, if its primary is still incarnation `incarnation` (the one that answered
    /// the changes being synced, `Response::Applied`); else `Io`: those changes may be lost.
    SyncPartition { incarnation: u64 },
    /// Where `request` goes (a `Fetch`, `Stat`, `StatMany` or `ReadDir`): the read, and a
    /// lease on the part of the directory it reads that this partition holds, for client
    /// `holder` (docs/fuse.md "Directory leases"). The answer is `Response::Leased`.
    Leased {
        holder: u64,
        request: Box<ClientRequest>,
        /// Asks for an exclusive lease (docs/fuse.md "Write-behind"): granted only if no
        /// other client holds one on the part and `holder` may create names there.
        exclusive: bool,
    },
    /// Where `request` goes (a read: `Stat`, `Fetch`, `StatMany`, `ReadDir`, `Read`,
    /// `Readlink`, `Grant`): the read, made by client `holder`, so that it does not
    /// recall `holder`'s own exclusive lease on the directory (every other reader's read
    /// does: docs/fuse.md "Write-behind"). Answered as the read alone.
    ReadAs {
        holder: u64,
        request: Box<ClientRequest>,
    },
    /// The partition of every change in it: changes sent once (`Once`), applied in order,
    /// each as if sent alone (one failing does not stop the next); answered by
    /// `Response::Bundle`, one answer per change. One answered `Busy` or with a routing
    /// error stops the batch: the changes after it are answered `Busy`, untried, and the
    /// client sends them again in order. A mount's write-behind journal is sent this way
    /// (at most `limits::BATCH_MAX` changes). `times`: per change, when the client
    /// answered it (ns since the epoch); the partition applies it as made then (its new
    /// times, its directory's), so that what the client answered and what the servers
    /// keep agree (a time further than a minute from the server's clock is not taken).
    Batch {
        ops: Vec<ClientRequest>,
        times: Vec<i64>,
    },
    /// The partition targeted, sent once: reserves `count` (at most
    /// `limits::RESERVE_IDS_MAX`) inode numbers for the sending client's creates there
    /// (`Create::ino`); answered by `Response::Ids`. A client holds at most two ranges
    /// per partition: a third replaces the older.
    ReserveIds { count: u32 },
    /// The primary of `Ring::owner_of_locks(ino)`: a file lock request (docs/fuse.md "File
    /// locks between mounts"); the answer is `Response::Lock`.
    Lock(crate::locks::LockRequest),
    /// The partition that held the names of `inos`: this client still has those files
    /// open, so their data stays (as orphans) for `limits::ORPHAN_HOLD` more if another
    /// client removes their last name (docs/fuse.md "Open files unlinked elsewhere").
    KeepOpen { inos: Vec<InodeId> },
    /// Home of directory `path` (root only): mark every part of its directory object as
    /// inside the frozen tree `mark` (changes of its entries are then refused with
    /// `ReadOnly`), or, with `None`, unmark it. Idempotent (docs/metadata-index.md).
    /// With `auto`, the mark of an automatic index instead: changes are not refused, the
    /// first one unregisters the index (`PeerRequest::UnregisterIndex`) before it applies.
    MarkReadOnly {
        path: String,
        mark: Option<crate::ReadOnlyMark>,
        auto: bool,
    },
    /// Any partition: the directories it homes that were read at least `min_reads` times
    /// in its popularity window and not changed for `quiet_ms` (the candidates for an
    /// automatic metadata index, docs/metadata-index.md); `Response::IndexCandidates`.
    IndexCandidates { min_reads: u64, quiet_ms: u64 },
    /// Where `request` goes (a change this client sent once as `id` and was answered
    /// `Response::Applied` by an earlier primary of the partition, now gone): sent again
    /// by a client that kept it (docs/fuse.md "Keeping answered changes until they are
    /// durable"). Answered as `Once` is, durable: by its recorded outcome if it survived
    /// the failover; else applied, unless another client changed any name it touches
    /// since this primary opened: then `FsError::Io`, and the change is lost (its
    /// client reports it at the next fsync). Protocol 31.
    Resend {
        id: OnceId,
        request: Box<ClientRequest>,
    },
}

/// What a read reads (`ClientRequest::read_of`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOf<'a> {
    /// One name (its entry, attributes or bytes).
    Name(&'a str),
    /// A directory's names.
    Listing(&'a str),
}

/// What a directory lease covers: the entries of `dir` that partition `partition` holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseKey {
    pub partition: PartitionId,
    pub dir: String,
}

/// A change's identity: the client that sends it (random per client), its number among
/// that client's changes, and the lowest number the client still waits for (outcomes below
/// it may be forgotten).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OnceId {
    pub client: u64,
    pub seq: u64,
    pub low: u64,
}

/// Requests about a server as a whole (its map, counters, free space), answered by the server
/// whatever partition they name; any authenticated client may send them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerRequest {
    /// Any node: that node's capacity and usage.
    StatFs,
    /// Any node: its request counters.
    GetCounters,
    /// Any node: its cluster map.
    GetMap,
    /// Any node: adopt `map` if its epoch is newer.
    InstallMap(Box<ClusterMap>),
    /// Any node: `released` are leases of client `holder` it was asked to give back and
    /// has (its caches of them dropped); then, the leases the server wants back from
    /// `holder` (`Response::Recalls`), as soon as there are any or after at most
    /// `wait_ms` (an empty list). A client keeps one such call waiting at every server
    /// it holds leases from.
    LeasePoll {
        holder: u64,
        released: Vec<LeaseKey>,
        wait_ms: u64,
    },
    /// Any node: extends `holder`'s leases `keys` by a lease period counted from when
    /// this was sent (`Response::Renewed`: per key, whether it was renewed; a lease being
    /// recalled, or lost with a restart or a failover, is not).
    LeaseRenew { holder: u64, keys: Vec<LeaseKey> },
    /// Any node: bytes `offset .. offset + len` of fragment `index` of chunk `chunk` of
    /// file `ino`, written for layout generation `generation` (docs/redundancy.md), with a
    /// capability to read the file. `Response::Data`; `NotFound` if this server holds no
    /// such fragment, `Stale` if it holds another generation's, `Io` if it fails its
    /// checksum (the reader rebuilds it from the others).
    ReadFragment {
        ino: InodeId,
        chunk: u64,
        index: u8,
        generation: u32,
        offset: u32,
        len: u32,
        cap: Capability,
    },
}

/// Administration: holders of the cluster secret only (SECURITY.md); they read or change
/// everything regardless of permissions (fsck, counter resets).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Any node: reset its request counters.
    ResetCounters,
    /// Any node, as root: the directory objects it holds (fsck), after path `after`.
    FsckDirs { after: Option<String>, limit: u32 },
    /// Any node, as root: raw entries of its parts of `dir` (all shards, pending ones too).
    FsckEntries {
        dir: String,
        after: Option<String>,
        limit: u32,
    },
    /// Any node, as root: inodes with blocks here (after `after`), each with its first block.
    FsckBlocks { after: Option<InodeId>, limit: u32 },
    /// Any node, as root: the first block of `ino` at or after `block`.
    FsckBlockFrom { ino: InodeId, block: u64 },
    /// Any node, as root: one repair (`myriad fsck --repair`).
    FsckRepair(FsckRepair),
    /// The target partition's primary, as root: its coded chunks after (`after`), at most
    /// `limit` (`Response::CodedChunks`).
    FsckCoded {
        after: Option<(InodeId, u64)>,
        limit: u32,
    },
    /// Any node, as root: the fragments it keeps after `after` (inode, chunk, index,
    /// generation), at most `limit`, each with whether its checksum holds
    /// (`Response::Fragments`).
    FsckFragments {
        after: Option<(InodeId, u64, u8, u32)>,
        limit: u32,
    },
    /// A server holding a copy (primary or backup) of the target partition, as root: the
    /// copy's last applied batch and a digest of its whole contents (`ReplicaDigest`).
    FsckReplica,
    /// The target partition's primary: the fsstats it keeps of its files and directories
    /// (`Response::KeptStats`; `myriad fsstats --cluster`).
    KeptStats,
}

/// Server-to-server requests: two-partition protocols, splits, hard-link bookkeeping, directory
/// times, ancestor replicas, the cluster-map group. Never accepted from a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerRequest {
    // ---- server to server ----
    /// A node holding part of split directory `path`, from its home: mark (or unmark)
    /// that part (`ClientRequest::MarkReadOnly`).
    DirMarkReadOnly {
        path: String,
        mark: Option<crate::ReadOnlyMark>,
        auto: bool,
    },
    /// The node holding registry entry `name` in `tree_index::TREES_DIR` (an automatic
    /// index's, `pending.<file>` or `<file>`), from a node about to change a directory of
    /// its tree: unlink it if it is there, through the change gate, so every client's
    /// registry lease is recalled before. The sender asks for the pending entry first,
    /// then the live one (docs/metadata-index.md "Automatic indexes").
    UnregisterIndex { name: String },
    /// A server (the partition of a file coding it), to a server keeping fragments: keep
    /// these fragments of chunk `chunk` of `ino` for layout generation `generation`
    /// (docs/redundancy.md); answered once they are durable here.
    PutFragments {
        ino: InodeId,
        chunk: u64,
        generation: u32,
        fragments: Vec<(u8, serde_bytes::ByteBuf)>,
    },
    /// A server (the partition of the chunk), to a server keeping fragments: drop the
    /// fragments of chunk `chunk` of `ino` written for generation `generation` here (a
    /// fragment of another generation is a newer coding's and stays).
    DropFragments {
        ino: InodeId,
        chunk: u64,
        generation: u32,
    },
    /// Owner of directory `path`: create its directory object (idempotent for the same `ino`),
    /// split into 2^`depth` shards (it creates the other shards on their nodes first).
    DirObjectCreate {
        path: String,
        ino: InodeId,
        depth: u8,
    },
    /// Node of shards `shards` of directory `dir`: hold them (empty; pre-split mkdir).
    ShardCreate {
        dir: String,
        ino: InodeId,
        shards: Vec<Shard>,
    },
    /// Node of the upper half `child` of a splitting shard: stage these entries, hidden.
    ShardImport {
        dir: String,
        ino: InodeId,
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
        ino: InodeId,
        shard: Shard,
        split: bool,
    },
    /// Owner of directory `path`: remove its (empty) directory object (idempotent).
    /// `client`: the client whose rmdir this is (`PeerRequest::acting_for`).
    DirObjectRemove {
        path: String,
        ino: InodeId,
        client: Option<u64>,
    },
    /// Owner of the destination entry: stage `inode` under `to` (invisible until commit) with
    /// the chunk-0 blocks that move with it.
    RenamePrepare {
        txid: u64,
        coordinator: PartitionId,
        to: String,
        inode: Inode,
        flags: RenameFlags,
        blocks: Vec<(u64, serde_bytes::ByteBuf)>,
        /// A directory moving over an existing (empty) one: that directory's inode, as the
        /// coordinator found it (the entry must still hold it, else `Busy`).
        replaces: Option<InodeId>,
        /// The client whose rename this is (`PeerRequest::acting_for`).
        client: Option<u64>,
    },
    /// Owner of the destination entry: make the staged entry visible (idempotent).
    /// `client`: the client whose rename this is, if the coordinator still knows
    /// (`None` from recovery). `visible`: answer once applied, not once durable (the
    /// coordinator answers its client then, and sends the commit again, durable, before
    /// it forgets the rename: a later durable answer covers the earlier commit).
    RenameCommit {
        txid: u64,
        client: Option<u64>,
        visible: bool,
    },
    /// Owner of the destination entry: drop the staged entry (idempotent).
    RenameAbort { txid: u64 },
    /// Owner of chunk `chunk`: drop its bytes at and beyond `keep_bytes` (chunk-relative).
    ChunkTrim {
        ino: InodeId,
        chunk: u64,
        keep_bytes: u64,
    },
    /// Any partition: drop every byte of `ino` it holds at or beyond `from_bytes` in chunks
    /// 1 and up (a truncate or unlink of a file with many chunks: one request per
    /// partition instead of one per chunk, so a huge sparse file goes in bounded time).
    ChunkTrimFrom { ino: InodeId, from_bytes: u64 },
    /// Owner of the entry of directory `path` (inode `ino`): entries were added or removed
    /// in it, by the partition holding them, at `now_ns`: set its mtime and ctime, and its
    /// link count to `nlink` if given. `client`: the client whose change this reports
    /// (its own lease on the directory holding the entry is not recalled for it).
    DirTouch {
        path: String,
        ino: InodeId,
        now_ns: i64,
        nlink: Option<u32>,
        client: Option<u64>,
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
        ino: InodeId,
        shards: Vec<Shard>,
        map: Option<ShardMap>,
        entries: Vec<ExportedEntry>,
        /// The moved directory's root replaces the empty directory `replaces` at `path`:
        /// the owner takes its object over (refused unless it is still that directory,
        /// whole and empty) and restores it if the rename aborts.
        replaces: Option<InodeId>,
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
    /// Home of directory `path`: its mode or owner changed to `inode`'s (by client `by`,
    /// if one said so). An exclusive lease on it carries the attributes its grant found:
    /// they are refreshed, and any other client's exclusive lease is recalled first.
    DirAttrsChanged {
        path: String,
        inode: Inode,
        by: Option<u64>,
    },
    /// Owner of the entry of `path`: create a hard-link name for inode `ino` living on `home`.
    PutLinkRef {
        path: String,
        ino: InodeId,
        home: PartitionId,
        /// The client whose link this is (`PeerRequest::acting_for`).
        client: Option<u64>,
    },
    /// Home of hard-linked inode `ino`: add `delta` to its link count (the object and its
    /// data go away at 0). Replies with the inode after the change (`Unit` when removed).
    AdjustLinks { ino: InodeId, delta: i64 },
    /// Home of hard-linked inode `ino`: `op` (from a path request whose path names a link
    /// to it; ancestors already checked by the sender) applied to the inode object, as
    /// `caller`. A flat operation, not a nested `Request`: a decoder must never recurse on
    /// what a peer sends.
    AtInode {
        ino: InodeId,
        caller: Caller,
        op: InodeOp,
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
    /// A partition's primary, from a server keeping a copy of it in sync: "lend me reads"
    /// (docs/zones.md "Nearest copy"). Granted (`Response::ReadsLent`) only while that
    /// copy's stream is a member; for `valid_ms` after, the primary acknowledges no write
    /// the copy has not applied, so the copy may answer reads once it holds batch `seq`.
    LendReads,
    /// The partition that reserved inode number `ino` for `client` (`ReserveIds`), from the
    /// partition about to create `client`'s file with it (a directory split moved the
    /// name there after the client took the number): mark it used, for `by`.
    ClaimReserved {
        client: u64,
        ino: InodeId,
        by: PartitionId,
    },
    /// Any server, from the leader: whether it keeps any erasure-coded fragment
    /// (`Response::Bool`); a leaving server stays in the map until it keeps none
    /// (docs/redundancy.md, "Leaving").
    KeepsFragments,
    /// The primary of chunk `chunk` of `ino`, from a leaving server sweeping its fragments:
    /// whether the chunk's coded record still names `server` for fragment `index` of
    /// generation `generation` (`Response::Bool`); if not, the fragment is dropped there.
    FragmentNamed {
        ino: InodeId,
        chunk: u64,
        index: u8,
        generation: u32,
        server: NodeId,
    },
    /// Owner of the entries of every directory named: `DirTouch` for each, applied in one
    /// batch (a server sends the touches of all its partitions for one target together,
    /// at most `limits::DIR_TOUCHES_MAX`). Answered with `Response::Attrs`, one result per
    /// touch in order: the directory's attributes after it, `NotFound` if the entry names
    /// another inode or none (nothing changed), or the routing error of that path alone.
    DirTouches { touches: Vec<DirTouchItem> },
    /// Home of directory `path`, from its parent's partition before a change of its mode
    /// or owner by client `by`: grant no exclusive lease on it until `DirAttrsChanged`
    /// (or a few seconds), and recall every other client's exclusive lease and answer once
    /// each was given back (its changes answered behind by the old attributes applied
    /// first).
    DirAttrsChanging { path: String, by: Option<u64> },
}

/// One directory's times and link count (an item of `PeerRequest::DirTouches`; the fields
/// mean what they mean in `DirTouch`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirTouchItem {
    pub path: String,
    pub ino: InodeId,
    pub now_ns: i64,
    pub nlink: Option<u32>,
    pub client: Option<u64>,
}

/// Requests for a partition's copy rather than its primary (replication, catch-up, repair).
/// Never accepted from a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplicaRequest {
    /// Primary to a backup of the same partition: the backup's copy of one block, if intact
    /// (repairing a block that failed its checksum on the primary).
    ReplicaBlock { ino: InodeId, block: u64 },
    /// Primary to a backup: the backup's stored bytes of a metadata record (space code,
    /// key), if intact (repairing a record that failed its checksum).
    ReplicaRecord {
        space: u8,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    // ---- replication (docs/replication.md); target = the partition, sent by its primary ----
    /// A backup of the target partition: apply batch `seq` (after every lower one), durably,
    /// then answer. `acked`: every batch up to it was acknowledged by this backup before (a
    /// backup that lacks one of them lost its disk: `ReplicaGap`). `prev_chain` and `chain`:
    /// the partition's batch chain before and after this batch; the backup applies it only
    /// on top of `prev_chain` and acknowledges a resend only if it applied the same batch
    /// (`ReplicaGap` otherwise: the primary copies the whole partition), so batches of
    /// another history (a deposed primary's, a crashed incarnation's) never mix in.
    Replicate {
        seq: u64,
        prev_chain: u64,
        chain: u64,
        acked: u64,
        /// Shared by the requests of every copy, the primary's log and resends (serialized
        /// as the list itself).
        ops: std::sync::Arc<Vec<ReplOp>>,
    },
    /// A backup of the target partition: the last batch it applied (`Response::Seq`).
    ReplicaSeq,
    /// A backup of the target partition: a whole copy begins; drop everything held.
    ReplicaReset,
    /// A backup of the target partition: one page of a whole copy.
    ReplicaCopy { ops: Vec<ReplOp> },
    /// A backup of the target partition: the copy is complete and reflects every batch up
    /// to `seq`, whose chain is `chain`; batches after it follow.
    ReplicaCopyDone { seq: u64, chain: u64 },
    /// A backup of the target partition: one page of its keys in `space` after `after`
    /// (a primary that restarted behind its backups copies from the most advanced one).
    ReplicaRead {
        space: u8,
        after: Option<serde_bytes::ByteBuf>,
    },
    /// Sent to a server (target `PartitionId::SERVER`) by another: requests for several of
    /// its copies in one frame (docs/write-path.md). Each item is handled as if it came
    /// alone, in order; the answer is `Response::Bundle`, one answer per item. Items are
    /// never bundles themselves.
    Bundle(Vec<BundleItem>),
    /// A backup of the target partition, from its primary's anti-entropy: the sums of its
    /// keys in buckets (`Response::Sums`), if it has applied exactly batch `at` of the
    /// history whose chain after it is `chain`, and no other before and after reading
    /// them (`Busy` otherwise: a copy of another history is the stream's to replace).
    ReplicaSums { at: u64, chain: u64 },
    /// A backup of the target partition: the keys of one bucket of `space`, each with a
    /// hash of its value (`Response::BucketKeys`), if it is at batch `at` of chain `chain`
    /// (else `Busy`).
    ReplicaBucket {
        at: u64,
        chain: u64,
        space: u8,
        bucket: u32,
    },
}

/// One request of a `ReplicaRequest::Bundle`: for the copy of `partition`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleItem {
    pub partition: PartitionId,
    pub request: ReplicaRequest,
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
    pub src_ino: InodeId,
    pub src_off: u64,
    pub dst: String,
    pub dst_ino: InodeId,
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
        ino: InodeId,
        offset: u64,
        len: u64,
    },
    /// `opened` (here and below): sent through a descriptor whose open checked access, so
    /// the file's owner may go on writing without a write bit (a file made by
    /// open(O_CREAT, 0) is written through its descriptor; POSIX checks access at open).
    Write {
        ino: InodeId,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        opened: bool,
    },
    ExtendSize {
        ino: InodeId,
        size: u64,
        opened: bool,
    },
    Truncate {
        ino: InodeId,
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
    pub ino: InodeId,
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
    CreateDirObject { path: String, ino: InodeId },
    /// A directory object without an entry naming it, and empty: remove it.
    DropEmptyDirObject { path: String, ino: InodeId },
    /// Set a hard-linked inode's link count to the number of names found.
    SetLinks { ino: InodeId, nlink: u32 },
    /// Blocks of an inode no file has, or beyond its size: drop blocks from `from_block`.
    DropBlocks { ino: InodeId, from_block: u64 },
    /// A block failing its checksum on some copy: make every copy intact again from one
    /// that is (sent to the partition's primary).
    RepairBlock { ino: InodeId, block: u64 },
    /// A coded chunk with a fragment missing, of another generation or failing its
    /// checksum: rebuild its fragments from the others (sent to the chunk's primary).
    RepairFragments { ino: InodeId, chunk: u64 },
    /// A metadata record failing its checksum on some copy: every copy intact again from
    /// one that is (sent to the partition's primary).
    RepairRecord {
        space: u8,
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// Fragment `index` of generation `generation` of chunk `chunk` of `ino`, kept on
    /// `server`, that no coded record names: dropped there, if the chunk's primary (which
    /// gets it), with no coding of its own in flight, finds its record still not naming it
    /// (protocol 31, issue 49).
    DropOrphanFragment {
        ino: InodeId,
        chunk: u64,
        index: u8,
        generation: u32,
        server: NodeId,
    },
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

impl ClientRequest {
    /// The path of a request that, when it names a hard link, is applied at the inode's
    /// home (reads and changes of the file's contents or attributes; see `into_inode_op`).
    #[must_use]
    pub fn link_resolved_path(&self) -> Option<&str> {
        match self {
            ClientRequest::Read { path, .. }
            | ClientRequest::Write { path, .. }
            | ClientRequest::ExtendSize { path, .. }
            | ClientRequest::Truncate { path, .. }
            | ClientRequest::SetAttr { path, .. }
            | ClientRequest::SetXattr { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The inode operation of a request `link_resolved_path` names (`None` for others).
    #[must_use]
    pub fn into_inode_op(self) -> Option<InodeOp> {
        Some(match self {
            ClientRequest::Read {
                ino, offset, len, ..
            } => InodeOp::Read { ino, offset, len },
            ClientRequest::Write {
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
            ClientRequest::ExtendSize {
                ino, size, opened, ..
            } => InodeOp::ExtendSize { ino, size, opened },
            ClientRequest::Truncate {
                ino, size, opened, ..
            } => InodeOp::Truncate { ino, size, opened },
            ClientRequest::SetAttr { set, .. } => InodeOp::SetAttr { set },
            ClientRequest::SetXattr {
                name, value, mode, ..
            } => InodeOp::SetXattr { name, value, mode },
            _ => return None,
        })
    }

    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            ClientRequest::Echo(_) => "echo",
            ClientRequest::Stat { .. } => "stat",
            ClientRequest::OpenWrite { .. } => "open_write",
            ClientRequest::IndexCandidates { .. } => "index_candidates",
            ClientRequest::StatMany { .. } => "stat_many",
            ClientRequest::Fetch { .. } => "fetch",
            ClientRequest::ReadDir { .. } => "readdir",
            ClientRequest::GetShardMap { .. } => "get_shard_map",
            ClientRequest::Create { .. } => "create",
            ClientRequest::Mkdir { .. } => "mkdir",
            ClientRequest::Rmdir { .. } => "rmdir",
            ClientRequest::Unlink { .. } => "unlink",
            ClientRequest::Symlink { .. } => "symlink",
            ClientRequest::Readlink { .. } => "readlink",
            ClientRequest::SetAttr { .. } => "setattr",
            ClientRequest::Rename { .. } => "rename",
            ClientRequest::Write { .. } => "write",
            ClientRequest::Read { .. } => "read",
            ClientRequest::Truncate { .. } => "truncate",
            ClientRequest::CopyRange(_) => "copy_range",
            ClientRequest::ExtendSize { .. } => "extend_size",
            ClientRequest::WriteChunk { .. } => "write_chunk",
            ClientRequest::ReadChunk { .. } => "read_chunk",
            ClientRequest::Mknod { .. } => "mknod",
            ClientRequest::SetXattr { .. } => "setxattr",
            ClientRequest::Sync { .. } => "sync",
            ClientRequest::SyncPartition { .. } => "sync_partition",
            ClientRequest::Leased { request, .. } | ClientRequest::ReadAs { request, .. } => {
                request.op_name()
            }
            ClientRequest::Batch { .. } => "batch",
            ClientRequest::ReserveIds { .. } => "reserve_ids",
            ClientRequest::Link { .. } => "link",
            ClientRequest::Once { request, .. } | ClientRequest::Resend { request, .. } => {
                request.op_name()
            }
            ClientRequest::Grant { .. } => "grant",
            ClientRequest::Lock(_) => "lock",
            ClientRequest::KeepOpen { .. } => "keep_open",
            ClientRequest::MarkReadOnly { .. } => "mark_read_only",
        }
    }

    /// Requests that change the file system: sent as `Once`, so that a retry of one that
    /// went through answers its first outcome.
    #[must_use]
    pub fn is_change(&self) -> bool {
        matches!(
            self,
            ClientRequest::Create { .. }
                | ClientRequest::Mkdir { .. }
                | ClientRequest::Rmdir { .. }
                | ClientRequest::Unlink { .. }
                | ClientRequest::Symlink { .. }
                | ClientRequest::SetAttr { .. }
                | ClientRequest::Rename { .. }
                | ClientRequest::Write { .. }
                | ClientRequest::CopyRange(_)
                | ClientRequest::Truncate { .. }
                | ClientRequest::ExtendSize { .. }
                | ClientRequest::WriteChunk { .. }
                | ClientRequest::Mknod { .. }
                | ClientRequest::SetXattr { .. }
                | ClientRequest::Link { .. }
                | ClientRequest::ReserveIds { .. }
        )
    }

    /// What a read reads (docs/fuse.md "Write-behind": the reads another client's
    /// exclusive lease gives way to, and the reads a client's own journal must be sent
    /// before): one name, or a directory's names.
    #[must_use]
    pub fn read_of(&self) -> Option<ReadOf<'_>> {
        match self {
            ClientRequest::Stat { path }
            | ClientRequest::OpenWrite { path }
            | ClientRequest::Fetch { path, .. }
            | ClientRequest::Readlink { path }
            | ClientRequest::Read { path, .. }
            | ClientRequest::Grant { path, .. } => Some(ReadOf::Name(path)),
            ClientRequest::StatMany { dir, .. } => Some(ReadOf::Listing(dir)),
            ClientRequest::ReadDir { path, .. } => Some(ReadOf::Listing(path)),
            _ => None,
        }
    }

    /// The directory whose object (its entry for a name, or its listing) a request is
    /// served from: the parent of the name it reads or changes, the directory it lists.
    /// (A partition that answers `NotFound` because that object moved away while the
    /// request ran answers with its newer map instead: docs/zones.md section 3.)
    #[must_use]
    pub fn served_dir(&self) -> Option<&str> {
        match self {
            ClientRequest::Create { path, .. }
            | ClientRequest::Mkdir { path, .. }
            | ClientRequest::Rmdir { path }
            | ClientRequest::Unlink { path }
            | ClientRequest::Symlink { path, .. }
            | ClientRequest::SetAttr { path, .. }
            | ClientRequest::Mknod { path, .. }
            | ClientRequest::SetXattr { path, .. }
            | ClientRequest::Write { path, .. }
            | ClientRequest::Truncate { path, .. }
            | ClientRequest::ExtendSize { path, .. }
            | ClientRequest::Rename { from: path, .. } => parent_dir(path),
            _ => self.read_dir(),
        }
    }

    /// The directory whose entries a read reads (`read_of`; none for "/" itself).
    #[must_use]
    pub fn read_dir(&self) -> Option<&str> {
        match self.read_of()? {
            ReadOf::Name(path) => parent_dir(path),
            ReadOf::Listing(dir) => Some(dir),
        }
    }
}

/// The directory holding `path`'s entry (none for "/").
fn parent_dir(path: &str) -> Option<&str> {
    (path != "/").then(|| match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    })
}

impl ServerRequest {
    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            ServerRequest::StatFs => "statfs",
            ServerRequest::GetCounters => "get_counters",
            ServerRequest::GetMap => "get_map",
            ServerRequest::InstallMap(_) => "install_map",
            ServerRequest::LeasePoll { .. } => "lease_poll",
            ServerRequest::LeaseRenew { .. } => "lease_renew",
            ServerRequest::ReadFragment { .. } => "read_fragment",
        }
    }
}

impl AdminRequest {
    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            AdminRequest::ResetCounters => "reset_counters",
            AdminRequest::FsckDirs { .. } => "fsck_dirs",
            AdminRequest::FsckEntries { .. } => "fsck_entries",
            AdminRequest::FsckBlocks { .. } => "fsck_blocks",
            AdminRequest::FsckBlockFrom { .. } => "fsck_block_from",
            AdminRequest::FsckRepair(_) => "fsck_repair",
            AdminRequest::FsckReplica => "fsck_replica",
            AdminRequest::FsckCoded { .. } => "fsck_coded",
            AdminRequest::KeptStats => "kept_stats",
            AdminRequest::FsckFragments { .. } => "fsck_fragments",
        }
    }
}

impl Request {
    /// What the request is for, for traffic counters (`TrafficKind`).
    #[must_use]
    pub fn traffic_kind(&self) -> crate::TrafficKind {
        use crate::TrafficKind;
        match self {
            Request::Client(_) => TrafficKind::File,
            Request::Server(_) | Request::Admin(_) => TrafficKind::Control,
            Request::Replica(_) => TrafficKind::Replication,
            Request::Peer(p) => match p {
                PeerRequest::Raft { .. } | PeerRequest::Lease | PeerRequest::PartitionSeqs => {
                    TrafficKind::Membership
                }
                PeerRequest::LendReads => TrafficKind::Replication,
                PeerRequest::GetAttrs { .. }
                | PeerRequest::RenewAttrs { .. }
                | PeerRequest::Unsubscribe { .. }
                | PeerRequest::AttrUpdate { .. }
                | PeerRequest::InvalidatePrefix { .. } => TrafficKind::Ancestors,
                PeerRequest::PutFragments { .. }
                | PeerRequest::DropFragments { .. }
                | PeerRequest::KeepsFragments
                | PeerRequest::FragmentNamed { .. } => TrafficKind::Replication,
                _ => TrafficKind::File,
            },
        }
    }
}

impl PeerRequest {
    /// The client whose change this request carries on at another partition, if it says
    /// (the destination of a rename, the new name of a link, the object of an rmdir): its
    /// own directory leases there are not recalled for it, as at the change's first
    /// partition.
    #[must_use]
    pub fn acting_for(&self) -> Option<u64> {
        match self {
            PeerRequest::RenamePrepare { client, .. }
            | PeerRequest::RenameCommit { client, .. }
            | PeerRequest::PutLinkRef { client, .. }
            | PeerRequest::DirObjectRemove { client, .. } => *client,
            _ => None,
        }
    }

    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            PeerRequest::ShardCreate { .. } => "shard_create",
            PeerRequest::ShardImport { .. } => "shard_import",
            PeerRequest::ShardFinish { .. } => "shard_finish",
            PeerRequest::ShardMapChange { .. } => "shard_map_change",
            PeerRequest::PutLinkRef { .. } => "put_link_ref",
            PeerRequest::AdjustLinks { .. } => "adjust_links",
            PeerRequest::AtInode { .. } => "at_inode",
            PeerRequest::DirObjectCreate { .. } => "dirobj_create",
            PeerRequest::DirObjectRemove { .. } => "dirobj_remove",
            PeerRequest::RenamePrepare { .. } => "rename_prepare",
            PeerRequest::RenameCommit { .. } => "rename_commit",
            PeerRequest::RenameAbort { .. } => "rename_abort",
            PeerRequest::ChunkTrim { .. } => "chunk_trim",
            PeerRequest::ChunkTrimFrom { .. } => "chunk_trim_from",
            PeerRequest::DirTouch { .. } => "dir_touch",
            PeerRequest::DirFreeze { .. } => "dir_freeze",
            PeerRequest::DirExport { .. } => "dir_export",
            PeerRequest::DirImport { .. } => "dir_import",
            PeerRequest::DirFinish { .. } => "dir_finish",
            PeerRequest::GetAttrs { .. } => "get_attrs",
            PeerRequest::RenewAttrs { .. } => "renew_attrs",
            PeerRequest::Unsubscribe { .. } => "unsubscribe",
            PeerRequest::AttrUpdate { .. } => "attr_update",
            PeerRequest::InvalidatePrefix { .. } => "invalidate_prefix",
            PeerRequest::DirMarkReadOnly { .. } => "dir_mark_read_only",
            PeerRequest::UnregisterIndex { .. } => "unregister_index",
            PeerRequest::PutFragments { .. } => "put_fragments",
            PeerRequest::DropFragments { .. } => "drop_fragments",
            PeerRequest::DirAttrsChanged { .. } => "dir_attrs_changed",
            PeerRequest::DirAttrsChanging { .. } => "dir_attrs_changing",
            PeerRequest::Raft { .. } => "raft",
            PeerRequest::Lease => "lease",
            PeerRequest::PartitionSeqs => "partition_seqs",
            PeerRequest::LendReads => "lend_reads",
            PeerRequest::KeepsFragments => "keeps_fragments",
            PeerRequest::ClaimReserved { .. } => "claim_reserved",
            PeerRequest::FragmentNamed { .. } => "fragment_named",
            PeerRequest::DirTouches { .. } => "dir_touches",
        }
    }
}

impl ReplicaRequest {
    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            ReplicaRequest::ReplicaBlock { .. } => "replica_block",
            ReplicaRequest::ReplicaRecord { .. } => "replica_record",
            ReplicaRequest::Replicate { .. } => "replicate",
            ReplicaRequest::ReplicaSeq => "replica_seq",
            ReplicaRequest::ReplicaReset => "replica_reset",
            ReplicaRequest::ReplicaCopy { .. } => "replica_copy",
            ReplicaRequest::ReplicaCopyDone { .. } => "replica_copy_done",
            ReplicaRequest::ReplicaRead { .. } => "replica_read",
            ReplicaRequest::ReplicaSums { .. } => "replica_sums",
            ReplicaRequest::ReplicaBucket { .. } => "replica_bucket",
            ReplicaRequest::Bundle(_) => "replica_bundle",
        }
    }
}

impl Request {
    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Client(r) => r.op_name(),
            Request::Server(r) => r.op_name(),
            Request::Admin(r) => r.op_name(),
            Request::Peer(r) => r.op_name(),
            Request::Replica(r) => r.op_name(),
        }
    }

    /// Client requests that may need more disk: refused with `NoSpace` while the server's
    /// free space is below its reserve (myriad-server space.rs). `AtInode` carries a client's
    /// operation on a hard-linked file to the server holding its inode, which may be another
    /// server with a fuller disk, so it counts too.
    #[must_use]
    pub fn grows_storage(&self) -> bool {
        matches!(
            self,
            Request::Client(
                ClientRequest::Create { .. }
                    | ClientRequest::Mkdir { .. }
                    | ClientRequest::Symlink { .. }
                    | ClientRequest::Rename { .. }
                    | ClientRequest::Write { .. }
                    | ClientRequest::CopyRange(_)
                    | ClientRequest::ExtendSize { .. }
                    | ClientRequest::WriteChunk { .. }
                    | ClientRequest::Mknod { .. }
                    | ClientRequest::SetXattr { .. }
                    | ClientRequest::Link { .. }
            ) | Request::Peer(
                PeerRequest::AtInode {
                    op: InodeOp::Write { .. }
                        | InodeOp::ExtendSize { .. }
                        | InodeOp::SetXattr { .. },
                    ..
                } | PeerRequest::PutFragments { .. }
            )
        )
    }

    /// Client requests that write anything at all, frees included: refused too once the
    /// disk is all but full, so that the storage engine itself never runs out of space.
    #[must_use]
    pub fn writes_storage(&self) -> bool {
        self.grows_storage()
            || matches!(
                self,
                Request::Client(
                    ClientRequest::Rmdir { .. }
                        | ClientRequest::Unlink { .. }
                        | ClientRequest::SetAttr { .. }
                        | ClientRequest::Truncate { .. }
                ) | Request::Peer(PeerRequest::AtInode {
                    op: InodeOp::Truncate { .. } | InodeOp::SetAttr { .. },
                    ..
                })
            )
    }

    /// Requests that are not file system traffic (not counted as such, and not held to the
    /// map epoch): the server's own, administration, and the cluster-map group's.
    #[must_use]
    pub fn is_admin(&self) -> bool {
        match self {
            Request::Server(r) => !matches!(
                r,
                ServerRequest::StatFs
                    | ServerRequest::LeasePoll { .. }
                    | ServerRequest::LeaseRenew { .. }
                    | ServerRequest::ReadFragment { .. }
            ),
            Request::Admin(_) => true,
            Request::Peer(r) => matches!(
                r,
                PeerRequest::Raft { .. }
                    | PeerRequest::Lease
                    | PeerRequest::PartitionSeqs
                    | PeerRequest::KeepsFragments
            ),
            Request::Client(_) | Request::Replica(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_served_from_its_names_directory_or_the_one_it_lists() {
        let rmdir = ClientRequest::Rmdir {
            path: "/a/b".into(),
        };
        assert_eq!(rmdir.served_dir(), Some("/a"));
        let rename = ClientRequest::Rename {
            from: "/x".into(),
            to: "/y/z".into(),
            flags: RenameFlags::default(),
        };
        assert_eq!(rename.served_dir(), Some("/"));
        let stat = ClientRequest::Stat { path: "/".into() };
        assert_eq!(stat.served_dir(), None);
        let list = ClientRequest::ReadDir {
            path: "/a/b".into(),
            from: 0,
            after: None,
            limit: 10,
        };
        assert_eq!(list.served_dir(), Some("/a/b"));
    }
}
