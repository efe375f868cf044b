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
use crate::{CounterSnapshot, DirEntry, FsError, Inode, ShardMap, StatFs};

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
    /// The reply `r` carries; a protocol error if it is not an `R`.
    pub fn of(self, r: Response) -> Result<R, FsError> {
        R::take(r).map_err(|Other(other)| {
            FsError::Protocol(format!("expected {}, the server answered {other}", R::WHAT))
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

impl Reply for () {
    const WHAT: &'static str = "done";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Unit => Ok(()),
            other => Err(Other::of(&other)),
        }
    }
}

/// A file's attributes: a change's new attributes, or what a lease kept of a fetch.
impl Reply for Inode {
    const WHAT: &'static str = "attributes";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Attr(i)
            | Response::Changed { inode: Some(i), .. }
            | Response::Fetched { inode: i, .. } => Ok(i),
            other => Err(Other::of(&other)),
        }
    }
}

/// A name's attributes and, for a small file, its contents (`ClientRequest::Fetch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub inode: Inode,
    pub data: Vec<u8>,
}

impl Reply for Fetched {
    const WHAT: &'static str = "a fetch";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Fetched { inode, data } => Ok(Fetched { inode, data }),
            other => Err(Other::of(&other)),
        }
    }
}

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

impl Reply for DirPage {
    const WHAT: &'static str = "a listing page";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::DirPage {
                entries,
                next,
                shard_end,
                hidden,
                map,
            } => Ok(DirPage {
                entries,
                next,
                shard_end,
                hidden,
                map,
            }),
            other => Err(Other::of(&other)),
        }
    }
}

/// Bytes read, and the file's attributes when the read was by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bytes {
    pub inode: Option<Inode>,
    pub data: Vec<u8>,
}

impl Reply for Bytes {
    const WHAT: &'static str = "data";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Data { inode, data } => Ok(Bytes { inode, data }),
            other => Err(Other::of(&other)),
        }
    }
}

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

impl Reply for Granted {
    const WHAT: &'static str = "a capability";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Granted { cap, valid_ms } => Ok(Granted { cap, valid_ms }),
            other => Err(Other::of(&other)),
        }
    }
}

/// A read's answer with the directory lease asked for, if granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leased {
    pub answer: Result<Box<Response>, FsError>,
    pub lease: Option<LeaseGrant>,
}

impl Reply for Leased {
    const WHAT: &'static str = "a leased answer";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Leased { answer, lease } => Ok(Leased { answer, lease }),
            other => Err(Other::of(&other)),
        }
    }
}

/// A symbolic link's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target(pub String);

impl Reply for Target {
    const WHAT: &'static str = "a link's target";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Link(t) => Ok(Target(t)),
            other => Err(Other::of(&other)),
        }
    }
}

/// The bytes an echo sent back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Echoed(pub Vec<u8>);

impl Reply for Echoed {
    const WHAT: &'static str = "an echo";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Echo(p) => Ok(Echoed(p)),
            other => Err(Other::of(&other)),
        }
    }
}

/// The outcome a partition recorded of a change, if any (`ClientRequest::Recorded`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded(pub Option<Box<Response>>);

impl Reply for Recorded {
    const WHAT: &'static str = "a recorded outcome";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Recorded(a) => Ok(Recorded(a)),
            other => Err(Other::of(&other)),
        }
    }
}

/// Attributes of many names, one result each, in the order asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attrs(pub Vec<Result<Inode, FsError>>);

impl Reply for Attrs {
    const WHAT: &'static str = "attributes of names";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Attrs(a) => Ok(Attrs(a)),
            other => Err(Other::of(&other)),
        }
    }
}

/// The answers to a batch of changes, one each, in its order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle(pub Vec<Result<Response, FsError>>);

impl Reply for Bundle {
    const WHAT: &'static str = "answers to a batch";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Bundle(a) => Ok(Bundle(a)),
            other => Err(Other::of(&other)),
        }
    }
}

/// Directories read far more than changed: path, reads, milliseconds since a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexCandidates(pub Vec<(String, u64, Option<u64>)>);

impl Reply for IndexCandidates {
    const WHAT: &'static str = "index candidates";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::IndexCandidates(c) => Ok(IndexCandidates(c)),
            other => Err(Other::of(&other)),
        }
    }
}

impl Reply for StatFs {
    const WHAT: &'static str = "a server's disks";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::StatFs(s) => Ok(s),
            other => Err(Other::of(&other)),
        }
    }
}

impl Reply for CounterSnapshot {
    const WHAT: &'static str = "counters";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Counters(c) => Ok(c),
            other => Err(Other::of(&other)),
        }
    }
}

impl Reply for Box<ClusterMap> {
    const WHAT: &'static str = "a cluster map";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Map(m) => Ok(m),
            other => Err(Other::of(&other)),
        }
    }
}

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

impl Reply for ReplicaDigest {
    const WHAT: &'static str = "a copy's digest";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::ReplicaDigest {
                seq,
                keys,
                digest,
                corrupt,
                corrupt_records,
            } => Ok(ReplicaDigest {
                seq,
                keys,
                digest,
                corrupt,
                corrupt_records: corrupt_records
                    .into_iter()
                    .map(|(s, k)| (s, k.into_vec()))
                    .collect(),
            }),
            other => Err(Other::of(&other)),
        }
    }
}

/// Fragments a server keeps: (inode, chunk, index, generation, whether intact).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragmentsKept(pub Vec<(crate::InodeId, u64, u8, u32, bool)>);

impl Reply for FragmentsKept {
    const WHAT: &'static str = "a page of fragments";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Fragments(f) => Ok(FragmentsKept(f)),
            other => Err(Other::of(&other)),
        }
    }
}

/// Coded chunks of a partition: (inode, chunk, record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodedChunks(pub Vec<(crate::InodeId, u64, CodedChunk)>);

impl Reply for CodedChunks {
    const WHAT: &'static str = "a page of coded chunks";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::CodedChunks(c) => Ok(CodedChunks(c)),
            other => Err(Other::of(&other)),
        }
    }
}

/// A page of a directory's entries as fsck reads them, and where the next starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsckEntries {
    pub entries: Vec<crate::FsckEntry>,
    pub next: Option<String>,
}

impl Reply for FsckEntries {
    const WHAT: &'static str = "a page of entries";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::FsckEntries { entries, next } => Ok(FsckEntries { entries, next }),
            other => Err(Other::of(&other)),
        }
    }
}

/// A page of the directories a partition holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsckDirs(pub Vec<crate::FsckDir>);

impl Reply for FsckDirs {
    const WHAT: &'static str = "a page of directories";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::FsckDirs(d) => Ok(FsckDirs(d)),
            other => Err(Other::of(&other)),
        }
    }
}

/// A page of the blocks a partition holds: (inode, block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsckBlocks(pub Vec<(crate::InodeId, u64)>);

impl Reply for FsckBlocks {
    const WHAT: &'static str = "a page of blocks";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::FsckBlocks(b) => Ok(FsckBlocks(b)),
            other => Err(Other::of(&other)),
        }
    }
}

/// A partition's kept fsstats (`None`: not counted yet) and its pieces of split
/// directories (path, entries here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptStats {
    pub stats: Option<Box<crate::fsstats::FsStats>>,
    pub split_dirs: Vec<(String, u64)>,
}

impl Reply for KeptStats {
    const WHAT: &'static str = "kept fsstats";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::KeptStats { stats, split_dirs } => Ok(KeptStats { stats, split_dirs }),
            other => Err(Other::of(&other)),
        }
    }
}

/// An entry's attributes, with an ancestor lease of `lease_ms` (0: not subscribed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrLease {
    pub inode: Inode,
    pub lease_ms: u64,
}

impl Reply for AttrLease {
    const WHAT: &'static str = "attributes with a lease";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::AttrLease { inode, lease_ms } => Ok(AttrLease { inode, lease_ms }),
            other => Err(Other::of(&other)),
        }
    }
}

/// A page of a frozen directory's entries, exported for a move or a removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    pub entries: Vec<crate::ExportedEntry>,
    pub next: Option<String>,
}

impl Reply for Exported {
    const WHAT: &'static str = "exported entries";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Exported { entries, next } => Ok(Exported { entries, next }),
            other => Err(Other::of(&other)),
        }
    }
}

impl Reply for Box<ShardMap> {
    const WHAT: &'static str = "a shard map";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::ShardMap(m) => Ok(m),
            other => Err(Other::of(&other)),
        }
    }
}

/// A page of a copy's keys (empty: no more).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaPage(pub Vec<crate::ReplOp>);

impl Reply for ReplicaPage {
    const WHAT: &'static str = "a page of a copy";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::ReplicaPage(ops) => Ok(ReplicaPage(ops)),
            other => Err(Other::of(&other)),
        }
    }
}

/// A loan of reads: the copy may answer reads for `valid_ms` once it applied batch `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadsLent {
    pub seq: u64,
    pub valid_ms: u64,
}

impl Reply for ReadsLent {
    const WHAT: &'static str = "a loan of reads";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::ReadsLent { seq, valid_ms } => Ok(ReadsLent { seq, valid_ms }),
            other => Err(Other::of(&other)),
        }
    }
}

/// openraft's answer, postcard-encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftAnswer(pub Vec<u8>);

impl Reply for RaftAnswer {
    const WHAT: &'static str = "a raft answer";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Raft(b) => Ok(RaftAnswer(b)),
            other => Err(Other::of(&other)),
        }
    }
}

/// The answer to a file-lock request.
impl Reply for crate::locks::LockAnswer {
    const WHAT: &'static str = "a lock answer";
    fn take(r: Response) -> Result<Self, Other> {
        match r {
            Response::Lock(a) => Ok(a),
            other => Err(Other::of(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask;

    #[test]
    fn a_reply_of_the_wrong_kind_is_a_protocol_error_naming_both() {
        let stat = ask::stat("/a");
        let e = stat.answer.of(Response::Link("x".into()));
        match e {
            Err(FsError::Protocol(m)) => {
                assert!(m.contains("attributes") && m.contains("Link"), "{m}");
            }
            other => panic!("not refused: {other:?}"),
        }
        let i = Inode::new(crate::InodeId(9), crate::FileKind::File, 0o644, (1, 1), 5);
        assert_eq!(stat.answer.of(Response::Attr(i.clone())), Ok(i));
    }

    #[test]
    fn a_chunk_read_is_its_bytes_or_its_coded_record() {
        let a = ask::read_chunk(crate::InodeId(3), 1, 0, 10, None).answer;
        let got = a.of(Response::Data {
            inode: None,
            data: vec![1, 2],
        });
        assert!(matches!(got, Ok(ChunkRead::Bytes(Bytes { ref data, .. })) if data == &[1, 2]));
        assert!(a.of(Response::Unit).is_err());
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
