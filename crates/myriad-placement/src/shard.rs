//! Shards of huge directories (docs/huge-dirs.md).
//!
//! Entry names hash to a 64-bit value (`name_hash`). A shard is a binary prefix of that hash:
//! `Shard { prefix, depth }` holds the names whose hash starts with the `depth` bits of
//! `prefix`, i.e. one contiguous range of hash values. An unsplit directory is the single
//! shard of depth 0. Splitting a shard halves its range: the lower half keeps the shard's
//! place, the upper half (the "child") goes to another node. Because every shard is a hash
//! range, a cursor that is a hash position stays valid however the shards split.
//!
//! Where shards live: the directory's nodes are the distinct nodes met walking the ring
//! clockwise from the directory's point (`Ring::dir_nodes`); its first node holds the
//! directory object as always (the directory's *home*). A shard's *index* is its prefix
//! with the bits reversed (GIGA+ numbering: the lower half of shard i keeps i, the upper
//! half is i + 2^depth) and it lives on node `index mod nodes`. So shard 0, which always
//! keeps the lowest range, stays on the home, and once a directory has as many shards as
//! nodes every node holds an equal share of the hash space.
//!
//! How far a directory splits (`spread_depth`, `split_trigger`): the first split waits for
//! the threshold (less in a group of many partitions); from then on the directory is huge, and every shard splits again while
//! its share of the directory (entries times 2^depth) is over half the threshold, down to
//! the depth at which every node of the group holds the same number of shards. All leaves
//! then have one depth, so equal hash ranges: sizes within the spread of a hash.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

const DOMAIN_NAME: u64 = 0x4d59_5244_4e41_4d31; // "MYRDNAM1"

/// Deepest split: at most 2^12 = 4,096 shards per directory, the spread of a group of up to
/// 4,096 partitions (512 servers at 8 partitions each); a bigger group stops there.
pub const SHARD_DEPTH_MAX: u8 = 12;

/// The depth a huge directory of a group of `partitions` partitions splits to: the smallest
/// at which every partition holds the same number of shards, or (a count that is no power
/// of two) at least four per partition, so that no partition holds more than 1.25x the
/// mean and a server's several partitions average that out to within 1.15x (measured for
/// 1-40 servers: spread_tests.rs; two per partition reached 1.30). 0 for one partition.
#[must_use]
pub fn spread_depth(partitions: usize) -> u8 {
    let p = u64::try_from(partitions).unwrap_or(u64::MAX);
    if p <= 1 {
        return 0;
    }
    let shards = if p.is_power_of_two() {
        p
    } else {
        p.saturating_mul(4)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63)
    };
    u8::try_from(shards.trailing_zeros())
        .unwrap_or(SHARD_DEPTH_MAX)
        .min(SHARD_DEPTH_MAX)
}

/// Partitions a group may have before the first split comes sooner than the threshold.
pub const FIRST_SPLIT_PARTITIONS: u64 = 16;

/// The entry count over which `shard` splits, for a server threshold of `threshold` entries
/// (0: never) in a group of `partitions` partitions. Every entry made before a directory's
/// first split lands on its home, a load that weighs more the more servers share the rest:
/// an unsplit directory splits past the threshold in a group of up to
/// `FIRST_SPLIT_PARTITIONS` (two servers), and past `threshold * 16 / partitions` in a
/// bigger one (8,192 by default: 4,096 at 4 servers, 1,024 at 16, 512 at 32). A shard of a
/// split directory splits while its entries times `2^depth` (its estimate of the whole
/// directory) exceed half of that, so a directory once past it spreads at once, and a
/// shard the hash left nearly empty waits until it fills. The caller checks the depth.
#[must_use]
pub fn split_trigger(shard: Shard, threshold: u64, partitions: usize) -> Option<u64> {
    if threshold == 0 {
        return None;
    }
    let p = u64::try_from(partitions).unwrap_or(u64::MAX);
    let first =
        (threshold.saturating_mul(FIRST_SPLIT_PARTITIONS) / p.max(FIRST_SPLIT_PARTITIONS)).max(1);
    match shard.depth {
        0 => Some(first),
        d => Some((first / 2).checked_shr(u32::from(d)).unwrap_or(0)),
    }
}

/// The hash of an entry name that decides its shard and its place in a listing.
#[must_use]
pub fn name_hash(name: &str) -> u64 {
    xxh3_64_with_seed(name.as_bytes(), DOMAIN_NAME)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shard {
    /// The first `depth` bits of the hash, right-aligned.
    pub prefix: u64,
    pub depth: u8,
}

impl Shard {
    /// The whole hash space: an unsplit directory.
    pub const ALL: Shard = Shard {
        prefix: 0,
        depth: 0,
    };

    /// False for a depth over `SHARD_DEPTH_MAX` or a prefix with bits beyond `depth` (never
    /// built here; checked on what peers send).
    #[must_use]
    pub fn is_valid(&self) -> bool {
        self.depth <= SHARD_DEPTH_MAX && self.prefix >> self.depth == 0
    }

    /// First hash value in the shard.
    #[must_use]
    pub fn start(&self) -> u64 {
        if self.depth == 0 {
            0
        } else {
            self.prefix << (64 - u32::from(self.depth))
        }
    }

    /// First hash value after the shard (`None`: the shard reaches the end of the space).
    #[must_use]
    pub fn end(&self) -> Option<u64> {
        if self.depth == 0 {
            return None;
        }
        let width = 1u64 << (64 - u32::from(self.depth));
        self.start().checked_add(width)
    }

    #[must_use]
    pub fn contains(&self, hash: u64) -> bool {
        self.depth == 0 || hash >> (64 - u32::from(self.depth)) == self.prefix
    }

    /// True if `other` lies inside this shard (or is it).
    #[must_use]
    pub fn covers(&self, other: &Shard) -> bool {
        other.depth >= self.depth
            && (self.depth == 0 || other.prefix >> (other.depth - self.depth) == self.prefix)
    }

    /// The two halves: (lower, which keeps this shard's place; upper, the child that moves).
    #[must_use]
    pub fn halves(&self) -> (Shard, Shard) {
        let depth = self.depth + 1;
        (
            Shard {
                prefix: self.prefix << 1,
                depth,
            },
            Shard {
                prefix: (self.prefix << 1) | 1,
                depth,
            },
        )
    }

    /// GIGA+ index: the prefix bits reversed (the first split bit is the lowest).
    #[must_use]
    pub fn index(&self) -> u64 {
        if self.depth == 0 {
            0
        } else {
            self.prefix.reverse_bits() >> (64 - u32::from(self.depth))
        }
    }

    /// Short text for logs and fsck reports: "3/2" = prefix 3 at depth 2.
    #[must_use]
    pub fn label(&self) -> String {
        format!("{}/{}", self.prefix, self.depth)
    }
}

/// How a directory is split: its leaf shards in hash order, covering the whole space.
/// Kept by the directory's home node; clients cache it and learn of splits by redirects.
/// `version` grows with every change, so the newer of two maps is the one to keep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    pub version: u64,
    pub leaves: Vec<Shard>,
}

impl Default for ShardMap {
    fn default() -> Self {
        ShardMap::unsplit()
    }
}

impl ShardMap {
    #[must_use]
    pub fn unsplit() -> ShardMap {
        ShardMap {
            version: 0,
            leaves: vec![Shard::ALL],
        }
    }

    /// A directory created with `2^depth` shards (`mkdir --shards`).
    #[must_use]
    pub fn presplit(depth: u8) -> ShardMap {
        let depth = depth.min(SHARD_DEPTH_MAX);
        ShardMap {
            version: 1,
            leaves: (0..1u64 << depth)
                .map(|prefix| Shard { prefix, depth })
                .collect(),
        }
    }

    #[must_use]
    pub fn is_split(&self) -> bool {
        self.leaves.len() > 1
    }

    /// The leaf holding `hash`.
    #[must_use]
    pub fn leaf_for(&self, hash: u64) -> Shard {
        let i = self.leaves.partition_point(|s| s.start() <= hash);
        self.leaves
            .get(i.saturating_sub(1))
            .copied()
            .unwrap_or(Shard::ALL)
    }

    /// Replaces leaf `shard` by its halves. False if `shard` is not a leaf.
    pub fn split(&mut self, shard: Shard) -> bool {
        let Some(i) = self.leaves.iter().position(|s| *s == shard) else {
            return false;
        };
        let (lo, hi) = shard.halves();
        self.leaves[i] = lo;
        self.leaves.insert(i + 1, hi);
        self.version += 1;
        true
    }

    /// Undoes `split(shard)` (an abandoned split). False if its halves are not both leaves.
    pub fn unsplit_leaf(&mut self, shard: Shard) -> bool {
        let (lo, hi) = shard.halves();
        let Some(i) = self.leaves.iter().position(|s| *s == lo) else {
            return false;
        };
        if self.leaves.get(i + 1) != Some(&hi) {
            return false;
        }
        self.leaves[i] = shard;
        self.leaves.remove(i + 1);
        self.version += 1;
        true
    }

    /// True if the leaves are sorted, disjoint, valid and cover the whole hash space.
    #[must_use]
    pub fn is_well_formed(&self) -> bool {
        let mut next = Some(0u64);
        for s in &self.leaves {
            if !s.is_valid() || Some(s.start()) != next {
                return false;
            }
            next = s.end();
        }
        next.is_none() && !self.leaves.is_empty()
    }
}

/// Most directories a cache remembers; beyond it, it starts over (maps are re-learned by
/// one redirect each).
const CACHE_DIRS_MAX: usize = 65_536;

/// A client's (or server's) cache of the shard maps of the split directories it has met.
/// A directory not in it is taken as unsplit.
#[derive(Default)]
pub struct ShardCache {
    maps: std::sync::RwLock<std::collections::BTreeMap<String, std::sync::Arc<ShardMap>>>,
}

impl ShardCache {
    /// The cached map of `dir` (`None`: taken as unsplit).
    #[must_use]
    pub fn get(&self, dir: &str) -> Option<std::sync::Arc<ShardMap>> {
        self.maps.read().ok()?.get(dir).cloned()
    }

    /// The leaf of `dir` that holds `hash`, as far as this cache knows.
    #[must_use]
    pub fn leaf_for(&self, dir: &str, hash: u64) -> Shard {
        self.get(dir).map_or(Shard::ALL, |m| m.leaf_for(hash))
    }

    /// Keeps `map` for `dir` if it is newer than the one held; `authoritative` (it came from
    /// the directory's home) replaces whatever is held, since a directory removed and made
    /// again starts its versions over.
    pub fn adopt(&self, dir: &str, map: ShardMap, authoritative: bool) {
        if !map.is_well_formed() {
            return;
        }
        let Ok(mut g) = self.maps.write() else {
            return;
        };
        if !authoritative && g.get(dir).is_some_and(|m| m.version >= map.version) {
            return;
        }
        if !map.is_split() {
            g.remove(dir);
            return;
        }
        if g.len() >= CACHE_DIRS_MAX {
            g.clear();
        }
        g.insert(dir.to_string(), std::sync::Arc::new(map));
    }

    pub fn forget(&self, dir: &str) {
        if let Ok(mut g) = self.maps.write() {
            g.remove(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_partition_the_range() {
        let s = Shard {
            prefix: 0b10,
            depth: 2,
        };
        let (lo, hi) = s.halves();
        assert_eq!(lo.start(), s.start());
        assert_eq!(lo.end(), Some(hi.start()));
        assert_eq!(hi.end(), s.end());
        assert!(s.covers(&lo) && s.covers(&hi) && !lo.covers(&s));
        let (a, b) = Shard::ALL.halves();
        assert_eq!((a.start(), a.end(), b.end()), (0, Some(1 << 63), None));
        for h in [0u64, 1 << 62, 1 << 63, u64::MAX] {
            assert!(Shard::ALL.contains(h));
            assert_eq!(a.contains(h), !b.contains(h));
        }
    }

    #[test]
    fn giga_index_arithmetic() {
        // The lower half keeps the index, the upper half is index + 2^depth.
        let mut s = Shard::ALL;
        for _ in 0..6 {
            let (lo, hi) = s.halves();
            assert_eq!(lo.index(), s.index());
            assert_eq!(hi.index(), s.index() + (1 << s.depth));
            s = hi;
        }
    }

    #[test]
    fn maps_split_and_route() {
        let mut m = ShardMap::unsplit();
        assert!(m.split(Shard::ALL));
        let (lo, hi) = Shard::ALL.halves();
        assert!(m.split(hi));
        assert!(m.is_well_formed());
        assert_eq!(m.leaves.len(), 3);
        for h in [0u64, 5, 1 << 63, (1 << 63) | (1 << 62), u64::MAX] {
            let leaf = m.leaf_for(h);
            assert!(leaf.contains(h), "{h:x} -> {leaf:?}");
        }
        assert!(!m.unsplit_leaf(Shard::ALL), "halves are not both leaves");
        assert!(m.unsplit_leaf(hi));
        assert_eq!(m.leaves, vec![lo, hi]);
        assert_eq!(m.version, 3);
        let p = ShardMap::presplit(3);
        assert!(p.is_well_formed());
        assert_eq!(p.leaves.len(), 8);
        assert!(
            !ShardMap {
                version: 1,
                leaves: vec![lo]
            }
            .is_well_formed()
        );
    }

    #[test]
    fn cache_keeps_the_newer_map() {
        let c = ShardCache::default();
        assert_eq!(c.leaf_for("/d", u64::MAX), Shard::ALL);
        let mut m = ShardMap::unsplit();
        m.split(Shard::ALL);
        c.adopt("/d", m.clone(), false);
        assert_eq!(c.leaf_for("/d", u64::MAX), Shard::ALL.halves().1);
        let mut older = ShardMap::unsplit();
        older.version = 0;
        c.adopt("/d", older.clone(), false);
        assert!(
            c.get("/d").is_some(),
            "an older map does not replace a newer one"
        );
        c.adopt("/d", older, true);
        assert!(c.get("/d").is_none(), "the home's word is final");
        c.adopt(
            "/d",
            ShardMap {
                version: 9,
                leaves: vec![],
            },
            true,
        );
        assert!(c.get("/d").is_none(), "malformed maps are ignored");
    }

    #[test]
    fn spread_depth_gives_every_partition_its_share() {
        assert_eq!(spread_depth(0), 0);
        assert_eq!(spread_depth(1), 0);
        assert_eq!(spread_depth(2), 1);
        assert_eq!(spread_depth(32), 5);
        assert_eq!(spread_depth(64), 6);
        assert_eq!(spread_depth(256), 8);
        // No power of two: at least four shards per partition.
        assert_eq!(spread_depth(24), 7);
        assert_eq!(spread_depth(40), 8);
        assert_eq!(spread_depth(3), 4);
        assert_eq!(spread_depth(1 << 20), SHARD_DEPTH_MAX);
        for p in 2..3000usize {
            let shards = 1usize << spread_depth(p);
            if shards < 1 << SHARD_DEPTH_MAX {
                assert!(shards >= p, "{p}");
                assert!(shards.is_multiple_of(p) || shards >= 4 * p, "{p}");
            }
        }
    }

    #[test]
    fn split_trigger_waits_for_the_threshold_then_spreads() {
        let (lo, _) = Shard::ALL.halves();
        assert_eq!(split_trigger(Shard::ALL, 0, 32), None);
        assert_eq!(split_trigger(lo, 0, 32), None);
        // Up to 16 partitions: the threshold itself.
        assert_eq!(split_trigger(Shard::ALL, 8192, 1), Some(8192));
        assert_eq!(split_trigger(Shard::ALL, 8192, 16), Some(8192));
        // Bigger groups split sooner: 4 servers, 16, 32 (8 partitions each).
        assert_eq!(split_trigger(Shard::ALL, 8192, 32), Some(4096));
        assert_eq!(split_trigger(Shard::ALL, 8192, 128), Some(1024));
        assert_eq!(split_trigger(Shard::ALL, 8192, 256), Some(512));
        assert_eq!(split_trigger(Shard::ALL, 8, 4096), Some(1));
        // Just past the first trigger, both halves (about half each) split on.
        assert_eq!(split_trigger(lo, 8192, 16), Some(2048));
        assert_eq!(split_trigger(lo, 8192, 128), Some(256));
        let deep = Shard {
            prefix: 0,
            depth: 8,
        };
        assert_eq!(split_trigger(deep, 8192, 16), Some(16));
        let deepest = Shard {
            prefix: 0,
            depth: SHARD_DEPTH_MAX,
        };
        assert_eq!(split_trigger(deepest, 8192, 16), Some(1));
        assert_eq!(split_trigger(deep, 8, 16), Some(0));
    }

    #[test]
    fn names_spread_over_shards() {
        let m = ShardMap::presplit(2);
        let mut counts = [0u32; 4];
        for i in 0..40_000 {
            let leaf = m.leaf_for(name_hash(&format!("file-{i}")));
            counts[usize::try_from(leaf.prefix).unwrap_or(0)] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
    }
}
