//! Every record decoder of `myriad-storage`, chosen by the first input byte.
//!
//! The store's own `decode` (record-version byte + postcard) and its key parsers
//! (`keys::split_entry_key`, `keys::decode_u64_key`) are private, so they are reached
//! through the public `Store` API over an in-memory `Kv` into which the raw fuzz bytes are
//! written as values and keys: what a store reading a damaged (or hostile, replicated)
//! database sees. The public record types are also fuzzed directly with
//! `myriad_proto::codec::decode` and must round-trip.
//!
//! Input: `selector`, then for the store cases `split_chunks` byte strings.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use myriad_fuzz::{roundtrip, split_chunks, u64_of};
use myriad_proto::InodeId;
use myriad_storage::{
    BLOCK_BYTES, Batch, DirRecord, EntryRecord, Kv, LocalShard, MemKv, PartitionKv, Pending, Space,
    Store, block_data,
};

/// Directory whose records the store cases plant and read back.
const DIR: &str = "/d";
/// Largest read the fuzzer asks for: the caller clips reads to the inode's size and to
/// `IO_BYTES_MAX`; an unbounded length would only test the allocator.
const READ_BYTES_MAX: u64 = 4 * BLOCK_BYTES;

/// A fresh store over an in-memory engine, seen through partition `pid`'s key prefix as a
/// server sees it, with `plant` committed underneath first.
fn store_with(pid: u32, plant: Batch) -> Option<(Store, Arc<dyn Kv>)> {
    let kv: Arc<dyn Kv> = Arc::new(PartitionKv::new(Arc::new(MemKv::new()), pid));
    kv.commit(plant).ok()?;
    let store = Store::open(kv.clone(), pid).ok()?;
    Some((store, kv))
}

fn check_dir_record(rec: &DirRecord) {
    // Shards are checked (`Shard::is_valid`) where peers send them (ShardCreate, DirImport),
    // so a store only ever holds valid ones; shard arithmetic is only defined on those
    // (`Shard::contains` overflows for a depth over 64).
    if rec.shards.iter().all(|s| s.shard.is_valid()) {
        for s in &rec.shards {
            assert!(
                rec.shard_for(s.shard.start()).is_some(),
                "a held shard holds its own start"
            );
            let _ = s.blocks_write(s.shard.start());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 8 {
        // ---- the public record types, directly ----
        0 => {
            let _ = roundtrip::<EntryRecord>(rest);
        }
        1 => {
            if let Some(rec) = roundtrip::<DirRecord>(rest) {
                check_dir_record(&rec);
            }
        }
        2 => {
            let _ = roundtrip::<Pending>(rest);
        }
        3 => {
            let _ = roundtrip::<LocalShard>(rest);
        }
        // ---- the store's private decoder, via directory objects ----
        4 => {
            let c = split_chunks(rest);
            let mut plant = Batch::new();
            // chunk 0: the value of "/d" (version byte + record); more chunks: more paths.
            plant.put(
                Space::Dirs,
                DIR.as_bytes().to_vec(),
                c.first().copied().unwrap_or(rest).to_vec(),
            );
            for (i, v) in c.iter().enumerate().skip(1) {
                plant.put(Space::Dirs, format!("/x{i}").into_bytes(), v.to_vec());
            }
            let Some((store, _)) = store_with(7, plant) else {
                return;
            };
            let _ = store.dirs(None, 64);
            if let Ok(Some(rec)) = store.dir(DIR) {
                check_dir_record(&rec);
                // What the store decodes, it writes back the same.
                let mut b = Batch::new();
                store.put_dir(&mut b, DIR, &rec);
                if store.commit(b).is_ok() {
                    assert_eq!(store.dir(DIR).ok().flatten().as_ref(), Some(&rec));
                }
            }
        }
        // ---- entries: raw keys under "/d\0" (hash + name) and raw values ----
        5 => {
            let c = split_chunks(rest);
            let mut plant = Batch::new();
            let mut prefix = DIR.as_bytes().to_vec();
            prefix.push(0);
            // chunk 0: parameters; then pairs (key suffix after "/d\0", value)
            for kv in c.get(1..).unwrap_or_default().chunks(2) {
                let mut key = prefix.clone();
                key.extend_from_slice(kv[0]);
                plant.put(
                    Space::Entries,
                    key,
                    kv.get(1).copied().unwrap_or_default().to_vec(),
                );
            }
            let Some((store, _)) = store_with(3, plant) else {
                return;
            };
            let params = c.first().copied().unwrap_or_default();
            let from = u64_of(params);
            let end = params.get(8..16).map(u64_of);
            let after = params.get(16..).map(String::from_utf8_lossy);
            let _ = store.entries(DIR, after.as_deref(), 64);
            let _ = store.entries_in(DIR, from, after.as_deref(), end, 64);
            let _ = store.count_entries_in(DIR, from, end, 64);
            let _ = store.has_entries(DIR);
            if let Some(name) = &after
                && let Ok(Some(rec)) = store.entry(DIR, name)
            {
                let mut b = Batch::new();
                store.put_entry(&mut b, DIR, name, &rec);
                if store.commit(b).is_ok() {
                    assert_eq!(store.entry(DIR, name).ok().flatten().as_ref(), Some(&rec));
                }
            }
        }
        // ---- intents and blocks: raw keys (the u64 key parsers). Chunk 0: parameters
        //      (ino, block, read length); then pairs (space byte + key, value), space byte
        //      even: blocks, odd: intents ----
        6 => {
            let c = split_chunks(rest);
            let mut plant = Batch::new();
            for kv in c.get(1..).unwrap_or_default().chunks(2) {
                let Some((&space, key)) = kv[0].split_first() else {
                    continue;
                };
                let space = if space % 2 == 0 {
                    Space::Blocks
                } else {
                    Space::Intents
                };
                plant.put(
                    space,
                    key.to_vec(),
                    kv.get(1).copied().unwrap_or_default().to_vec(),
                );
            }
            let Some((store, kv)) = store_with(1, plant) else {
                return;
            };
            // Block values carry a checksum: the public check and the store's reads agree.
            for (k, v) in kv.scan(Space::Blocks, b"", None, 64).unwrap_or_default() {
                if k.len() == 16 {
                    let ino = u64::from_be_bytes(k[..8].try_into().unwrap_or_default());
                    let block = u64::from_be_bytes(k[8..].try_into().unwrap_or_default());
                    assert_eq!(
                        block_data(&v).is_some(),
                        store.block(InodeId(ino), block).is_ok(),
                        "block_data and Store::block disagree"
                    );
                }
            }
            let _ = store.corrupt_blocks(16);
            let params = c.first().copied().unwrap_or_default();
            let ino = u64_of(params);
            let block = params.get(8..).map(u64_of).unwrap_or(0);
            let _ = store.intents();
            let _ = store.block_inodes(None, 16);
            let _ = store.block_inodes(Some(InodeId(ino)), 16);
            let _ = store.first_block_from(InodeId(ino), block);
            let _ = store.blocks(InodeId(ino), block, block.saturating_add(8));
            let offset = block;
            let len = params.get(16..).map(u64_of).unwrap_or(0) % READ_BYTES_MAX;
            let size = offset.saturating_add(len);
            let _ = store.read_range(InodeId(ino), offset, len, size);
            let mut b = Batch::new();
            let _ = store.trim_blocks(&mut b, InodeId(ino), offset, 0, 8);
        }
        // ---- meta: raw format version / node id values; blocks written and read back ----
        _ => {
            let c = split_chunks(rest);
            let mut plant = Batch::new();
            if let Some(v) = c.first() {
                plant.put(Space::Meta, b"format_version".to_vec(), v.to_vec());
            }
            if let Some(v) = c.get(1) {
                plant.put(Space::Meta, b"node_id".to_vec(), v.to_vec());
            }
            let Some((store, _)) = store_with(2, plant) else {
                return;
            };
            let _ = store.meta_u64("format_version");
            // write_range then read_range gives back the bytes (file data round trip).
            let params = c.get(2).copied().unwrap_or_default();
            let ino = u64_of(params);
            let offset = params.get(8..).map(u64_of).unwrap_or(0) % (8 * BLOCK_BYTES);
            let payload = c.get(3).copied().unwrap_or_default();
            let mut b = Batch::new();
            if store
                .write_range(&mut b, InodeId(ino), offset, payload)
                .is_ok()
                && store.commit(b).is_ok()
            {
                let end = offset + payload.len() as u64;
                match store.read_range(InodeId(ino), offset, payload.len() as u64, end) {
                    Ok(back) => assert_eq!(back, payload, "blocks read back differently"),
                    Err(e) => panic!("reading back written blocks failed: {e}"),
                }
            }
        }
    }
});
