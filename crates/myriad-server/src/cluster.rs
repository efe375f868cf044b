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

/// How many copies besides the primary's must hold a write before it is acknowledged
/// (issue 49, docs/replication.md "The guarantee"): `min_copies` (`--min-copies`; by
/// default a majority of the partition's replica count R, `R - R/2`: 2 of 3, 1 of 2),
/// less one for the primary, never more than the map lists. Below it a write waits for
/// another copy, and a client's change is refused (`Unavailable`, retried) rather than
/// acknowledged on fewer disks.
pub(crate) fn other_copies_needed(
    map: &ClusterMap,
    pid: PartitionId,
    min_copies: Option<u32>,
) -> usize {
    let Some(p) = map.partition(pid) else {
        return 0;
    };
    let r = map.group_replication(p.group);
    let min = min_copies.unwrap_or(r - r / 2).clamp(1, r.max(1));
    let listed = u32::try_from(p.replicas.len()).unwrap_or(u32::MAX);
    usize::try_from(min.min(listed).saturating_sub(1)).unwrap_or(0)
}

/// True if partition `pid` has more than one copy: when its server dies, another one takes
/// over, so waiting for that is worth it (with one copy, only the server's return helps).
pub(crate) fn failover_possible(map: &ClusterMap, pid: PartitionId) -> bool {
    map.partition(pid).is_some_and(|p| p.replicas.len() > 1)
}
