//! What a partition's store can be asked to do: the `Mutation`s (with the split protocol's
//! `ShardMutation`s), their `Outcome`s, and the context they run in. Data only; the families
//! beside this module execute them, `mutation.rs` routes each to its family.

use myriad_proto::ec_layout::CodedChunk;
use myriad_proto::{
    DirAction, ExportedEntry, FileKind, Inode, OnceId, PartitionId, RenameFlags, Response, SetAttr,
    Shard, ShardMap, WireError, XattrMode,
};
use myriad_storage::{BLOCK_BYTES, Store};

use crate::state::ids::IdAlloc;
use crate::state::intent::{Decision, DirMove};
use myriad_proto::InodeId;

/// Chunk-0 blocks travelling with an entry: (block number, bytes).
pub type Blocks = Vec<(u64, Vec<u8>)>;

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

/// A client's change whose outcome an intent records when it resolves (mkdir, rmdir):
/// kept with the intent (`Store::put_awaited_outcome`), so that a retry after a crash
/// finds the outcome whether the coordinator or recovery finished the change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Awaited {
    pub id: OnceId,
    pub at_ns: i64,
}

/// One directory's touch in `Mutation::DirTouches` (the fields of `Mutation::DirTouch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirTouchOne {
    pub dir: String,
    pub name: String,
    pub ino: InodeId,
    pub now: i64,
    pub nlink: Option<u32>,
}

/// A directory part moved to this partition (`Mutation::DirImport`): hidden until revealed.
/// The peer request's own struct: the mutation applies what the request carries.
pub use myriad_proto::requests::DirImport;

/// The target side of a rename between partitions (`Mutation::RenamePrepare`): the moved
/// entry staged pending under `txid`.
#[derive(Clone, Debug)]
pub struct RenamePrepare {
    pub txid: u64,
    /// The partition running the rename (it commits or aborts it).
    pub coordinator: PartitionId,
    pub to: String,
    pub inode: Inode,
    pub flags: RenameFlags,
    /// The moved file's chunk-0 blocks, which live with its entry.
    pub blocks: Vec<(u64, Vec<u8>)>,
    /// The inode the name replaces, if the rename replaces one.
    pub replaces: Option<InodeId>,
    /// With the trash on: the trash's name (on this partition) for the file the name holds
    /// now, and that file's inode; it goes there when the rename commits
    /// (`Intent::RenameInKeeping`).
    pub keep: Option<(String, InodeId)>,
}

#[derive(Debug)]
pub enum Mutation {
    /// Changes nothing; its reply comes after the fsync covering everything applied before.
    Barrier,
    /// Records `answer` as the outcome of change `id` (`state/outcomes.rs`): for a change whose
    /// work spans mutations or partitions, recorded once it is done.
    RecordOnce {
        id: OnceId,
        at_ns: i64,
        answer: Response,
    },
    /// Records that primary term `term` grants file locks (`lock_marks.rs`).
    MarkFileLocks {
        term: u64,
    },
    /// Forgets outcomes recorded before `before_ns`, and the oldest beyond `keep_max`.
    ForgetOnces {
        before_ns: i64,
        keep_max: usize,
    },
    /// Puts an intact copy of a block that failed its checksum here or on a backup
    /// (repair.rs). Applied only if the block is still what repair saw: corrupt here, or
    /// intact and equal to `data` (rewritten so that every copy gets it); a block written
    /// or deleted meanwhile is left alone.
    RepairBlock {
        ino: InodeId,
        block: u64,
        data: Vec<u8>,
    },
    /// Puts an intact copy (`value`, stored bytes) of a metadata record that failed its
    /// checksum here or on a backup (repair.rs). Applied only if the record is still what
    /// repair saw: damaged here, or equal to `value` (rewritten so every copy gets it).
    RepairRecord {
        space: myriad_storage::Space,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Anti-entropy (partition/anti_entropy.rs): each key is written again with the value
    /// this copy holds, or deleted where it holds none, as an ordinary replicated batch,
    /// so every copy ends with this copy's value. A value here that fails its checksum (a
    /// block, an entry or directory record) is left alone: the read that meets it repairs
    /// it from an intact copy. Outcome: `Resynced(keys written or deleted)`.
    Resync {
        keys: Vec<(myriad_storage::Space, Vec<u8>)>,
    },
    /// First extra name of the regular file at `dir/name`: its inode moves to an inode object
    /// on this node (`me`), with one more link; the entry becomes a reference to it.
    /// `anchored`: its bytes stay in the quotas of `dir` (a quota anchor written with the
    /// object: only once the map's floor is `QUOTA_ANCHORS_SINCE`, so that every primary
    /// of the partition counts it).
    LinkSource {
        dir: String,
        name: String,
        me: PartitionId,
        now: i64,
        anchored: bool,
    },
    /// A new name `dir/name` referring to hard-linked inode `ino` on node `home`; for a
    /// client's change (`made_for`: its name mark, `hard_links::name_mark`), that mark is
    /// recorded in the same batch, so the change makes the name once.
    PutLinkRef {
        dir: String,
        name: String,
        ino: InodeId,
        home: PartitionId,
        made_for: Option<Awaited>,
    },
    /// Adds `delta` to the link count of inode object `ino`; at 0 it goes with its data.
    AdjustLinks {
        ino: InodeId,
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
        /// The inode number, reserved by this client (`IdAlloc::use_reserved`).
        ino: Option<(u64, InodeId)>,
        /// A setattr of the new file folded into its create (checked), and its time:
        /// applied after it, as that setattr alone would be (`requests::Create::then`).
        then: Option<(SetAttr, i64)>,
    },
    /// Reserves `count` inode numbers for `client` (`IdAlloc::reserve`).
    ReserveIds {
        client: u64,
        count: u32,
    },
    /// Partition `by` creates a file of `client` with inode number `ino`, reserved here
    /// (the directory was split after the client took the number): used here, for `by`
    /// (`IdAlloc::claim_reserved`).
    ClaimReserved {
        client: u64,
        ino: u64,
        by: PartitionId,
    },
    /// The claim of `client`'s number `ino` (reserved here) moves from partition `from`,
    /// which gave it up unused, to `to` (`IdAlloc::move_claim`).
    MoveClaim {
        client: u64,
        ino: u64,
        from: PartitionId,
        to: PartitionId,
    },
    /// Another partition's number `ino`, claimed for this one, is never used here: the
    /// name its create was for moved on (`IdAlloc::give_up_claimed`).
    GiveUpClaimed {
        ino: u64,
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
        now: i64,
    },
    /// Removes the orphans `inos` (files whose last name went while some client may
    /// still have them open: `records::drop_file_data`) with their data. Outcome:
    /// `Gcs` (chunk GC intents to run).
    DropOrphans {
        inos: Vec<InodeId>,
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
        ino: InodeId,
        now: i64,
        nlink: Option<u32>,
    },
    /// Several `DirTouch`es in one batch (`PeerRequest::DirTouches`), each as alone and in
    /// order: a directory named twice ends with its last touch.
    DirTouches(Vec<DirTouchOne>),
    Write {
        dir: String,
        name: String,
        ino: InodeId,
        offset: u64,
        data: Vec<u8>,
        now: i64,
    },
    ExtendSize {
        dir: String,
        name: String,
        ino: InodeId,
        size: u64,
        now: i64,
    },
    Truncate {
        dir: String,
        name: String,
        ino: InodeId,
        size: u64,
        now: i64,
    },
    WriteChunk {
        ino: InodeId,
        chunk: u64,
        offset: u64,
        data: Vec<u8>,
    },
    ChunkTrim {
        ino: InodeId,
        chunk: u64,
        keep_bytes: u64,
    },
    /// Drops every byte of `ino` held here at or beyond `from_bytes`, in chunks >= 1.
    ChunkTrimFrom {
        ino: InodeId,
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
        /// The client's change it is (`None`: not sent once): its outcome is recorded
        /// with the resolution, by whoever resolves it.
        once: Option<Awaited>,
        /// A mkdir answered behind: its client and the inode number it reserved (used
        /// once, as a create's).
        ino: Option<(u64, InodeId)>,
    },
    RmdirBegin {
        dir: String,
        name: String,
        once: Option<Awaited>,
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
    /// Starts the move of the tree at `path` (its root's entry is here) between
    /// placements: a `TreeMove` intent (`Outcome::TreeMoveBegun`).
    TreeMoveBegin {
        path: String,
        group: u32,
        arriving: bool,
    },
    /// Records the directory objects a tree move copied, before its decision.
    TreeMoveRecord {
        txid: u64,
        moves: Vec<crate::state::intent::DirMove>,
    },
    /// `shards`: the shards this (home) node holds; `map`: the map of a pre-split directory;
    /// `undecided`: made for a mkdir not decided yet, it takes no entries until confirmed
    /// (ARCHITECTURE.md "Undecided directory objects").
    DirObjectCreate {
        path: String,
        ino: InodeId,
        shards: Vec<Shard>,
        map: Option<ShardMap>,
        undecided: bool,
    },
    /// Clears the `undecided` mark of this node's part of directory `path`, if it is still
    /// directory `ino`'s: its mkdir is committed.
    DirObjectConfirm {
        path: String,
        ino: InodeId,
    },
    DirObjectRemove {
        path: String,
        ino: InodeId,
    },
    /// Marks this node's part of directory object `path` as inside a frozen tree, or
    /// unmarks it (`None`); with `auto`, as inside the tree of an automatic index
    /// (`DirRecord::auto_index`). `Busy` while the part is moving or splitting.
    MarkReadOnly {
        path: String,
        mark: Option<myriad_proto::ReadOnlyMark>,
        auto: bool,
    },
    /// Clears this node's part of `path` of automatic index `mark`, once that index is
    /// unregistered (a newer build's mark stays).
    ClearAutoIndex {
        path: String,
        mark: myriad_proto::ReadOnlyMark,
    },
    /// `keep`: with the trash on, where the file `to` holds (that inode) is kept instead
    /// of freed (`/.trash/...`, its directory's part held here; taken: `<kept>.<inode>`).
    /// `Busy` if `to` holds another file by then (the caller looks again).
    RenameLocal {
        from: String,
        to: String,
        flags: RenameFlags,
        now: i64,
        keep: Option<(String, InodeId)>,
    },
    RenameSourceBegin {
        from: String,
        to: String,
        dst_node: PartitionId,
        now: i64,
    },
    /// Coordinator: commit deletes the source entry and its chunk-0 blocks; abort restores it.
    /// `moves` (directory renames) is recorded in the intent with the decision.
    RenameSourceDecide {
        txid: u64,
        commit: bool,
        moves: Vec<DirMove>,
        /// An exchange's commit: the entry that takes the source's name (the
        /// destination's, with its chunk-0 blocks).
        incoming: Option<(Inode, Blocks)>,
    },
    DirFreeze {
        path: String,
        txid: u64,
    },
    DirImport(DirImport),
    DirFinish {
        path: String,
        txid: u64,
        action: DirAction,
    },
    RenamePrepare(RenamePrepare),
    RenameTargetResolve {
        /// When (file times' clock): an abort leaves a tombstone with it.
        now: i64,
        txid: u64,
        commit: bool,
        /// The directory whose entry the prepare staged here, as read just before (`None`:
        /// none staged): the only directory it changes, so the only one whose leases are
        /// recalled (an abort of a prepare that failed recalls none: an unlink moved to the
        /// trash from a mount's batch waited on its own mount's leases for seconds).
        /// Refused (`Busy`) if the intent says otherwise when it is applied.
        staged: Option<String>,
        /// The trash's directory that a commit moves the replaced file into, as read with
        /// `staged` (`Intent::RenameInKeeping`): its leases are recalled too.
        kept: Option<String>,
    },
    /// The split protocol (docs/huge-dirs.md).
    Shard(ShardMutation),
    /// fsck repair: drop every block of `ino` from `from_block` on.
    DropBlocks {
        ino: InodeId,
        from_block: u64,
    },
    /// The partition's kept fsstats made to follow the setting (docs/redundancy.md
    /// "Cluster-wide fsstats"): counted from scratch when they are kept and it holds none
    /// yet (its first opening with them), dropped when they are not kept.
    RebuildStats,
    /// The partition counts the quotas of the map of `epoch` (docs/quotas.md): those new
    /// here counted from scratch, those gone dropped; nothing when it counts them already
    /// or counted a newer map's.
    SyncQuotas {
        epoch: u64,
        roots: Vec<myriad_storage::QuotaRoot>,
    },
    /// This partition's allowance of `quota` becomes `granted` if newer than the one held
    /// (docs/quotas.md "The ledger's protocol"). `Outcome::Ledger`: the allowance held.
    QuotaAllow {
        quota: u64,
        granted: myriad_storage::Allowance,
    },
    /// The home's settle: adopt `ledger` if newer, give back what is unused.
    /// `Outcome::Ledger`: the allowance held after it.
    QuotaSettle {
        quota: u64,
        ledger: myriad_storage::Allowance,
    },
    /// At `quota`'s home: the ledger's entries of these partitions become these.
    QuotaLedger {
        quota: u64,
        entries: Vec<(u32, myriad_storage::Allowance)>,
    },
    /// Chunk `chunk` of `ino` is coded (docs/redundancy.md): its blocks give way to
    /// `coded`, if they still hold exactly the bytes coded (`crc` of them, and nothing
    /// past them in the chunk). `Outcome::Switched` says whether they did.
    CodeChunk {
        ino: InodeId,
        chunk: u64,
        coded: CodedChunk,
        crc: u32,
    },
    /// A coded chunk's bytes back in blocks (a write or a cut into it), if it is still
    /// coded at `generation`.
    UncodeChunk {
        ino: InodeId,
        chunk: u64,
        generation: u32,
        data: Vec<u8>,
    },
    /// A coded chunk's record after fragments were rebuilt (on other servers), if it is
    /// still `was`.
    RecodeChunk {
        ino: InodeId,
        chunk: u64,
        was: CodedChunk,
        now: CodedChunk,
    },
}

#[derive(Debug)]
pub enum Outcome {
    Unit,
    /// An allowance of a quota: (names, bytes, version).
    Ledger((u64, u64, u64)),
    /// The first of the ids reserved (`ReserveIds`), and how many.
    Ids(u64, u32),
    /// Keys rewritten by `Mutation::Resync`.
    Resynced(u64),
    /// One result per touch of `Mutation::DirTouches`: the directory's attributes after
    /// it, `None` where nothing changed.
    Touched(Vec<Option<Inode>>),
    Inode(Inode),
    /// A new inode (a create that did not find the name taken).
    Created(Inode),
    /// The inode after the change, plus the txid of a chunk GC intent the caller must run.
    InodeGc(Inode, Option<u64>),
    Gc(Option<u64>),
    /// Chunk GC intents to run (`DropOrphans`).
    Gcs(Vec<u64>),
    Begun {
        txid: u64,
        inode: Inode,
    },
    TreeMoveBegun {
        txid: u64,
    },
    RenameBegun {
        txid: u64,
        inode: Inode,
        blocks: Vec<(u64, Vec<u8>)>,
    },
    /// A rename; the txid of the replaced file's chunk GC intent, if any, and the replaced
    /// entry if it was a hard-link name (the node then drops a link at its home).
    Renamed(Option<u64>, Option<Inode>),
    /// An exchanging prepare: the destination's entry and its chunk-0 blocks.
    Exchanged(Inode, Blocks),
    SplitBegun {
        txid: u64,
        ino: InodeId,
    },
    /// The chunk a write or a cut is for is coded: nothing was done; uncode it first.
    Coded(Box<CodedChunk>),
    /// Whether a `CodeChunk` or `RecodeChunk` took effect.
    Switched(bool),
    /// Coded chunks a cut dropped: their fragments are dropped next.
    DroppedCoded(Vec<(u64, CodedChunk)>),
}

/// Key of a rename's destination-side record. The destination of a rename can be the
/// coordinator itself (both entries on one node), so its record must not share the
/// coordinator's intent key. Bit 63 is never set in a txid (node ids < 2^23).
#[must_use]
pub fn prepare_key(txid: u64) -> u64 {
    txid | (1 << 63)
}

/// Where the owner of a directory object that a rename's copy took over keeps what it
/// replaced (`Intent::DirReplaced`), apart from the coordinator's and the destination
/// entry's records of the same rename, which may live on the same node. Ids are
/// `partition << 40 | counter` with partitions far below 2^22, so bit 62 is free.
#[must_use]
pub fn replace_key(txid: u64) -> u64 {
    txid | (1 << 62)
}

/// Layout parameters the mutations need (from the cluster map).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub chunk_size_bytes: u64,
    /// The partition keeps fsstats as its files change (`--kept-stats`, docs/redundancy.md
    /// "Cluster-wide fsstats"); off: it keeps none (and drops any it kept before).
    pub kept_stats: bool,
}

impl Mutation {
    /// Whether the change is a client's growth of a tree, held to the quotas' allowances
    /// (docs/quotas.md "The ledger's protocol"): internal moves of entries (imports,
    /// splits, resolves, repairs) are never refused.
    #[must_use]
    pub fn quota_checked(&self) -> bool {
        matches!(
            self,
            Mutation::CreateFile { .. }
                | Mutation::Symlink { .. }
                | Mutation::Mknod { .. }
                | Mutation::Write { .. }
                | Mutation::ExtendSize { .. }
                | Mutation::Truncate { .. }
                | Mutation::PutLinkRef { .. }
                | Mutation::RenameLocal { .. }
                | Mutation::MkdirBegin { .. }
                | Mutation::RenamePrepare(_)
        )
    }

    /// Whether what the change takes away from a tree's usage may have gone to another
    /// partition (a split's or a tree move's export, a rename's source dropping its
    /// name), rather than being freed by a client's unlink or rmdir.
    #[must_use]
    pub fn quota_may_move(&self) -> bool {
        !(self.quota_checked()
            || matches!(self, Mutation::Unlink { .. } | Mutation::RmdirBegin { .. }))
    }
}

#[derive(Debug)]
pub enum ShardMutation {
    /// Partition A: start splitting its `shard` of `dir`: writes of the upper half get `Busy`;
    /// the intent `SplitOut` is written in the same batch.
    SplitBegin { dir: String, shard: Shard },
    /// Partition A, the decision: the upper half's entries and their chunk-0 blocks go, the shard
    /// becomes its lower half, the intent records `Commit`.
    SplitCommit { txid: u64 },
    /// Partition A: the split is abandoned (the home's map no longer lists the child): writes
    /// resume; the intent stays, decided `Abort`, until the child's node dropped its copy.
    SplitAbort { txid: u64 },
    /// Partition B: stage `entries` in hidden shard `child` (created on the first page).
    Import {
        dir: String,
        ino: InodeId,
        txid: u64,
        child: Shard,
        entries: Vec<ExportedEntry>,
    },
    /// Partition B: reveal the staged shard, or drop it with its entries and blocks.
    Finish {
        dir: String,
        txid: u64,
        child: Shard,
        reveal: bool,
    },
    /// Home: leaf `shard` of `dir` splits, or the split is undone. Idempotent.
    MapChange {
        dir: String,
        ino: InodeId,
        shard: Shard,
        split: bool,
    },
    /// Partition of shards of a directory made pre-split: hold them, empty. Idempotent.
    Create {
        dir: String,
        ino: InodeId,
        shards: Vec<Shard>,
        undecided: bool,
    },
}

pub use crate::state::failure::storage_err;

pub(crate) fn chunk0_blocks(layout: Layout) -> u64 {
    layout.chunk_size_bytes / BLOCK_BYTES
}

pub struct Ctx<'a> {
    pub store: &'a Store,
    pub ids: &'a mut IdAlloc,
    /// The outcomes of clients' changes held here (`exactly_once.rs`).
    pub outcomes: &'a mut crate::state::outcome_index::Outcomes,
    pub layout: Layout,
}

/// A mutation handed to a family that does not execute it (a routing bug in `mutation.rs`).
pub(crate) fn not_routed(m: &Mutation) -> WireError {
    WireError::Io(format!(
        "internal: mutation routed to the wrong family: {m:?}"
    ))
}
