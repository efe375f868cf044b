//! Coded chunks (docs/redundancy.md): the record that replaces an erasure-coded chunk's
//! blocks in its partition (`Space::Coded`, key `ino (8 BE) chunk (8 BE)`), and the walk
//! over chunks still kept in blocks that the coder makes when a partition opens.

use myriad_proto::InodeId;
use myriad_proto::ec_layout::CodedChunk;

use crate::StorageError;
use crate::keys::block_key;
use crate::kv::{Batch, Space};
use crate::store::{Store, decode, encode};

fn coded_key(ino: InodeId, chunk: u64) -> Vec<u8> {
    block_key(ino, chunk)
}

fn split_key(k: &[u8]) -> Option<(InodeId, u64)> {
    let ino = u64::from_be_bytes(k.get(..8)?.try_into().ok()?);
    let chunk = u64::from_be_bytes(k.get(8..16)?.try_into().ok()?);
    Some((InodeId(ino), chunk))
}

impl Store {
    /// The record of chunk `chunk` of `ino` if it is coded.
    pub fn coded(&self, ino: InodeId, chunk: u64) -> Result<Option<CodedChunk>, StorageError> {
        match self.kv().get(Space::Coded, &coded_key(ino, chunk))? {
            None => Ok(None),
            Some(v) => decode("coded", &v).map(Some),
        }
    }

    pub fn put_coded(&self, batch: &mut Batch, ino: InodeId, chunk: u64, c: &CodedChunk) {
        batch.put(Space::Coded, coded_key(ino, chunk), encode(c));
    }

    pub fn delete_coded(&self, batch: &mut Batch, ino: InodeId, chunk: u64) {
        batch.delete(Space::Coded, coded_key(ino, chunk));
    }

    /// The coded chunks of `ino` numbered `from` or more, with their records.
    pub fn coded_from(
        &self,
        ino: InodeId,
        from: u64,
    ) -> Result<Vec<(u64, CodedChunk)>, StorageError> {
        let mut out = Vec::new();
        let mut after = from.checked_sub(1).map(|c| coded_key(ino, c));
        loop {
            let page = self
                .kv()
                .scan(Space::Coded, &ino.0.to_be_bytes(), after.as_deref(), 256)?;
            let Some((last, _)) = page.last() else {
                return Ok(out);
            };
            after = Some(last.clone());
            for (k, v) in page {
                if let Some((_, chunk)) = split_key(&k) {
                    out.push((chunk, decode("coded", &v)?));
                }
            }
        }
    }

    /// Coded chunks of this partition after `after`, at most `limit` (fsck, repair).
    pub fn coded_chunks(
        &self,
        after: Option<(InodeId, u64)>,
        limit: usize,
    ) -> Result<Vec<(InodeId, u64, CodedChunk)>, StorageError> {
        let after = after.map(|(i, c)| coded_key(i, c));
        let page = self.kv().scan(Space::Coded, b"", after.as_deref(), limit)?;
        let mut out = Vec::with_capacity(page.len());
        for (k, v) in page {
            if let Some((ino, chunk)) = split_key(&k) {
                out.push((ino, chunk, decode("coded", &v)?));
            }
        }
        Ok(out)
    }

    /// The next chunk numbered 1 or more that has blocks here, after chunk `after` (or
    /// from the start), with `chunk_blocks` blocks to a chunk: one short read per chunk.
    pub fn next_chunk_with_blocks(
        &self,
        after: Option<(InodeId, u64)>,
        chunk_blocks: u64,
    ) -> Result<Option<(InodeId, u64)>, StorageError> {
        let chunk_blocks = chunk_blocks.max(1);
        // The key just before the first block of the next chunk to look at.
        let mut cursor: Option<Vec<u8>> = after.map(|(ino, chunk)| {
            block_key(
                ino,
                chunk.saturating_add(1).saturating_mul(chunk_blocks) - 1,
            )
        });
        loop {
            let page = self.kv().scan(Space::Blocks, b"", cursor.as_deref(), 1)?;
            let Some((k, _)) = page.into_iter().next() else {
                return Ok(None);
            };
            let Some((ino, block)) = split_key(&k) else {
                return Ok(None);
            };
            let chunk = block / chunk_blocks;
            if chunk >= 1 {
                return Ok(Some((ino, chunk)));
            }
            // Chunk 0 stays with its inode: skip to the file's chunk 1.
            cursor = Some(block_key(ino, chunk_blocks - 1));
        }
    }

    /// Fault injection for tests: drops the record of a coded chunk behind the server's
    /// back. Never called by the server.
    pub fn delete_coded_for_test(&self, ino: InodeId, chunk: u64) -> Result<(), StorageError> {
        let mut b = Batch::new();
        self.delete_coded(&mut b, ino, chunk);
        self.commit(b)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use myriad_proto::NodeId;
    use myriad_proto::erasure::EcParams;

    use super::*;
    use crate::MemKv;

    fn record(generation: u32) -> CodedChunk {
        CodedChunk {
            generation,
            params: EcParams { k: 2, m: 2 },
            data_bytes: 1000,
            servers: (1..=4).map(NodeId).collect(),
        }
    }

    #[test]
    fn coded_records_come_back_by_file_and_in_order() {
        let s = Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        for chunk in [3, 1, 7] {
            s.put_coded(&mut b, InodeId(5), chunk, &record(chunk as u32));
        }
        s.put_coded(&mut b, InodeId(6), 2, &record(9));
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.coded(InodeId(5), 3).ok().flatten(), Some(record(3)));
        assert_eq!(s.coded(InodeId(5), 2).ok().flatten(), None);
        let from: Vec<u64> = s
            .coded_from(InodeId(5), 2)
            .unwrap_or_default()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(from, vec![3, 7]);
        let all = s
            .coded_chunks(Some((InodeId(5), 3)), 10)
            .unwrap_or_default();
        let keys: Vec<(u64, u64)> = all.iter().map(|(i, c, _)| (i.0, *c)).collect();
        assert_eq!(keys, vec![(5, 7), (6, 2)]);
    }

    #[test]
    fn the_walk_finds_every_chunk_past_the_first_that_has_blocks() {
        let s = Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        // 4 blocks to a chunk: file 5 has chunks 0, 1 and 3; file 6 only chunk 0.
        for (ino, block) in [(5, 0), (5, 2), (5, 5), (5, 6), (5, 13), (6, 1), (8, 4)] {
            s.put_block(&mut b, InodeId(ino), block, vec![1; 10]);
        }
        s.commit(b).unwrap_or_else(|e| panic!("{e}"));
        let mut found = Vec::new();
        let mut at = None;
        while let Some(next) = s.next_chunk_with_blocks(at, 4).unwrap_or(None) {
            found.push((next.0.0, next.1));
            at = Some(next);
        }
        assert_eq!(found, vec![(5, 1), (5, 3), (8, 1)]);
    }
}
