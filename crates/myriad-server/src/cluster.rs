//! The cluster as one server sees it: the map it serves under and the ring built from it,
//! swapped whole when a newer map is adopted.

use myriad_placement::{ClusterMap, Ring};

pub struct MapState {
    pub map: ClusterMap,
    pub ring: Ring,
}
