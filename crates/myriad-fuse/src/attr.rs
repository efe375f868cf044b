//! Conversions between Myriad's types and the kernel's: attributes, file types, errors.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo};
use myriad_proto::{FileKind, FsError, Inode};

/// `st_blksize`: programs size their I/O buffers by it (cp, cat, Python). 128 KiB keeps the
/// number of FUSE round trips per file low without bloating small reads.
pub const BLOCK_SIZE: u32 = 128 * 1024;

pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        // HardLink is resolved by the servers; never seen here.
        FileKind::File | FileKind::HardLink => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// A device number as the kernel sends and expects it in FUSE attributes (its
/// `new_encode_dev` form: 12 bits of major, 20 of minor) to a `dev_t` (`makedev`), which
/// is what Myriad stores and shows.
pub fn dev_from_kernel(rdev: u32) -> u64 {
    let major = (rdev & 0xfff00) >> 8;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

/// `dev_from_kernel` reversed (devices beyond 12/20 bits cannot be told to the kernel: 0).
pub fn dev_to_kernel(dev: u64) -> u32 {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major > 0xfff || minor > 0xf_ffff {
        return 0;
    }
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

pub fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

pub fn file_attr(i: &Inode) -> FileAttr {
    file_attr_sized(i, i.size)
}

/// `file_attr` with another size (bytes this mount wrote but has not sent yet).
pub fn file_attr_sized(i: &Inode, size: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(i.ino.0),
        size,
        blocks: size.div_ceil(512),
        atime: time(i.atime_ns),
        mtime: time(i.mtime_ns),
        ctime: time(i.ctime_ns),
        crtime: time(i.ctime_ns),
        kind: file_type(i.kind),
        perm: u16::try_from(i.mode & 0o7777).unwrap_or(0),
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        rdev: dev_to_kernel(i.rdev),
        flags: 0,
        blksize: BLOCK_SIZE,
    }
}

pub fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}
