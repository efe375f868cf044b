//! `myriad du [--raw] [--json] PATH`: the bytes a file or a tree holds (logical), and with
//! `--raw` what storing them takes on the servers: every copy of the data with its block
//! checksums, and the entries and directory objects of every copy (docs/redundancy.md,
//! "Capacity accounting"). Files with several names count once.

use std::collections::HashSet;

use myriad_client::{Client, FileKind, Inode};
use serde::Serialize;

use crate::tree_walk::{Visit, walk};

#[derive(clap::Args)]
pub struct DuArgs {
    /// A Myriad path: a file or a directory (walked whole).
    pub path: String,
    /// Also the raw bytes stored: copies, checksums and metadata.
    #[arg(long)]
    pub raw: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Directories listed at once.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
}

/// A stored block holds up to this much data, then its checksum (myriad-storage).
const BLOCK_BYTES: u64 = 64 << 10;
const CHECKSUM_BYTES: u64 = 4;
/// An entry's key besides its directory's path and its name: the partition prefix, the
/// separator and the name hash.
const ENTRY_KEY_BYTES: u64 = 4 + 1 + 8;
/// An entry's value without the inode's variable parts: an encoded inode is 46-49 bytes
/// (postcard, measured), plus the record's framing and the storage engine's per-key
/// overhead (sequence number, lengths).
const INODE_BYTES: u64 = 64;
/// A directory object's record besides its path (shards, times, counts), rounded up.
const DIR_RECORD_BYTES: u64 = 4 + 64;

#[derive(Default, Serialize)]
pub struct Usage {
    pub path: String,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub other: u64,
    pub unreadable: u64,
    pub logical_bytes: u64,
    pub copies: u64,
    pub raw_data_bytes: u64,
    /// Entries and directory objects, estimated from their sizes (see the constants).
    pub raw_metadata_bytes: u64,
    pub raw_bytes: u64,
    /// Chunks kept erasure coded (their fragments counted with their parity).
    pub coded_chunks: u64,
}

/// Bytes a fragment stores besides its data: its generation and checksum (myriad-storage).
const FRAGMENT_OVERHEAD_BYTES: u64 = 4 + 4;
/// A coded chunk's record in its partition (every copy), rounded up.
const CODED_RECORD_BYTES: u64 = 16 + 96;

/// The raw bytes of a coded chunk: every fragment, parity included, with its framing, and
/// its record in every copy of its partition.
#[must_use]
pub fn coded_raw_bytes(c: &myriad_client::CodedChunk, copies: u64) -> u64 {
    c.raw_bytes() + c.params.total() as u64 * FRAGMENT_OVERHEAD_BYTES + CODED_RECORD_BYTES * copies
}

/// The raw bytes of a file's data: each 64 KiB block with its checksum, in every copy.
#[must_use]
pub fn raw_data_bytes(size: u64, copies: u64) -> u64 {
    let blocks = size.div_ceil(BLOCK_BYTES);
    (size + blocks * CHECKSUM_BYTES) * copies
}

fn entry_bytes(dir: &str, name: &str, i: &Inode) -> u64 {
    let variable: usize = i.symlink_target.as_ref().map_or(0, String::len)
        + i.xattrs
            .iter()
            .map(|x| x.name.len() + x.value.len())
            .sum::<usize>();
    ENTRY_KEY_BYTES + (dir.len() + name.len() + variable) as u64 + INODE_BYTES
}

pub async fn usage(client: &Client, root: &str, parallel: usize) -> anyhow::Result<Usage> {
    let copies = crate::tree_walk::copies(client);
    let mut u = Usage {
        path: root.to_string(),
        copies,
        ..Usage::default()
    };
    let mut seen = HashSet::new();
    let mut meta = 0u64;
    let chunk_bytes = client.chunk_size();
    let mut large = Vec::new();
    walk(client, root, parallel, |v| match v {
        Visit::Dir(dir, entries) => {
            u.dirs += 1;
            meta += DIR_RECORD_BYTES + dir.len() as u64;
            for e in entries {
                if e.inode.kind == FileKind::Directory {
                    // A subdirectory's entry (its attributes) lives in this directory.
                    meta += entry_bytes(dir, &e.name, &e.inode);
                }
            }
        }
        Visit::Unreadable(dir, e) => {
            tracing::warn!(dir, "not listed: {e}");
            u.unreadable += 1;
        }
        Visit::Other(dir, name, i) => {
            meta += entry_bytes(dir, name, i);
            match i.kind {
                FileKind::File | FileKind::HardLink => {
                    if i.nlink > 1 && !seen.insert(i.ino) {
                        return;
                    }
                    u.files += 1;
                    u.logical_bytes += i.size;
                    if i.size > chunk_bytes {
                        // Chunks past the first may be coded: asked below.
                        large.push((myriad_placement::join(dir, name), i.size));
                        u.raw_data_bytes += raw_data_bytes(chunk_bytes, copies);
                    } else {
                        u.raw_data_bytes += raw_data_bytes(i.size, copies);
                    }
                }
                FileKind::Symlink => u.symlinks += 1,
                _ => u.other += 1,
            }
        }
    })
    .await?;
    for (path, size) in large {
        let codes = match client.open(&path).await {
            Ok(h) => client.chunk_codes(&h, parallel).await,
            Err(e) => Err(e),
        };
        // A file the caller may not read (or gone meanwhile): its chunks count as copies.
        let codes = codes.unwrap_or_else(|e| {
            tracing::debug!(path, "chunks not asked ({e}): counted as copies");
            let last = size.saturating_sub(1) / chunk_bytes;
            (1..=last).map(|c| (c, None)).collect()
        });
        for (chunk, code) in codes {
            let bytes = size.saturating_sub(chunk * chunk_bytes).min(chunk_bytes);
            u.raw_data_bytes += match code {
                Some(c) => {
                    u.coded_chunks += 1;
                    coded_raw_bytes(&c, copies)
                }
                None => raw_data_bytes(bytes, copies),
            };
        }
    }
    u.raw_metadata_bytes = meta * copies;
    u.raw_bytes = u.raw_data_bytes + u.raw_metadata_bytes;
    Ok(u)
}

pub async fn run(a: &DuArgs, client: &Client) -> anyhow::Result<()> {
    let root = crate::fs_cmds::normalize(&a.path)?;
    let u = usage(client, &root, a.parallel).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&u)?);
    } else if a.raw {
        let ratio = if u.logical_bytes > 0 {
            u.raw_bytes as f64 / u.logical_bytes as f64
        } else {
            0.0
        };
        println!(
            "{:>16} {:>16} {:>16} {:>7}  path",
            "logical", "raw data", "raw metadata", "raw/log"
        );
        println!(
            "{:>16} {:>16} {:>16} {ratio:>7.3}  {}",
            u.logical_bytes, u.raw_data_bytes, u.raw_metadata_bytes, u.path
        );
        println!(
            "{} files, {} directories, {} symlinks; {} copies of everything but {} erasure-coded chunks",
            u.files, u.dirs, u.symlinks, u.copies, u.coded_chunks
        );
    } else {
        println!("{}\t{}", u.logical_bytes, u.path);
    }
    // As du: what could not be read is an error, after what could was printed.
    if u.unreadable > 0 {
        anyhow::bail!("{} directories could not be listed", u.unreadable);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_data_is_every_copy_of_every_block_with_its_checksum() {
        assert_eq!(raw_data_bytes(0, 3), 0);
        assert_eq!(raw_data_bytes(1, 3), 3 * 5);
        assert_eq!(raw_data_bytes(64 << 10, 2), 2 * ((64 << 10) + 4));
        assert_eq!(raw_data_bytes((64 << 10) + 1, 1), (64 << 10) + 1 + 8);
    }
}
