//! What each client request *is*, in one table (issue 50).
//!
//! Every question the client and the servers ask of a request — is it a change (sent
//! exactly once)? what does it read? which names and files does it change? may a copy
//! answer it? may it need more disk? — is answered by `ClientRequest::describe`, one
//! exhaustive match with one row per request. Adding a request is a compile error here
//! until its row says what it is, so a new change cannot silently miss exactly-once
//! delivery, lease invalidation or the disk reserve.

use crate::InodeId;
use crate::request::{ClientRequest, ReadOf};

/// One row of the table: a request's stable name and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Description<'a> {
    /// Short stable name, used for counters and logs.
    pub name: &'static str,
    pub kind: Kind<'a>,
}

/// What a request does to the file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    /// Reads and changes nothing kept.
    Read(Read<'a>),
    /// Changes the file system: sent as `Once`, so that a retry of one that went through
    /// answers its first outcome.
    Change(Change<'a>),
    /// Neither a read of the tree nor a change sent once: the transport echo, barriers,
    /// file locks, open-file keep-alives, marks of frozen trees (idempotent).
    Other,
}

/// A read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read<'a> {
    /// The name or listing it reads (docs/fuse.md "Write-behind": the reads another
    /// client's exclusive lease gives way to); `None` for reads of no name (chunks, shard
    /// maps, index candidates).
    pub of: Option<ReadOf<'a>>,
    /// Whether an in-sync copy may answer it under a loan of reads (host_copy_reads.rs).
    pub copy_may_answer: bool,
}

/// A change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change<'a> {
    /// The names it changes (at most two: a rename's or a link's both ends).
    pub names: [Option<&'a str>; 2],
    /// The file whose data or attributes it changes, when it names one by inode.
    pub file: Option<InodeId>,
    /// Whether it may move or remove a directory (then everything cached beneath its first
    /// name is stale too).
    pub subtree: bool,
    /// The directory whose object it is served from (the parent of its first name), for
    /// changes addressed by their entry; `None` for those addressed otherwise (a link, a
    /// copy, a chunk, a reservation).
    pub served_dir: Option<&'a str>,
    /// Whether it changes one name and is answered with its new attributes (so the answer
    /// may be kept under a lease).
    pub answers_attributes: bool,
    /// Whether it adds or removes a name of `served_dir` (whose times and link count then
    /// follow: the server's dirtimes.rs).
    pub alters_listing: bool,
    /// What it may do to the disk (the free-space reserve, myriad-server space.rs).
    pub disk: Disk,
}

/// What a change may do to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disk {
    /// It may need more space: refused once free space is below the reserve.
    Grows,
    /// It writes (frees included): refused only once the disk is all but full, so that
    /// the storage engine itself never runs out of space.
    Writes,
    /// It writes nothing a full disk could refuse (a reservation of inode numbers).
    Untouched,
}

impl<'a> Change<'a> {
    /// A change of no name (`names` set by the other constructors), not addressed by an
    /// entry's directory.
    #[inline]
    fn unnamed(file: Option<InodeId>, disk: Disk) -> Change<'a> {
        Change {
            names: [None, None],
            file,
            subtree: false,
            served_dir: None,
            answers_attributes: false,
            alters_listing: false,
            disk,
        }
    }

    /// A change of the one name `path`, served from its directory.
    #[inline]
    fn of(path: &'a str, disk: Disk) -> Change<'a> {
        Change {
            names: [Some(path), None],
            served_dir: parent_dir(path),
            ..Change::unnamed(None, disk)
        }
    }

    /// A change of file `ino`'s contents or attributes through its name `path`.
    fn of_file(path: &'a str, ino: InodeId, disk: Disk) -> Change<'a> {
        Change {
            file: Some(ino),
            ..Change::of(path, disk).with_attributes()
        }
    }

    fn altering_listing(self) -> Change<'a> {
        Change {
            alters_listing: true,
            ..self
        }
    }

    fn with_attributes(self) -> Change<'a> {
        Change {
            answers_attributes: true,
            ..self
        }
    }

    fn of_subtree(self) -> Change<'a> {
        Change {
            subtree: true,
            ..self
        }
    }

    /// The names it changes.
    pub fn names(&self) -> impl Iterator<Item = &'a str> {
        self.names.into_iter().flatten()
    }
}

#[inline]
fn read<'a>(name: &'static str, of: Option<ReadOf<'a>>, copy_may_answer: bool) -> Description<'a> {
    Description {
        name,
        kind: Kind::Read(Read {
            of,
            copy_may_answer,
        }),
    }
}

#[inline]
fn change<'a>(name: &'static str, change: Change<'a>) -> Description<'a> {
    Description {
        name,
        kind: Kind::Change(change),
    }
}

#[inline]
fn other(name: &'static str) -> Description<'static> {
    Description {
        name,
        kind: Kind::Other,
    }
}

impl ClientRequest {
    /// What this request is: the one table every "what is this request" question reads.
    /// Inlined: each question then costs what its own match did (the fields it does not
    /// read are never built).
    #[must_use]
    #[inline]
    pub fn describe(&self) -> Description<'_> {
        use ClientRequest as C;
        use Disk::{Grows, Untouched, Writes};
        use ReadOf::{Listing, Name};
        match self {
            C::Echo(_) => other("echo"),
            C::Stat { path } => read("stat", Some(Name(path)), true),
            C::OpenWrite { path } => read("open_write", Some(Name(path)), false),
            C::StatMany { dir, .. } => read("stat_many", Some(Listing(dir)), false),
            C::Fetch { path, .. } => read("fetch", Some(Name(path)), true),
            C::ReadDir { path, .. } => read("readdir", Some(Listing(path)), true),
            C::GetShardMap { .. } => read("get_shard_map", None, false),
            C::Readlink { path } => read("readlink", Some(Name(path)), false),
            C::Read { path, .. } => read("read", Some(Name(path)), false),
            C::ReadChunk { .. } => read("read_chunk", None, false),
            C::Grant { path, .. } => read("grant", Some(Name(path)), false),
            C::IndexCandidates { .. } => read("index_candidates", None, false),
            C::IndexReaders { .. } => read("index_readers", None, false),
            C::Create(c) => change(
                "create",
                Change::of(&c.path, Grows)
                    .with_attributes()
                    .altering_listing(),
            ),
            C::Mkdir { path, .. } => change(
                "mkdir",
                Change::of(path, Grows).with_attributes().altering_listing(),
            ),
            C::MkdirNumbered { path, .. } => change(
                "mkdir_numbered",
                Change::of(path, Grows).with_attributes().altering_listing(),
            ),
            C::Rmdir { path } => change(
                "rmdir",
                Change::of(path, Writes).of_subtree().altering_listing(),
            ),
            C::Unlink { path } => change("unlink", Change::of(path, Writes).altering_listing()),
            C::Symlink { path, .. } => change(
                "symlink",
                Change::of(path, Grows).with_attributes().altering_listing(),
            ),
            C::Mknod { path, .. } => change(
                "mknod",
                Change::of(path, Grows).with_attributes().altering_listing(),
            ),
            C::SetAttr { path, .. } => {
                change("setattr", Change::of(path, Writes).with_attributes())
            }
            C::SetXattr { path, .. } => change("setxattr", Change::of(path, Grows)),
            C::Rename { from, to, .. } => change(
                "rename",
                Change {
                    names: [Some(from), Some(to)],
                    ..Change::of(from, Grows).of_subtree().altering_listing()
                },
            ),
            C::Link { from, to } => change(
                "link",
                Change {
                    names: [Some(from), Some(to)],
                    ..Change::unnamed(None, Grows)
                },
            ),
            C::Write(w) => change("write", Change::of_file(&w.path, w.ino, Grows)),
            C::Truncate(t) => change("truncate", Change::of_file(&t.path, t.ino, Writes)),
            C::ExtendSize(e) => change("extend_size", Change::of_file(&e.path, e.ino, Grows)),
            C::CopyRange(c) => change(
                "copy_range",
                Change {
                    names: [Some(&c.dst), None],
                    ..Change::unnamed(Some(c.dst_ino), Grows)
                },
            ),
            C::WriteChunk { ino, .. } => change("write_chunk", Change::unnamed(Some(*ino), Grows)),
            C::ReserveIds { .. } => change("reserve_ids", Change::unnamed(None, Untouched)),
            C::OnceSlot(s)
            | C::LeasedSlot(s)
            | C::ReadAsSlot(s)
            | C::BatchSlot(s)
            | C::ResendSlot(s)
            | C::RecordedSlot(s) => match *s {},
            C::Sync { .. } => other("sync"),
            C::SyncPartition { .. } => other("sync_partition"),
            C::Lock(_) => other("lock"),
            C::KeepOpen { .. } => other("keep_open"),
            C::MarkReadOnly { .. } => other("mark_read_only"),
        }
    }

    /// Short stable name, used for counters and logs.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        self.describe().name
    }

    /// What this request changes, if it is a change (sent as `Once`).
    #[must_use]
    pub fn change(&self) -> Option<Change<'_>> {
        match self.describe().kind {
            Kind::Change(c) => Some(c),
            _ => None,
        }
    }

    /// Requests that change the file system: sent as `Once`, so that a retry of one that
    /// went through answers its first outcome.
    #[must_use]
    pub fn is_change(&self) -> bool {
        self.change().is_some()
    }

    /// What a read reads (docs/fuse.md "Write-behind": the reads another client's
    /// exclusive lease gives way to, and the reads a client's own journal must be sent
    /// before): one name, or a directory's names.
    #[must_use]
    pub fn read_of(&self) -> Option<ReadOf<'_>> {
        match self.describe().kind {
            Kind::Read(r) => r.of,
            _ => None,
        }
    }

    /// Whether an in-sync copy of the partition may answer this read.
    #[must_use]
    pub fn copy_may_answer(&self) -> bool {
        matches!(
            self.describe().kind,
            Kind::Read(Read {
                copy_may_answer: true,
                ..
            })
        )
    }

    /// The directory whose object (its entry for a name, or its listing) a request is
    /// served from: the parent of the name it reads or changes, the directory it lists.
    /// (A partition that answers `NotFound` because that object moved away while the
    /// request ran answers with its newer map instead: docs/zones.md section 3.)
    #[must_use]
    pub fn served_dir(&self) -> Option<&str> {
        match self.describe().kind {
            Kind::Change(c) => c.served_dir,
            Kind::Read(r) => r.of.and_then(dir_read),
            Kind::Other => None,
        }
    }

    /// The name whose entry a request is served from: the name it reads, or a change's
    /// first name when it is served from that name's directory (`served_dir`).
    #[must_use]
    pub fn served_entry(&self) -> Option<&str> {
        match self.describe().kind {
            Kind::Change(c) if c.served_dir.is_some() => c.names[0],
            Kind::Read(Read {
                of: Some(ReadOf::Name(path)),
                ..
            }) => Some(path),
            _ => None,
        }
    }

    /// The directory a change adds a name to or removes one from, where it is served
    /// (a rename's source directory; its destination's is served elsewhere).
    #[must_use]
    pub fn listing_altered(&self) -> Option<&str> {
        self.change()
            .filter(|c| c.alters_listing)
            .and_then(|c| c.served_dir)
    }

    /// The directory whose entries a read reads (`read_of`; none for "/" itself).
    #[must_use]
    pub fn read_dir(&self) -> Option<&str> {
        self.read_of().and_then(dir_read)
    }
}

/// The directory whose entries `of` reads: a name's parent, or the listed directory.
fn dir_read(of: ReadOf<'_>) -> Option<&str> {
    match of {
        ReadOf::Name(path) => parent_dir(path),
        ReadOf::Listing(dir) => Some(dir),
    }
}

/// The directory holding `path`'s entry (none for "/").
fn parent_dir(path: &str) -> Option<&str> {
    (path != "/").then(|| match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    })
}

#[cfg(test)]
mod tests;
