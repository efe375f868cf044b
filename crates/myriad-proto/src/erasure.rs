//! Erasure coding of a chunk (docs/redundancy.md): k data fragments (the chunk cut in k
//! equal pieces, the last padded with zeros: the code is systematic, so a healthy read
//! asks only the data fragments it covers) plus m parity fragments, any k of which give the
//! chunk back. Reed-Solomon over GF(2^16) (`reed-solomon-simd`) behind the `Erasure` trait,
//! so that the codec recorded with a file can change later. Pure: no I/O.

use serde::{Deserialize, Serialize};

/// The most data fragments a chunk is cut into (the issue: up to 8+2).
pub const K_MAX: u8 = 8;
/// Fragments are a multiple of this many bytes (the codec works on 64-byte blocks).
const FRAGMENT_ALIGN: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErasureError {
    #[error("{have} of the {k} fragments needed to rebuild the chunk")]
    TooFewFragments { have: usize, k: usize },
    #[error("fragment {index} has {len} bytes, not {want}")]
    BadFragment {
        index: usize,
        len: usize,
        want: usize,
    },
    #[error("{k}+{m} is not a code this codec makes")]
    Unsupported { k: u8, m: u8 },
    #[error("codec: {0}")]
    Codec(String),
}

/// How a chunk is coded: k data and m parity fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EcParams {
    pub k: u8,
    pub m: u8,
}

impl EcParams {
    /// The code for a cluster of `servers` servers keeping `copies` copies of small files:
    /// m = copies - 1 (the failures the copies tolerate), k = servers - m within 2..=8
    /// (every fragment of a chunk on a server of its own). `None`: too few servers for a
    /// code that saves anything (k < 2), or no redundancy asked (copies < 2).
    #[must_use]
    pub fn for_cluster(servers: usize, copies: usize) -> Option<EcParams> {
        let m = copies.checked_sub(1).filter(|m| *m >= 1)?;
        let k = servers.checked_sub(m)?.min(usize::from(K_MAX));
        (k >= 2).then(|| EcParams {
            k: u8::try_from(k).unwrap_or(K_MAX),
            m: u8::try_from(m).unwrap_or(u8::MAX),
        })
    }

    #[must_use]
    pub fn total(&self) -> usize {
        usize::from(self.k) + usize::from(self.m)
    }

    /// The bytes of each fragment of a chunk of `chunk_len` bytes.
    #[must_use]
    pub fn fragment_bytes(&self, chunk_len: usize) -> usize {
        let k = usize::from(self.k.max(1));
        chunk_len.div_ceil(k).div_ceil(FRAGMENT_ALIGN).max(1) * FRAGMENT_ALIGN
    }

    /// Raw bytes stored per byte of a chunk of `chunk_len` bytes.
    #[must_use]
    pub fn raw_ratio(&self, chunk_len: usize) -> f64 {
        if chunk_len == 0 {
            return 0.0;
        }
        (self.fragment_bytes(chunk_len) * self.total()) as f64 / chunk_len as f64
    }

    /// Which data fragments hold bytes `offset .. offset + len` of a chunk of `chunk_len`
    /// bytes (a healthy read asks only those).
    #[must_use]
    pub fn data_fragments_for(
        &self,
        chunk_len: usize,
        offset: usize,
        len: usize,
    ) -> std::ops::Range<usize> {
        let f = self.fragment_bytes(chunk_len);
        if len == 0 {
            return 0..0;
        }
        let first = offset / f;
        let last = (offset + len - 1) / f;
        first.min(usize::from(self.k))..(last + 1).min(usize::from(self.k))
    }
}

/// A codec: a chunk to its k+m fragments, and any k of them back to the chunk.
pub trait Erasure {
    fn params(&self) -> EcParams;
    /// The k+m fragments of `chunk` (data first, then parity), each
    /// `params().fragment_bytes(chunk.len())` bytes.
    fn encode(&self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, ErasureError>;
    /// The chunk of `chunk_len` bytes from its fragments by index (`None`: missing); at
    /// least k must be there.
    fn decode(
        &self,
        chunk_len: usize,
        fragments: &[Option<Vec<u8>>],
    ) -> Result<Vec<u8>, ErasureError>;
}

/// Reed-Solomon over GF(2^16), SIMD where the CPU has it.
#[derive(Clone, Copy, Debug)]
pub struct ReedSolomon {
    params: EcParams,
}

impl ReedSolomon {
    pub fn new(params: EcParams) -> Result<ReedSolomon, ErasureError> {
        let (k, m) = (usize::from(params.k), usize::from(params.m));
        if k == 0 || m == 0 || !reed_solomon_simd::ReedSolomonEncoder::supports(k, m) {
            return Err(ErasureError::Unsupported {
                k: params.k,
                m: params.m,
            });
        }
        Ok(ReedSolomon { params })
    }
}

fn codec_err(e: reed_solomon_simd::Error) -> ErasureError {
    ErasureError::Codec(e.to_string())
}

impl Erasure for ReedSolomon {
    fn params(&self) -> EcParams {
        self.params
    }

    fn encode(&self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, ErasureError> {
        let (k, m) = (usize::from(self.params.k), usize::from(self.params.m));
        let f = self.params.fragment_bytes(chunk.len());
        let data: Vec<Vec<u8>> = (0..k)
            .map(|i| {
                let mut piece = vec![0u8; f];
                let start = (i * f).min(chunk.len());
                let end = ((i + 1) * f).min(chunk.len());
                piece[..end - start].copy_from_slice(&chunk[start..end]);
                piece
            })
            .collect();
        let parity = reed_solomon_simd::encode(k, m, &data).map_err(codec_err)?;
        let mut out = data;
        out.extend(parity);
        Ok(out)
    }

    fn decode(
        &self,
        chunk_len: usize,
        fragments: &[Option<Vec<u8>>],
    ) -> Result<Vec<u8>, ErasureError> {
        let (k, m) = (usize::from(self.params.k), usize::from(self.params.m));
        let f = self.params.fragment_bytes(chunk_len);
        for (index, frag) in fragments.iter().enumerate() {
            if let Some(b) = frag
                && b.len() != f
            {
                return Err(ErasureError::BadFragment {
                    index,
                    len: b.len(),
                    want: f,
                });
            }
        }
        let have = fragments.iter().take(k + m).filter(|x| x.is_some()).count();
        if have < k {
            return Err(ErasureError::TooFewFragments { have, k });
        }
        let data = |i: usize| fragments.get(i).and_then(Option::as_ref);
        let mut restored = std::collections::BTreeMap::new();
        if (0..k).any(|i| data(i).is_none()) {
            let originals = (0..k).filter_map(|i| data(i).map(|b| (i, b)));
            let recovery = (0..m).filter_map(|j| data(k + j).map(|b| (j, b)));
            restored = reed_solomon_simd::decode(k, m, originals, recovery).map_err(codec_err)?;
        }
        let mut out = Vec::with_capacity(k * f);
        for i in 0..k {
            match data(i).or_else(|| restored.get(&i)) {
                Some(b) => out.extend_from_slice(b),
                None => return Err(ErasureError::TooFewFragments { have, k }),
            }
        }
        out.truncate(chunk_len);
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
