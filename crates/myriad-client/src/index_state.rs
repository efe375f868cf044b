//! What a client knows of metadata indexes (docs/metadata-index.md): the registry as last
//! read and the lease it was read under, the indexes loaded, and what they saved. State
//! only: reading, loading and answering are `index.rs`'s.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use myriad_placement::join;
use myriad_proto::tree_index::{IndexView, RegisteredTree, Registry};
use tokio::time::Instant;

/// A loaded index.
pub(crate) struct Loaded {
    pub(crate) tree: RegisteredTree,
    pub(crate) view: IndexView,
    /// Answers given from it.
    pub(crate) hits: AtomicU64,
}

/// The registry as last read.
pub(crate) struct Known {
    pub(crate) registry: Registry,
    /// The lease it was read under, if any.
    pub(crate) mark: Option<Held>,
    /// When to read it again if no lease covers it.
    pub(crate) retry_at: Instant,
    /// When it was read.
    pub(crate) read_at: Instant,
}

/// The lease a registry read was kept under, and the lease mark read before it.
#[derive(Clone, Copy)]
pub(crate) enum Held {
    /// `TREES_DIR` does not exist: its absence, kept under the lease on `INDEX_DIR`.
    Missing(crate::LeaseMark),
    /// `TREES_DIR`'s whole listing and its entries, under the lease on it.
    Listed(crate::LeaseMark),
}

/// What this client knows of indexes, and what they saved.
#[derive(Default)]
pub(crate) struct Indexes {
    pub(crate) known: Mutex<Option<Arc<Known>>>,
    pub(crate) loaded: Mutex<HashMap<String, Arc<Loaded>>>,
    /// One read of the registry or load of an index at a time.
    pub(crate) loading: tokio::sync::Mutex<()>,
    /// Index files that failed to load, and when to try again.
    pub(crate) failed: Mutex<HashMap<String, Instant>>,
    pub(crate) hits: AtomicU64,
    /// Answers given from indexes no longer loaded, by index file.
    pub(crate) retired_hits: Mutex<HashMap<String, u64>>,
    /// Bumped by every read (or forgetting) of the registry (`LeaseMark::index_epoch`).
    pub(crate) epoch: AtomicU64,
    pub(crate) loads: AtomicU64,
    /// Requests of this client that were not changes (reads, whether of metadata or
    /// data), sent to the servers: whether it has anything for automatic indexing.
    pub(crate) server_reads: AtomicU64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Counts of what the indexes saved this client (`Client::index_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Answers given from an index.
    pub hits: u64,
    /// Indexes loaded (from the cluster or the local cache).
    pub loads: u64,
}

impl Indexes {
    /// The directories of every loaded index (absolute paths), for the kernel's copies
    /// to be dropped with the registry's lease.
    pub(crate) fn loaded_dirs(&self) -> Vec<String> {
        let loaded = lock(&self.loaded);
        let mut out = Vec::new();
        for l in loaded.values() {
            for d in &l.view.index.dirs {
                out.push(if d.rel.is_empty() {
                    l.tree.root.clone()
                } else {
                    join(&l.tree.root, &d.rel)
                });
            }
        }
        out
    }
}
