//! Typed access to a node's store. Reads go straight to the engine; writes are expressed as
//! `Batch`es that the caller commits (the server's single applier thread does, which is what
//! makes check-then-write sequences race-free).

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::StorageError;
use crate::blocks::{BLOCK_BYTES, open_block, seal_block};
use crate::keys::{
    block_key, entry_key, entry_prefix, hash_position_key, split_entry_key, u64_key,
};
use crate::kv::{Batch, Kv, Space};
use crate::records::{
    DirRecord, DirRecordV2, DirRecordV3, DirRecordV4, DirRecordV4Ref, EntryRecord, RECORD_VERSION,
    RECORD_VERSION_DIR_UNDECIDED, RECORD_VERSION_PLAIN, RECORD_VERSION_V3, checksummed,
};
use myriad_proto::InodeId;

/// Version of the on-disk layout; stored under `format_version` in `Meta`.
/// 2: entry keys carry the name hash; directory records carry shards.
/// 3: every key carries its partition's id (`PartitionKv`); 0 holds the server's own records.
/// 4: every block value ends with the crc32c of its data (blocks.rs).
/// 5: inodes carry `rdev`; directory records count their subdirectories (issue 16).
/// 6: the cluster map kept by the membership group (Raft log, state, snapshots) records
///    zones, partition groups and policies (issue 22); its encoding is not self-describing.
/// 7: policies carry their state (a tree moving between zones; the map as in 6).
pub const FORMAT_VERSION: u32 = 7;

#[derive(Clone)]
pub struct Store {
    kv: Arc<dyn Kv>,
    /// True if this open created the store (a first start, not a restart).
    fresh: bool,
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    encode_as(RECORD_VERSION, value)
}

/// A directory record: version 4's layout unless it is marked `undecided` (version 5), so
/// that what a release before 5 reads is all a cluster writes until its floor allows it.
fn encode_dir(rec: &DirRecord) -> Vec<u8> {
    if rec.undecided {
        encode_as(RECORD_VERSION_DIR_UNDECIDED, rec)
    } else {
        encode_as(RECORD_VERSION, &DirRecordV4Ref::from(rec))
    }
}

fn encode_as<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
    let mut out = vec![version];
    // Serializing our own plain structs into a Vec cannot fail.
    if let Ok(body) = postcard_encode(value) {
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    }
    out
}

fn postcard_encode<T: Serialize>(value: &T) -> Result<Vec<u8>, myriad_proto::codec::EncodeError> {
    myriad_proto::codec::encode(value)
}

fn decode<T: DeserializeOwned>(space: &'static str, bytes: &[u8]) -> Result<T, StorageError> {
    let (_, body) = checked_body(space, bytes)?;
    myriad_proto::codec::decode(body).map_err(|e| StorageError::Corrupt {
        space,
        detail: e.to_string(),
    })
}

/// A directory record of any record version (version 2 had no `read_only`, version 3 no
/// `auto_index`, version 4 no `undecided`).
fn decode_dir(bytes: &[u8]) -> Result<DirRecord, StorageError> {
    let space = "dirs";
    let corrupt = |e: myriad_proto::codec::DecodeError| StorageError::Corrupt {
        space,
        detail: e.to_string(),
    };
    match checked_body(space, bytes)? {
        (RECORD_VERSION_DIR_UNDECIDED, body) => myriad_proto::codec::decode(body).map_err(corrupt),
        (RECORD_VERSION, body) => myriad_proto::codec::decode::<DirRecordV4>(body)
            .map(DirRecord::from)
            .map_err(corrupt),
        (RECORD_VERSION_V3, body) => myriad_proto::codec::decode::<DirRecordV3>(body)
            .map(DirRecord::from)
            .map_err(corrupt),
        (_, body) => myriad_proto::codec::decode::<DirRecordV2>(body)
            .map(DirRecord::from)
            .map_err(corrupt),
    }
}

/// A stored record's version and body, its checksum checked.
fn checked_body<'a>(space: &'static str, bytes: &'a [u8]) -> Result<(u8, &'a [u8]), StorageError> {
    let corrupt = |detail: String| StorageError::Corrupt { space, detail };
    match bytes.split_first() {
        Some((&v, rest)) if checksummed(v) => {
            let Some(split) = rest.len().checked_sub(4) else {
                return Err(corrupt("record shorter than its checksum".into()));
            };
            let (body, crc) = rest.split_at(split);
            if crc32c::crc32c(body).to_le_bytes() != crc {
                return Err(corrupt(
                    "record failed its checksum (damaged on disk)".into(),
                ));
            }
            Ok((v, body))
        }
        Some((&RECORD_VERSION_PLAIN, body)) => Ok((RECORD_VERSION_PLAIN, body)),
        Some((v, _)) => Err(corrupt(format!("unknown record version {v}"))),
        None => Err(corrupt("empty record".into())),
    }
}

impl Store {
    /// Opens the store and checks (or, on first open, writes) its format version and owner.
    pub fn open(kv: Arc<dyn Kv>, node_id: u32) -> Result<Store, StorageError> {
        let mut store = Store { kv, fresh: false };
        match store.meta_u64("format_version")? {
            Some(v) if v != u64::from(FORMAT_VERSION) => {
                return Err(StorageError::FormatVersion {
                    found: u32::try_from(v).unwrap_or(u32::MAX),
                    expected: FORMAT_VERSION,
                });
            }
            Some(_) => {}
            None => {
                store.fresh = true;
                let mut b = Batch::new();
                store.put_meta_u64(&mut b, "format_version", u64::from(FORMAT_VERSION));
                store.put_meta_u64(&mut b, "node_id", u64::from(node_id));
                store.kv.commit(b)?;
                store.kv.sync()?;
            }
        }
        if let Some(found) = store.meta_u64("node_id")?
            && found != u64::from(node_id)
        {
            return Err(StorageError::WrongNode {
                found: u32::try_from(found).unwrap_or(0),
                expected: node_id,
            });
        }
        Ok(store)
    }

    /// True if this open created the store: the node never ran before on this data.
    #[must_use]
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    #[must_use]
    pub fn kv(&self) -> &Arc<dyn Kv> {
        &self.kv
    }

    pub fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        self.kv.commit(batch)
    }

    pub fn sync(&self) -> Result<(), StorageError> {
        self.kv.sync()
    }

    // ---- meta ----

    pub fn meta_u64(&self, name: &str) -> Result<Option<u64>, StorageError> {
        Ok(self.kv.get(Space::Meta, name.as_bytes())?.and_then(|v| {
            v.get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
        }))
    }

    pub fn put_meta_u64(&self, batch: &mut Batch, name: &str, value: u64) {
        batch.put(
            Space::Meta,
            name.as_bytes().to_vec(),
            value.to_be_bytes().to_vec(),
        );
    }

    // ---- directory objects ----

    pub fn dir(&self, path: &str) -> Result<Option<DirRecord>, StorageError> {
        self.kv
            .get(Space::Dirs, path.as_bytes())?
            .map(|v| decode_dir(&v))
            .transpose()
    }

    pub fn put_dir(&self, batch: &mut Batch, path: &str, rec: &DirRecord) {
        batch.put(Space::Dirs, path.as_bytes().to_vec(), encode_dir(rec));
    }

    pub fn delete_dir(&self, batch: &mut Batch, path: &str) {
        batch.delete(Space::Dirs, path.as_bytes().to_vec());
    }

    /// Directory objects held by this node, in path order, after `after`.
    pub fn dirs(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, DirRecord)>, StorageError> {
        self.kv
            .scan(Space::Dirs, b"", after.map(str::as_bytes), limit)?
            .into_iter()
            .map(|(k, v)| Ok((String::from_utf8_lossy(&k).into_owned(), decode_dir(&v)?)))
            .collect()
    }

    // ---- entries ----

    pub fn entry(&self, dir: &str, name: &str) -> Result<Option<EntryRecord>, StorageError> {
        self.kv
            .get(Space::Entries, &entry_key(dir, name))?
            .map(|v| decode("entries", &v))
            .transpose()
    }

    pub fn put_entry(&self, batch: &mut Batch, dir: &str, name: &str, rec: &EntryRecord) {
        batch.put(Space::Entries, entry_key(dir, name), encode(rec));
    }

    pub fn delete_entry(&self, batch: &mut Batch, dir: &str, name: &str) {
        batch.delete(Space::Entries, entry_key(dir, name));
    }

    /// Up to `limit` entries of `dir` after name `after`, in hash order (docs/huge-dirs.md).
    pub fn entries(
        &self,
        dir: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, EntryRecord)>, StorageError> {
        Ok(self
            .entries_in(dir, 0, after, None, limit)?
            .into_iter()
            .map(|(_, n, r)| (n, r))
            .collect())
    }

    /// Up to `limit` entries `(hash, name, record)` of `dir` with hash in `[from, end)` (`end`
    /// `None`: to the end) and, if `after` is given, positioned after that name.
    pub fn entries_in(
        &self,
        dir: &str,
        from: u64,
        after: Option<&str>,
        end: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, String, EntryRecord)>, StorageError> {
        let prefix = entry_prefix(dir);
        let mut start = hash_position_key(dir, from);
        if let Some(a) = after {
            start = start.max(entry_key(dir, a));
        }
        let mut out = Vec::new();
        for (k, v) in self.kv.scan(Space::Entries, &prefix, Some(&start), limit)? {
            let Some((hash, name)) = split_entry_key(&k, prefix.len()) else {
                return Err(StorageError::Corrupt {
                    space: "entries",
                    detail: "short entry key".into(),
                });
            };
            if end.is_some_and(|e| hash >= e) {
                break;
            }
            out.push((hash, name, decode("entries", &v)?));
        }
        Ok(out)
    }

    /// For fsck: up to `limit` stored entries of `dir` after `after`, those that fail their
    /// checksum left out (fsck lists them from `corrupt_records`), and the name of the last
    /// one looked at if `limit` were looked at (where the next page starts).
    #[allow(clippy::type_complexity)]
    pub fn intact_entries(
        &self,
        dir: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<(String, EntryRecord)>, Option<String>), StorageError> {
        let prefix = entry_prefix(dir);
        let mut start = hash_position_key(dir, 0);
        if let Some(a) = after {
            start = start.max(entry_key(dir, a));
        }
        let page = self.kv.scan(Space::Entries, &prefix, Some(&start), limit)?;
        let full = page.len() == limit;
        let mut out = Vec::new();
        let mut last = None;
        for (k, v) in page {
            let Some((_, name)) = split_entry_key(&k, prefix.len()) else {
                continue;
            };
            if let Ok(rec) = decode("entries", &v) {
                out.push((name.clone(), rec));
            }
            last = Some(name);
        }
        Ok((out, last.filter(|_| full)))
    }

    /// Entries of `dir` with hash in `[from, end)`, counted up to `cap`.
    pub fn count_entries_in(
        &self,
        dir: &str,
        from: u64,
        end: Option<u64>,
        cap: usize,
    ) -> Result<usize, StorageError> {
        let prefix = entry_prefix(dir);
        let start = hash_position_key(dir, from);
        let mut n = 0;
        for (k, _) in self.kv.scan(Space::Entries, &prefix, Some(&start), cap)? {
            match split_entry_key(&k, prefix.len()) {
                Some((hash, _)) if end.is_none_or(|e| hash < e) => n += 1,
                _ => break,
            }
        }
        Ok(n)
    }

    /// True if `dir` has at least one entry (committed or pending).
    pub fn has_entries(&self, dir: &str) -> Result<bool, StorageError> {
        Ok(!self
            .kv
            .scan(Space::Entries, &entry_prefix(dir), None, 1)?
            .is_empty())
    }

    // ---- intents ----

    pub fn put_intent(&self, batch: &mut Batch, txid: u64, bytes: Vec<u8>) {
        batch.put(Space::Intents, u64_key(txid), bytes);
    }

    pub fn delete_intent(&self, batch: &mut Batch, txid: u64) {
        batch.delete(Space::Intents, u64_key(txid));
    }

    pub fn intent(&self, txid: u64) -> Result<Option<Vec<u8>>, StorageError> {
        self.kv.get(Space::Intents, &u64_key(txid))
    }

    pub fn intents(&self) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        Ok(self
            .kv
            .scan(Space::Intents, b"", None, usize::MAX)?
            .into_iter()
            .filter_map(|(k, v)| crate::keys::decode_u64_key(&k).map(|t| (t, v)))
            .collect())
    }

    // ---- blocks ----

    /// Reads `len` bytes at `offset` of inode `ino`, clipped to `size`; holes read as zeros.
    pub fn read_range(
        &self,
        ino: InodeId,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Result<Vec<u8>, StorageError> {
        self.read_range_whole(ino, offset, len, size)
            .map(|(d, _)| d)
    }

    /// `read_range`, and whether every byte came from a block: false if part of the range
    /// read as zeros (a hole, or a block shorter than `size` says), which a reader that took
    /// `size` from an entry read before checks against the entry again.
    pub fn read_range_whole(
        &self,
        ino: InodeId,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Result<(Vec<u8>, bool), StorageError> {
        if offset >= size || len == 0 {
            return Ok((Vec::new(), true));
        }
        let end = size.min(offset.saturating_add(len));
        let len_usize = usize::try_from(end - offset)
            .map_err(|_| StorageError::Engine("read too large".into()))?;
        let first = offset / BLOCK_BYTES;
        let last = (end - 1) / BLOCK_BYTES;
        if first == last {
            let block = self.block(ino, first)?.unwrap_or_default();
            let from = usize::try_from(offset - first * BLOCK_BYTES).unwrap_or(usize::MAX);
            // Fast path (every inline file): the block holds the whole range, hand it over.
            if from == 0 && block.len() == len_usize {
                return Ok((block, true));
            }
            let mut out = vec![0u8; len_usize];
            let copied = copy_block(&mut out, offset, first, &block);
            return Ok((out, copied == len_usize));
        }
        let mut out = vec![0u8; len_usize];
        let mut copied = 0;
        for (block, data) in self.blocks(ino, first, last + 1)? {
            copied += copy_block(&mut out, offset, block, &data);
        }
        Ok((out, copied == len_usize))
    }

    /// Adds to `batch` the block writes that put `data` at `offset` of inode `ino`.
    pub fn write_range(
        &self,
        batch: &mut Batch,
        ino: InodeId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), StorageError> {
        let mut pos = 0usize;
        while pos < data.len() {
            let abs = offset + pos as u64;
            let block = abs / BLOCK_BYTES;
            let in_block = usize::try_from(abs % BLOCK_BYTES).unwrap_or(0);
            let take = (BLOCK_BYTES as usize - in_block).min(data.len() - pos);
            let piece = &data[pos..pos + take];
            let value = if in_block == 0 && take == BLOCK_BYTES as usize {
                piece.to_vec()
            } else {
                let mut cur = self.block(ino, block)?.unwrap_or_default();
                if cur.len() < in_block + take {
                    cur.resize(in_block + take, 0);
                }
                cur[in_block..in_block + take].copy_from_slice(piece);
                cur
            };
            batch.put(Space::Blocks, block_key(ino, block), seal_block(value));
            pos += take;
        }
        Ok(())
    }

    /// Adds to `batch` what drops every byte at and beyond `keep_bytes` in blocks
    /// `[first_block, end_block)` of `ino` (the partial block is cut, later ones deleted).
    pub fn trim_blocks(
        &self,
        batch: &mut Batch,
        ino: InodeId,
        keep_bytes: u64,
        first_block: u64,
        end_block: u64,
    ) -> Result<(), StorageError> {
        let start_block = (keep_bytes / BLOCK_BYTES).max(first_block);
        // Raw values: a block that goes whole is deleted unread, so a corrupt block never
        // stops a file from being deleted or truncated below it.
        let prefix = ino.0.to_be_bytes();
        let mut after = start_block.checked_sub(1).map(|b| block_key(ino, b));
        loop {
            let page = self.kv.scan(Space::Blocks, &prefix, after.as_deref(), 64)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            for (k, v) in page {
                let Some(block) = k.get(8..).and_then(crate::keys::decode_u64_key) else {
                    continue;
                };
                if block >= end_block {
                    return Ok(());
                }
                let block_start = block * BLOCK_BYTES;
                if block_start >= keep_bytes {
                    batch.delete(Space::Blocks, k);
                    continue;
                }
                let keep = usize::try_from(keep_bytes - block_start).unwrap_or(usize::MAX);
                let data = open_block(v).ok_or(StorageError::Checksum { ino, block })?;
                if data.len() > keep {
                    let kept = data[..keep].to_vec();
                    batch.put(Space::Blocks, k, seal_block(kept));
                }
            }
        }
    }

    /// Inode ids that have blocks here, after `after`, with the first block of each (fsck).
    /// One short scan per inode: it jumps past each inode's blocks.
    pub fn block_inodes(
        &self,
        after: Option<InodeId>,
        limit: usize,
    ) -> Result<Vec<(InodeId, u64)>, StorageError> {
        let mut out = Vec::new();
        let mut cursor = after.map(|a| block_key(a, u64::MAX));
        while out.len() < limit {
            let page = self.kv.scan(Space::Blocks, b"", cursor.as_deref(), 1)?;
            let Some((k, _)) = page.first() else { break };
            let (Some(ino), Some(block)) = (
                crate::keys::decode_u64_key(k).map(InodeId),
                k.get(8..).and_then(crate::keys::decode_u64_key),
            ) else {
                break;
            };
            out.push((ino, block));
            cursor = Some(block_key(ino, u64::MAX));
        }
        Ok(out)
    }

    /// The first block of `ino` at or after `block`, if any (fsck: data beyond the size).
    pub fn first_block_from(&self, ino: InodeId, block: u64) -> Result<Option<u64>, StorageError> {
        let after = block.checked_sub(1).map(|b| block_key(ino, b));
        let page = self
            .kv
            .scan(Space::Blocks, &ino.0.to_be_bytes(), after.as_deref(), 1)?;
        Ok(page
            .first()
            .and_then(|(k, _)| k.get(8..).and_then(crate::keys::decode_u64_key)))
    }

    /// All blocks of `ino` in `[first_block, end_block)`, for moving chunk 0 with its inode.
    pub fn blocks(
        &self,
        ino: InodeId,
        first_block: u64,
        end_block: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        let prefix = ino.0.to_be_bytes();
        let after = if first_block == 0 {
            None
        } else {
            Some(block_key(ino, first_block - 1))
        };
        let mut out = Vec::new();
        // At most the blocks asked for: a scan without a limit would copy every later block
        // of the file (a 128 KiB read of a 2 GiB file copied the rest of the file).
        let wanted = usize::try_from(end_block.saturating_sub(first_block)).unwrap_or(usize::MAX);
        for (k, v) in self
            .kv
            .scan(Space::Blocks, &prefix, after.as_deref(), wanted)?
        {
            let Some(block) = k
                .get(8..16)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
            else {
                continue;
            };
            if block >= end_block {
                break;
            }
            out.push((
                block,
                open_block(v).ok_or(StorageError::Checksum { ino, block })?,
            ));
        }
        Ok(out)
    }

    pub fn put_block(&self, batch: &mut Batch, ino: InodeId, block: u64, data: Vec<u8>) {
        batch.put(Space::Blocks, block_key(ino, block), seal_block(data));
    }

    /// One block's data, checked against its checksum (None: a hole).
    pub fn block(&self, ino: InodeId, block: u64) -> Result<Option<Vec<u8>>, StorageError> {
        match self.kv.get(Space::Blocks, &block_key(ino, block))? {
            None => Ok(None),
            Some(v) => open_block(v)
                .map(Some)
                .ok_or(StorageError::Checksum { ino, block }),
        }
    }

    /// The raw stored value of a block, checksum included (repair compares it).
    pub fn block_value(&self, ino: InodeId, block: u64) -> Result<Option<Vec<u8>>, StorageError> {
        self.kv.get(Space::Blocks, &block_key(ino, block))
    }

    /// Blocks of this store whose checksum fails, at most `limit` (fsck, scrub).
    pub fn corrupt_blocks(&self, limit: usize) -> Result<Vec<(InodeId, u64)>, StorageError> {
        let mut bad = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self.kv.scan(Space::Blocks, b"", after.as_deref(), 64)?;
            let Some((last, _)) = page.last() else {
                return Ok(bad);
            };
            after = Some(last.clone());
            for (k, v) in &page {
                if crate::blocks::block_data(v).is_none() {
                    let ino = InodeId(crate::keys::decode_u64_key(k).unwrap_or(0));
                    let block = k
                        .get(8..)
                        .and_then(crate::keys::decode_u64_key)
                        .unwrap_or(0);
                    bad.push((ino, block));
                    if bad.len() >= limit {
                        return Ok(bad);
                    }
                }
            }
        }
    }

    /// Fault injection for tests of the checks above: flips one bit of a stored block's data
    /// behind its checksum, as a failing disk would. Never called by the server.
    pub fn corrupt_block_for_test(&self, ino: InodeId, block: u64) -> Result<bool, StorageError> {
        let key = block_key(ino, block);
        let Some(mut v) = self.kv.get(Space::Blocks, &key)? else {
            return Ok(false);
        };
        let Some(b) = v.first_mut() else {
            return Ok(false);
        };
        *b ^= 0x01;
        let mut batch = Batch::new();
        batch.put(Space::Blocks, key, v);
        self.kv.commit(batch)?;
        self.kv.sync()?;
        Ok(true)
    }

    pub fn disk_bytes(&self) -> u64 {
        self.kv.disk_bytes()
    }
}

/// Copies the part of block `block` (contents `data`) that overlaps the output window starting
/// at file offset `offset`; returns the bytes copied (blocks do not overlap: summed over a
/// range's blocks, it is the range's bytes that are not holes).
fn copy_block(out: &mut [u8], offset: u64, block: u64, data: &[u8]) -> usize {
    let block_start = block * BLOCK_BYTES;
    let win_end = offset + out.len() as u64;
    let from = block_start.max(offset);
    let to = (block_start + data.len() as u64).min(win_end);
    if from >= to {
        return 0;
    }
    let src = &data[usize::try_from(from - block_start).unwrap_or(0)
        ..usize::try_from(to - block_start).unwrap_or(0)];
    let dst_start = usize::try_from(from - offset).unwrap_or(0);
    out[dst_start..dst_start + src.len()].copy_from_slice(src);
    src.len()
}

mod coded;
pub(crate) mod damage;
pub(crate) mod kept_stats;
mod outcomes;
pub(crate) mod quota_anchors;
pub(crate) mod quota_ledger;
pub(crate) mod quota_usage;

#[cfg(test)]
mod tests;
