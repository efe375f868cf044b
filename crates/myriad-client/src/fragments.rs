//! Reading erasure-coded fragments from the servers that keep them (docs/redundancy.md):
//! a fragment is asked of its server directly, with a capability to read its file.

use myriad_placement::NodeId;
use myriad_proto::auth::Capability;
use myriad_proto::ec_layout::{CodedChunk, window};
use myriad_proto::{FsError, InodeId};

use crate::client::{Client, Route};
use crate::file::FileHandle;
use myriad_proto::ask;
use myriad_proto::reply::ChunkRead;

/// Which fragment: of chunk `chunk` of file `ino`, number `index`, written for layout
/// generation `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentAt {
    pub ino: InodeId,
    pub chunk: u64,
    pub index: u8,
    pub generation: u32,
}

impl Client {
    /// Reads of coded chunks so far that had to decode because a fragment failed.
    #[must_use]
    pub fn degraded_reads(&self) -> u64 {
        self.degraded_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn note_degraded_read(&self) {
        self.degraded_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A capability to read the chunks (and fragments) of `h`.
    pub async fn read_capability(&self, h: &FileHandle) -> Result<Capability, FsError> {
        self.capability(h, false).await
    }

    /// Bytes `offset .. offset + len` of fragment `at`, from server `node`.
    pub async fn read_fragment(
        &self,
        node: NodeId,
        at: FragmentAt,
        (offset, len): (u32, u32),
        cap: Capability,
    ) -> Result<Vec<u8>, FsError> {
        let read = ask::read_fragment(
            (at.ino, at.chunk, at.index),
            at.generation,
            (offset, len),
            cap,
        );
        Ok(self.ask(Route::Server(node), read).await?.data)
    }
}

impl Client {
    /// Bytes `off .. off + n` of coded chunk `chunk` of `h` (zeros past its end): from
    /// the data fragments that hold them, in parallel; if one of them fails (its server
    /// down, a checksum, another generation), from any k whole fragments, decoded.
    /// `Stale` when too few fragments are of the record's generation (the chunk was
    /// uncoded or coded again meanwhile: the caller asks its partition again).
    pub(crate) async fn read_coded(
        &self,
        h: &FileHandle,
        chunk: u64,
        coded: &CodedChunk,
        off: u64,
        n: u64,
    ) -> Result<Vec<u8>, FsError> {
        let cap = self.read_capability(h).await?;
        let at = |index: usize| FragmentAt {
            ino: h.inode.ino,
            chunk,
            index: u8::try_from(index).unwrap_or(u8::MAX),
            generation: coded.generation,
        };
        let server = |index: usize| coded.servers.get(index).copied().unwrap_or(NodeId(0));
        let pieces = coded.pieces(off, n);
        let reads = pieces.iter().map(|p| {
            let window = (
                u32::try_from(p.offset).unwrap_or(u32::MAX),
                u32::try_from(p.len).unwrap_or(u32::MAX),
            );
            self.read_fragment(server(p.index), at(p.index), window, cap)
        });
        let got = futures::future::join_all(reads).await;
        let mut out = vec![0u8; usize::try_from(n).unwrap_or(0)];
        let mut healthy = true;
        for (p, r) in pieces.iter().zip(got) {
            match r {
                Ok(d) if d.len() == p.len => out[p.at..p.at + p.len].copy_from_slice(&d),
                _ => healthy = false,
            }
        }
        if healthy {
            return Ok(out);
        }
        // Degraded: every fragment whole, any k of them decode the chunk.
        let bytes = coded.fragment_bytes();
        let whole = (0, u32::try_from(bytes).unwrap_or(u32::MAX));
        let reads =
            (0..coded.params.total()).map(|i| self.read_fragment(server(i), at(i), whole, cap));
        let all = futures::future::join_all(reads).await;
        let moved = all
            .iter()
            .filter(|r| matches!(r, Err(FsError::Stale | FsError::NotFound)))
            .count();
        let fragments: Vec<Option<Vec<u8>>> = all
            .into_iter()
            .map(|r| r.ok().filter(|d| d.len() == bytes))
            .collect();
        match coded.decode(&fragments) {
            Ok(chunk_bytes) => {
                self.note_degraded_read();
                Ok(window(&chunk_bytes, off, n))
            }
            Err(_) if moved > 0 => Err(FsError::Stale),
            Err(e) => Err(FsError::Unavailable(format!(
                "chunk {chunk} of inode {}: {e}",
                h.inode.ino
            ))),
        }
    }
}

impl Client {
    /// How each chunk past the first of `h` is kept: its coded record, or `None` for full
    /// copies (`myriad du --raw`). One small request per chunk, `parallel` at a time.
    pub async fn chunk_codes(
        &self,
        h: &FileHandle,
        parallel: usize,
    ) -> Result<Vec<(u64, Option<CodedChunk>)>, FsError> {
        use futures::StreamExt;
        let cs = self.chunk_size();
        let last = h.inode.size.saturating_sub(1) / cs;
        let asks = (1..=last)
            .filter(|_| h.inode.size > cs)
            .map(|chunk| async move {
                let answer = self
                    .chunk_call(h, chunk, false, |cap| {
                        ask::read_chunk(h.inode.ino, chunk, 0, 0, Some(cap))
                    })
                    .await?;
                Ok(match answer {
                    ChunkRead::Coded(c) => (chunk, Some(*c)),
                    ChunkRead::Bytes(_) => (chunk, None),
                })
            });
        futures::stream::iter(asks)
            .buffered(parallel.max(1))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }
}
