//! How one erasure-coded chunk is kept (docs/redundancy.md): the record that replaces the
//! chunk's blocks on its partition once the chunk is coded. It says which code, how many
//! bytes the chunk held, which server keeps each fragment, and the generation every one of
//! those fragments carries (a fragment of another generation is never read). It lives
//! where the chunk lived, so it is replicated, moved and read exactly as the chunk was, and
//! the chunk's partition, which orders every write to the chunk, is the one place that
//! codes, uncodes and repairs it.

use myriad_placement::{NodeId, fragment_slot};
use serde::{Deserialize, Serialize};

use crate::erasure::{EcParams, Erasure, ErasureError, ReedSolomon};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodedChunk {
    /// Carried by every fragment; a new one for every coding of the chunk.
    pub generation: u32,
    pub params: EcParams,
    /// Bytes of the chunk (its last block's end): fragments are cut from this many.
    pub data_bytes: u64,
    /// The server keeping fragment i, `params.total()` of them (data first, then parity).
    pub servers: Vec<NodeId>,
}

/// One piece of a read of a coded chunk: bytes `offset .. offset + len` of fragment
/// `index`, which land at `at` in the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentPiece {
    pub index: usize,
    pub offset: usize,
    pub len: usize,
    pub at: usize,
}

impl CodedChunk {
    /// The servers for the fragments of chunk `chunk` out of the file's server set
    /// `set` (`myriad_placement::fragment_servers`), rotated by the chunk number so that
    /// parity is spread over the set.
    #[must_use]
    pub fn rotated(chunk: u64, set: &[NodeId]) -> Vec<NodeId> {
        (0..set.len())
            .map(|i| set[fragment_slot(chunk, i, set.len())])
            .collect()
    }

    /// Bytes of each fragment.
    #[must_use]
    pub fn fragment_bytes(&self) -> usize {
        self.params
            .fragment_bytes(usize::try_from(self.data_bytes).unwrap_or(usize::MAX))
    }

    /// Raw bytes the fragments take.
    #[must_use]
    pub fn raw_bytes(&self) -> u64 {
        (self.fragment_bytes() * self.params.total()) as u64
    }

    /// The data fragment pieces that hold bytes `offset .. offset + len` of the chunk
    /// (clipped to the chunk): a healthy read asks only these (the code is systematic).
    #[must_use]
    pub fn pieces(&self, offset: u64, len: u64) -> Vec<FragmentPiece> {
        let end = offset.saturating_add(len).min(self.data_bytes);
        let f = self.fragment_bytes() as u64;
        let mut out = Vec::new();
        let mut pos = offset;
        while pos < end && f > 0 {
            let index = pos / f;
            let in_frag = pos % f;
            let take = (f - in_frag).min(end - pos);
            out.push(FragmentPiece {
                index: usize::try_from(index).unwrap_or(usize::MAX),
                offset: usize::try_from(in_frag).unwrap_or(usize::MAX),
                len: usize::try_from(take).unwrap_or(usize::MAX),
                at: usize::try_from(pos - offset).unwrap_or(usize::MAX),
            });
            pos += take;
        }
        out
    }

    /// The codec this chunk was coded with.
    pub fn codec(&self) -> Result<ReedSolomon, ErasureError> {
        ReedSolomon::new(self.params)
    }

    /// The whole chunk from whole fragments by index (at least k of them).
    pub fn decode(&self, fragments: &[Option<Vec<u8>>]) -> Result<Vec<u8>, ErasureError> {
        let len = usize::try_from(self.data_bytes).unwrap_or(usize::MAX);
        self.codec()?.decode(len, fragments)
    }
}

/// Bytes `offset .. offset + len` of a chunk's bytes `whole`, zeros past its end (a chunk
/// read answers as many bytes as asked, holes and the tail as zeros).
#[must_use]
pub fn window(whole: &[u8], offset: u64, len: u64) -> Vec<u8> {
    let len = usize::try_from(len).unwrap_or(0);
    let mut out = vec![0u8; len];
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(whole.len());
    let end = start.saturating_add(len).min(whole.len());
    out[..end - start].copy_from_slice(&whole[start..end]);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn coded(data_bytes: u64) -> CodedChunk {
        CodedChunk {
            generation: 1,
            params: EcParams { k: 4, m: 2 },
            data_bytes,
            servers: (1..=6).map(NodeId).collect(),
        }
    }

    #[test]
    fn fragments_rotate_with_the_chunk() {
        let set: Vec<NodeId> = (1..=6).map(NodeId).collect();
        assert_eq!(CodedChunk::rotated(0, &set), set);
        let r = CodedChunk::rotated(5, &set);
        assert_eq!(r[0], NodeId(6));
        assert_eq!(r[1], NodeId(1), "wraps around");
    }

    proptest! {
        /// The pieces of any read put every byte of the chunk in place: reading them out of
        /// the data fragments gives the chunk's bytes at that range, and no piece asks a
        /// parity fragment.
        #[test]
        fn pieces_cover_exactly_the_range(
            data_bytes in 1u64..300_000,
            offset in 0u64..320_000,
            len in 0u64..320_000,
        ) {
            let c = coded(data_bytes);
            let chunk: Vec<u8> = (0..data_bytes).map(|i| (i * 31 % 251) as u8).collect();
            let frags = c.codec().unwrap_or_else(|e| panic!("{e}")).encode(&chunk)
                .unwrap_or_else(|e| panic!("{e}"));
            let end = offset.saturating_add(len).min(data_bytes);
            let want = if offset < end { &chunk[offset as usize..end as usize] } else { &[][..] };
            let mut got = vec![0u8; want.len()];
            for p in c.pieces(offset, len) {
                prop_assert!(p.index < 4);
                got[p.at..p.at + p.len].copy_from_slice(&frags[p.index][p.offset..p.offset + p.len]);
            }
            prop_assert_eq!(&got[..], want);
        }
    }
}
