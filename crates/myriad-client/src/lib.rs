//! The native Myriad client: placement-aware routing, retries on stale maps and busy entries,
//! a POSIX-like API, and `fetch` (open + read of a small file in one round trip).
//!
//! The client computes where every path lives from its cluster map and talks to that node
//! directly; it never asks anyone "where is X". A node that disagrees answers with its newer
//! map (redirect) and the client retries.
//!
//! Must not depend on: the server, storage, FUSE, the CLI.

mod behind_journals;
mod caps;
mod client;
mod dirs;
mod file;
mod file_locks;
mod fragments;
mod frozen;
mod held;
mod held_locks;
mod held_state;
mod index;
mod index_state;
mod leases;
mod nearest;
mod recent_changes;
mod route;
pub mod setup;
pub mod symlinks;
mod whole_files;
mod write_behind;

pub use behind_journals::{BehindSpawner, BehindTask};
pub use client::cluster::Installed;
pub use client::quotas::{PathStatFs, QuotaCount};
pub use client::{Client, ClientConfig};
pub use dirs::ListFor;
pub use file::FileHandle;
pub use fragments::FragmentAt;
pub use held_state::{BARRIER_EVERY, HELD_BYTES_MAX, HELD_CHANGES_MAX};
pub use index::{
    AutoIndexPolicy, AutoIndexer, BuildOptions, BuildReport, IndexStats, choose_roots,
};
pub use leases::{Dropped, LeaseMark, RecallHook};
pub use myriad_net::{Link, Transport};
pub use myriad_placement::{
    ClusterMap, DEFAULT_PARTITIONS_PER_NODE, DEFAULT_REPLICATION, Forced, LossPlan, LostError,
    Move, NodeId, NodeInfo, NodeState, PartitionId, PartitionInfo, Policy, PolicyState, Quota,
    ZONE_NAME_MAX, zone_name_ok,
};
/// The protocol, for tools that speak it directly (fsck).
pub use myriad_proto as proto;
pub use myriad_proto::auth::Keyring;
pub use myriad_proto::ec_layout::CodedChunk;
pub use myriad_proto::{
    Caller, CounterSnapshot, DirEntry, FileKind, FsError, Inode, InodeId, RenameFlags, SetAttr,
    StatFs, TierStat, TrafficKind, ZoneTraffic,
};
pub use whole_files::FETCH_MANY_PARALLEL;
