//! A client's requests (`ClientRequest`), one variant per request, and the types they carry.
//! How they are sent (alone or in an envelope) is envelope.rs; every audience's requests
//! together, audience.rs.

use serde::{Deserialize, Serialize};

use crate::auth::Capability;
use crate::peer_request::InodeOp;
use crate::request_parts::{RenameFlags, SetAttr, XattrMode};
use crate::{FileKind, InodeId};

/// What a wire slot of `ClientRequest` holds: nothing (no value of it exists). The slots
/// keep the variant indices of the envelopes that were once requests (envelope.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Slot {}

/// File system requests: what any authenticated client may send, to the partition the
/// comment on each variant names. Paths are absolute and normalized (`validate_path`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Any node. Measures the transport floor.
    Echo(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Owner of the entry (the parent directory's node; "/" -> its own node).
    Stat { path: String },
    /// Owner of the entry: `path`'s attributes for an open that will write it, as `Stat`,
    /// but `ReadOnly` in a frozen tree (so the open fails, not a later write).
    OpenWrite { path: String },
    /// Owner of directory `dir`: attributes of many names in one round trip.
    StatMany { dir: String, names: Vec<String> },
    /// Owner of the entry: attributes plus the first `max_bytes` of data, in one round trip.
    Fetch { path: String, max_bytes: u64 },
    /// Node of the shard of `path` holding position (`from`, or `after` if given): up to
    /// `limit` entries with attributes, in hash order, from that position to the shard's end
    /// (docs/huge-dirs.md "Listings").
    ReadDir {
        path: String,
        /// Start at this name hash (inclusive) ...
        from: u64,
        /// ... or after this name (its hash must be at least `from`).
        after: Option<String>,
        limit: u32,
    },
    /// Home of directory `dir`: its shard map (unsplit if it is not split).
    GetShardMap { dir: String },
    /// Owner of the entry. Creates a file, optionally with its first bytes (one atomic write).
    Create(crate::requests::Create),
    /// Owner of the entry (the coordinator of the two-node mkdir). `shards` > 1 creates the
    /// directory split into that many shards (rounded up to a power of two, at most 4,096).
    Mkdir {
        path: String,
        mode: u32,
        shards: u32,
    },
    /// Owner of the entry (the coordinator of the two-node rmdir).
    Rmdir { path: String },
    /// Owner of the entry.
    Unlink { path: String },
    /// Owner of the entry.
    Symlink { path: String, target: String },
    /// Owner of the entry.
    Readlink { path: String },
    /// Owner of the entry.
    SetAttr { path: String, set: SetAttr },
    /// Owner of the source entry (the coordinator if the destination lives elsewhere).
    Rename {
        from: String,
        to: String,
        flags: RenameFlags,
    },
    /// Owner of the entry: write into chunk 0; updates size, mtime.
    Write(crate::requests::Write),
    /// Owner of the entry: read from chunk 0; returns the current inode too.
    Read {
        path: String,
        ino: InodeId,
        offset: u64,
        len: u64,
    },
    /// Owner of the entry `dst`: copy up to `len` bytes of file `src` (inode `src_ino`) at
    /// `src_off` into `dst` (inode `dst_ino`) at `dst_off`, server to server: the bytes
    /// never pass through the client (copy_file_range). Short at the source's end and at
    /// `limits::COPY_BYTES_MAX`; answers `Copied`. `opened`: as for `Write`.
    CopyRange(CopyRange),
    /// Owner of the entry: set the size; trims chunks beyond it on their nodes before replying.
    Truncate(crate::requests::Truncate),
    /// Owner of the entry: raise the size to at least `size` after chunk writes elsewhere.
    ExtendSize(crate::requests::ExtendSize),
    /// Owner of chunk `chunk` (>= 1) of `ino`.
    /// From a client, `cap` must grant writing `ino` (`Grant`); servers send none.
    WriteChunk {
        ino: InodeId,
        chunk: u64,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        cap: Option<Capability>,
    },
    /// Owner of chunk `chunk` (>= 1) of `ino`. Missing bytes read as zeros. From a client,
    /// `cap` must grant reading `ino` (`Grant`); servers send none.
    ReadChunk {
        ino: InodeId,
        chunk: u64,
        offset: u64,
        len: u64,
        cap: Option<Capability>,
    },
    /// Owner of the entry: create a metadata-only node (`Fifo`, `Socket`, or, as root, a
    /// `CharDevice` or `BlockDevice` numbered `rdev`).
    Mknod {
        path: String,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    },
    /// Owner of the entry: set (`value: Some`) or remove (`None`) a `user.` extended attribute.
    SetXattr {
        path: String,
        name: String,
        value: Option<serde_bytes::ByteBuf>,
        mode: XattrMode,
    },
    /// Owner of the entry of `from`: give the regular file at `from` the additional name `to`
    /// (a hard link; `to` must not exist).
    Link { from: String, to: String },
    /// Owner of the entry of `path`: returns once everything that node applied before it
    /// is durable (a barrier after non-durable creates), then checks that `path` still
    /// names inode `ino` (`Stale` if a crash lost it, `NotFound` if it was removed).
    Sync { path: String, ino: InodeId },
    /// Owner of the entry: after checking that the caller may read (`write`: also write)
    /// file `path`, inode `ino`, a capability for its chunks past the first (`Granted`).
    /// `opened`: as for `Write`.
    Grant {
        path: String,
        ino: InodeId,
        write: bool,
        opened: bool,
    },
    /// Wire slot of `Envelope::Once` (envelope.rs): holds no value.
    #[doc(hidden)]
    OnceSlot(Slot),
    /// The partition targeted: returns once everything it applied before is durable on
    /// every copy, if its primary is still incarnation `incarnation` (the one that answered
    /// the changes being synced, `Response::Applied`); else `Io`: those changes may be lost.
    SyncPartition { incarnation: u64 },
    /// Wire slot of `Envelope::Leased`.
    #[doc(hidden)]
    LeasedSlot(Slot),
    /// Wire slot of `Envelope::ReadAs`.
    #[doc(hidden)]
    ReadAsSlot(Slot),
    /// Wire slot of `Envelope::Batch`.
    #[doc(hidden)]
    BatchSlot(Slot),
    /// The partition targeted, sent once: reserves `count` (at most
    /// `limits::RESERVE_IDS_MAX`) inode numbers for the sending client's creates there
    /// (`Create::ino`); answered by `Response::Ids`. A client holds at most two ranges
    /// per partition: a third replaces the older.
    ReserveIds { count: u32 },
    /// The primary of `Ring::owner_of_locks(ino)`: a file lock request (docs/fuse.md "File
    /// locks between mounts"); the answer is `Response::Lock`.
    Lock(crate::locks::LockRequest),
    /// The partition that held the names of `inos`: this client still has those files
    /// open, so their data stays (as orphans) for `limits::ORPHAN_HOLD` more if another
    /// client removes their last name (docs/fuse.md "Open files unlinked elsewhere").
    KeepOpen { inos: Vec<InodeId> },
    /// Home of directory `path` (root only): mark every part of its directory object as
    /// inside the frozen tree `mark` (changes of its entries are then refused with
    /// `ReadOnly`), or, with `None`, unmark it. Idempotent (docs/metadata-index.md).
    /// With `auto`, the mark of an automatic index instead: changes are not refused, the
    /// first one unregisters the index (`PeerRequest::UnregisterIndex`) before it applies.
    MarkReadOnly {
        path: String,
        mark: Option<crate::ReadOnlyMark>,
        auto: bool,
    },
    /// Any partition: the directories it homes that were read at least `min_reads` times
    /// in its popularity window and not changed for `quiet_ms` (the candidates for an
    /// automatic metadata index, docs/metadata-index.md); `Response::IndexCandidates`.
    IndexCandidates { min_reads: u64, quiet_ms: u64 },
    /// Wire slot of `Envelope::Resend`.
    #[doc(hidden)]
    ResendSlot(Slot),
    /// Wire slot of `Envelope::Recorded`.
    #[doc(hidden)]
    RecordedSlot(Slot),
    /// As `IndexCandidates`, with how many clients read each directory in the window
    /// (`Response::IndexReaders`): an automatic index is built for a tree read from
    /// several mounts, or read hard by one (docs/metadata-index.md). Protocol 33.
    IndexReaders { min_reads: u64, quiet_ms: u64 },
    /// Owner of the entry: a mkdir a client answered behind under an exclusive lease on
    /// the parent (docs/fuse.md "mkdir behind"). The directory takes inode number `ino`,
    /// reserved for the client by this partition (`ReserveIds`, checked as a create's),
    /// and its object is made with an exclusive lease for that client (its birth lease,
    /// `PeerRequest::DirObjectBorn`). Sent only once the map's floor is 42.
    MkdirNumbered {
        path: String,
        mode: u32,
        ino: InodeId,
    },
}

/// What a read reads (`ClientRequest::read_of`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOf<'a> {
    /// One name (its entry, attributes or bytes).
    Name(&'a str),
    /// A directory's names.
    Listing(&'a str),
}

/// A change's identity: the client that sends it (random per client), its number among
/// that client's changes, and the lowest number the client still waits for (outcomes below
/// it may be forgotten).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OnceId {
    pub client: u64,
    pub seq: u64,
    pub low: u64,
}

/// `Request::CopyRange`: copy up to `len` bytes of file `src` (inode `src_ino`) at
/// `src_off` into `dst` (inode `dst_ino`) at `dst_off`. `opened`: as for `Write`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyRange {
    pub src: String,
    pub src_ino: InodeId,
    pub src_off: u64,
    pub dst: String,
    pub dst_ino: InodeId,
    pub dst_off: u64,
    pub len: u64,
    pub opened: bool,
}

impl ClientRequest {
    /// The path of a request that, when it names a hard link, is applied at the inode's
    /// home (reads and changes of the file's contents or attributes; see `into_inode_op`).
    #[must_use]
    pub fn link_resolved_path(&self) -> Option<&str> {
        match self {
            ClientRequest::Write(w) => Some(&w.path),
            ClientRequest::ExtendSize(e) => Some(&e.path),
            ClientRequest::Truncate(t) => Some(&t.path),
            ClientRequest::Read { path, .. }
            | ClientRequest::SetAttr { path, .. }
            | ClientRequest::SetXattr { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The inode operation of a request `link_resolved_path` names (`None` for others).
    #[must_use]
    pub fn into_inode_op(self) -> Option<InodeOp> {
        Some(match self {
            ClientRequest::Read {
                ino, offset, len, ..
            } => InodeOp::Read { ino, offset, len },
            ClientRequest::Write(w) => InodeOp::Write {
                ino: w.ino,
                offset: w.offset,
                data: w.data,
                opened: w.opened,
            },
            ClientRequest::ExtendSize(e) => InodeOp::ExtendSize {
                ino: e.ino,
                size: e.size,
                opened: e.opened,
            },
            ClientRequest::Truncate(t) => InodeOp::Truncate {
                ino: t.ino,
                size: t.size,
                opened: t.opened,
            },
            ClientRequest::SetAttr { set, .. } => InodeOp::SetAttr { set },
            ClientRequest::SetXattr {
                name, value, mode, ..
            } => InodeOp::SetXattr { name, value, mode },
            _ => return None,
        })
    }
}
