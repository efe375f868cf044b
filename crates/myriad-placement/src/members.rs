//! Who is in the cluster: server and partition ids, a server's entry in the map, a
//! partition's copies. The lowest module of the crate: plain data, no placement logic.

use serde::{Deserialize, Serialize};

/// A server's identity in the cluster map. Ids are small positive integers, stable for the
/// server's life.
pub type NodeId = u32;
/// A partition's identity: the ring maps keys to partitions. 1..=`PARTITION_ID_MAX`; ids
/// allocated by a partition are `pid << 40 | counter`, so a pid must fit in 24 bits.
pub type PartitionId = u32;
pub const PARTITION_ID_MAX: PartitionId = (1 << 24) - 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// `host:port` the node listens on.
    pub addr: String,
    /// Relative capacity; a node of weight 2 gets twice the partitions of a node of weight 1.
    pub weight: u32,
    /// Up or down, as decided by the Raft leader's failure detector (docs/replication.md).
    #[serde(default)]
    pub state: NodeState,
}

/// A server's state in the map. A down server is never a primary and its copies are not
/// written; it is kept in the replica lists (last) so that it rejoins as a backup. A leaving
/// server (remove-node) serves as usual while its copies move away, and is then dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    #[default]
    Up,
    Down,
    Leaving,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    pub id: PartitionId,
    /// The servers holding a copy, primary first.
    pub replicas: Vec<NodeId>,
    /// A copy on its way from one server to another (`to` is listed last); see rebalance.rs.
    /// (Always written: postcard, the wire and Raft log format, cannot skip fields.)
    #[serde(default)]
    pub moving: Option<Move>,
}

/// A copy of a partition on its way from one server to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub from: NodeId,
    pub to: NodeId,
}
