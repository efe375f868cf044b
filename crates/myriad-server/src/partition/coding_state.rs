//! What a primary knows for erasure coding (`coding.rs`): chunks written and when, the
//! walk over chunks kept in blocks, servers seen down or gone. In-memory, below `core`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use myriad_placement::NodeId;
use myriad_proto::InodeId;
use tokio::time::Instant;

/// What the primary knows of chunks to code and servers lost.
pub(crate) struct CodingState {
    /// Chunks written here or found in blocks, and when last written (or found).
    pub(crate) written: Mutex<BTreeMap<(InodeId, u64), Instant>>,
    /// Tries that failed in a row, per chunk still to code (for the log).
    pub(crate) failed: Mutex<BTreeMap<(InodeId, u64), u32>>,
    /// The walk over chunks kept in blocks: where it is, `None` once it is done.
    pub(crate) walk: Mutex<Option<Option<(InodeId, u64)>>>,
    /// Servers seen down (or gone from the map), since when.
    pub(crate) down_since: Mutex<BTreeMap<NodeId, Instant>>,
    /// Every server seen in a map: one no longer there was removed, its fragments lost.
    pub(crate) seen: Mutex<std::collections::BTreeSet<NodeId>>,
    /// The map epoch of the last look at every record (a record may name a server
    /// removed before this primary opened: looked for once per map).
    pub(crate) looked_at: std::sync::atomic::AtomicU64,
    /// Held by a coding round and by fsck's fragment repairs: a fragment a coding in
    /// flight has put but not yet named in its record looks orphan, and must not be
    /// dropped as one.
    pub(crate) round: tokio::sync::Mutex<()>,
}

impl CodingState {
    pub(crate) fn new() -> CodingState {
        CodingState {
            written: Mutex::new(BTreeMap::new()),
            failed: Mutex::new(BTreeMap::new()),
            walk: Mutex::new(Some(None)),
            down_since: Mutex::new(BTreeMap::new()),
            seen: Mutex::new(std::collections::BTreeSet::new()),
            looked_at: std::sync::atomic::AtomicU64::new(0),
            round: tokio::sync::Mutex::new(()),
        }
    }
}
