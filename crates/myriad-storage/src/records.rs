//! Records stored as values. Encoded with postcard behind a one-byte record version, so the
//! on-disk format can evolve (a new version byte plus a migration in `Store`).

use myriad_proto::InodeId;
use myriad_proto::{Inode, ReadOnlyMark, Shard, ShardMap};
use serde::{Deserialize, Serialize};

/// Records written before issue 18: the version byte, then the body.
pub const RECORD_VERSION_PLAIN: u8 = 1;
/// Records written from issue 18 to issue 19: the version byte, the body, then the crc32c
/// of the body (little endian), so that a damaged record is found when read instead of
/// decoding to something else (docs/write-path.md, part 3). Their directory records have
/// no `read_only` (decoded as `DirRecordV2`).
pub const RECORD_VERSION_CHECKED_V2: u8 = 2;
/// Records written in issue 20 before automatic indexes: as version 2; directory records
/// carry `read_only` (decoded as `DirRecordV3`).
pub const RECORD_VERSION_V3: u8 = 3;
/// Records written now: as version 2; directory records carry `read_only` and
/// `auto_index`.
pub const RECORD_VERSION: u8 = 4;
/// Directory records marked `undecided` (ARCHITECTURE.md "Undecided directory objects"):
/// as version 4 with the mark appended. Only a marked record is written so (a server
/// marks one only once every member of the cluster reads it), so a backup of the
/// release before reads every record its primary sends while the mark is off.
pub const RECORD_VERSION_DIR_UNDECIDED: u8 = 5;

/// Whether records of version `v` end with the crc32c of their body (every version but 1).
#[must_use]
pub fn checksummed(v: u8) -> bool {
    matches!(
        v,
        RECORD_VERSION_CHECKED_V2
            | RECORD_VERSION_V3
            | RECORD_VERSION
            | RECORD_VERSION_DIR_UNDECIDED
    )
}

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
    pub ino: InodeId,
    /// The root's own attributes (it has no parent entry); `None` for every other directory.
    pub root_attrs: Option<Inode>,
    /// A directory rename (txid) is copying this object away: reads go on, writes get `Busy`.
    pub frozen: Option<u64>,
    /// A directory rename (txid) is copying this object here: not usable until revealed.
    pub hidden: Option<u64>,
    /// The shards of this directory held here (docs/huge-dirs.md): `[Shard::ALL]` for an
    /// unsplit directory on its home.
    pub shards: Vec<LocalShard>,
    /// On the directory's home once it is split: every leaf, with a version.
    pub map: Option<ShardMap>,
    /// Visible entries here that are directories, kept in the batch that adds or removes
    /// one: an unsplit directory's link count is 2 + this.
    pub subdirs: u32,
    /// The directory is inside a tree frozen for its metadata index: every change of its
    /// entries is refused with `ReadOnly` (docs/metadata-index.md).
    pub read_only: Option<ReadOnlyMark>,
    /// The directory is inside the tree of an automatic index: the first change of its
    /// entries unregisters that index before it applies, then clears this mark
    /// (docs/metadata-index.md "Automatic indexes").
    pub auto_index: Option<ReadOnlyMark>,
    /// Made by a mkdir not yet known to be committed: takes no entries until its entry is
    /// found committed (ARCHITECTURE.md "Undecided directory objects"; record version 5).
    pub undecided: bool,
}

/// A directory record as record version 4 stores it (every record not `undecided`),
/// borrowed for writing.
#[derive(Serialize)]
pub(crate) struct DirRecordV4Ref<'a> {
    pub ino: &'a InodeId,
    pub root_attrs: &'a Option<Inode>,
    pub frozen: &'a Option<u64>,
    pub hidden: &'a Option<u64>,
    pub shards: &'a Vec<LocalShard>,
    pub map: &'a Option<ShardMap>,
    pub subdirs: &'a u32,
    pub read_only: &'a Option<ReadOnlyMark>,
    pub auto_index: &'a Option<ReadOnlyMark>,
}

impl<'a> From<&'a DirRecord> for DirRecordV4Ref<'a> {
    fn from(r: &'a DirRecord) -> DirRecordV4Ref<'a> {
        DirRecordV4Ref {
            ino: &r.ino,
            root_attrs: &r.root_attrs,
            frozen: &r.frozen,
            hidden: &r.hidden,
            shards: &r.shards,
            map: &r.map,
            subdirs: &r.subdirs,
            read_only: &r.read_only,
            auto_index: &r.auto_index,
        }
    }
}

/// A directory record as record version 4 stored it (before `undecided`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DirRecordV4 {
    pub ino: InodeId,
    pub root_attrs: Option<Inode>,
    pub frozen: Option<u64>,
    pub hidden: Option<u64>,
    pub shards: Vec<LocalShard>,
    pub map: Option<ShardMap>,
    pub subdirs: u32,
    pub read_only: Option<ReadOnlyMark>,
    pub auto_index: Option<ReadOnlyMark>,
}

impl From<DirRecordV4> for DirRecord {
    fn from(v: DirRecordV4) -> DirRecord {
        DirRecord {
            ino: v.ino,
            root_attrs: v.root_attrs,
            frozen: v.frozen,
            hidden: v.hidden,
            shards: v.shards,
            map: v.map,
            subdirs: v.subdirs,
            read_only: v.read_only,
            auto_index: v.auto_index,
            undecided: false,
        }
    }
}

/// A directory record as record version 3 stored it (before `auto_index`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DirRecordV3 {
    pub ino: InodeId,
    pub root_attrs: Option<Inode>,
    pub frozen: Option<u64>,
    pub hidden: Option<u64>,
    pub shards: Vec<LocalShard>,
    pub map: Option<ShardMap>,
    pub subdirs: u32,
    pub read_only: Option<ReadOnlyMark>,
}

impl From<DirRecordV3> for DirRecord {
    fn from(v: DirRecordV3) -> DirRecord {
        DirRecord {
            ino: v.ino,
            root_attrs: v.root_attrs,
            frozen: v.frozen,
            hidden: v.hidden,
            shards: v.shards,
            map: v.map,
            subdirs: v.subdirs,
            read_only: v.read_only,
            auto_index: None,
            undecided: false,
        }
    }
}

/// A directory record as record version 2 stored it (before `read_only`): decoded and
/// converted when read, so stores written before it open unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DirRecordV2 {
    pub ino: InodeId,
    pub root_attrs: Option<Inode>,
    pub frozen: Option<u64>,
    pub hidden: Option<u64>,
    pub shards: Vec<LocalShard>,
    pub map: Option<ShardMap>,
    pub subdirs: u32,
}

impl From<DirRecordV2> for DirRecord {
    fn from(v: DirRecordV2) -> DirRecord {
        DirRecord {
            ino: v.ino,
            root_attrs: v.root_attrs,
            frozen: v.frozen,
            hidden: v.hidden,
            shards: v.shards,
            map: v.map,
            subdirs: v.subdirs,
            read_only: None,
            auto_index: None,
            undecided: false,
        }
    }
}

impl DirRecord {
    /// The record of a new, unsplit directory.
    #[must_use]
    pub fn new(ino: InodeId) -> DirRecord {
        DirRecord {
            ino,
            root_attrs: None,
            frozen: None,
            hidden: None,
            shards: vec![LocalShard::new(Shard::ALL)],
            map: None,
            subdirs: 0,
            read_only: None,
            auto_index: None,
            undecided: false,
        }
    }

    /// Whether this record holds the whole directory (its home, never split), so that its
    /// counts are the directory's.
    #[must_use]
    pub fn is_whole(&self) -> bool {
        self.map.is_none() && self.shards.len() == 1 && self.shards[0].shard == Shard::ALL
    }

    /// Whether this part is on its way somewhere: a rename is copying it away or here, or
    /// one of its shards is splitting or being made by a split.
    #[must_use]
    pub fn is_moving(&self) -> bool {
        self.frozen.is_some()
            || self.hidden.is_some()
            || self
                .shards
                .iter()
                .any(|s| s.splitting.is_some() || s.hidden.is_some())
    }

    /// The local shard holding names of hash `hash`, if any.
    #[must_use]
    pub fn shard_for(&self, hash: u64) -> Option<&LocalShard> {
        self.shards.iter().find(|s| s.shard.contains(hash))
    }
}

/// One shard of a directory held by this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalShard {
    pub shard: Shard,
    /// A split (txid) is copying this shard's upper half away: writes there get `Busy`.
    pub splitting: Option<u64>,
    /// A split (txid) is copying this shard here: readers wait, writers get `Busy`.
    pub hidden: Option<u64>,
}

impl LocalShard {
    #[must_use]
    pub fn new(shard: Shard) -> LocalShard {
        LocalShard {
            shard,
            splitting: None,
            hidden: None,
        }
    }

    /// True if a write of a name with hash `hash` must wait (`Busy`) for a split.
    #[must_use]
    pub fn blocks_write(&self, hash: u64) -> bool {
        self.hidden.is_some() || (self.splitting.is_some() && self.shard.halves().1.contains(hash))
    }
}
