//! Where the fragments of an erasure-coded file go (docs/redundancy.md): `count` distinct
//! servers chosen by rendezvous hashing of the file's inode over the servers that may take
//! them, so every client and server computes the same set, and a server joining or leaving
//! changes the set of only the files it wins or held. The set is recorded in the file's
//! layout when it is coded (a later map change does not move fragments by itself); chunk
//! `c`'s fragment `j` is on the set's server `(c + j) mod count`, so data and parity
//! fragments rotate over all of them.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::{InodeId, NodeId};

/// Seed separating this hash from placement's other uses.
const FRAGMENT_SEED: u64 = 0x6672_6167_6d65_6e74; // "fragment"

/// `count` distinct servers of `candidates` for the fragments of `ino`, best first; `None`
/// if there are fewer candidates than that.
#[must_use]
pub fn fragment_servers(ino: InodeId, count: usize, candidates: &[NodeId]) -> Option<Vec<NodeId>> {
    let mut scored: Vec<(u64, NodeId)> = candidates
        .iter()
        .map(|n| {
            let mut key = [0u8; 12];
            key[..8].copy_from_slice(&ino.0.to_be_bytes());
            key[8..].copy_from_slice(&n.0.to_be_bytes());
            (xxh3_64_with_seed(&key, FRAGMENT_SEED), *n)
        })
        .collect();
    scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.dedup_by_key(|s| s.1);
    (scored.len() >= count && count > 0)
        .then(|| scored.into_iter().take(count).map(|s| s.1).collect())
}

/// The position in a file's server set of chunk `chunk`'s fragment `index`.
#[must_use]
pub fn fragment_slot(chunk: u64, index: usize, count: usize) -> usize {
    if count == 0 {
        return 0;
    }
    let c = usize::try_from(chunk % count as u64).unwrap_or(0);
    (c + index) % count
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn nodes(n: u32) -> Vec<NodeId> {
        (1..=n).map(NodeId).collect()
    }

    #[test]
    fn too_few_servers_give_no_set() {
        assert_eq!(fragment_servers(InodeId(1), 6, &nodes(5)), None);
        assert_eq!(fragment_servers(InodeId(1), 0, &nodes(5)), None);
        assert_eq!(
            fragment_servers(InodeId(1), 6, &[NodeId(1), NodeId(1), NodeId(2)]),
            None,
            "a server listed twice counts once"
        );
    }

    #[test]
    fn every_server_of_the_set_holds_each_fragment_number_in_turn() {
        // Over `count` consecutive chunks, each slot takes each fragment number once: the
        // parity fragments rotate over all servers.
        let count = 6;
        for index in 0..count {
            let mut slots: Vec<usize> = (0..count as u64)
                .map(|c| fragment_slot(c + 100, index, count))
                .collect();
            slots.sort_unstable();
            assert_eq!(slots, (0..count).collect::<Vec<_>>());
        }
    }

    #[test]
    fn files_spread_evenly_over_the_servers() {
        let all = nodes(16);
        let mut held = [0u32; 17];
        for ino in 0..20_000u64 {
            for n in fragment_servers(InodeId(ino), 6, &all).unwrap_or_default() {
                held[n.0 as usize] += 1;
            }
        }
        let mean = 20_000.0 * 6.0 / 16.0;
        for (n, h) in held.iter().enumerate().skip(1) {
            let r = f64::from(*h) / mean;
            assert!((0.9..1.1).contains(&r), "server {n}: {r}");
        }
    }

    proptest! {
        /// The set is `count` distinct candidates, the same for the same input, and a
        /// server added changes a file's set only by taking one place in it (rendezvous:
        /// minimal movement); a server removed that was not in the set changes nothing.
        #[test]
        fn sets_are_distinct_stable_and_move_little(
            ino in any::<u64>(),
            n in 6u32..40,
            count in 1usize..=6,
        ) {
            let all = nodes(n);
            let set = fragment_servers(InodeId(ino), count, &all).unwrap_or_default();
            prop_assert_eq!(set.len(), count);
            let mut d = set.clone();
            d.sort_unstable();
            d.dedup();
            prop_assert_eq!(d.len(), count);
            prop_assert_eq!(fragment_servers(InodeId(ino), count, &all).unwrap_or_default(), set.clone());
            let mut more = all.clone();
            more.push(NodeId(1000));
            let grown = fragment_servers(InodeId(ino), count, &more).unwrap_or_default();
            let kept = grown.iter().filter(|s| set.contains(s)).count();
            prop_assert!(kept + 1 >= count, "{:?} -> {:?}", set, grown);
            if let Some(out) = all.iter().find(|s| !set.contains(s)) {
                let fewer: Vec<NodeId> = all.iter().copied().filter(|s| s != out).collect();
                prop_assert_eq!(fragment_servers(InodeId(ino), count, &fewer).unwrap_or_default(), set);
            }
        }
    }
}
