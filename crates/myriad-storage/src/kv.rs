//! The storage engine seam: the only operations the rest of the store needs.

use crate::StorageError;

/// The key spaces of a node's store. Each is an independent ordered key space; one `Batch` may
/// span several and is applied atomically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// `dir path \0 name` -> `EntryRecord` (entry with embedded inode).
    Entries,
    /// `dir path` -> `DirRecord` (this node holds that directory object).
    Dirs,
    /// `ino (8 BE) block (8 BE)` -> up to 64 KiB of file data.
    Blocks,
    /// `txid (8 BE)` -> an intent of a multi-node operation (opaque to the store).
    Intents,
    /// Named node metadata: format version, node id, id allocators.
    Meta,
    /// `log index (8 BE)` -> a Raft log entry of the cluster-map group (`myriad-membership`).
    RaftLog,
    /// Named Raft state of the cluster-map group: vote, committed, purged, state machine.
    RaftState,
    /// `ino (8 BE) chunk (8 BE) index (1)` -> an erasure-coded fragment kept on this
    /// server (`fragments.rs`; the server's own records, never a partition's).
    Fragments,
    /// `ino (8 BE) chunk (8 BE)` -> the record of an erasure-coded chunk
    /// (`myriad_proto::ec_layout::CodedChunk`), which replaced the chunk's blocks.
    Coded,
    /// `id (8 BE)` -> the capacity-tier part of a batch, until the capacity store has it
    /// (`tiered_kv.rs`; only in a tiered server's fast store).
    TierRedo,
    /// Raw block key -> nothing: a first-chunk block that went to the capacity tier while
    /// the fast tier overflowed (`tiered_kv.rs`; only in a tiered server's fast store).
    Overflowed,
}

impl Space {
    pub const ALL: [Space; 11] = [
        Space::Entries,
        Space::Dirs,
        Space::Blocks,
        Space::Intents,
        Space::Meta,
        Space::RaftLog,
        Space::RaftState,
        Space::Fragments,
        Space::Coded,
        Space::TierRedo,
        Space::Overflowed,
    ];

    /// The spaces that belong to a partition (and are replicated and copied with it).
    pub const PARTITION: [Space; 6] = [
        Space::Entries,
        Space::Dirs,
        Space::Blocks,
        Space::Intents,
        Space::Meta,
        Space::Coded,
    ];

    /// A stable one-byte code for the wire (replication).
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Space::Entries => 1,
            Space::Dirs => 2,
            Space::Blocks => 3,
            Space::Intents => 4,
            Space::Meta => 5,
            Space::RaftLog => 6,
            Space::RaftState => 7,
            Space::Fragments => 8,
            Space::Coded => 9,
            Space::TierRedo => 10,
            Space::Overflowed => 11,
        }
    }

    /// The partition space with wire code `code`; None for an unknown code or a space that
    /// is not a partition's (a peer may not write the Raft log through replication).
    #[must_use]
    pub fn partition_space(code: u8) -> Option<Space> {
        Space::PARTITION.into_iter().find(|s| s.code() == code)
    }

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Space::Entries => "entries",
            Space::Dirs => "dirs",
            Space::Blocks => "blocks",
            Space::Intents => "intents",
            Space::Meta => "meta",
            Space::RaftLog => "raft_log",
            Space::RaftState => "raft_state",
            Space::Fragments => "fragments",
            Space::Coded => "coded",
            Space::TierRedo => "tier_redo",
            Space::Overflowed => "overflowed",
        }
    }
}

/// An atomic group of puts and deletes.
#[derive(Debug, Default)]
pub struct Batch {
    pub ops: Vec<(Space, Vec<u8>, Option<Vec<u8>>)>,
}

impl Batch {
    #[must_use]
    pub fn new() -> Batch {
        Batch::default()
    }
    pub fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push((space, key, Some(value)));
    }
    pub fn delete(&mut self, space: Space, key: Vec<u8>) {
        self.ops.push((space, key, None));
    }
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    pub fn append(&mut self, other: Batch) {
        self.ops.extend(other.ops);
    }
}

/// Key-value pairs in key order, as `scan` returns them.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

pub trait Kv: Send + Sync + 'static {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;
    /// Up to `limit` pairs whose key starts with `prefix`, in key order, strictly after
    /// `after` if given.
    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError>;
    /// Applies the batch atomically. Visible to readers at once; durable after `sync`.
    fn commit(&self, batch: Batch) -> Result<(), StorageError>;
    /// Makes every committed batch durable (fsync).
    fn sync(&self) -> Result<(), StorageError>;
    /// Bytes used on disk (approximate).
    fn disk_bytes(&self) -> u64;
    /// Whether `key` is present (an engine may answer without reading the value).
    fn contains(&self, space: Space, key: &[u8]) -> Result<bool, StorageError> {
        Ok(self.get(space, key)?.is_some())
    }
}

/// The smallest key greater than every key starting with `prefix`, or None if there is none.
#[must_use]
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
