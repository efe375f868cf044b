//! Requests as types of their own (issue 50, step 1): one struct per request, carried by
//! its variant (`ClientRequest::Write(requests::Write)`), taken whole by its handler.
//!
//! A variant that holds one struct encodes exactly as the struct variant with the same
//! fields did (postcard writes a struct as its fields in order), so moving a request here
//! changes no byte on the wire (`codec.rs` checks it against bytes the earlier build
//! encoded). The other requests move here as their handlers are reshaped.

use serde::{Deserialize, Serialize};

use myriad_placement::{Shard, ShardMap};

use crate::{ExportedEntry, InodeId};

/// Owner of the entry. Creates a file, optionally with its first bytes (one atomic write).
/// Encoded by `appended.rs` (`data_at` only for peers of 36 or later, `then` of 43).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Create {
    pub path: String,
    pub mode: u32,
    pub exclusive: bool,
    pub data: Vec<u8>,
    /// false: reply once applied (visible to everyone), durable with the node's next
    /// group commit, which follows at once; a client that promises durability later
    /// (the FUSE mount, at close) ends with a durable write or `Sync` to the same node.
    pub durable: bool,
    /// The new file's inode number, from a range this partition reserved for the
    /// sending client (`ReserveIds`); `None`: the partition picks one. A number not
    /// in the client's reservations, or used already, is refused (`InvalidArgument`).
    pub ino: Option<InodeId>,
    /// When `data` was last written, if later than the create: writes answered behind
    /// folded into a create answered behind (one change for the servers). The file's
    /// times are this; its directory's are the create's (`Envelope::Batch::times`), as
    /// they were shown (nsx seed 6: the directory's mtime moved to the write's time once
    /// the creator's lease went). Not carried to a peer older than 36 (`appended.rs`):
    /// there the file's times are the create's.
    pub data_at: Option<i64>,
    /// A setattr of the new file answered behind after the create (and after its folded
    /// writes), folded into it: one change for the servers where `tar -x` makes two.
    /// Applied to the new file as that setattr by the same caller would be, checked by
    /// the same rules (refused, the create is applied alone and the setattr's error
    /// answered). Only for an exclusive create, and only sent once the map's floor is
    /// `SETATTR_IN_CREATE_SINCE` (a peer older than 43 would drop it: `appended.rs`).
    pub then: Option<SetAfter>,
}

/// A setattr folded into the create before it (`Create::then`), answered at `at_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAfter {
    pub set: crate::SetAttr,
    pub at_ns: i64,
}

/// Owner of the entry: write into chunk 0 (offset + len <= chunk size); updates size, mtime.
/// `opened`: through a descriptor whose open checked access (see `InodeOp::Write`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub path: String,
    pub ino: InodeId,
    pub offset: u64,
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    pub opened: bool,
}

/// Owner of the entry: raise the size to at least `size` after chunk writes elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtendSize {
    pub path: String,
    pub ino: InodeId,
    pub size: u64,
    pub opened: bool,
}

/// Owner of the entry: set the size; trims chunks beyond it on their nodes before replying.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncate {
    pub path: String,
    pub ino: InodeId,
    pub size: u64,
    pub opened: bool,
}

/// `PeerRequest::DirImport`, and the mutation that applies it: a directory part moved to
/// the partition of shards `shards` of directory `path` (its home if `shards` is empty or
/// holds shard 0), hidden until revealed: its part is created (if new) with these shards
/// and, on the home, `map`; the staged entries are added.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirImport {
    pub path: String,
    pub txid: u64,
    pub ino: InodeId,
    pub shards: Vec<Shard>,
    pub map: Option<ShardMap>,
    pub entries: Vec<ExportedEntry>,
    /// The moved directory's root replaces the empty directory `replaces` at `path`:
    /// the owner takes its object over (refused unless it is still that directory,
    /// whole and empty) and restores it if the rename aborts.
    pub replaces: Option<InodeId>,
}
