//! Requests between servers: a partition's side of two-partition protocols, splits,
//! links, directory times and ancestor replicas (`PeerRequest`), and replication to a
//! partition's copies (`ReplicaRequest`).

use myriad_placement::{NodeId, PartitionId};
use serde::{Deserialize, Serialize};

use crate::request_parts::{RenameFlags, SetAttr, XattrMode};
use crate::{Caller, Inode, InodeId, Shard};

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
    DirImport(crate::requests::DirImport),
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
    /// Owner of the entry of `path`: as `PutLinkRef`, for the client's change `id`
    /// (protocol 32). The name is made once per change: one whose earlier try made it
    /// answers `Response::Recorded(Some(Unit))` and makes nothing, so a link retried after
    /// its coordinator died answers its first outcome rather than `AlreadyExists`
    /// (docs/write-path.md "Exactly once").
    PutLinkRefOnce {
        path: String,
        ino: InodeId,
        home: PartitionId,
        id: crate::OnceId,
    },
    /// Home of quota `quota` (the partition of its root's directory object), from a
    /// partition that needs an allowance of `files` names and `bytes` bytes and holds one
    /// of version `held`: grant it (and a slice more) if the limit allows, after settling
    /// partitions if it must (docs/quotas.md "The ledger's protocol"). Answered with
    /// `Response::QuotaLedger` (the asker's new entry), or `QuotaExceeded`. Protocol 37.
    QuotaAsk {
        quota: u64,
        files: u64,
        bytes: u64,
        held: u64,
    },
    /// Any partition, from quota `quota`'s home: adopt `ledger` (files, bytes, version) if
    /// newer than the allowance held, give back what is unused, and answer the allowance
    /// now held (`Response::QuotaLedger`). Protocol 37.
    QuotaSettle { quota: u64, ledger: (u64, u64, u64) },
    /// Any partition, from quota `quota`'s home before it grants: the names and bytes of
    /// the tree it holds now, with no version (`Response::QuotaLedger`; changes nothing).
    /// Entries moved in by a split or a tree move are counted against no allowance until
    /// the partition is settled: the home reserves what it reports. Protocol 37.
    QuotaReport { quota: u64 },
    /// Partition of directory `path`'s entry, from a part of its directory object made
    /// `undecided` by a mkdir (inode `ino`): `Unit` if the entry holds that directory,
    /// committed; `NotFound` if it holds no such directory (the mkdir was undone, or the
    /// directory removed); `Busy` if it is still pending after a reader's wait.
    /// ARCHITECTURE.md "Undecided directory objects". Protocol 39.
    MkdirDecided { path: String, ino: InodeId },
    /// Home of directory object `path`, from the coordinator of its mkdir once the mkdir
    /// can no longer be undone: clear the object's `undecided` mark (if it is still that
    /// directory's). Protocol 39.
    DirObjectConfirm { path: String, ino: InodeId },
    /// A partition a reserved number `ino` was claimed for (`ClaimReserved`), from the
    /// partition that reserved it, asked by a third for the same client's create (the name
    /// moved on again before the create was applied): never use it here (`Unit`), or
    /// `AlreadyExists` if a create here did. Protocol 39.
    GiveUpClaimed { ino: InodeId },
    /// Home of directory `path`: as `DirObjectCreate` (unsplit), for a mkdir client
    /// `holder` answered behind: the object is made with an exclusive lease for it on the
    /// directory, which keeps `attrs` (the directory's attributes) as a grant's would
    /// (docs/fuse.md "mkdir behind"). Protocol 42.
    DirObjectBorn {
        path: String,
        ino: InodeId,
        holder: u64,
        attrs: crate::Inode,
    },
    /// Partition of entry `path`, from one whose request found no object for directory
    /// `path`: looks the entry up as a read by `reader` (`None`: unknown) would, recalling
    /// other clients' exclusive leases on its directory first (a journal there may hold
    /// its mkdir, answered behind): `Unit` if it is a directory now, `NotFound` if not
    /// (docs/fuse.md "mkdir behind", a path named below a new directory). `hops`: how
    /// many such asks led to this one (one level up each; a bounded number). Protocol 42.
    DirSought {
        path: String,
        reader: Option<u64>,
        hops: u8,
    },
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
    /// A name of the inode is about to be removed with the trash on: its attributes, with
    /// `nlink` less the names whose removal the home answered this way lately and has not
    /// yet seen the link dropped for (so of two names removed at once, one is told it is
    /// the last and kept). Protocol 41 (`REMOVAL_CLAIMS_SINCE`).
    ClaimRemoval,
    /// A removal that claimed (`ClaimRemoval`) drops its link: one link fewer, as
    /// `PeerRequest::AdjustLinks` by -1, and one claim ended. Protocol 41.
    DropClaimed,
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

impl PeerRequest {
    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            PeerRequest::ShardCreate { .. } => "shard_create",
            PeerRequest::ShardImport { .. } => "shard_import",
            PeerRequest::ShardFinish { .. } => "shard_finish",
            PeerRequest::ShardMapChange { .. } => "shard_map_change",
            PeerRequest::PutLinkRef { .. } | PeerRequest::PutLinkRefOnce { .. } => "put_link_ref",
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
            PeerRequest::QuotaAsk { .. } => "quota_ask",
            PeerRequest::QuotaSettle { .. } => "quota_settle",
            PeerRequest::QuotaReport { .. } => "quota_report",
            PeerRequest::MkdirDecided { .. } => "mkdir_decided",
            PeerRequest::DirObjectConfirm { .. } => "dirobj_confirm",
            PeerRequest::GiveUpClaimed { .. } => "give_up_claimed",
            PeerRequest::DirObjectBorn { .. } => "dirobj_born",
            PeerRequest::DirSought { .. } => "dir_sought",
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
