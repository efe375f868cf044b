//! Which reply each request gets: one constructor per request a client asks with, returning
//! the request and how to read its answer (`reply.rs`). A caller that builds its request
//! here cannot read the answer as another request's reply.

use myriad_placement::ClusterMap;

use crate::auth::Capability;
use crate::reply::{
    Ask, AttrLease, Attrs, Bundle, Bytes, ChunkRead, CodedChunks, Copied, DirPage, Echoed,
    Exported, Fetched, FragmentsKept, FsckBlocks, FsckDirs, FsckEntries, Granted, IndexCandidates,
    IndexReaders, KeptStats, Leased, LockTested, QuotaLedger, QuotaUsage, RaftAnswer, ReadsLent,
    Recorded, ReplicaDigest, ReplicaPage, Target,
};
use crate::{
    AdminRequest, Caller, ClientRequest, CopyRange, CounterSnapshot, DirTouchItem, Envelope,
    FileKind, Inode, InodeId, InodeOp, OnceId, PeerRequest, RaftRpc, ReplicaRequest, Request,
    SentOnce, ServerRequest, SetAttr, ShardMap, StatFs, XattrMode,
};

pub fn echo(payload: Vec<u8>) -> Ask<Echoed> {
    Ask::new(ClientRequest::Echo(payload))
}

pub fn stat(path: &str) -> Ask<Inode> {
    Ask::new(ClientRequest::Stat {
        path: path.to_string(),
    })
}

/// `path`'s attributes for an open that will write it (`ReadOnly` in a frozen tree).
pub fn open_write(path: &str) -> Ask<Inode> {
    Ask::new(ClientRequest::OpenWrite {
        path: path.to_string(),
    })
}

pub fn stat_many(dir: &str, names: Vec<String>) -> Ask<Attrs> {
    Ask::new(ClientRequest::StatMany {
        dir: dir.to_string(),
        names,
    })
}

pub fn fetch(path: &str, max_bytes: u64) -> Ask<Fetched> {
    Ask::new(ClientRequest::Fetch {
        path: path.to_string(),
        max_bytes,
    })
}

/// A page of `path`'s listing from hash `from` (after name `after`), at most `limit`.
pub fn read_dir(path: &str, (from, after): (u64, Option<String>), limit: u32) -> Ask<DirPage> {
    Ask::new(ClientRequest::ReadDir {
        path: path.to_string(),
        from,
        after,
        limit,
    })
}

/// `len` 0: the open file's attributes alone, by inode.
pub fn read(path: &str, ino: InodeId, offset: u64, len: u64) -> Ask<Bytes> {
    Ask::new(ClientRequest::Read {
        path: path.to_string(),
        ino,
        offset,
        len,
    })
}

pub fn read_chunk(
    ino: InodeId,
    chunk: u64,
    offset: u64,
    len: u64,
    cap: Option<Capability>,
) -> Ask<ChunkRead> {
    Ask::new(ClientRequest::ReadChunk {
        ino,
        chunk,
        offset,
        len,
        cap,
    })
}

pub fn create(
    path: &str,
    (mode, exclusive): (u32, bool),
    data: Vec<u8>,
    durable: bool,
    ino: Option<InodeId>,
) -> Ask<Inode> {
    Ask::new(ClientRequest::Create(crate::requests::Create {
        path: path.to_string(),
        mode,
        exclusive,
        data,
        durable,
        ino,
        data_at: None,
        then: None,
    }))
}

pub fn write_chunk(
    ino: InodeId,
    (chunk, offset): (u64, u64),
    data: Vec<u8>,
    cap: Option<Capability>,
) -> Ask<()> {
    Ask::new(ClientRequest::WriteChunk {
        ino,
        chunk,
        offset,
        data,
        cap,
    })
}

pub fn write(path: &str, ino: InodeId, offset: u64, data: Vec<u8>, opened: bool) -> Ask<Inode> {
    Ask::new(ClientRequest::Write(crate::requests::Write {
        path: path.to_string(),
        ino,
        offset,
        data,
        opened,
    }))
}

pub fn extend_size(path: &str, ino: InodeId, size: u64, opened: bool) -> Ask<Inode> {
    Ask::new(ClientRequest::ExtendSize(crate::requests::ExtendSize {
        path: path.to_string(),
        ino,
        size,
        opened,
    }))
}

pub fn truncate(path: &str, ino: InodeId, size: u64, opened: bool) -> Ask<Inode> {
    Ask::new(ClientRequest::Truncate(crate::requests::Truncate {
        path: path.to_string(),
        ino,
        size,
        opened,
    }))
}

pub fn mkdir(path: &str, mode: u32, shards: u32) -> Ask<Inode> {
    Ask::new(ClientRequest::Mkdir {
        path: path.to_string(),
        mode,
        shards,
    })
}

pub fn symlink(path: &str, target: &str) -> Ask<Inode> {
    Ask::new(ClientRequest::Symlink {
        path: path.to_string(),
        target: target.to_string(),
    })
}

pub fn link(from: &str, to: &str) -> Ask<Inode> {
    Ask::new(ClientRequest::Link {
        from: from.to_string(),
        to: to.to_string(),
    })
}

pub fn mknod(path: &str, kind: FileKind, mode: u32, rdev: u64) -> Ask<Inode> {
    Ask::new(ClientRequest::Mknod {
        path: path.to_string(),
        kind,
        mode,
        rdev,
    })
}

pub fn set_xattr(path: &str, name: &str, value: Option<&[u8]>, mode: XattrMode) -> Ask<Inode> {
    Ask::new(ClientRequest::SetXattr {
        path: path.to_string(),
        name: name.to_string(),
        value: value.map(|v| serde_bytes::ByteBuf::from(v.to_vec())),
        mode,
    })
}

pub fn set_attr(path: &str, set: SetAttr) -> Ask<Inode> {
    Ask::new(ClientRequest::SetAttr {
        path: path.to_string(),
        set,
    })
}

pub fn readlink(path: &str) -> Ask<Target> {
    Ask::new(ClientRequest::Readlink {
        path: path.to_string(),
    })
}

pub fn grant(path: &str, ino: InodeId, write: bool, opened: bool) -> Ask<Granted> {
    Ask::new(ClientRequest::Grant {
        path: path.to_string(),
        ino,
        write,
        opened,
    })
}

pub fn copy_range(copy: CopyRange) -> Ask<Copied> {
    Ask::new(ClientRequest::CopyRange(copy))
}

/// `request` (a read of a name or listing) with a lease on its directory for `holder`.
/// Its own answer stays a `Response` inside: what it is depends on `request`.
pub fn leased(holder: u64, request: ClientRequest, exclusive: bool) -> Ask<Leased, Envelope> {
    Ask::new(Envelope::Leased {
        holder,
        request,
        exclusive,
    })
}

/// Changes sent once, applied in order (a write-behind journal's), made at `times`.
pub fn batch(ops: Vec<SentOnce>, times: Vec<i64>) -> Ask<Bundle, Envelope> {
    Ask::new(Envelope::Batch { ops, times })
}

/// A file-lock request (docs/fuse.md "File locks between mounts").
pub fn lock(request: crate::locks::LockRequest) -> Ask<crate::locks::LockAnswer> {
    Ask::new(ClientRequest::Lock(request))
}

/// Whether a lock `owner` asks for on `start..=end` of `ino` would conflict.
pub fn lock_test(
    ino: InodeId,
    owner: crate::locks::LockOwner,
    (start, end): (u64, u64),
    kind: crate::locks::LockKind,
) -> Ask<LockTested> {
    Ask::new(ClientRequest::Lock(crate::locks::LockRequest::Test {
        ino,
        owner,
        start,
        end,
        kind,
    }))
}

/// The outcome a partition recorded of change `id` (`change`), if any.
pub fn recorded(id: OnceId, change: ClientRequest) -> Ask<Recorded, Envelope> {
    Ask::new(Envelope::Recorded {
        id,
        request: change,
    })
}

pub fn index_candidates(min_reads: u64, quiet_ms: u64) -> Ask<IndexCandidates> {
    Ask::new(ClientRequest::IndexCandidates {
        min_reads,
        quiet_ms,
    })
}

/// Protocol 33.
pub fn index_readers(min_reads: u64, quiet_ms: u64) -> Ask<IndexReaders> {
    Ask::new(ClientRequest::IndexReaders {
        min_reads,
        quiet_ms,
    })
}

/// One server's disks and tiers.
pub fn server_statfs() -> Ask<StatFs, Request> {
    Ask::new(Request::Server(ServerRequest::StatFs))
}

pub fn counters() -> Ask<CounterSnapshot, Request> {
    Ask::new(Request::Server(ServerRequest::GetCounters))
}

/// One server's answers to clients by how long they took (protocol 34).
pub fn latencies() -> Ask<crate::LatencyHistogram, Request> {
    Ask::new(Request::Server(ServerRequest::GetLatencies))
}

pub fn get_map() -> Ask<Box<ClusterMap>, Request> {
    Ask::new(Request::Server(ServerRequest::GetMap))
}

pub fn fsck_replica() -> Ask<ReplicaDigest, Request> {
    Ask::new(Request::Admin(AdminRequest::FsckReplica))
}

/// Bytes of fragment `index` of a coded chunk (docs/redundancy.md).
pub fn read_fragment(
    (ino, chunk, index): (InodeId, u64, u8),
    generation: u32,
    (offset, len): (u32, u32),
    cap: Capability,
) -> Ask<Bytes, Request> {
    Ask::new(Request::Server(ServerRequest::ReadFragment {
        ino,
        chunk,
        index,
        generation,
        offset,
        len,
        cap,
    }))
}

pub fn fsck_fragments(
    after: Option<(InodeId, u64, u8, u32)>,
    limit: u32,
) -> Ask<FragmentsKept, Request> {
    Ask::new(Request::Admin(AdminRequest::FsckFragments { after, limit }))
}

pub fn fsck_coded(after: Option<(InodeId, u64)>, limit: u32) -> Ask<CodedChunks, Request> {
    Ask::new(Request::Admin(AdminRequest::FsckCoded { after, limit }))
}

pub fn fsck_entries(dir: &str, after: Option<String>, limit: u32) -> Ask<FsckEntries, Request> {
    Ask::new(Request::Admin(AdminRequest::FsckEntries {
        dir: dir.to_string(),
        after,
        limit,
    }))
}

pub fn fsck_dirs(after: Option<String>, limit: u32) -> Ask<FsckDirs, Request> {
    Ask::new(Request::Admin(AdminRequest::FsckDirs { after, limit }))
}

pub fn fsck_blocks(after: Option<InodeId>, limit: u32) -> Ask<FsckBlocks, Request> {
    Ask::new(Request::Admin(AdminRequest::FsckBlocks { after, limit }))
}

pub fn kept_stats() -> Ask<KeptStats, Request> {
    Ask::new(Request::Admin(AdminRequest::KeptStats))
}

pub fn quota_usage() -> Ask<QuotaUsage, Request> {
    Ask::new(Request::Admin(AdminRequest::QuotaUsage))
}

pub fn quota_ask(quota: u64, (files, bytes): (u64, u64), held: u64) -> Ask<QuotaLedger, Request> {
    Ask::new(Request::Peer(PeerRequest::QuotaAsk {
        quota,
        files,
        bytes,
        held,
    }))
}

pub fn quota_settle(quota: u64, ledger: (u64, u64, u64)) -> Ask<QuotaLedger, Request> {
    Ask::new(Request::Peer(PeerRequest::QuotaSettle { quota, ledger }))
}

pub fn quota_report(quota: u64) -> Ask<QuotaLedger, Request> {
    Ask::new(Request::Peer(PeerRequest::QuotaReport { quota }))
}

// ---- between servers ----

/// The attributes of entry `path`, subscribing to its changes if `subscribe` (ancestor
/// replicas).
pub fn get_attrs(path: &str, subscribe: bool, seq: u64) -> Ask<AttrLease, Request> {
    Ask::new(Request::Peer(PeerRequest::GetAttrs {
        path: path.to_string(),
        subscribe,
        seq,
    }))
}

/// A loan of reads to this server's copy of the partition asked (docs/zones.md).
pub fn lend_reads() -> Ask<ReadsLent, Request> {
    Ask::new(Request::Peer(PeerRequest::LendReads))
}

/// A Raft message (`rpc` names its kind), postcard-encoded both ways.
pub fn raft(rpc: RaftRpc, payload: Vec<u8>) -> Ask<RaftAnswer, Request> {
    Ask::new(Request::Peer(PeerRequest::Raft { rpc, payload }))
}

/// The attributes of inode object `ino` at its home (a hard-linked file).
pub fn stat_inode(ino: InodeId, caller: Caller) -> Ask<Inode, Request> {
    Ask::new(Request::Peer(PeerRequest::AtInode {
        ino,
        caller,
        op: InodeOp::Stat,
    }))
}

/// Inode object `ino`'s attributes for a removal of one of its names with the trash on
/// (`InodeOp::ClaimRemoval`: `nlink` less the removals under way).
pub fn claim_removal(ino: InodeId) -> Ask<Inode, Request> {
    Ask::new(Request::Peer(PeerRequest::AtInode {
        ino,
        caller: Caller::root(),
        op: InodeOp::ClaimRemoval,
    }))
}

/// Changes the link count of inode object `ino` by `delta`: its attributes after. A count
/// that reaches zero frees the file and answers nothing (`Unit`), which this ask reads as
/// a protocol error: a caller that may drop the last link (an unlink's `drop_link`) sends
/// the request as it is and looks only for an error.
pub fn adjust_links(ino: InodeId, delta: i64) -> Ask<Inode, Request> {
    Ask::new(Request::Peer(PeerRequest::AdjustLinks { ino, delta }))
}

/// A page of the entries of frozen directory `path` (frozen by `txid`).
pub fn dir_export(path: &str, txid: u64, after: Option<String>) -> Ask<Exported, Request> {
    Ask::new(Request::Peer(PeerRequest::DirExport {
        path: path.to_string(),
        txid,
        after,
    }))
}

/// Directory touches: each directory's attributes after (`NotFound`: none there).
pub fn dir_touches(touches: Vec<DirTouchItem>) -> Ask<Attrs, Request> {
    Ask::new(Request::Peer(PeerRequest::DirTouches { touches }))
}

/// The shard map of directory `dir`, from its home.
pub fn get_shard_map(dir: &str) -> Ask<Box<ShardMap>> {
    Ask::new(ClientRequest::GetShardMap {
        dir: dir.to_string(),
    })
}

/// A page of a copy's keys of space `space` after key `after`.
pub fn replica_read(space: u8, after: Option<Vec<u8>>) -> Ask<ReplicaPage, Request> {
    Ask::new(Request::Replica(ReplicaRequest::ReplicaRead {
        space,
        after: after.map(serde_bytes::ByteBuf::from),
    }))
}
