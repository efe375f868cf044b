//! Replies shared by several callbacks: an entry (or a negative one), a lookup's, an open,
//! an empty answer, an extended attribute's value or size; and the kernel's open flags and
//! times in our terms.

use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, OpenAccMode, OpenFlags, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyXattr, TimeOrNow,
};
use myriad_proto::{FsError, Inode};

use crate::attr::{errno, file_attr, nanos};
use crate::mount::{Mount, now_ns};
use myriad_proto::access as perm;

pub(super) fn reply_entry(inner: &Mount, path: &str, r: Result<Inode, FsError>, reply: ReplyEntry) {
    match r {
        Ok(i) => {
            let (entry, attr) = inner.ttls(path);
            reply.entry_with_ttls(&entry, &attr, &inner.kernel_attr(&i), Generation(0));
        }
        Err(FsError::NotFound) if !inner.cfg.negative_ttl.is_zero() => {
            reply_negative(&inner.cfg.negative_ttl, reply);
        }
        Err(e) => reply.error(errno(&e)),
    }
}

/// A lookup's answer: a name, or a missing name, that a lease covered since `mark` is
/// kept by the kernel until the lease goes; any other for its usual time.
pub(super) fn reply_lookup(
    inner: &Mount,
    path: &str,
    mark: Option<myriad_client::LeaseMark>,
    r: Result<Inode, FsError>,
    reply: ReplyEntry,
) {
    let is_dir = matches!(&r, Ok(i) if i.kind == myriad_proto::FileKind::Directory);
    match inner.leased_ttl(path, mark, is_dir) {
        Some(ttl) => match r {
            Ok(i) => reply.entry(&ttl, &inner.kernel_attr(&i), Generation(0)),
            Err(FsError::NotFound) => reply_negative(&ttl, reply),
            Err(e) => reply.error(errno(&e)),
        },
        None => reply_entry(inner, path, r, reply),
    }
}

/// "No such file", kept by the kernel for `ttl`: a zero inode with a TTL.
pub(super) fn reply_negative(ttl: &std::time::Duration, reply: ReplyEntry) {
    let mut attr = file_attr(&crate::mount::placeholder());
    attr.ino = INodeNo(0);
    reply.entry(ttl, &attr, Generation(0));
}

/// A file's open flags: the kernel's pages kept if `keep`, and no flush at close from a
/// reader (`want` only READ: nothing to send then, so spare the kernel the round trip).
pub(super) fn file_flags(keep: bool, want: u32) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if keep {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if want == perm::READ {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    f
}

/// An opened handle with its flags, or the error.
pub(super) fn reply_open(r: Result<(u64, FopenFlags), FsError>, reply: ReplyOpen) {
    match r {
        Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
        Err(e) => reply.error(errno(&e)),
    }
}

pub(super) fn reply_empty(r: Result<(), FsError>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

pub(super) fn want_of(flags: OpenFlags) -> u32 {
    match flags.acc_mode() {
        OpenAccMode::O_RDONLY => perm::READ,
        OpenAccMode::O_WRONLY => perm::WRITE,
        _ => perm::READ | perm::WRITE,
    }
}

pub(super) fn time_ns(t: Option<TimeOrNow>) -> Option<i64> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => nanos(t),
        TimeOrNow::Now => now_ns(),
    })
}

pub(super) fn reply_xattr(v: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(u32::try_from(v.len()).unwrap_or(u32::MAX));
    } else if (size as usize) < v.len() {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(v);
    }
}
