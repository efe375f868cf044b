//! Replication health as an operator alerts on it, read from the cluster map every server
//! follows: of the partitions a server leads, those with fewer copies in sync on up servers
//! than they have copies, and the copies that may lack writes; for the whole cluster (given
//! by the cluster-map group's leader only, so a sum over servers counts it once), servers
//! down and partitions without a serving primary (docs/metrics.md).

use myriad_placement::{ClusterMap, NodeId, NodeState};

/// The cluster as a whole, as the cluster-map group's leader sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterHealth {
    pub servers_down: u64,
    /// Partitions no up server serves (their copies up are all behind, or none is up).
    pub partitions_unavailable: u64,
    pub partitions_under_replicated: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Partitions led here with fewer copies in sync on up servers than copies wanted.
    pub under_replicated: u64,
    /// Copies of partitions led here that may lack writes (behind, or a move's new copy).
    pub copies_catching_up: u64,
    /// `Some` on the cluster-map group's leader only.
    pub cluster: Option<ClusterHealth>,
}

/// The health `me` reports; `leads_map`: whether `me` leads the cluster-map group.
#[must_use]
pub fn health(map: &ClusterMap, me: NodeId, leads_map: bool) -> Health {
    let mut h = Health::default();
    for p in &map.partitions {
        if map.primary_in(p) != Some(me) {
            continue;
        }
        h.under_replicated += u64::from(map.is_under_replicated(p));
        h.copies_catching_up += p.replicas.iter().filter(|&&r| p.is_behind(r)).count() as u64;
    }
    if leads_map {
        h.cluster = Some(ClusterHealth {
            servers_down: map
                .nodes
                .iter()
                .filter(|n| n.state == NodeState::Down)
                .count() as u64,
            partitions_unavailable: map
                .partitions
                .iter()
                .filter(|p| map.primary_in(p).is_none())
                .count() as u64,
            partitions_under_replicated: map
                .partitions
                .iter()
                .filter(|p| map.is_under_replicated(p))
                .count() as u64,
        });
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(servers: usize) -> ClusterMap {
        let addrs: Vec<String> = (0..servers)
            .map(|i| format!("127.0.0.1:{}", 7000 + i))
            .collect();
        ClusterMap::build(1, &addrs, 4, 3)
    }

    fn sum(m: &ClusterMap, f: impl Fn(&Health) -> u64) -> u64 {
        m.nodes.iter().map(|n| f(&health(m, n.id, false))).sum()
    }

    #[test]
    fn a_healthy_cluster_reports_nothing() {
        let m = map(4);
        assert_eq!(sum(&m, |h| h.under_replicated), 0);
        assert_eq!(sum(&m, |h| h.copies_catching_up), 0);
        assert_eq!(
            health(&m, NodeId(1), true).cluster,
            Some(ClusterHealth::default())
        );
        assert_eq!(health(&m, NodeId(1), false).cluster, None);
    }

    #[test]
    fn a_server_down_leaves_its_partitions_under_replicated_until_it_is_back() {
        let m = map(4);
        let held = m
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&NodeId(2)))
            .count() as u64;
        assert!(held > 0);
        let down = m
            .mark_down(NodeId(2))
            .unwrap_or_else(|| panic!("not marked down"));
        // Counted once, by each partition's new primary; the cluster view agrees.
        assert_eq!(sum(&down, |h| h.under_replicated), held);
        let leader = health(&down, NodeId(1), true).cluster.unwrap_or_default();
        assert_eq!(leader.servers_down, 1);
        assert_eq!(leader.partitions_under_replicated, held);
        assert_eq!(leader.partitions_unavailable, 0);
        // Back up but behind: still under-replicated, and its copies are catching up.
        let back = down
            .mark_up(NodeId(2))
            .unwrap_or_else(|| panic!("not marked up"));
        let behind: Vec<_> = back
            .partitions
            .iter()
            .filter(|p| p.behind.contains(&NodeId(2)))
            .map(|p| (p.id, NodeId(2)))
            .collect();
        assert_eq!(sum(&back, |h| h.copies_catching_up), behind.len() as u64);
        assert_eq!(sum(&back, |h| h.under_replicated), behind.len() as u64);
        // Caught up: healthy again.
        let synced = back.caught_up(&behind).unwrap_or(back);
        assert_eq!(sum(&synced, |h| h.under_replicated), 0);
        assert_eq!(sum(&synced, |h| h.copies_catching_up), 0);
    }
}
