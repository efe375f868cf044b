//! Placement: a pure function from a versioned cluster map and a key (a directory path, or an
//! inode id and chunk index) to the partition that holds it, and from a partition to the
//! servers holding its copies.
//!
//! Clients compute placement locally and never ask a server "where is X" (DESIGN.md principle 2).
//! Consistent hashing with virtual nodes keeps the load even (busiest node <= 1.15x the mean)
//! and moves only ~1/N of the keys when a node joins or leaves.
//!
//! Must not depend on: any other workspace crate, an async runtime, I/O, clocks or randomness.

mod fragments;
mod lost;
mod map;
pub mod map_wire;
mod members;
pub mod partition;
mod path;
mod primaries;
mod quota_changes;
mod quotas;
mod rebalance;
mod ring;
mod shard;
pub mod splitmix;
#[cfg(test)]
mod spread_tests;
mod tree_moves;
mod zones;

pub use fragments::{fragment_servers, fragment_slot};
pub use lost::{Forced, LossPlan, LostError};
pub use map::{ClusterMap, DEFAULT_PARTITIONS_PER_NODE, DEFAULT_REPLICATION, MapError, MapExt};
pub use members::{
    DEFAULT_GROUP, InodeId, Move, NO_SERVER, NodeId, NodeInfo, NodeState, PARTITION_ID_MAX,
    PartitionId, PartitionInfo, Policy, PolicyState, ZONE_NAME_MAX, zone_name_ok,
};
pub use path::{is_normal_below_root, is_within, join, parent_of, split_parent};
pub use quotas::{QUOTAS_LEAVE_TRASH_SINCE, QUOTAS_MAX, Quota, TRASH_ROOT, in_trash};
pub use ring::{LOCKS_ON_DEFAULT_GROUP_SINCE, Ring};
pub use shard::{
    SHARD_DEPTH_MAX, Shard, ShardCache, ShardMap, name_hash, split_trigger, spread_depth,
};
