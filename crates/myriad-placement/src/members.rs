//! Who is in the cluster: server and partition ids, a server's entry in the map, a
//! partition's copies. The lowest module of the crate: plain data, no placement logic.

use serde::{Deserialize, Serialize};

/// A server's identity in the cluster map. Ids are small positive integers, stable for the
/// server's life. (A type of its own: a partition id is not a server id, though both are
/// small integers; on the wire and in the map file it is the bare number.)
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

/// A partition's identity: the ring maps keys to partitions. 1..=`PARTITION_ID_MAX`; ids
/// allocated by a partition are `pid << 40 | counter`, so a pid must fit in 24 bits. 0
/// stands for "the server itself" where a request names a partition (`Endpoints`).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PartitionId(pub u32);

pub const PARTITION_ID_MAX: PartitionId = PartitionId((1 << 24) - 1);

/// An inode's identity: the root's is 1 (`myriad_proto::ROOT_INO`), others
/// `partition << 40 | counter`, unique across the cluster without coordination. A type of its
/// own (on the wire and on disk the bare number): an inode id is not a transaction id, a
/// block number or an offset, though all are `u64`s.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InodeId(pub u64);

impl NodeId {
    /// As an index into a table of servers (ids are small).
    #[must_use]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl PartitionId {
    /// Not a partition: the server itself (requests to it), or no partition (a client).
    pub const SERVER: PartitionId = PartitionId(0);

    /// The high bits of every id (inode, transaction) this partition allocates.
    #[must_use]
    pub fn id_base(self) -> u64 {
        u64::from(self.0) << 40
    }
}

// Both print as the bare number: logs, traces and maps read as they did.
macro_rules! bare_number {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}
bare_number!(NodeId);
bare_number!(PartitionId);
bare_number!(InodeId);

/// Inode ids are `node << 40 | counter`: tools and logs show them in hex, where the two
/// parts read apart.
impl std::fmt::LowerHex for InodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::LowerHex::fmt(&self.0, f)
    }
}

/// The Raft group names its members by the server ids, widened.
impl From<NodeId> for u64 {
    fn from(n: NodeId) -> u64 {
        u64::from(n.0)
    }
}

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
    /// The zone (site, rack, room) the server is in: placement spreads a partition's copies
    /// over as many zones as it can, and a policy can pin a tree to one (docs/zones.md).
    /// `""` (the default) is a zone like any other: a map without zones has one.
    #[serde(default)]
    pub zone: String,
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
    /// The partition group it belongs to: 0, the default group, places every path no policy
    /// covers; a policy's group (`Policy::group`) only the trees it pins, on its zone's servers.
    #[serde(default)]
    pub group: u32,
    /// Copies that may lack acknowledged writes: marked down while another copy that has
    /// them went on serving (writes were then acknowledged without them), until the
    /// Raft leader sees them caught up with their primary (`ClusterMap::caught_up`). A
    /// copy listed here never becomes primary while a copy not listed may return
    /// (`mark_down`): promoting it would lose acknowledged writes. Never every copy.
    #[serde(default)]
    pub behind: Vec<NodeId>,
}

impl PartitionInfo {
    /// True if copy `r` may lack acknowledged writes: listed behind, or a move's new copy
    /// still being made.
    #[must_use]
    pub fn is_behind(&self, r: NodeId) -> bool {
        self.behind.contains(&r) || self.moving.is_some_and(|m| m.to == r)
    }
}

/// A copy of a partition on its way from one server to another; from `NO_SERVER`: a copy
/// added (a partition with fewer copies than its group wants, in a cluster that grew
/// from fewer servers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub from: NodeId,
    pub to: NodeId,
}

/// The `from` of a move that adds a copy (node id 0 is never a server's).
pub const NO_SERVER: NodeId = NodeId(0);

impl Move {
    /// Whether the move adds a copy rather than moving one.
    #[must_use]
    pub fn adds(&self) -> bool {
        self.from == NO_SERVER
    }
}

/// The default partition group: every path no policy covers.
pub const DEFAULT_GROUP: u32 = 0;
/// Longest zone name (bytes): zones are labels, printed in status lines.
pub const ZONE_NAME_MAX: usize = 64;

/// "Everything under `path` lives only in `zone`, with `replicas` copies": the policy's
/// tree is placed on the partitions of its own `group`, whose copies the map keeps on that
/// zone's servers only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The partition group its tree is placed on (never `DEFAULT_GROUP`).
    pub group: u32,
    /// Absolute, normalized path of the tree's root (not `/`).
    pub path: String,
    pub zone: String,
    /// Copies of each of the group's partitions (capped by the zone's servers).
    pub replicas: u32,
    /// Whether paths are placed by it, or its tree is on its way in or out
    /// (docs/zones.md section 3).
    #[serde(default)]
    pub state: PolicyState,
}

/// Where a policy is in its life. Paths under it are placed by its group while it is
/// `Active` or `Leaving` (the tree is there); the placement a tree move is heading for
/// (`Ring::target`) uses the groups of `Active` and `Arriving` policies. A `Retired`
/// policy places no path; its group's partitions stay, for the data of files its
/// partitions numbered (chunks past the first are placed by inode number).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyState {
    #[default]
    Active,
    /// Set on a tree that exists: the tree is being copied into the group.
    Arriving,
    /// Cleared on a tree that exists: the tree is being copied out of the group.
    Leaving,
    Retired,
}

impl PolicyState {
    /// Paths are placed by the policy's group now.
    #[must_use]
    pub fn places_paths(self) -> bool {
        matches!(self, PolicyState::Active | PolicyState::Leaving)
    }

    /// Paths will be placed by the policy's group once the move in flight is done.
    #[must_use]
    pub fn will_place_paths(self) -> bool {
        matches!(self, PolicyState::Active | PolicyState::Arriving)
    }

    /// A tree is moving into or out of the policy's group.
    #[must_use]
    pub fn is_moving(self) -> bool {
        matches!(self, PolicyState::Arriving | PolicyState::Leaving)
    }
}

/// A zone name is printable ASCII without spaces or commas (it is listed comma-separated).
#[must_use]
pub fn zone_name_ok(zone: &str) -> bool {
    zone.len() <= ZONE_NAME_MAX
        && zone
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b',' && b != b'"')
}
