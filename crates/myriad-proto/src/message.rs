//! Messages. A connection starts with `Hello`/`HelloReply`; then the client sends
//! `RequestFrame`s and the server answers each with a `ResponseFrame` carrying the same id, in
//! any order (many requests in flight per connection).

use myriad_placement::ClusterMap;
use serde::{Deserialize, Serialize};

use crate::audience::{FromClient, Request};
use crate::auth::{KeyId, Nonce, Proof};
use crate::peer_request::{ExportedEntry, ReplOp};
use crate::server_request::{FsckDir, FsckEntry};
use myriad_placement::{NodeId, PartitionId};

use crate::{Caller, CounterSnapshot, DirEntry, Inode, InodeId, ShardMap, StatFs, WireError};

/// "MYRD": first field of every hello, so a stray connection is recognised at once.
pub const MAGIC: u32 = 0x4d59_5244;
/// Bumped on any incompatible change of a message. Peers must match exactly for now.
/// 5: authenticated handshake and tagged frames (issue 7).
/// 6: devices (`Inode::rdev`), `SetAttr::touch`, `opened` writes, `ChunkTrimFrom`,
/// `DirTouch` (issue 16).
/// 7: requests grouped by audience (`Request::{Client, Server, Admin, Peer, Replica}`).
/// 8: `Response::ReplicaState` (a copy's batch number with the chain of its batches).
/// 9: `Replicate` and `ReplicaCopyDone` carry the batch chain (copies check it).
/// 10: `ReplicaState` carries the term; replication bundles (`ReplicaRequest::Bundle`).
/// 11: `ClientRequest::Once` (a change with its client id and sequence number).
/// 12: chunk capabilities (`ClientRequest::Grant`, `cap` on chunk requests); frames sealed
/// with AES-256-GCM.
/// 13: metadata records checked and repaired (`ReplicaRecord`, `RepairRecord`).
/// 14: directory touches sent together (`PeerRequest::DirTouches`); anti-entropy
/// (`ReplicaSums`, `ReplicaBucket`); changes answered once applied (`SentOnce::visible`,
/// `Response::Applied`, `SyncPartition`).
/// 15: directory leases (`ClientRequest::Leased`, `LeasePoll`, `LeaseRenew`).
/// 16: file locks between clients (`ClientRequest::Lock`), `KeepOpen`, exchanges.
/// 17: directory touches name the client whose change they report (`DirTouch::client`);
/// `DirPage::hidden`.
/// 18: exclusive directory leases, reserved inode numbers (`ReserveIds`), `Batch`.
/// 19: frozen trees (docs/metadata-index.md): `WireError::ReadOnly` (EROFS),
/// `ClientRequest::MarkReadOnly`, `PeerRequest::DirMarkReadOnly`, `ClientRequest::OpenWrite`.
/// 20: `ClientRequest::IndexCandidates`; the root's attributes come with a lease.
/// 21: automatic indexes: `auto` on `MarkReadOnly` and `DirMarkReadOnly`,
/// `PeerRequest::UnregisterIndex`, `WireError::AutoIndexed`.
/// 22: erasure-coded fragments (docs/redundancy.md): `ServerRequest::ReadFragment`,
/// `PeerRequest::PutFragments`, `PeerRequest::DropFragments`.
/// 23: coded chunks: `Response::Coded` (a chunk read meeting a coded chunk),
/// `DropFragments` per chunk and generation, `FsckRepair::RepairFragments`,
/// `AdminRequest::FsckCoded`, `AdminRequest::FsckFragments`, `PeerRequest::KeepsFragments`,
/// `PeerRequest::FragmentNamed`, `Response::Bool`.
/// 24: storage tiers: `StatFs::tiers`; kept fsstats: `AdminRequest::KeptStats`,
/// `Response::KeptStats`.
/// 25: zones (docs/zones.md): the map's `NodeInfo::zone`, `PartitionInfo::group`,
/// `ClusterMap::policies`.
/// 26: nearest-copy reads (docs/zones.md): `PeerRequest::LendReads`, `Response::ReadsLent`,
/// `WireError::AskPrimary`.
/// 27: trees moved between zones online (docs/zones.md section 3): `Policy::state` in the
/// map.
/// 28: `CounterSnapshot::popular` (the popular directories a server holds replicas of, for
/// the dashboard).
/// 29: the client a peer request carries a change on for (`PeerRequest::acting_for`:
/// `client` of `RenamePrepare`, `RenameCommit`, `PutLinkRef`, `DirObjectRemove`);
/// `WireError::TooManyLinks`.
/// 30: versions are negotiated (docs/upgrades.md): `Hello::min_version` and
/// `HelloReply::newest`, appended (a peer of 29 ignores them, and its hello and reply are
/// read by `Hello::decode_any` and `HelloReply::decode_any`). Nothing else changed: 30
/// speaks 29 with a peer that only speaks 29.
/// 31: `ClientRequest::Resend` (a change a client kept, sent again after a failover lost
/// it), sent only on connections of 31.
/// 32: `ClientRequest::Recorded` and `Response::Recorded` (the outcome of a change an
/// earlier try left at a partition its name has since moved away from), asked only over
/// connections of 32; `PeerRequest::PutLinkRefOnce` (a hard link's new name, made once
/// per change), sent only over connections of 32.
/// 33: `ClientRequest::IndexReaders` and `Response::IndexReaders` (hot directories with
/// how many clients read them), asked only over connections of 33.
/// 34: `ServerRequest::GetLatencies` and `Response::Latencies` (a server's answers to
/// clients by how long they took, for the status page), asked only over connections of 34.
/// 35: `ClusterMap::ext` (settings of the whole cluster: the protocol floor, then quotas
/// and the trash), appended to the map and written only in frames encoded for 35 or later
/// (`versioned::scope`): a map sent to a peer of 34 is 34's map byte for byte.
/// 36: `requests::Create::data_at` (the time of writes answered behind folded into a
/// create: the file's times are that, its directory's the create's) and `SetAttr::of`
/// (the inode a change of attributes is meant for), appended and written only in frames
/// encoded for 36 or later.
/// 37: directory quotas (docs/quotas.md): `MapExt::quotas`, written only in frames encoded
/// for 37 or later; `AdminRequest::QuotaUsage`, `Response::QuotaUsage`, asked only of
/// servers of 37 (a cluster has quotas only once its floor is 37); `WireError::QuotaExceeded`
/// (sent as `NoSpace` to a peer below 37), `PeerRequest::QuotaAsk`, `PeerRequest::QuotaSettle`,
/// `Response::QuotaLedger`.
/// 38: the trash (docs/trash.md): `MapExt::trash_days`, written only in frames encoded for
/// 38 or later (a cluster keeps removed files only once its floor is 38).
/// 39: undecided directory objects (ARCHITECTURE.md "Undecided directory objects"):
/// `PeerRequest::MkdirDecided` and `PeerRequest::DirObjectConfirm`, sent only while the
/// map's floor is 39 (the only time an object is marked); `WireError::DirUndecided`, never
/// sent (`ResponseFrame::for_version` answers `Busy` for it). And the trash keeps a file
/// replaced by a rename between partitions (docs/trash.md): a stored intent servers of 38
/// cannot read (`Intent::RenameInKeeping`), written only while the map's floor is 39. And
/// `PeerRequest::GiveUpClaimed` (a reserved number's claim moved between partitions).
/// 40: quotas leave the trash out (docs/quotas.md "The trash"): partitions count by the
/// new rule once the map's floor is 40, so that every primary of a partition counts by
/// one rule. And `WireError::CrossDevice` (EXDEV) appended, sent only to peers of 40.
/// 41: `InodeOp::ClaimRemoval` and `InodeOp::DropClaimed` appended (the trash keeps one of
/// two last names of a linked file removed at once, docs/trash.md), sent only once the
/// map's floor is 41; and quota anchors of hard-linked files (docs/quotas.md "Hard
/// links"), a stored record written only once the map's floor is 41.
/// 42: mkdir behind (docs/fuse.md "mkdir behind"): `ClientRequest::MkdirNumbered`,
/// `PeerRequest::DirObjectBorn` and `PeerRequest::DirSought` appended, sent only once the
/// map's floor is 42.
/// 43: a file's setattr folded into its create (`requests::Create::then`), written only in
/// frames encoded for 43 or later and sent only once the map's floor is 43.
pub const PROTOCOL_VERSION: u16 = 43;

/// The first protocol whose servers take a setattr folded into a create
/// (`requests::Create::then`): a client folds them only once the map's floor is this.
pub const SETATTR_IN_CREATE_SINCE: u16 = 43;

/// The first protocol whose servers take a mkdir answered behind
/// (`ClientRequest::MkdirNumbered`): a client answers mkdirs behind only once the map's
/// floor is this.
pub const MKDIR_BEHIND_SINCE: u16 = 42;

/// The first protocol with undecided directory objects: a server marks the object of a
/// mkdir only once the map's floor is this.
pub const DIR_UNDECIDED_SINCE: u16 = 39;

/// The first protocol whose servers read the intent of a rename between partitions that
/// keeps the file it replaces in the trash: written only once the map's floor is this.
pub const TRASH_KEEPS_ACROSS_SINCE: u16 = 39;

/// The first protocol whose servers leave the trash out of every quota not set in it
/// (kept with the map's rule that follows from it).
pub use myriad_placement::QUOTAS_LEAVE_TRASH_SINCE;

/// The first protocol whose servers answer `InodeOp::ClaimRemoval` and
/// `InodeOp::DropClaimed`: sent only once the map's floor is this (below it, an unlink
/// asks `InodeOp::Stat` and drops its link with `AdjustLinks` as before).
pub const REMOVAL_CLAIMS_SINCE: u16 = 41;

/// The first protocol whose servers count a hard-linked file's bytes at its quota anchor
/// (docs/quotas.md "Hard links"): anchors are written only once the map's floor is this.
pub const QUOTA_ANCHORS_SINCE: u16 = 41;

/// The first protocol that reads `WireError::CrossDevice`: an older peer is sent
/// `NotSupported` (EOPNOTSUPP, what it answered for such a rename) instead.
pub const CROSS_DEVICE_SINCE: u16 = 40;

/// The first protocol whose servers move a reserved number's claim between partitions
/// (`PeerRequest::GiveUpClaimed`): sent only once the map's floor is this.
pub const CLAIMS_MOVE_SINCE: u16 = 39;

// The map's extension is known to this build's newest version.
const _: () = assert!(PROTOCOL_VERSION >= myriad_placement::map_wire::MAP_EXT_SINCE);
const _: () = assert!(PROTOCOL_VERSION >= crate::appended::APPENDED_36);
const _: () = assert!(PROTOCOL_VERSION >= myriad_placement::map_wire::QUOTAS_SINCE);
const _: () = assert!(PROTOCOL_VERSION >= myriad_placement::map_wire::TRASH_SINCE);

/// The oldest protocol this build still speaks (docs/upgrades.md): every message of every
/// version from this one to `PROTOCOL_VERSION` is read and written alike, but for what a
/// connection's negotiated version gates. A change that breaks that (a field inserted, a
/// variant reordered) raises it, and a rolling upgrade must then go through each release.
pub const PROTOCOL_MIN: u16 = 29;

/// The version two peers speak: the newest both speak, if their ranges meet (`theirs`:
/// the other side's oldest and newest).
#[must_use]
pub fn negotiate((oldest, newest): (u16, u16)) -> Option<u16> {
    let v = newest.min(PROTOCOL_VERSION);
    (v >= oldest && v >= PROTOCOL_MIN).then_some(v)
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerKind {
    Client,
    Server { node_id: NodeId },
}

/// First message of a connection (auth.rs has the whole handshake).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub magic: u32,
    pub version: u16,
    pub peer: PeerKind,
    /// Public id of the key the client will prove; None: the client has no key (refused).
    pub key_id: Option<KeyId>,
    pub nonce: Nonce,
    /// The zone the peer is in (docs/zones.md; `""`: not known), for traffic counters.
    pub zone: String,
    /// The oldest protocol the sender speaks (`version` is its newest, or the one it
    /// offers). Since 30; a hello of 29 ends before it (`decode_any`).
    pub min_version: u16,
}

/// The hello of protocol 29, as it was on the wire (postcard: the fields in order), to read
/// a peer of 29. Frozen: never change it.
#[derive(Deserialize)]
struct HelloV29 {
    magic: u32,
    version: u16,
    peer: PeerKind,
    key_id: Option<KeyId>,
    nonce: Nonce,
    zone: String,
}

impl Hello {
    /// Reads a hello of any version this build knows: 30 on, or 29 (whose sender speaks 29
    /// only). A peer of 29 reads a hello of 30 as its own (postcard leaves trailing bytes).
    pub fn decode_any(bytes: &[u8]) -> Result<Hello, crate::codec::DecodeError> {
        crate::codec::decode::<Hello>(bytes).or_else(|e| {
            let old = crate::codec::decode::<HelloV29>(bytes).map_err(|_| e)?;
            Ok(Hello {
                magic: old.magic,
                version: old.version,
                peer: old.peer,
                key_id: old.key_id,
                nonce: old.nonce,
                zone: old.zone,
                min_version: old.version,
            })
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloReply {
    pub version: u16,
    pub node_id: NodeId,
    pub epoch: u64,
    /// Set when the server refuses the connection; it closes right after.
    pub refused: Option<String>,
    pub nonce: Nonce,
    /// The server's proof that it holds the key the client named (zero when refused).
    pub proof: Proof,
    /// The newest protocol the server speaks (`version` is the one this connection speaks,
    /// or, refused, the newest). Since 30; a reply of 29 ends before it (`decode_any`).
    pub newest: u16,
}

/// The hello reply of protocol 29, as it was on the wire. Frozen: never change it.
#[derive(Deserialize)]
struct HelloReplyV29 {
    version: u16,
    node_id: NodeId,
    epoch: u64,
    refused: Option<String>,
    nonce: Nonce,
    proof: Proof,
}

impl HelloReply {
    /// Reads a reply of any version this build knows (29: the server's newest is its
    /// `version`).
    pub fn decode_any(bytes: &[u8]) -> Result<HelloReply, crate::codec::DecodeError> {
        crate::codec::decode::<HelloReply>(bytes).or_else(|e| {
            let old = crate::codec::decode::<HelloReplyV29>(bytes).map_err(|_| e)?;
            Ok(HelloReply {
                version: old.version,
                node_id: old.node_id,
                epoch: old.epoch,
                refused: old.refused,
                nonce: old.nonce,
                proof: old.proof,
                newest: old.version,
            })
        })
    }
}

/// The client's proof, third message of a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Auth {
    pub proof: Proof,
}

/// The server's verdict on `Auth`; after it (when not refused) every frame carries a tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthReply {
    pub refused: Option<String>,
}

/// Which partition a request is for, and which partition sent it. 0 is "the server itself"
/// as a target (admin requests) and "not a partition" (a client, a CLI) as a source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    pub target: PartitionId,
    pub source: PartitionId,
}

impl Endpoints {
    /// A request from a client (or a server acting as one) to partition `target`.
    #[must_use]
    pub fn to(target: PartitionId) -> Endpoints {
        Endpoints {
            target,
            source: PartitionId::SERVER,
        }
    }

    /// A request to the server itself rather than one of its partitions.
    pub const SERVER: Endpoints = Endpoints {
        target: PartitionId::SERVER,
        source: PartitionId::SERVER,
    };
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFrame {
    pub id: u64,
    /// Epoch of the sender's cluster map, so the receiver can redirect or ask for the newer map.
    pub epoch: u64,
    pub ends: Endpoints,
    pub caller: Caller,
    pub body: Request,
}

/// A `RequestFrame` as a connection with a client key decodes it: its body can only be a
/// client's or a server request (`FromClient`), so a peer's or administrator's request from a
/// client fails to decode. Same bytes as `RequestFrame` for what it can hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientFrame {
    pub id: u64,
    pub epoch: u64,
    pub ends: Endpoints,
    pub caller: Caller,
    pub body: FromClient,
}

impl From<ClientFrame> for RequestFrame {
    fn from(f: ClientFrame) -> RequestFrame {
        RequestFrame {
            id: f.id,
            epoch: f.epoch,
            ends: f.ends,
            caller: f.caller,
            body: f.body.into(),
        }
    }
}

/// `RequestFrame` by reference, for encoding without copying the caller or the body (a write
/// carries up to 4 MiB). Its encoding is byte-for-byte that of `RequestFrame`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RequestFrameRef<'a> {
    pub id: u64,
    pub epoch: u64,
    pub ends: Endpoints,
    pub caller: &'a Caller,
    pub body: &'a Request,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseFrame {
    pub id: u64,
    pub result: Result<Response, WireError>,
}

/// The first protocol version that knows `WireError::QuotaExceeded`.
pub const QUOTA_ERRORS_SINCE: u16 = 37;

impl ResponseFrame {
    /// How many bytes its encoding is likely to take (an error's: a few hundred).
    #[must_use]
    pub fn size_hint(&self) -> usize {
        self.result.as_ref().map_or(256, Response::size_hint)
    }

    /// The frame as a peer speaking `version` is sent it: an error it does not know
    /// becomes the nearest one it does (`QuotaExceeded`: `NoSpace`, ENOSPC, before 37),
    /// and an error meant to stay inside a server (`QuotaShort`, `DirUndecided`) becomes
    /// `Busy`.
    #[must_use]
    pub fn for_version(mut self, version: u16) -> ResponseFrame {
        match &self.result {
            Err(WireError::QuotaExceeded) if version < QUOTA_ERRORS_SINCE => {
                self.result = Err(WireError::NoSpace);
            }
            Err(WireError::CrossDevice(m)) if version < CROSS_DEVICE_SINCE => {
                self.result = Err(WireError::NotSupported(m.clone()));
            }
            Err(WireError::QuotaShort { .. } | WireError::DirUndecided { .. }) => {
                self.result = Err(WireError::Busy);
            }
            _ => {}
        }
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Echo(#[serde(with = "serde_bytes")] Vec<u8>),
    Unit,
    Attr(Inode),
    Attrs(Vec<Result<Inode, WireError>>),
    Fetched {
        inode: Inode,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    DirPage {
        entries: Vec<DirEntry>,
        /// More entries in this shard after this name.
        next: Option<String>,
        /// The serving shard ends before this hash (`None`: at the end of the hash space);
        /// a listing continues there once `next` is `None`.
        shard_end: Option<u64>,
        /// Entries still being created (by a change spanning partitions) were left out: a
        /// name missing from this page may exist for a client already told so.
        hidden: bool,
        /// The directory's map, from its home once it is split.
        map: Option<Box<ShardMap>>,
    },
    ShardMap(Box<ShardMap>),
    Data {
        inode: Option<Inode>,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    Link(String),
    /// A chunk read (`ReadChunk`) met an erasure-coded chunk: its record, from which the
    /// reader asks the fragments' servers (docs/redundancy.md).
    Coded(Box<crate::ec_layout::CodedChunk>),
    /// Coded chunks of a partition (`AdminRequest::FsckCoded`): (inode, chunk, record).
    CodedChunks(Vec<(InodeId, u64, crate::ec_layout::CodedChunk)>),
    /// A partition's kept fsstats (`AdminRequest::KeptStats`): `None` while it has not
    /// counted its files yet; and its pieces of split directories (path, entries here).
    KeptStats {
        /// Boxed: a response travels in many futures, and this one is large.
        stats: Option<Box<crate::fsstats::FsStats>>,
        split_dirs: Vec<(String, u64)>,
    },
    /// Fragments kept by a server (`AdminRequest::FsckFragments`): (inode, chunk, index,
    /// generation, whether its checksum holds).
    Fragments(Vec<(InodeId, u64, u8, u32, bool)>),
    /// A capability for a file's chunks, and how long it is good for (`valid_ms`, so that
    /// a client need not trust its clock to agree with the servers').
    Granted {
        cap: crate::auth::Capability,
        valid_ms: u64,
    },
    StatFs(StatFs),
    /// Attributes with the lease granted (0: not subscribed).
    AttrLease {
        inode: Inode,
        lease_ms: u64,
    },
    Exported {
        entries: Vec<ExportedEntry>,
        next: Option<String>,
    },
    Counters(CounterSnapshot),
    Map(Box<ClusterMap>),
    FsckDirs(Vec<FsckDir>),
    FsckEntries {
        entries: Vec<FsckEntry>,
        next: Option<String>,
    },
    FsckBlocks(Vec<(InodeId, u64)>),
    Block(Option<u64>),
    /// A copy's last applied batch (`None` while it is receiving a whole copy), the hash
    /// chain of its batches up to it (equal numbers over different histories differ here),
    /// and the term of its last batch: the map epoch its primary was opened under. Copies
    /// are ordered by (term, batch), newest term first, as Raft orders logs.
    ReplicaState {
        seq: Option<u64>,
        chain: u64,
        term: u64,
    },
    /// A page of a replica's keys (empty: no more).
    ReplicaPage(Vec<ReplOp>),
    /// A backup cannot apply a replicated batch: it lacks batches its primary counts as
    /// acknowledged (it lost its disk), holds another history, or is receiving a whole copy
    /// (`next` None). The primary then copies the whole partition to it
    /// (docs/replication.md). An answer of the replication protocol, not an error: no
    /// client ever sees it.
    ReplicaGap {
        next: Option<u64>,
    },
    ReplicaDigest {
        /// Last applied batch (None: receiving a whole copy).
        seq: Option<u64>,
        keys: u64,
        /// xxh3 of every (space, key, value) but the sequence number itself.
        digest: u64,
        /// Blocks of this copy that fail their checksum (ino, block), at most 64.
        corrupt: Vec<(InodeId, u64)>,
        /// Metadata records of this copy that fail their checksum (space code, key), at
        /// most 64.
        corrupt_records: Vec<(u8, serde_bytes::ByteBuf)>,
    },
    /// A backup's intact copy of a block (None: it has no such block).
    BlockCopy(Option<serde_bytes::ByteBuf>),
    /// A backup's intact copy of a metadata record (None: none, or damaged there too).
    RecordCopy(Option<serde_bytes::ByteBuf>),
    /// openraft's response, postcard-encoded.
    Raft(#[serde(with = "serde_bytes")] Vec<u8>),
    /// After a change of entries (create, symlink, mknod, mkdir, unlink, rmdir): the new
    /// inode, if one was made, and the parent directory's attributes after the change (its
    /// new times and link count) when its partition sent them back, so a client may cache
    /// them instead of asking again.
    Changed {
        inode: Option<Inode>,
        parent: Option<Inode>,
    },
    /// The destination after a `CopyRange`, and how many bytes were copied.
    Copied {
        inode: Inode,
        bytes: u64,
    },
    /// `granted`: the sender may serve for the lease period counted from when it sent the
    /// request. `epoch`: the leader's map epoch (a sender behind it is not granted).
    Lease {
        granted: bool,
        epoch: u64,
    },
    /// (partition, last applied batch; None while a whole copy is arriving) of every copy a
    /// server holds, primary or backup.
    Seqs(Vec<(PartitionId, Option<u64>)>),
    /// `PeerRequest::LendReads` granted: the copy may answer reads for `valid_ms` from when
    /// it asked, once it has applied batch `seq` (every write acknowledged before the grant).
    ReadsLent {
        seq: u64,
        valid_ms: u64,
    },
    /// A yes or no (`PeerRequest::KeepsFragments`, `PeerRequest::FragmentNamed`).
    Bool(bool),
    /// The answers to a `ReplicaRequest::Bundle`, one per item, in its order.
    Bundle(Vec<Result<Response, WireError>>),
    /// A change sent with `visible` (`ClientRequest::Once`), answered once applied: its
    /// answer, and the incarnation of the primary that applied it (what `SyncPartition`
    /// checks).
    Applied {
        answer: Box<Response>,
        incarnation: u64,
    },
    /// A read's answer, with the lease it asked for (`ClientRequest::Leased`) if granted:
    /// good for `valid_ms` from when the request was sent. Not granted while a change
    /// of the directory by another client is under way.
    /// `answer` may be an error: a name that does not exist is leased too (a negative
    /// entry).
    Leased {
        answer: Result<Box<Response>, WireError>,
        lease: Option<LeaseGrant>,
    },
    /// Inode numbers reserved for the client (`ClientRequest::ReserveIds`): `count`
    /// numbers from `first` on.
    Ids {
        first: InodeId,
        count: u32,
    },
    /// The leases a server wants back (`ServerRequest::LeasePoll`).
    Recalls(Vec<crate::request_parts::LeaseKey>),
    /// Per key of a `LeaseRenew`, whether it was renewed.
    Renewed(Vec<bool>),
    /// A destination's answer to an exchanging `RenamePrepare`: the entry it gives the
    /// source in return, with its chunk-0 blocks.
    Exchanged {
        inode: Inode,
        blocks: Vec<(u64, serde_bytes::ByteBuf)>,
    },
    /// The answer to `ClientRequest::Lock`.
    Lock(crate::locks::LockAnswer),
    /// A copy's bucket sums (`ReplicaRequest::ReplicaSums`).
    Sums(Vec<u64>),
    /// The keys of one bucket with a hash of each value (`ReplicaRequest::ReplicaBucket`).
    BucketKeys(Vec<(serde_bytes::ByteBuf, u64)>),
    /// Directories read far more than changed (`ClientRequest::IndexCandidates`): path,
    /// reads in the window, milliseconds since its last change (`None`: none seen since
    /// the partition opened).
    IndexCandidates(Vec<(String, u64, Option<u64>)>),
    /// The outcome a partition recorded of a change (`ClientRequest::Recorded`), if any.
    Recorded(Option<Box<Response>>),
    /// Directories read far more than changed, with their readers
    /// (`ClientRequest::IndexReaders`). Protocol 33.
    IndexReaders(Vec<HotDir>),
    /// How long a server took to answer clients (`ServerRequest::GetLatencies`). Protocol 34.
    Latencies(LatencyHistogram),
    /// A partition's part of the quotas' usage (`AdminRequest::QuotaUsage`): the map epoch
    /// whose quotas it counts, and (quota id, names, bytes) for each. Protocol 37.
    QuotaUsage {
        epoch: u64,
        usage: Vec<(u64, u64, u64)>,
    },
    /// A partition's entry in a quota's ledger, or the allowance it holds: (names, bytes,
    /// version) (`PeerRequest::QuotaAsk`, `PeerRequest::QuotaSettle`). Protocol 37.
    QuotaLedger((u64, u64, u64)),
}

/// A server's answers to clients by how long they took, since it started (long polls
/// apart: `LONG_POLL_OPS`): `counts[i]` took at most `bounds_us[i]` (and more than the
/// bound before), the last count (one more than the bounds) took longer than every bound.
/// Two of them a few seconds apart give that interval's percentiles (the status page's
/// per-server p50 and p99).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    pub bounds_us: Vec<u64>,
    pub counts: Vec<u64>,
}

/// A directory a partition saw read far more than changed (`Response::IndexReaders`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotDir {
    pub path: String,
    /// Reads of its names and listing in the partition's popularity window.
    pub reads: u64,
    /// Milliseconds since its last change (`None`: none seen since the partition opened).
    pub since_ms: Option<u64>,
    /// Distinct clients that read it in the window, as far as their reads name them
    /// (a mount's do: `Leased`, `ReadAs`); at most `limits::HOT_DIR_READERS_MAX`.
    pub readers: u32,
}

impl Response {
    /// Bytes the encoded response needs, roughly: payload plus room for headers.
    #[must_use]
    pub fn size_hint(&self) -> usize {
        const HEADERS: usize = 256;
        match self {
            Response::Echo(d)
            | Response::Fetched { data: d, .. }
            | Response::Data { data: d, .. } => d.len() + HEADERS,
            Response::DirPage { entries, .. } => entries.len() * 96 + HEADERS,
            Response::Leased {
                answer: Ok(answer), ..
            }
            | Response::Applied { answer, .. } => answer.size_hint() + HEADERS,
            _ => HEADERS,
        }
    }
}

/// A directory lease granted with a read (`Response::Leased`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub key: crate::request_parts::LeaseKey,
    /// Good for this long from when the read was sent, by the client's clock.
    pub valid_ms: u64,
    /// An exclusive lease: the directory's attributes as the grant found them (the
    /// holder may create names there: docs/fuse.md "Write-behind").
    pub exclusive: Option<Inode>,
}

#[cfg(test)]
mod size_tests {
    /// Responses and requests travel inside many nested futures: a large variant makes
    /// every one of them larger, and a server's debug build overflowed its stack when a
    /// response grew by a whole `FsStats` (boxed since).
    #[test]
    fn messages_stay_small() {
        let (req, resp) = (
            std::mem::size_of::<crate::Request>(),
            std::mem::size_of::<super::Response>(),
        );
        eprintln!("Request {req} bytes, Response {resp} bytes");
        assert!(
            resp <= 256,
            "Response is {resp} bytes: box the large variant"
        );
        assert!(req <= 512, "Request is {req} bytes: box the large variant");
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;
    use crate::codec::{decode, encode};

    fn hello(version: u16, min_version: u16) -> Hello {
        Hello {
            magic: MAGIC,
            version,
            peer: PeerKind::Server { node_id: NodeId(3) },
            key_id: None,
            nonce: [9; 32],
            zone: "a".into(),
            min_version,
        }
    }

    #[test]
    fn versions_meet_at_the_newest_both_speak() {
        assert_eq!(
            negotiate((PROTOCOL_MIN, PROTOCOL_VERSION)),
            Some(PROTOCOL_VERSION)
        );
        assert_eq!(negotiate((29, 29)), Some(29), "a peer of 29");
        assert_eq!(negotiate((29, 30)), Some(30), "a peer of 30");
        assert_eq!(negotiate((29, 40)), Some(40), "a peer of 40");
        let newer = PROTOCOL_VERSION + 9;
        assert_eq!(
            negotiate((29, newer)),
            Some(PROTOCOL_VERSION),
            "a newer peer"
        );
        assert_eq!(
            negotiate((PROTOCOL_VERSION + 1, newer)),
            None,
            "a peer that no longer speaks ours"
        );
        assert_eq!(negotiate((20, 28)), None, "a peer older than our oldest");
    }

    /// Peers of 29 read hellos and replies of 30 as their own, and 30 reads theirs.
    #[test]
    fn hellos_and_replies_of_29_and_30_read_each_other() {
        let new = hello(30, 29);
        let bytes = encode(&new).unwrap_or_default();
        let as_29 = decode::<HelloV29>(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((as_29.version, as_29.zone.as_str()), (30, "a"));
        assert_eq!(Hello::decode_any(&bytes).ok(), Some(new.clone()));
        // A hello of 29 is a hello of 30 without its last field.
        let old = hello(29, 29);
        let mut bytes = encode(&old).unwrap_or_default();
        bytes.pop();
        assert!(decode::<Hello>(&bytes).is_err());
        assert_eq!(Hello::decode_any(&bytes).ok(), Some(old));
        let reply = HelloReply {
            version: 29,
            node_id: NodeId(2),
            epoch: 7,
            refused: None,
            nonce: [1; 32],
            proof: [2; 32],
            newest: 29,
        };
        let mut bytes = encode(&reply).unwrap_or_default();
        let as_29 = decode::<HelloReplyV29>(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((as_29.version, as_29.epoch), (29, 7));
        bytes.pop();
        assert_eq!(HelloReply::decode_any(&bytes).ok(), Some(reply));
        assert!(Hello::decode_any(&[1, 2, 3]).is_err());
    }

    /// Protocol 34's cluster map, frozen: what a peer of 34 decodes.
    #[derive(Debug, PartialEq, Deserialize)]
    struct ClusterMapV34 {
        epoch: u64,
        vnodes_per_partition: u32,
        chunk_size_bytes: u64,
        inline_max_bytes: u64,
        replication: u32,
        nodes: Vec<myriad_placement::NodeInfo>,
        partitions: Vec<myriad_placement::PartitionInfo>,
        policies: Vec<myriad_placement::Policy>,
        retired_partitions_max: u32,
    }

    fn map_with_ext() -> ClusterMap {
        let mut map = ClusterMap::new(7, &["h1:1".to_string(), "h2:2".to_string()]);
        map.ext.protocol_floor = 35;
        map
    }

    /// A map (with an extension) to a peer of 34 is 34's map byte for byte, and the whole
    /// of it to a peer of 35, alone or in a message.
    #[test]
    fn a_map_carries_its_extension_only_to_peers_that_know_it() {
        use crate::versioned::scope;
        let map = map_with_ext();
        let with_none = ClusterMap {
            ext: myriad_placement::MapExt::default(),
            ..map.clone()
        };
        let for_34 = scope(34, || encode(&map)).unwrap_or_default();
        let for_35 = scope(35, || encode(&map)).unwrap_or_default();
        assert!(for_35.len() > for_34.len(), "the extension is appended");
        assert_eq!(&for_35[..for_34.len()], &for_34[..], "and only appended");
        let as_34 = decode::<ClusterMapV34>(&for_34).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (as_34.epoch, as_34.nodes.len(), as_34.partitions.len()),
            (7, map.nodes.len(), map.partitions.len())
        );
        assert_eq!(
            scope(34, || decode::<ClusterMap>(&for_34)).ok(),
            Some(with_none.clone())
        );
        assert_eq!(
            scope(35, || decode::<ClusterMap>(&for_35)).ok(),
            Some(map.clone())
        );
        // In a reply, as in every message that carries a map.
        let reply = Response::Map(Box::new(map.clone()));
        let r34 = scope(34, || encode(&reply)).unwrap_or_default();
        let r35 = scope(35, || encode(&reply)).unwrap_or_default();
        assert_eq!(
            scope(34, || decode::<Response>(&r34)).ok(),
            Some(Response::Map(Box::new(with_none)))
        );
        assert_eq!(
            scope(35, || decode::<Response>(&r35)).ok(),
            Some(reply.clone())
        );
        // Read for the wrong version, a frame is malformed: never made-up settings.
        assert!(scope(35, || decode::<Response>(&r34)).is_err());
        // Outside any scope: as 34 (what the Raft log holds until the protocol floor).
        assert_eq!(encode(&reply).unwrap_or_default(), r34);
    }
}

#[cfg(test)]
mod older_peer_tests {
    use super::*;

    /// An answer a peer's version cannot read is sent as the one it knew for the case.
    #[test]
    fn an_older_peer_is_sent_what_its_version_reads() {
        let frame = |e: WireError| ResponseFrame {
            id: 1,
            result: Err(e),
        };
        let across = || WireError::CrossDevice("across".into());
        assert_eq!(
            frame(across()).for_version(CROSS_DEVICE_SINCE - 1).result,
            Err(WireError::NotSupported("across".into()))
        );
        assert_eq!(
            frame(across()).for_version(CROSS_DEVICE_SINCE).result,
            Err(across())
        );
        assert_eq!(
            frame(WireError::QuotaExceeded)
                .for_version(QUOTA_ERRORS_SINCE - 1)
                .result,
            Err(WireError::NoSpace)
        );
    }
}
