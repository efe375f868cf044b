//! A cluster map file (`ClusterMap::from_json`, which validates) from arbitrary text, then
//! everything placement does with an accepted map: the ring and every lookup clients and
//! servers make on it, failover and rebalancing steps. A hostile map file may be refused;
//! it must never make placement panic. An accepted map survives `to_json` unchanged.
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;
use myriad_fuzz::u64_of;
use myriad_placement::{
    ClusterMap, NodeId, PartitionId, SHARD_DEPTH_MAX, Shard, ShardMap, partition,
};

/// Rings bigger than this are not built here: `validate` bounds a ring at `RING_POINTS_MAX`
/// (4 Mi) points, which only costs time (seconds per input under the sanitizer), not new
/// code paths; the placement crate's own tests build big rings.
const FUZZ_RING_POINTS_MAX: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(map) = ClusterMap::from_json(&text) else {
        return;
    };
    match ClusterMap::from_json(&map.to_json()) {
        Ok(back) => assert_eq!(back, map, "map changed through to_json"),
        Err(e) => panic!("an accepted map's JSON is refused: {e}"),
    }

    let points = u64::from(map.vnodes_per_partition) * map.partitions.len() as u64;
    if points <= FUZZ_RING_POINTS_MAX {
        let ring = map.ring();
        let seed = u64_of(data.get(data.len().saturating_sub(8)..).unwrap_or_default());
        for path in ["/", "/a", "/a/b", "/home/user/file.txt", &*text] {
            let owner = ring.owner_of_dir(path);
            assert!(
                map.partition(owner).is_some(),
                "ring placed {path:?} on unknown partition {owner}"
            );
            let _ = ring.owner_of_entry(path);
            let nodes = ring.dir_nodes(path);
            assert_eq!(
                nodes.first(),
                Some(&owner),
                "a directory's first node is its owner"
            );
            let leaves = ShardMap::presplit(u8::try_from(seed % 9).unwrap_or(0)).leaves;
            for shard in leaves.iter().take(8).copied().chain([Shard::ALL]) {
                let n = ring.owner_of_shard(path, shard);
                assert!(
                    nodes.contains(&n),
                    "shard {shard:?} of {path:?} off its nodes"
                );
                if shard.depth < SHARD_DEPTH_MAX {
                    let _ = ring.can_split(path, shard);
                }
            }
        }
        for chunk in 1..4 {
            let _ = ring.owner_of_chunk(myriad_placement::InodeId(seed), chunk);
        }
        let _ = (ring.epoch(), ring.chunk_size_bytes());
    }

    // Routing: every partition's primary, backups and address.
    for p in &map.partitions {
        let _ = (
            map.primary_of(p.id),
            map.backups_of(p.id),
            map.partition_addr(p.id),
        );
    }
    // Failover and membership steps the Raft leader takes on a committed map.
    for n in map.nodes.iter().take(4) {
        let _ = map.primaries_of(n.id);
        for next in [
            map.mark_down(n.id),
            map.mark_up(n.id),
            map.mark_leaving(n.id),
        ]
        .into_iter()
        .flatten()
        {
            assert!(next.epoch > map.epoch, "a changed map keeps its epoch");
        }
    }
    let expired: BTreeSet<NodeId> = map.nodes.iter().take(1).map(|n| n.id).collect();
    for exp in [BTreeSet::new(), expired] {
        if let Some(planned) = map.plan_moves(&exp, 4) {
            let pids: Vec<PartitionId> = planned.moves().iter().map(|(p, _)| *p).collect();
            for keeping in [BTreeSet::new(), exp.clone()] {
                let _ = planned.complete_moves(&pids, &keeping);
            }
        }
    }
    // Partition assignment over the map's (hostile) servers, with small counts.
    let count = u32::try_from(data.len() % 64).unwrap_or(0);
    let _ = partition::assign(&map.nodes, count, map.replication.min(8));
});
