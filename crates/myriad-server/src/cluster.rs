//! The cluster as one server sees it: the map it serves under and the ring built from it,
//! swapped whole when a newer map is adopted.

use myriad_placement::{ClusterMap, PartitionId, Ring};

pub struct MapState {
    pub map: ClusterMap,
    pub ring: Ring,
    /// `Ring::target` of the map, built on first use (only while a tree moves between
    /// zones: every directory the move imports checks it).
    target: std::sync::OnceLock<Ring>,
}

impl MapState {
    #[must_use]
    pub fn new(map: ClusterMap) -> MapState {
        MapState {
            ring: map.ring(),
            map,
            target: std::sync::OnceLock::new(),
        }
    }

    /// The placement the tree move in flight heads for (`ring` when none moves).
    pub fn target_ring(&self) -> &Ring {
        self.target.get_or_init(|| Ring::target(&self.map))
    }
}

/// True if partition `pid` has more than one copy: when its server dies, another one takes
/// over, so waiting for that is worth it (with one copy, only the server's return helps).
pub(crate) fn failover_possible(map: &ClusterMap, pid: PartitionId) -> bool {
    map.partition(pid).is_some_and(|p| p.replicas.len() > 1)
}
