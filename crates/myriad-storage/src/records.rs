//! Records stored as values. Encoded with postcard behind a one-byte record version, so the
//! on-disk format can evolve (a new version byte plus a migration in `Store`).

use myriad_proto::Inode;
use serde::{Deserialize, Serialize};

pub const RECORD_VERSION: u8 = 1;

/// A directory entry with its embedded inode.
///
/// `pending` marks a multi-node operation in flight on this name (mkdir, rmdir, cross-node
/// rename). While it is set, readers of this name wait for the outcome instead of answering,
/// which makes the operation atomic as seen by clients; writers get `Busy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryRecord {
    /// The visible inode; `None` while a creating operation is pending.
    pub inode: Option<Inode>,
    pub pending: Option<Pending>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub txid: u64,
    /// What the entry becomes if the operation commits (`None`: the entry goes away).
    pub after: Option<Inode>,
}

/// The header of a directory object held by this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirRecord {
    /// Inode id of the directory (matches the entry in its parent).
    pub ino: u64,
    /// The root's own attributes (it has no parent entry); `None` for every other directory.
    pub root_attrs: Option<Inode>,
    /// A directory rename (txid) is copying this object away: reads go on, writes get `Busy`.
    pub frozen: Option<u64>,
    /// A directory rename (txid) is copying this object here: not usable until revealed.
    pub hidden: Option<u64>,
}
