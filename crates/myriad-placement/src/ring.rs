//! Consistent-hash ring with virtual nodes. Its members are partitions (a "node" here is a
//! partition id); the cluster map says which servers hold each partition.
//!
//! Keys and ring points are xxh3-64 hashes; xxh3 is specified and stable across versions and
//! platforms, so every client and server computes the same placement forever.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::map::ClusterMap;
use crate::members::{InodeId, PartitionId};
use crate::shard::{Shard, spread_depth};

/// Domain separators (as xxh3 seeds, which costs no copy of the key) so that a directory
/// path and a chunk key hash independently.
const DOMAIN_DIR: u64 = 0x4d59_5244_4449_5231; // "MYRDDIR1"
const DOMAIN_CHUNK: u64 = 0x4d59_5244_4348_4b31; // "MYRDCHK1"

/// The ring of one partition group (zones.rs): its partitions' points.
#[derive(Clone, Debug, Default)]
struct GroupRing {
    /// Sorted by point; ties broken by node id so the order is total and deterministic.
    points: Vec<(u64, PartitionId)>,
    /// Distinct nodes on the ring.
    nodes: usize,
    /// The lowest and highest partition id on the ring (the bitset of a walk spans them).
    id_span: (u32, u32),
}

/// Placement of keys on partitions: one ring per partition group. Paths go to the group of
/// the longest policy root they are in (the default group if none), chunks and file locks
/// to the group of the partition that numbered their inode, so the inode number alone
/// still places a file's data.
#[derive(Clone, Debug)]
pub struct Ring {
    /// Index 0: the default group; then one per policy, in `policies` order.
    groups: Vec<GroupRing>,
    /// Policy roots, longest first, with their index in `groups`.
    policies: Vec<(String, usize)>,
    /// The partitions of policy groups, by id, with their index in `groups`.
    pinned: Vec<(PartitionId, usize)>,
    chunk_size_bytes: u64,
    epoch: u64,
    /// File locks on the default group's ring (the map's floor is
    /// `LOCKS_ON_DEFAULT_GROUP_SINCE`), else on the ring of the group that numbered the
    /// inode, as servers before it place them.
    locks_on_default: bool,
}

/// The first protocol whose servers keep every file's locks on the default group's ring
/// (`Ring::owner_of_locks`): used once the map's floor is this, so that every server and
/// client holding a map places a file's locks alike.
pub const LOCKS_ON_DEFAULT_GROUP_SINCE: u16 = 41;

impl ClusterMap {
    /// Builds the hash ring for this map. Callers cache it per epoch.
    #[must_use]
    pub fn ring(&self) -> Ring {
        Ring::build(self)
    }
}

impl GroupRing {
    fn owner_of_hash(&self, hash: u64) -> PartitionId {
        if self.points.is_empty() {
            return PartitionId::SERVER;
        }
        let i = self.points.partition_point(|&(p, _)| p < hash);
        let i = if i == self.points.len() { 0 } else { i };
        self.points[i].1
    }

    /// The first `want` distinct partitions met clockwise from `hash`. A walk to the last
    /// partition of a group of P meets about P ln P points, each checked against a bitset
    /// of the ids seen (a list was O(P) per point: 0.3 ms per call at 256 partitions).
    fn distinct_from(&self, hash: u64, want: usize) -> Vec<PartitionId> {
        let mut out: Vec<PartitionId> = Vec::new();
        if self.points.is_empty() {
            return out;
        }
        let mut seen = vec![0u64; (self.id_span.1 - self.id_span.0) as usize / 64 + 1];
        let start = self.points.partition_point(|&(p, _)| p < hash);
        for k in 0..self.points.len() {
            let node = self.points[(start + k) % self.points.len()].1;
            let i = (node.0 - self.id_span.0) as usize;
            let (word, bit) = (i / 64, i % 64);
            if seen[word] & (1 << bit) == 0 {
                seen[word] |= 1 << bit;
                out.push(node);
                if out.len() >= want {
                    break;
                }
            }
        }
        out
    }

    fn build<'a>(
        partitions: impl Iterator<Item = &'a crate::PartitionInfo>,
        vnodes: u32,
    ) -> GroupRing {
        let mut points = Vec::new();
        // The ring places keys on partitions (which never change); the map places partitions
        // on servers. Labels kept from when ring members were servers: a one-partition-per-
        // server map places keys exactly as before.
        for part in partitions {
            for v in 0..vnodes {
                let label = format!("myriad-vnode/{}/{}", part.id, v);
                points.push((xxh3_64(label.as_bytes()), part.id));
            }
        }
        points.sort_unstable();
        let mut ids: Vec<PartitionId> = points.iter().map(|p| p.1).collect();
        ids.sort_unstable();
        ids.dedup();
        GroupRing {
            points,
            nodes: ids.len(),
            id_span: (
                ids.first().map_or(0, |p| p.0),
                ids.last().map_or(0, |p| p.0),
            ),
        }
    }
}

impl Ring {
    pub(crate) fn build(map: &ClusterMap) -> Ring {
        Ring::build_placing(map, crate::PolicyState::places_paths)
    }

    /// The placement the tree move in flight is heading for (docs/zones.md section 3): paths
    /// under an `Arriving` policy placed by its group, under a `Leaving` one no longer. The
    /// same as `build` when no tree is moving.
    #[must_use]
    pub fn target(map: &ClusterMap) -> Ring {
        Ring::build_placing(map, crate::PolicyState::will_place_paths)
    }

    /// A ring whose paths follow the policies `places` says place them; every group with
    /// partitions places the chunks of the inodes its partitions numbered.
    fn build_placing(map: &ClusterMap, places: impl Fn(crate::PolicyState) -> bool) -> Ring {
        let vnodes = map.vnodes_per_partition;
        let mut groups = vec![GroupRing::build(
            map.partitions
                .iter()
                .filter(|p| p.group == crate::DEFAULT_GROUP),
            vnodes,
        )];
        let mut policies = Vec::new();
        let mut pinned = Vec::new();
        for pol in &map.policies {
            let ring = GroupRing::build(
                map.partitions.iter().filter(|p| p.group == pol.group),
                vnodes,
            );
            // A group without partitions places nothing: its paths stay in the default one.
            if ring.nodes == 0 {
                continue;
            }
            let index = groups.len();
            groups.push(ring);
            if places(pol.state) {
                policies.push((pol.path.clone(), index));
            }
            pinned.extend(
                map.partitions
                    .iter()
                    .filter(|p| p.group == pol.group)
                    .map(|p| (p.id, index)),
            );
        }
        policies.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        pinned.sort_unstable();
        Ring {
            groups,
            policies,
            pinned,
            chunk_size_bytes: map.chunk_size_bytes,
            epoch: map.epoch,
            locks_on_default: map.ext.protocol_floor >= LOCKS_ON_DEFAULT_GROUP_SINCE,
        }
    }

    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The ring of the group `path` is placed by.
    fn group_of_path(&self, path: &str) -> &GroupRing {
        let index = self
            .policies
            .iter()
            .find(|(root, _)| crate::path::is_within(path, root))
            .map_or(0, |(_, i)| *i);
        &self.groups[index]
    }

    /// The ring of the group of the partition that numbered `ino`.
    fn group_of_ino(&self, ino: InodeId) -> &GroupRing {
        if self.pinned.is_empty() {
            return &self.groups[0];
        }
        let pid = PartitionId(u32::try_from(ino.0 >> 40).unwrap_or(0));
        let index = self
            .pinned
            .binary_search_by_key(&pid, |(p, _)| *p)
            .map_or(0, |i| self.pinned[i].1);
        &self.groups[index]
    }

    /// The policy root whose tree `path` is in, if any (the longest).
    #[must_use]
    pub fn policy_root_of(&self, path: &str) -> Option<&str> {
        self.policies
            .iter()
            .find(|(root, _)| crate::path::is_within(path, root))
            .map(|(root, _)| root.as_str())
    }

    /// The node holding the directory object (entries with embedded inodes) of `dir_path`.
    #[must_use]
    pub fn owner_of_dir(&self, dir_path: &str) -> PartitionId {
        self.group_of_path(dir_path)
            .owner_of_hash(hash_dir(dir_path))
    }

    /// The node holding the entry (and so the inode and chunk 0) of `path`: its parent's owner.
    /// The root has no parent; its attributes live in its own directory object.
    #[must_use]
    pub fn owner_of_entry(&self, path: &str) -> PartitionId {
        if path == "/" {
            return self.owner_of_dir("/");
        }
        self.owner_of_dir(crate::parent_of(path))
    }

    /// The node holding chunk `chunk_index` (>= 1) of inode `ino`. Chunk 0 lives with the inode,
    /// so callers route it by `owner_of_entry` instead.
    #[must_use]
    pub fn owner_of_chunk(&self, ino: InodeId, chunk_index: u64) -> PartitionId {
        self.group_of_ino(ino)
            .owner_of_hash(hash_chunk(ino.0, chunk_index))
    }

    /// The partition whose primary keeps the file locks of inode `ino` (docs/fuse.md "File
    /// locks between mounts"): a point of its own (no data chunk has index `u64::MAX`), so
    /// renames and links never move them, on the default group's ring, whose partitions
    /// never change, so no map change moves them either. (On the ring of the group that
    /// numbered the inode, a zone's group coming and going with its tree moved a file's
    /// locks to a partition that knew nothing of them and granted a held lock again:
    /// simulation seed 111009, `--locks --zones --tree-moves`.) Below the map's floor
    /// `LOCKS_ON_DEFAULT_GROUP_SINCE`, as servers before it place them.
    #[must_use]
    pub fn owner_of_locks(&self, ino: InodeId) -> PartitionId {
        let group = if self.locks_on_default {
            &self.groups[0]
        } else {
            self.group_of_ino(ino)
        };
        group.owner_of_hash(hash_chunk(ino.0, u64::MAX))
    }

    /// The nodes of directory `dir_path` in shard order: the distinct nodes met walking the
    /// ring clockwise from the directory's point, its owner first (docs/huge-dirs.md).
    #[must_use]
    pub fn dir_nodes(&self, dir_path: &str) -> Vec<PartitionId> {
        let g = self.group_of_path(dir_path);
        g.distinct_from(hash_dir(dir_path), g.nodes)
    }

    /// The node holding shard `shard` of directory `dir_path`: node `index mod n` of
    /// `dir_nodes`. Shard 0 (and so an unsplit directory) is on `owner_of_dir`.
    #[must_use]
    pub fn owner_of_shard(&self, dir_path: &str, shard: Shard) -> PartitionId {
        let g = self.group_of_path(dir_path);
        let n = u64::try_from(g.nodes.max(1)).unwrap_or(1);
        let k = usize::try_from(shard.index() % n).unwrap_or(0);
        if k == 0 {
            // Shard 0 (every unsplit directory): no walk.
            return g.owner_of_hash(hash_dir(dir_path));
        }
        // Walk only as far as the k-th distinct node.
        g.distinct_from(hash_dir(dir_path), k + 1)
            .get(k)
            .copied()
            .unwrap_or(PartitionId::SERVER)
    }

    /// The depth `dir_path`'s shards split to once it is huge: every partition of its group
    /// then holds the same number of its shards (`shard::spread_depth`).
    #[must_use]
    pub fn spread_depth(&self, dir_path: &str) -> u8 {
        spread_depth(self.group_of_path(dir_path).nodes)
    }

    /// The nodes of `shards` of `dir_path`, in order: `owner_of_shard` of each, with one
    /// walk of the ring for all of them.
    #[must_use]
    pub fn owners_of_shards(&self, dir_path: &str, shards: &[Shard]) -> Vec<PartitionId> {
        let nodes = self.dir_nodes(dir_path);
        let n = u64::try_from(nodes.len().max(1)).unwrap_or(1);
        shards
            .iter()
            .map(|s| {
                let k = usize::try_from(s.index() % n).unwrap_or(0);
                nodes.get(k).copied().unwrap_or(PartitionId::SERVER)
            })
            .collect()
    }

    /// The entry count over which `shard` of `dir_path` splits for a server threshold of
    /// `threshold` (`shard::split_trigger` for the partitions of its group).
    #[must_use]
    pub fn split_trigger(&self, dir_path: &str, shard: Shard, threshold: u64) -> Option<u64> {
        crate::shard::split_trigger(shard, threshold, self.group_of_path(dir_path).nodes)
    }

    /// True if `shard` of `dir_path` is above its spread depth and splitting it puts its
    /// upper half on another node (a split on one node spreads nothing).
    #[must_use]
    pub fn can_split(&self, dir_path: &str, shard: Shard) -> bool {
        shard.depth < self.spread_depth(dir_path)
            && self.owner_of_shard(dir_path, shard.halves().1)
                != self.owner_of_shard(dir_path, shard)
    }

    #[must_use]
    pub fn chunk_size_bytes(&self) -> u64 {
        self.chunk_size_bytes
    }
}

fn hash_dir(path: &str) -> u64 {
    xxh3_64_with_seed(path.as_bytes(), DOMAIN_DIR)
}

fn hash_chunk(ino: u64, chunk_index: u64) -> u64 {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&ino.to_be_bytes());
    buf[8..].copy_from_slice(&chunk_index.to_be_bytes());
    xxh3_64_with_seed(&buf, DOMAIN_CHUNK)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::{MapError, NodeId};

    fn map(n: usize) -> ClusterMap {
        let addrs: Vec<String> = (0..n).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect();
        ClusterMap::new(1, &addrs)
    }

    fn random_dir_path(rng: &mut impl Rng) -> String {
        let depth = rng.gen_range(1..6);
        let mut p = String::new();
        for _ in 0..depth {
            let len = rng.gen_range(1..12);
            p.push('/');
            for _ in 0..len {
                p.push(char::from(b'a' + rng.gen_range(0..26u8)));
            }
        }
        p
    }

    /// DESIGN.md: for uniformly spread work, no node carries more than 1.15x the mean load.
    #[test]
    fn four_nodes_100k_dirs_busiest_at_most_1_15_mean() {
        let ring = map(4).ring();
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let mut counts: HashMap<PartitionId, u64> = HashMap::new();
        let total = 100_000u64;
        for _ in 0..total {
            *counts
                .entry(ring.owner_of_dir(&random_dir_path(&mut rng)))
                .or_default() += 1;
        }
        assert_eq!(counts.len(), 4, "every node must get keys");
        let mean = total as f64 / 4.0;
        let max = *counts.values().max().unwrap_or(&0) as f64;
        assert!(
            max / mean <= 1.15,
            "busiest/mean = {:.3} ({counts:?})",
            max / mean
        );
    }

    #[test]
    fn chunks_spread_evenly() {
        let ring = map(4).ring();
        let mut counts: HashMap<PartitionId, u64> = HashMap::new();
        for ino in 0..10_000u64 {
            for c in 1..11 {
                *counts
                    .entry(ring.owner_of_chunk(InodeId(ino), c))
                    .or_default() += 1;
            }
        }
        let mean = 100_000.0 / 4.0;
        let max = *counts.values().max().unwrap_or(&0) as f64;
        assert!(max / mean <= 1.15, "busiest/mean = {:.3}", max / mean);
    }

    #[test]
    fn entry_lives_with_parent_directory_object() {
        let ring = map(4).ring();
        assert_eq!(ring.owner_of_entry("/a/b/file"), ring.owner_of_dir("/a/b"));
        assert_eq!(ring.owner_of_entry("/top"), ring.owner_of_dir("/"));
        assert_eq!(ring.owner_of_entry("/"), ring.owner_of_dir("/"));
    }

    #[test]
    fn adding_a_node_moves_about_one_fifth_of_keys() {
        let before = map(4).ring();
        let after = map(5).ring();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut moved = 0;
        let n = 20_000;
        for _ in 0..n {
            let p = random_dir_path(&mut rng);
            let (a, b) = (before.owner_of_dir(&p), after.owner_of_dir(&p));
            if a != b {
                moved += 1;
                assert_eq!(b, PartitionId(5), "keys only move to the new node");
            }
        }
        let share = f64::from(moved) / f64::from(n);
        assert!((0.12..0.28).contains(&share), "moved share {share}");
    }

    #[test]
    fn map_validation() {
        let mut m = map(3);
        assert!(m.validate().is_ok());
        m.nodes[1].id = NodeId(1);
        assert_eq!(m.validate(), Err(MapError::DuplicateNode(NodeId(1))));
        let mut m = map(1);
        m.nodes[0].weight = 0;
        assert_eq!(m.validate(), Err(MapError::BadWeight(NodeId(1))));
        let mut m = map(1);
        m.chunk_size_bytes = 1000;
        assert_eq!(m.validate(), Err(MapError::BadLayout));
        assert!(matches!(
            ClusterMap::from_json("{"),
            Err(MapError::Parse(_))
        ));
        let m = map(2);
        assert_eq!(ClusterMap::from_json(&m.to_json()), Ok(m));
    }

    #[test]
    fn shards_of_a_directory_spread_over_distinct_nodes() {
        let ring = map(4).ring();
        for d in ["/", "/data", "/a/b/c"] {
            let nodes = ring.dir_nodes(d);
            assert_eq!(nodes.len(), 4);
            assert_eq!(nodes[0], ring.owner_of_dir(d));
            assert_eq!(ring.owner_of_shard(d, Shard::ALL), ring.owner_of_dir(d));
            let m = crate::ShardMap::presplit(2);
            let mut owners: Vec<PartitionId> = m
                .leaves
                .iter()
                .map(|s| ring.owner_of_shard(d, *s))
                .collect();
            owners.sort_unstable();
            assert_eq!(owners, [1, 2, 3, 4].map(PartitionId).to_vec(), "{d}");
            // Four nodes: splits spread the directory until it has four shards.
            assert!(ring.can_split(d, Shard::ALL));
            let (lo, hi) = Shard::ALL.halves();
            assert!(ring.can_split(d, lo) && ring.can_split(d, hi));
            assert!(!ring.can_split(d, lo.halves().0));
        }
        assert!(
            !map(1).ring().can_split("/x", Shard::ALL),
            "one node: never split"
        );
        assert!(
            map(3)
                .ring()
                .can_split("/x", Shard::ALL.halves().0.halves().0)
        );
    }

    proptest! {
        /// Placement is a pure function: same map and key, same node, every time.
        #[test]
        fn placement_is_deterministic(path in "(/[a-z]{1,8}){1,5}", ino in any::<u64>(), c in 1u64..1000) {
            let r1 = map(4).ring();
            let r2 = map(4).ring();
            prop_assert_eq!(r1.owner_of_dir(&path), r2.owner_of_dir(&path));
            prop_assert_eq!(r1.owner_of_chunk(InodeId(ino), c), r2.owner_of_chunk(InodeId(ino), c));
            prop_assert!((1..=4).contains(&r1.owner_of_dir(&path).0));
        }
    }
}
