//! Typed replies (issue 50): the wire carries one `Response` enum, but a caller asks with
//! an `Ask<R>` (built in `ask.rs`, the one place that says which reply each request gets)
//! and is handed an `R`. Telling a reply from any other response happens here, once per
//! reply type, instead of a "that was not the answer I expected" arm at every call site.

use std::fmt::Write as _;
use std::marker::PhantomData;

use myriad_placement::ClusterMap;

use crate::auth::Capability;
use crate::ec_layout::CodedChunk;
use crate::message::{LeaseGrant, Response};
use crate::{CounterSnapshot, DirEntry, Inode, ShardMap, StatFs, WireError};

/// A type a request is answered with, taken out of the wire's `Response`.
pub trait Reply: Sized {
    /// What it is, for the error when a server answered something else.
    const WHAT: &'static str;
    /// The reply, or what the response was instead.
    fn take(r: Response) -> Result<Self, Other>;
}

/// A response that was not the reply asked for: its name (`Response::Link`: "Link").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Other(pub String);

impl Other {
    fn of(r: &Response) -> Self {
        Other(response_name(r))
    }
}

/// How to read the answer to one request: made only with the request itself (`Ask`), so a
/// response is never read as the reply of another request.
pub struct Answer<R>(PhantomData<fn() -> R>);

impl<R> Clone for Answer<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Answer<R> {}

impl<R: Reply> Answer<R> {
    /// The reply `r` carries; a protocol error if it is not an `R` (as the caller's error
    /// type: the wire's in a server, the client API's `FsError` in a client).
    pub fn of<E: From<WireError>>(self, r: Response) -> Result<R, E> {
        R::take(r).map_err(|Other(other)| {
            WireError::Protocol(format!("expected {}, the server answered {other}", R::WHAT)).into()
        })
    }
}

/// A request and how to read its answer.
pub struct Ask<R, Q = crate::ClientRequest> {
    pub request: Q,
    pub answer: Answer<R>,
}

impl<R, Q> Ask<R, Q> {
    pub(crate) fn new(request: Q) -> Self {
        Self {
            request,
            answer: Answer(PhantomData),
        }
    }
}

/// The variant's name alone (`Fetched`), without formatting what it carries.
#[must_use]
pub fn response_name(r: &Response) -> String {
    /// Keeps the leading name and stops the formatter at the first other character.
    struct Head(String);
    impl std::fmt::Write for Head {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for c in s.chars() {
                if !c.is_alphanumeric() {
                    return Err(std::fmt::Error);
                }
                self.0.push(c);
            }
            Ok(())
        }
    }
    let mut head = Head(String::new());
    let _ = write!(head, "{r:?}");
    head.0
}

/// A reply that is one kind of `Response`: `reply!(Type, "what it is", pattern => value)`.
macro_rules! reply {
    ($ty:ty, $what:literal, $pat:pat => $val:expr) => {
        impl Reply for $ty {
            const WHAT: &'static str = $what;
            fn take(r: Response) -> Result<Self, Other> {
                match r {
                    $pat => Ok($val),
                    other => Err(Other::of(&other)),
                }
            }
        }
    };
}

reply!((), "done", Response::Unit => ());

// A file's attributes: a change's new attributes, or what a lease kept of a fetch.
reply!(
    Inode,
    "attributes",
    Response::Attr(i) | Response::Changed { inode: Some(i), .. } | Response::Fetched { inode: i, .. }
        => i
);

/// A name's attributes and, for a small file, its contents (`ClientRequest::Fetch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub inode: Inode,
    pub data: Vec<u8>,
}

reply!(Fetched, "a fetch", Response::Fetched { inode, data } => Fetched { inode, data });

/// A page of a directory listing (`ClientRequest::ReadDir`; `Response::DirPage` says
/// what each part means).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirPage {
    pub entries: Vec<DirEntry>,
    pub next: Option<String>,
    pub shard_end: Option<u64>,
    pub hidden: bool,
    pub map: Option<Box<ShardMap>>,
}

reply!(DirPage, "a listing page", Response::DirPage {
    entries,
    next,
    shard_end,
    hidden,
    map,
} => DirPage {
    entries,
    next,
    shard_end,
    hidden,
    map,
});

/// Bytes read, and the file's attributes when the read was by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bytes {
    pub inode: Option<Inode>,
    pub data: Vec<u8>,
}

reply!(Bytes, "data", Response::Data { inode, data } => Bytes { inode, data });

/// A chunk read: its bytes, or the record of an erasure-coded chunk to read from its
/// fragments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkRead {
    Bytes(Bytes),
    Coded(Box<CodedChunk>),
}

impl Reply for ChunkRead {
    const WHAT: &'static str = "a chunk";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Coded(c) => Ok(ChunkRead::Coded(c)),
            other => Bytes::take(other).map(ChunkRead::Bytes),
        }
    }
}

/// The destination after a copy, and how many bytes were copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    pub inode: Inode,
    pub bytes: u64,
}

impl Reply for Copied {
    const WHAT: &'static str = "a copy";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Copied { inode, bytes } => Ok(Copied { inode, bytes }),
            other => Err(Other::of(&other)),
        }
    }
}

/// A capability for a file's chunks, good for `valid_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    pub cap: Capability,
    pub valid_ms: u64,
}

reply!(Granted, "a capability", Response::Granted { cap, valid_ms } => Granted { cap, valid_ms });

/// A read's answer with the directory lease asked for, if granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leased {
    pub answer: Result<Box<Response>, WireError>,
    pub lease: Option<LeaseGrant>,
}

reply!(Leased, "a leased answer", Response::Leased { answer, lease } => Leased { answer, lease });

/// A symbolic link's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target(pub String);

reply!(Target, "a link's target", Response::Link(t) => Target(t));

/// The bytes an echo sent back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Echoed(pub Vec<u8>);

reply!(Echoed, "an echo", Response::Echo(p) => Echoed(p));

/// The outcome a partition recorded of a change, if any (`Envelope::Recorded`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded(pub Option<Box<Response>>);

reply!(Recorded, "a recorded outcome", Response::Recorded(a) => Recorded(a));

/// Attributes of many names, one result each, in the order asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attrs(pub Vec<Result<Inode, WireError>>);

reply!(Attrs, "attributes of names", Response::Attrs(a) => Attrs(a));

/// The answers to a batch of changes, one each, in its order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle(pub Vec<Result<Response, WireError>>);

reply!(Bundle, "answers to a batch", Response::Bundle(a) => Bundle(a));

/// Directories read far more than changed: path, reads, milliseconds since a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexCandidates(pub Vec<(String, u64, Option<u64>)>);

/// Hot directories with their readers (`ClientRequest::IndexReaders`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexReaders(pub Vec<crate::HotDir>);

reply!(IndexCandidates, "index candidates", Response::IndexCandidates(c) => IndexCandidates(c));
reply!(IndexReaders, "hot directories with their readers", Response::IndexReaders(h) => IndexReaders(h));

reply!(StatFs, "a server's disks", Response::StatFs(s) => s);

reply!(CounterSnapshot, "counters", Response::Counters(c) => c);

reply!(crate::LatencyHistogram, "latencies", Response::Latencies(l) => l);

reply!(Box<ClusterMap>, "a cluster map", Response::Map(m) => m);

/// A copy's digest (`AdminRequest::FsckReplica`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaDigest {
    /// Last applied batch (None: receiving a whole copy).
    pub seq: Option<u64>,
    pub keys: u64,
    pub digest: u64,
    /// Blocks failing their checksum (ino, block).
    pub corrupt: Vec<(crate::InodeId, u64)>,
    /// Metadata records failing their checksum (space code, key).
    pub corrupt_records: Vec<(u8, Vec<u8>)>,
}

reply!(ReplicaDigest, "a copy's digest", Response::ReplicaDigest {
    seq,
    keys,
    digest,
    corrupt,
    corrupt_records,
} => ReplicaDigest {
    seq,
    keys,
    digest,
    corrupt,
    corrupt_records: corrupt_records
        .into_iter()
        .map(|(s, k)| (s, k.into_vec()))
        .collect(),
});

/// Fragments a server keeps: (inode, chunk, index, generation, whether intact).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentsKept(pub Vec<(crate::InodeId, u64, u8, u32, bool)>);

reply!(FragmentsKept, "a page of fragments", Response::Fragments(f) => FragmentsKept(f));

/// Coded chunks of a partition: (inode, chunk, record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodedChunks(pub Vec<(crate::InodeId, u64, CodedChunk)>);

reply!(CodedChunks, "a page of coded chunks", Response::CodedChunks(c) => CodedChunks(c));

/// A page of a directory's entries as fsck reads them, and where the next starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsckEntries {
    pub entries: Vec<crate::FsckEntry>,
    pub next: Option<String>,
}

reply!(FsckEntries, "a page of entries",
    Response::FsckEntries { entries, next }
        => FsckEntries { entries, next });

/// A page of the directories a partition holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsckDirs(pub Vec<crate::FsckDir>);

reply!(FsckDirs, "a page of directories", Response::FsckDirs(d) => FsckDirs(d));

/// A page of the blocks a partition holds: (inode, block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsckBlocks(pub Vec<(crate::InodeId, u64)>);

reply!(FsckBlocks, "a page of blocks", Response::FsckBlocks(b) => FsckBlocks(b));

/// A partition's kept fsstats (`None`: not counted yet) and its pieces of split
/// directories (path, entries here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptStats {
    pub stats: Option<Box<crate::fsstats::FsStats>>,
    pub split_dirs: Vec<(String, u64)>,
}

reply!(KeptStats, "kept fsstats",
    Response::KeptStats { stats, split_dirs }
        => KeptStats { stats, split_dirs });

/// A partition's part of the quotas' usage: the map epoch whose quotas it counts (0:
/// none yet), and (quota id, names, bytes) for each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaUsage {
    pub epoch: u64,
    pub usage: Vec<(u64, u64, u64)>,
}

reply!(QuotaUsage, "quotas' usage",
    Response::QuotaUsage { epoch, usage } => QuotaUsage { epoch, usage });

/// A partition's entry in a quota's ledger, or its allowance: (names, bytes, version).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaLedger(pub (u64, u64, u64));

reply!(QuotaLedger, "a quota's ledger entry", Response::QuotaLedger(l) => QuotaLedger(l));

/// An entry's attributes, with an ancestor lease of `lease_ms` (0: not subscribed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrLease {
    pub inode: Inode,
    pub lease_ms: u64,
}

reply!(AttrLease, "attributes with a lease",
    Response::AttrLease { inode, lease_ms }
        => AttrLease { inode, lease_ms });

/// A page of a frozen directory's entries, exported for a move or a removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    pub entries: Vec<crate::ExportedEntry>,
    pub next: Option<String>,
}

reply!(Exported, "exported entries",
    Response::Exported { entries, next }
        => Exported { entries, next });

reply!(Box<ShardMap>, "a shard map", Response::ShardMap(m) => m);

/// A page of a copy's keys (empty: no more).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaPage(pub Vec<crate::ReplOp>);

reply!(ReplicaPage, "a page of a copy", Response::ReplicaPage(ops) => ReplicaPage(ops));

/// A loan of reads: the copy may answer reads for `valid_ms` once it applied batch `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadsLent {
    pub seq: u64,
    pub valid_ms: u64,
}

reply!(ReadsLent, "a loan of reads",
    Response::ReadsLent { seq, valid_ms }
        => ReadsLent { seq, valid_ms });

/// openraft's answer, postcard-encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftAnswer(pub Vec<u8>);

reply!(RaftAnswer, "a raft answer", Response::Raft(b) => RaftAnswer(b));

// The answer to a file-lock request.
reply!(crate::locks::LockAnswer, "a lock answer", Response::Lock(a) => a);

/// A lock test's answer: the conflicting lock, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockTested(pub Option<crate::locks::HeldLock>);

reply!(
    LockTested,
    "a lock test's answer",
    Response::Lock(crate::locks::LockAnswer::Tested { by, .. }) => LockTested(by)
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask;

    #[test]
    fn a_reply_of_the_wrong_kind_is_a_protocol_error_naming_both() {
        let stat = ask::stat("/a");
        let e = stat.answer.of(Response::Link("x".into()));
        match e {
            Err(WireError::Protocol(m)) => {
                assert!(m.contains("attributes") && m.contains("Link"), "{m}");
            }
            other => panic!("not refused: {other:?}"),
        }
        let i = Inode::new(crate::InodeId(9), crate::FileKind::File, 0o644, (1, 1), 5);
        assert_eq!(
            stat.answer.of::<WireError>(Response::Attr(i.clone())),
            Ok(i)
        );
    }

    #[test]
    fn a_chunk_read_is_its_bytes_or_its_coded_record() {
        let a = ask::read_chunk(crate::InodeId(3), 1, 0, 10, None).answer;
        let got = a.of::<WireError>(Response::Data {
            inode: None,
            data: vec![1, 2],
        });
        assert!(matches!(got, Ok(ChunkRead::Bytes(Bytes { ref data, .. })) if data == &[1, 2]));
        assert!(a.of::<WireError>(Response::Unit).is_err());
    }

    #[test]
    fn the_name_of_a_response_is_its_variant_alone() {
        assert_eq!(
            response_name(&Response::Data {
                inode: None,
                data: vec![0; 1 << 20]
            }),
            "Data"
        );
        assert_eq!(response_name(&Response::Unit), "Unit");
    }
}
