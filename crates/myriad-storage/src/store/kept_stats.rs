//! fsstats kept by each partition as its files change (docs/redundancy.md "Cluster-wide
//! fsstats"), so that `myriad fsstats --cluster` answers from the partitions' records
//! instead of a walk. Kept in the partition's own `Meta` space, written in the batch of
//! the change itself (replicated and copied with the partition, as every record):
//!
//! * `fsstats/ SLOT` -> (write number, the partition's `FsStats`; the newest of the
//!   slots counts): regular files by size and link count,
//!   symbolic links by target length, names by length, and its whole directories (those
//!   never split) by entry count;
//! * `fsstats-dir \0 dir` -> visible entries of `dir` here (absent: none);
//! * `fsstats-split \0 dir` -> (empty) `dir` is split and this partition holds shards of it:
//!   its count here is one piece of the directory's, summed over partitions by the reader.
//!
//! Files' ages are not kept (they change without a mutation), nor capacity (it depends on
//! coding done elsewhere): `fsstats PATH` walks for those.

use std::collections::BTreeMap;

use myriad_proto::FileKind;
use myriad_proto::fsstats::{FileFacts, FsStats};

use crate::StorageError;
use crate::kv::{Batch, Space};
use crate::records::{DirRecord, EntryRecord};
use crate::store::{Store, decode, decode_dir, encode};

/// The statistics record rotates over `STATS_SLOTS` keys `fsstats/ slot`, each value
/// holding a write number: the newest is the record. One key rewritten by every batch
/// cost 8-13% of create throughput (each batch's new version of one key in the engine's
/// memtable, measured with an 8-byte value too), as many keys taking turns did not.
const STATS_PREFIX: &[u8] = b"fsstats/";
const STATS_SLOTS: u64 = 64;
const DIR_PREFIX: &[u8] = b"fsstats-dir\0";
const SPLIT_PREFIX: &[u8] = b"fsstats-split\0";
/// Records read per page while rebuilding.
const PAGE: usize = 1024;

/// What one partition keeps: its statistics, and its pieces of split directories
/// (path, entries here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptStats {
    pub stats: FsStats,
    pub split_dirs: Vec<(String, u64)>,
}

fn prefixed(prefix: &[u8], dir: &str) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(dir.as_bytes());
    k
}

/// Where inode objects of hard-linked files live on their home (a reserved directory no
/// valid path names: "//" never passes path validation).
pub const INODE_DIR: &str = "//i";

/// Reserved directories are no user's directories: they count as none, their entries
/// have no name, and only the inode objects of hard-linked files count as files (files
/// waiting in `//o` for their last open to close are gone for the user).
fn internal(dir: &str) -> bool {
    dir.starts_with("//")
}

/// Whether an entry of `dir` counts at all.
fn counts_files(dir: &str) -> bool {
    !internal(dir) || dir == INODE_DIR
}

/// (dir, name length) of an entry key `dir \0 hash(8) name`.
pub(crate) fn entry_parts(key: &[u8]) -> Option<(String, usize)> {
    let nul = key.iter().position(|b| *b == 0)?;
    let name_len = key.len().checked_sub(nul + 1 + crate::keys::HASH_BYTES)?;
    Some((String::from_utf8_lossy(&key[..nul]).into_owned(), name_len))
}

/// What an entry adds to the statistics, if it is visible.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    File(FileFacts),
    Symlink(u64),
    /// Directories, hard-link names (their inode is counted at its home), devices, sockets.
    Name {
        other: bool,
    },
}

fn counted(rec: &EntryRecord) -> Option<Counted> {
    let i = rec.inode.as_ref()?;
    Some(match i.kind {
        FileKind::File => Counted::File(FileFacts {
            size: i.size,
            capacity: 0,
            nlink: u64::from(i.nlink),
            mtime_age_secs: 0,
            ctime_age_secs: 0,
        }),
        FileKind::Symlink => Counted::Symlink(i.size),
        FileKind::Directory | FileKind::HardLink => Counted::Name { other: false },
        _ => Counted::Name { other: true },
    })
}

/// What a stored entry record adds; nothing for a damaged one.
fn counted_bytes(bytes: &[u8]) -> Option<Counted> {
    decode::<EntryRecord>("entries", bytes)
        .ok()
        .and_then(|r| counted(&r))
}

/// Adds (`sign` true) or takes away one entry's part of `s`.
fn apply(s: &mut FsStats, c: Counted, name_len: Option<usize>, sign: bool) {
    match (c, sign) {
        (Counted::File(f), true) => {
            s.size.add(f.size);
            if f.nlink > 1 {
                s.hard_links.add(f.nlink);
            }
        }
        (Counted::File(f), false) => s.remove_file(None, f),
        (Counted::Symlink(n), true) => s.symlinks.add(n),
        (Counted::Symlink(n), false) => s.symlinks.remove(n),
        (Counted::Name { other }, _) => {
            if other {
                s.other = if sign {
                    s.other + 1
                } else {
                    s.other.saturating_sub(1)
                };
            }
        }
    }
    if let Some(n) = name_len {
        if sign {
            s.name_len.add(n as u64);
        } else {
            s.name_len.remove(n as u64);
        }
    }
}

/// What a directory record says for the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirShape {
    /// Never split: its entries are all here, and it counts in the histogram.
    Whole,
    /// Split: this is a piece of it, summed with the others by the reader.
    Split,
}

impl DirShape {
    fn of(r: &DirRecord) -> DirShape {
        if r.is_whole() {
            DirShape::Whole
        } else {
            DirShape::Split
        }
    }
}

/// One directory as the statistics see it: its entries here and its record's shape
/// (`None`: no record here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirFacts {
    pub count: u64,
    pub shape: Option<DirShape>,
}

/// Directories' facts as the partition's writer last wrote them, so that a round of
/// creates in one directory reads its count and record once. Valid only while every
/// batch of the partition passes `account_stats` with it (the writer forgets it when a
/// stage is dropped).
pub type DirCache = std::collections::HashMap<String, DirFacts>;
/// Directories remembered at most (then forgotten at once, and read again as needed).
const DIR_CACHE_MAX: usize = 4096;

/// Every statistic empty, with the edges of `FsStats::default`.
fn empty() -> FsStats {
    FsStats::default()
}

impl Store {
    /// The statistics this partition keeps, or None before they were built here.
    pub fn kept_stats(&self) -> Result<Option<KeptStats>, StorageError> {
        let Some((_, stats)) = self.load_kept_stats()? else {
            return Ok(None);
        };
        let mut split_dirs = Vec::new();
        self.each_pair(Space::Meta, SPLIT_PREFIX, |k, _| {
            let dir = String::from_utf8_lossy(&k[SPLIT_PREFIX.len()..]).into_owned();
            let n = self.dir_count(&dir)?;
            split_dirs.push((dir, n));
            Ok(())
        })?;
        Ok(Some(KeptStats { stats, split_dirs }))
    }

    /// Every pair of `space` whose key starts with `prefix`, in key order, page by page.
    pub(crate) fn each_pair(
        &self,
        space: Space,
        prefix: &[u8],
        mut f: impl FnMut(Vec<u8>, Vec<u8>) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self.kv().scan(space, prefix, after.as_deref(), PAGE)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            for (k, v) in page {
                f(k, v)?;
            }
        }
    }

    fn dir_count(&self, dir: &str) -> Result<u64, StorageError> {
        Ok(self
            .kv()
            .get(Space::Meta, &prefixed(DIR_PREFIX, dir))?
            .and_then(|v| v.get(..8).and_then(|b| b.try_into().ok()))
            .map_or(0, u64::from_be_bytes))
    }

    /// The partition's statistics record alone, with its write number (None before they
    /// were built).
    pub fn load_kept_stats(&self) -> Result<Option<(u64, FsStats)>, StorageError> {
        let slots = self
            .kv()
            .scan(Space::Meta, STATS_PREFIX, None, STATS_SLOTS as usize)?;
        let mut newest: Option<(u64, FsStats)> = None;
        for (_, v) in slots {
            let Ok((n, stats)) = decode::<(u64, FsStats)>("meta", &v) else {
                // A damaged record: kept statistics can no longer be trusted. As none,
                // the partition counts from scratch when it next opens, and no change is
                // refused meanwhile.
                tracing::warn!(
                    "a kept fsstats record is damaged; counted again at the partition's next opening"
                );
                return Ok(None);
            };
            if newest.as_ref().is_none_or(|(m, _)| n > *m) {
                newest = Some((n, stats));
            }
        }
        Ok(newest)
    }

    /// Writes `stats` as the partition's statistics record number `n` (one more than the
    /// last one written).
    pub fn put_kept_stats(&self, batch: &mut Batch, n: u64, stats: &FsStats) {
        let mut key = STATS_PREFIX.to_vec();
        key.push(u8::try_from(n % STATS_SLOTS).unwrap_or(0));
        batch.put(Space::Meta, key, encode(&(n, stats)));
    }

    /// Whether `batch` writes the statistics record itself (a rebuild).
    #[must_use]
    pub fn rebuilds_stats(&self, batch: &Batch) -> bool {
        batch
            .ops
            .iter()
            .any(|(s, k, v)| *s == Space::Meta && v.is_some() && k.starts_with(STATS_PREFIX))
    }

    /// Changes `stats` by what `batch`'s entry and directory changes do to them, and adds
    /// to `batch` the directory counts they change; the caller writes `stats` back
    /// (`put_kept_stats`) in the batch or a later one of the same commit. Returns whether
    /// anything was counted.
    pub fn account_stats(
        &self,
        batch: &mut Batch,
        stats: &mut FsStats,
        cache: &mut DirCache,
    ) -> Result<bool, StorageError> {
        if !batch
            .ops
            .iter()
            .any(|(s, _, _)| matches!(s, Space::Entries | Space::Dirs))
        {
            return Ok(false);
        }
        // The batch's own earlier ops come before its later ones on the same key.
        let mut seen: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        // Directories whose record the batch writes: what the record says after it.
        let mut dirs: BTreeMap<String, Option<DirShape>> = BTreeMap::new();
        for (space, key, value) in &batch.ops {
            match space {
                Space::Entries => {
                    // Only entries need what they replace (never a block's 64 KiB).
                    let before = match seen.get(key) {
                        Some(v) => v.clone(),
                        None => self.kv().get(*space, key)?,
                    };
                    seen.insert(key.clone(), value.clone());
                    let Some((dir, name_len)) = entry_parts(key) else {
                        continue;
                    };
                    if !counts_files(&dir) {
                        continue;
                    }
                    // A damaged record counts as nothing, as in a count from scratch:
                    // the change (often the repair of that very record) goes on.
                    let old = before.as_deref().and_then(counted_bytes);
                    let new = value.as_deref().and_then(counted_bytes);
                    if old == new {
                        continue;
                    }
                    let named = (!internal(&dir)).then_some(name_len);
                    if let Some(c) = old {
                        apply(stats, c, named, false);
                    }
                    if let Some(c) = new {
                        apply(stats, c, named, true);
                    }
                    if !internal(&dir) {
                        let d = i64::from(new.is_some()) - i64::from(old.is_some());
                        *counts.entry(dir).or_default() += d;
                    }
                }
                Space::Dirs => {
                    let dir = String::from_utf8_lossy(key).into_owned();
                    if internal(&dir) {
                        continue;
                    }
                    let new = value.as_deref().and_then(|v| decode_dir(v).ok());
                    dirs.insert(dir, new.as_ref().map(DirShape::of));
                }
                _ => {}
            }
        }
        let touched: std::collections::BTreeSet<String> =
            counts.keys().chain(dirs.keys()).cloned().collect();
        if cache.len() > DIR_CACHE_MAX {
            cache.clear();
        }
        for dir in touched {
            let old = match cache.get(&dir) {
                Some(f) => *f,
                None => DirFacts {
                    count: self.dir_count(&dir)?,
                    // A damaged record is as none (fsck names it).
                    shape: self.dir(&dir).ok().flatten().as_ref().map(DirShape::of),
                },
            };
            let new = DirFacts {
                count: u64::try_from(
                    i64::try_from(old.count).unwrap_or(i64::MAX)
                        + counts.get(&dir).copied().unwrap_or(0),
                )
                .unwrap_or(0),
                shape: match dirs.get(&dir) {
                    Some(shape) => *shape,
                    None => old.shape,
                },
            };
            let whole = |f: &DirFacts| f.shape == Some(DirShape::Whole);
            let split = |f: &DirFacts| f.shape == Some(DirShape::Split);
            if whole(&old) {
                stats.dir_entries.remove(old.count);
            }
            if whole(&new) {
                stats.dir_entries.add(new.count);
            }
            if new.count != old.count {
                if new.count == 0 {
                    batch.delete(Space::Meta, prefixed(DIR_PREFIX, &dir));
                } else {
                    batch.put(
                        Space::Meta,
                        prefixed(DIR_PREFIX, &dir),
                        new.count.to_be_bytes().to_vec(),
                    );
                }
            }
            if split(&old) != split(&new) {
                if split(&new) {
                    batch.put(Space::Meta, prefixed(SPLIT_PREFIX, &dir), Vec::new());
                } else {
                    batch.delete(Space::Meta, prefixed(SPLIT_PREFIX, &dir));
                }
            }
            cache.insert(dir, new);
        }
        Ok(true)
    }

    /// A batch that counts every entry and directory of this partition from scratch (the
    /// first time a partition opens with this code, or to repair the counts).
    pub fn rebuild_stats(&self) -> Result<Batch, StorageError> {
        let mut b = self.drop_stats()?;
        let counted = self.count_from_scratch()?;
        for dir in &counted.split {
            b.put(Space::Meta, prefixed(SPLIT_PREFIX, dir), Vec::new());
        }
        for (dir, n) in &counted.dirs {
            b.put(
                Space::Meta,
                prefixed(DIR_PREFIX, dir),
                n.to_be_bytes().to_vec(),
            );
        }
        self.put_kept_stats(&mut b, 0, &counted.stats);
        Ok(b)
    }

    /// A batch that drops every statistics record (they are kept no more).
    pub fn drop_stats(&self) -> Result<Batch, StorageError> {
        let mut b = Batch::new();
        for prefix in [DIR_PREFIX, SPLIT_PREFIX, STATS_PREFIX] {
            self.each_pair(Space::Meta, prefix, |k, _| {
                b.delete(Space::Meta, k);
                Ok(())
            })?;
        }
        Ok(b)
    }

    /// What the kept statistics differ in from a count from scratch (None: nothing; also
    /// None before they were built). For checks: the simulation runs it on every primary.
    pub fn kept_stats_drift(&self) -> Result<Option<String>, StorageError> {
        let Some(kept) = self.kept_stats()? else {
            return Ok(None);
        };
        let fresh = self.count_from_scratch()?;
        if !kept.stats.same_counts(&fresh.stats) {
            return Ok(Some(format!(
                "kept {:?}, counted {:?}",
                kept.stats, fresh.stats
            )));
        }
        let kept_split: Vec<(String, u64)> = kept.split_dirs;
        let fresh_split: Vec<(String, u64)> = fresh
            .split
            .iter()
            .map(|d| (d.clone(), fresh.dirs.get(d).copied().unwrap_or(0)))
            .collect();
        if kept_split != fresh_split {
            return Ok(Some(format!(
                "split directories kept {kept_split:?}, counted {fresh_split:?}"
            )));
        }
        Ok(None)
    }

    /// Every entry and directory of the partition counted.
    fn count_from_scratch(&self) -> Result<FromScratch, StorageError> {
        let mut stats = empty();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut split = Vec::new();
        self.each_pair(Space::Entries, b"", |k, v| {
            let Some((dir, name_len)) = entry_parts(&k) else {
                return Ok(());
            };
            // A damaged record counts as nothing (fsck names it).
            if let Some(c) = counted_bytes(&v)
                && counts_files(&dir)
            {
                let named = (!internal(&dir)).then_some(name_len);
                apply(&mut stats, c, named, true);
                if !internal(&dir) {
                    *counts.entry(dir).or_default() += 1;
                }
            }
            Ok(())
        })?;
        self.each_pair(Space::Dirs, b"", |k, v| {
            let dir = String::from_utf8_lossy(&k).into_owned();
            match decode_dir(&v) {
                Ok(rec) if !internal(&dir) && rec.is_whole() => stats
                    .dir_entries
                    .add(counts.get(&dir).copied().unwrap_or(0)),
                Ok(_) if !internal(&dir) => split.push(dir),
                _ => {}
            }
            Ok(())
        })?;
        Ok(FromScratch {
            stats,
            dirs: counts,
            split,
        })
    }
}

/// A count from scratch: the statistics, every directory's entries here, and the split
/// directories with shards here (in path order).
struct FromScratch {
    stats: FsStats,
    dirs: BTreeMap<String, u64>,
    split: Vec<String>,
}

#[cfg(test)]
mod tests;
