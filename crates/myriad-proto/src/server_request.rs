//! Requests to a server itself rather than one of its partitions: its own state
//! (`ServerRequest`) and an administrator's (`AdminRequest`, with fsck's records).

use myriad_placement::{ClusterMap, NodeId};
use serde::{Deserialize, Serialize};

use crate::auth::Capability;
use crate::request_parts::LeaseKey;
use crate::{Inode, InodeId, Shard, ShardMap};

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
    /// Any node: its answers to clients by how long they took (`Response::Latencies`).
    /// Protocol 34.
    GetLatencies,
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
    /// The target partition's primary: its part of each quota's usage, and the map epoch
    /// whose quotas it counts (`Response::QuotaUsage`; `myriad quota get`). Protocol 37.
    QuotaUsage,
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

/// The operations that wait for something to happen before they answer (a lease poll waits
/// up to its `wait_ms` for recalls): their time says nothing of how fast a server answers,
/// so metrics time them apart from every other request.
pub const LONG_POLL_OPS: [&str; 1] = ["lease_poll"];

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
            ServerRequest::GetLatencies => "get_latencies",
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
            AdminRequest::QuotaUsage => "quota_usage",
            AdminRequest::FsckFragments { .. } => "fsck_fragments",
        }
    }
}
