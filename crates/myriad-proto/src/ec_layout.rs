//! The layout of an erasure-coded file (docs/redundancy.md): which of its chunks are coded,
//! with which code, on which servers, for which generation. Kept by the partition of the
//! file's inode and handed to readers with their capability; every change of it (chunks
//! coded, a chunk uncoded for a write, a server replaced by repair) bumps the generation,
//! which every fragment carries, so a fragment of another generation is never read.

use myriad_placement::{NodeId, fragment_slot};
use serde::{Deserialize, Serialize};

use crate::erasure::EcParams;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EcLayout {
    pub generation: u32,
    pub params: EcParams,
    /// The chunk size the file was coded with (the map's, then).
    pub chunk_bytes: u64,
    /// The servers holding the fragments, `params.total()` of them
    /// (`myriad_placement::fragment_servers`).
    pub servers: Vec<NodeId>,
    /// The coded chunks, as sorted, disjoint, non-adjacent half-open ranges. Chunk 0 is
    /// never coded (it stays with the inode).
    pub coded: Vec<(u64, u64)>,
}

impl EcLayout {
    /// Whether chunk `chunk` is coded (else it is kept in copies by its partition).
    #[must_use]
    pub fn is_coded(&self, chunk: u64) -> bool {
        let i = self.coded.partition_point(|r| r.1 <= chunk);
        self.coded.get(i).is_some_and(|r| r.0 <= chunk)
    }

    /// The server holding fragment `index` of chunk `chunk`.
    #[must_use]
    pub fn server_of(&self, chunk: u64, index: usize) -> Option<NodeId> {
        self.servers
            .get(fragment_slot(chunk, index, self.servers.len()))
            .copied()
    }

    /// Chunks `from..to` coded as well (chunk 0 never is).
    pub fn add_coded(&mut self, from: u64, to: u64) {
        let from = from.max(1);
        if from >= to {
            return;
        }
        self.coded.push((from, to));
        self.normalize();
    }

    /// Chunk `chunk` no longer coded (a write to it).
    pub fn remove_coded(&mut self, chunk: u64) {
        let mut out = Vec::with_capacity(self.coded.len() + 1);
        for &(a, b) in &self.coded {
            if chunk < a || chunk >= b {
                out.push((a, b));
                continue;
            }
            if a < chunk {
                out.push((a, chunk));
            }
            if chunk + 1 < b {
                out.push((chunk + 1, b));
            }
        }
        self.coded = out;
    }

    /// How many chunks are coded.
    #[must_use]
    pub fn coded_chunks(&self) -> u64 {
        self.coded.iter().map(|(a, b)| b - a).sum()
    }

    fn normalize(&mut self) {
        self.coded.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.coded.len());
        for &(a, b) in &self.coded {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        self.coded = out;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn layout() -> EcLayout {
        EcLayout {
            generation: 1,
            params: EcParams { k: 4, m: 2 },
            chunk_bytes: 4 << 20,
            servers: (1..=6).map(NodeId).collect(),
            coded: Vec::new(),
        }
    }

    #[test]
    fn chunk_zero_is_never_coded_and_fragments_rotate() {
        let mut l = layout();
        l.add_coded(0, 10);
        assert!(!l.is_coded(0));
        assert!(l.is_coded(1) && l.is_coded(9) && !l.is_coded(10));
        assert_eq!(l.coded_chunks(), 9);
        assert_eq!(l.server_of(1, 0), Some(NodeId(2)));
        assert_eq!(l.server_of(5, 1), Some(NodeId(1)), "wraps around");
    }

    proptest! {
        /// The coded set behaves as a set of chunk numbers: adds and removes in any order
        /// give the same answers as a plain set, and the ranges stay sorted, disjoint and
        /// non-adjacent.
        #[test]
        fn coded_ranges_are_a_set_of_chunks(
            ops in proptest::collection::vec((any::<bool>(), 0u64..60, 0u64..20), 0..40),
        ) {
            let mut l = layout();
            let mut set = std::collections::BTreeSet::new();
            for (add, a, len) in ops {
                if add {
                    l.add_coded(a, a + len);
                    for c in a.max(1)..a + len {
                        set.insert(c);
                    }
                } else {
                    l.remove_coded(a);
                    set.remove(&a);
                }
            }
            for c in 0..90 {
                prop_assert_eq!(l.is_coded(c), set.contains(&c), "chunk {}", c);
            }
            prop_assert_eq!(l.coded_chunks(), set.len() as u64);
            for w in l.coded.windows(2) {
                prop_assert!(w[0].1 < w[1].0, "{:?}", l.coded);
            }
            prop_assert!(l.coded.iter().all(|(a, b)| a < b));
        }
    }
}
