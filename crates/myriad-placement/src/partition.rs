//! Which servers hold each partition: a pure, deterministic assignment.
//!
//! Greedy, partition by partition: the primary goes to the server with the fewest primaries
//! per unit of weight; each backup to a server in a zone the partition's copies do not cover
//! yet (so copies span as many zones as there are), then the one with the fewest replicas per
//! unit of weight, ties broken by how often it already holds that place in the list of this
//! primary's partitions. So every server gets its share,
//! and the backups of one server's primaries (the servers that take over when it dies) are
//! spread over all the others.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::members::{NodeId, NodeInfo, PartitionId, PartitionInfo};

#[derive(Default)]
struct Load {
    primaries: HashMap<NodeId, u64>,
    replicas: HashMap<NodeId, u64>,
    backups: HashMap<NodeId, u64>,
    /// (primary, backup, position in the list) -> times.
    pairs: HashMap<(NodeId, NodeId, usize), u64>,
}

/// `a/wa` against `b/wb`, exactly.
fn per_weight(a: u64, wa: u32, b: u64, wb: u32) -> Ordering {
    (u128::from(a) * u128::from(wb)).cmp(&(u128::from(b) * u128::from(wa)))
}

/// `count` partitions (ids 1..=count) with `replication` copies each (capped by the number of
/// servers) on `nodes`, in the default group.
#[must_use]
pub fn assign(nodes: &[NodeInfo], count: u32, replication: u32) -> Vec<PartitionInfo> {
    assign_group(nodes, 1, count, replication, crate::DEFAULT_GROUP)
}

/// `count` partitions of group `group`, ids `first..first + count`, on `nodes` (for a
/// policy's group: its zone's servers).
#[must_use]
pub fn assign_group(
    nodes: &[NodeInfo],
    first: u32,
    count: u32,
    replication: u32,
    group: u32,
) -> Vec<PartitionInfo> {
    let r = (replication as usize).min(nodes.len());
    let mut load = Load::default();
    let mut out = Vec::with_capacity(count as usize);
    for pid in first..first.saturating_add(count) {
        let Some(primary) = nodes
            .iter()
            .min_by(|a, b| {
                let pa = load.primaries.get(&a.id).copied().unwrap_or(0);
                let pb = load.primaries.get(&b.id).copied().unwrap_or(0);
                let ra = load.replicas.get(&a.id).copied().unwrap_or(0);
                let rb = load.replicas.get(&b.id).copied().unwrap_or(0);
                per_weight(pa, a.weight, pb, b.weight)
                    .then(per_weight(ra, a.weight, rb, b.weight))
                    .then(a.id.cmp(&b.id))
            })
            .map(|n| n.id)
        else {
            break;
        };
        let mut replicas = vec![primary];
        let mut zones = vec![zone(nodes, primary)];
        while replicas.len() < r {
            let Some(backup) = nodes
                .iter()
                .filter(|n| !replicas.contains(&n.id))
                .min_by(|a, b| {
                    let za = zones.contains(&a.zone.as_str());
                    let zb = zones.contains(&b.zone.as_str());
                    let ra = load.backups.get(&a.id).copied().unwrap_or(0);
                    let rb = load.backups.get(&b.id).copied().unwrap_or(0);
                    let xa = load
                        .pairs
                        .get(&(primary, a.id, replicas.len()))
                        .copied()
                        .unwrap_or(0);
                    let xb = load
                        .pairs
                        .get(&(primary, b.id, replicas.len()))
                        .copied()
                        .unwrap_or(0);
                    za.cmp(&zb)
                        .then(per_weight(ra, a.weight, rb, b.weight))
                        .then(xa.cmp(&xb))
                        .then(a.id.cmp(&b.id))
                })
                .map(|n| n.id)
            else {
                break;
            };
            zones.push(zone(nodes, backup));
            *load
                .pairs
                .entry((primary, backup, replicas.len()))
                .or_default() += 1;
            *load.backups.entry(backup).or_default() += 1;
            replicas.push(backup);
        }
        *load.primaries.entry(primary).or_default() += 1;
        for n in &replicas {
            *load.replicas.entry(*n).or_default() += 1;
        }
        out.push(PartitionInfo {
            id: PartitionId(pid),
            replicas,
            moving: None,
            group,
            behind: Vec::new(),
        });
    }
    out
}

fn zone(nodes: &[NodeInfo], id: NodeId) -> &str {
    nodes
        .iter()
        .find(|n| n.id == id)
        .map_or("", |n| n.zone.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClusterMap;

    fn addrs(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect()
    }

    #[test]
    fn one_per_node_without_replication_is_the_identity() {
        let m = ClusterMap::new(1, &addrs(4));
        assert!(m.validate().is_ok());
        for p in &m.partitions {
            assert_eq!(p.replicas, vec![NodeId(p.id.0)]);
        }
    }

    #[test]
    fn five_nodes_r3_even_and_failover_spread() {
        let m = ClusterMap::build(1, &addrs(5), 8, 3);
        assert!(m.validate().is_ok());
        assert_eq!(m.partitions.len(), 40);
        let mut primaries: HashMap<NodeId, u32> = HashMap::new();
        let mut replicas: HashMap<NodeId, u32> = HashMap::new();
        let mut takeover: HashMap<(NodeId, NodeId), u32> = HashMap::new();
        for p in &m.partitions {
            assert_eq!(p.replicas.len(), 3);
            *primaries.entry(p.replicas[0]).or_default() += 1;
            for r in &p.replicas {
                *replicas.entry(*r).or_default() += 1;
            }
            *takeover.entry((p.replicas[0], p.replicas[1])).or_default() += 1;
        }
        assert!(primaries.values().all(|&c| c == 8), "{primaries:?}");
        // 120 copies on 5 servers: 24 each, give or take one (greedy, not optimal).
        assert!(
            replicas.values().all(|&c| (23..=25).contains(&c)),
            "{replicas:?}"
        );
        // When a server dies, the next replica of each of its 8 primaries takes over: no
        // other server should get more than 3 of them (2 is the even share).
        assert!(takeover.values().all(|&c| c <= 3), "{takeover:?}");
    }

    #[test]
    fn replication_is_capped_by_servers_and_weights_count() {
        let m = ClusterMap::build(1, &addrs(2), 4, 3);
        assert!(m.validate().is_ok());
        assert!(m.partitions.iter().all(|p| p.replicas.len() == 2));
        let mut nodes = ClusterMap::new(1, &addrs(3)).nodes;
        nodes[2].weight = 2;
        let parts = assign(&nodes, 16, 1);
        let on3 = parts.iter().filter(|p| p.replicas[0] == NodeId(3)).count();
        assert_eq!(on3, 8, "weight 2 gets half of 16 with weights 1,1,2");
    }
}
