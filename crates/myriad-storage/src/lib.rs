//! One server's durable store: directory objects, entries with embedded inodes, file blocks
//! (inline data and chunks), intents of multi-node operations, and node metadata.
//!
//! Layered as redb does it: a narrow `Kv` trait (get, scan, atomic batch, sync) with a fjall
//! implementation for production and an in-memory one for tests; `Store` puts typed keys and
//! records on top. Durability is explicit: `Kv::commit` makes a batch atomic and visible,
//! `Kv::sync` makes everything committed so far durable (the server's group commit calls it
//! once for many batches).
//!
//! Must not depend on: the network, placement, server, client. It uses `myriad-proto` only for
//! the types it stores (`Inode`, `Shard`, `ShardMap`) and the entry-name hash.

mod blocks;
mod error;
mod fjall_kv;
mod fragments;
mod keys;
mod kv;
mod mem_kv;
mod partition_kv;
mod records;
mod staged_kv;
mod store;
mod tiered_kv;

pub use blocks::{BLOCK_BYTES, block_data};
pub use error::StorageError;
pub use fjall_kv::{FjallKv, MAX_JOURNAL_BYTES};
pub use fragments::{Fragment, FragmentId, FragmentStore};
/// Where the entry `dir/name` is stored in `Space::Entries` (repairing a damaged record).
pub use keys::entry_key;
pub use kv::{Batch, Kv, Pairs, Space, prefix_end};
pub use mem_kv::{MemKv, Table, scan_table};
pub use partition_kv::PartitionKv;
pub use records::{DirRecord, EntryRecord, LocalShard, Pending};
pub use staged_kv::StagedKv;
pub use store::damage::{RECORD_SPACES, record_intact};
pub use store::kept_stats::{DirCache, INODE_DIR, KeptStats};
pub use store::quota_ledger::{Allowance, short_of};
pub use store::quota_usage::{QuotaRoot, QuotaSet, QuotaUsage};
pub use store::{FORMAT_VERSION, Store};
pub use tiered_kv::{TierCounts, TierRole, TieredKv};
