//! The cluster as one server sees it: the map it serves under and the ring built from it,
//! swapped whole when a newer map is adopted.

use myriad_placement::{ClusterMap, PartitionId, Ring};

pub struct MapState {
    pub map: ClusterMap,
    pub ring: Ring,
}

/// True if partition `pid` has more than one copy: when its server dies, another one takes
/// over, so waiting for that is worth it (with one copy, only the server's return helps).
pub(crate) fn failover_possible(map: &ClusterMap, pid: PartitionId) -> bool {
    map.partition(pid).is_some_and(|p| p.replicas.len() > 1)
}
