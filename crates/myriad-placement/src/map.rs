//! The cluster map: which nodes exist, where they listen, and the layout parameters that every
//! client and server must agree on. It is versioned by `epoch`; a higher epoch always wins.

use serde::{Deserialize, Serialize};

use crate::ring::Ring;

/// A node's identity in the cluster map. Ids are small positive integers, stable for the node's life.
pub type NodeId = u32;

/// Virtual nodes per unit of weight. 256 keeps the busiest of 4 nodes within ~1.1x of the mean
/// (see the balance test) while a ring of 4 nodes stays at 1,024 points (a 10-step binary search).
pub const DEFAULT_VNODES_PER_NODE: u32 = 256;
/// Default chunk size of big files: the unit of placement for file data beyond chunk 0.
pub const DEFAULT_CHUNK_SIZE_BYTES: u64 = 4 * 1024 * 1024;
/// Files up to this size are "inline": their bytes live with the inode and `fetch` returns them.
pub const DEFAULT_INLINE_MAX_BYTES: u64 = 64 * 1024;
/// Upper bound on weights, so `vnodes * weight` cannot blow up the ring.
pub const WEIGHT_MAX: u32 = 64;
/// Upper bound on the ring size: nodes * vnodes * weight.
pub const RING_POINTS_MAX: u64 = 1 << 22;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// `host:port` the node listens on.
    pub addr: String,
    /// Relative capacity; a node of weight 2 gets twice the keys of a node of weight 1.
    pub weight: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Version of this map. Every change increments it; the higher epoch wins.
    pub epoch: u64,
    pub vnodes_per_node: u32,
    pub chunk_size_bytes: u64,
    pub inline_max_bytes: u64,
    pub nodes: Vec<NodeInfo>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    #[error("cluster map has no nodes")]
    Empty,
    #[error("cluster map lists node id {0} twice")]
    DuplicateNode(NodeId),
    #[error("node {0}: weight must be 1..={WEIGHT_MAX}")]
    BadWeight(NodeId),
    #[error("node id 0 is reserved")]
    ZeroNodeId,
    #[error("vnodes_per_node must be at least 1 and the ring at most {RING_POINTS_MAX} points")]
    BadVnodes,
    #[error(
        "chunk_size_bytes must be a multiple of 65536 and inline_max_bytes at most the chunk size"
    )]
    BadLayout,
    #[error("cluster map is not valid JSON: {0}")]
    Parse(String),
}

impl ClusterMap {
    /// A map of `addrs.len()` equally weighted nodes with ids 1..=N and default layout.
    #[must_use]
    pub fn new(epoch: u64, addrs: &[String]) -> ClusterMap {
        ClusterMap {
            epoch,
            vnodes_per_node: DEFAULT_VNODES_PER_NODE,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            inline_max_bytes: DEFAULT_INLINE_MAX_BYTES,
            nodes: addrs
                .iter()
                .enumerate()
                .map(|(i, a)| NodeInfo {
                    id: u32::try_from(i + 1).unwrap_or(u32::MAX),
                    addr: a.clone(),
                    weight: 1,
                })
                .collect(),
        }
    }

    /// Checks every rule a map must obey before anyone acts on it.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.nodes.is_empty() {
            return Err(MapError::Empty);
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut points: u64 = 0;
        for n in &self.nodes {
            if n.id == 0 {
                return Err(MapError::ZeroNodeId);
            }
            if !seen.insert(n.id) {
                return Err(MapError::DuplicateNode(n.id));
            }
            if n.weight == 0 || n.weight > WEIGHT_MAX {
                return Err(MapError::BadWeight(n.id));
            }
            points += u64::from(self.vnodes_per_node) * u64::from(n.weight);
        }
        if self.vnodes_per_node == 0 || points > RING_POINTS_MAX {
            return Err(MapError::BadVnodes);
        }
        if self.chunk_size_bytes == 0
            || !self.chunk_size_bytes.is_multiple_of(65536)
            || self.inline_max_bytes > self.chunk_size_bytes
        {
            return Err(MapError::BadLayout);
        }
        Ok(())
    }

    pub fn from_json(text: &str) -> Result<ClusterMap, MapError> {
        let map: ClusterMap =
            serde_json::from_str(text).map_err(|e| MapError::Parse(e.to_string()))?;
        map.validate()?;
        Ok(map)
    }

    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    #[must_use]
    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Builds the hash ring for this map. Callers cache it per epoch.
    #[must_use]
    pub fn ring(&self) -> Ring {
        Ring::build(self)
    }
}
