//! The operations the namespace exerciser draws, how each runs on a tree, and how it prints.

use super::*;

pub(super) const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];
pub(super) const FILE_MODES: [u32; 12] = [
    0o644, 0o600, 0o666, 0o777, 0, 0o6755, 0o4711, 0o2755, 0o1644, 0o7777, 0o640, 0o444,
];
pub(super) const DIR_MODES: [u32; 9] =
    [0o755, 0o777, 0o1777, 0o2775, 0o700, 0o711, 0o3777, 0o555, 0];
pub(super) const IDS: [u32; 6] = [0, 1000, 1001, 1002, u32::MAX, u32::MAX];
pub(super) const SIZES: [i64; 7] = [0, 1, 100, 4096, 65537, 1 << 20, -1];
/// Explicit times are all before this (2017), times the clock gives all after.
pub(super) const EXPLICIT_BEFORE: i64 = 1_500_000_000;
pub(super) const SECS: [i64; 4] = [0, 1_000_000_000, 1_234_567_890, 1_400_000_000];
pub(super) const NSECS: [i64; 4] = [0, 1, 500_000_000, 999_999_999];

#[derive(Clone, Debug)]
pub(super) enum Op {
    Create {
        path: String,
        flags: i32,
        mode: u32,
    },
    Mkdir {
        path: String,
        mode: u32,
    },
    Mknod {
        path: String,
        mode: u32,
        rdev: u64,
    },
    Symlink {
        target: String,
        path: String,
    },
    Link {
        from: String,
        to: String,
    },
    Rename {
        from: String,
        to: String,
        flags: u32,
    },
    Unlink {
        path: String,
    },
    Rmdir {
        path: String,
    },
    Chmod {
        path: String,
        mode: u32,
        nofollow: bool,
    },
    Chown {
        path: String,
        uid: u32,
        gid: u32,
        nofollow: bool,
    },
    Utimens {
        path: String,
        times: [(i64, i64); 2],
        nofollow: bool,
    },
    Truncate {
        path: String,
        size: i64,
        create: bool,
    },
    Open {
        path: String,
        flags: i32,
        mode: u32,
    },
    Write {
        path: String,
        len: usize,
        append: bool,
    },
    /// Removes a whole subtree, always as root: without it the small name pool fills up
    /// with names no user may remove (sticky directories), and creations stop succeeding.
    Clear {
        path: String,
    },
}

impl Op {
    /// The operation's name in allow-list keys.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Create { .. } => "create",
            Op::Mkdir { .. } => "mkdir",
            Op::Mknod { .. } => "mknod",
            Op::Symlink { .. } => "symlink",
            Op::Link { .. } => "link",
            Op::Rename { .. } => "rename",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Chmod { .. } => "chmod",
            Op::Chown { .. } => "chown",
            Op::Utimens { .. } => "utimens",
            Op::Truncate { .. } => "truncate",
            Op::Open { .. } => "open",
            Op::Write { .. } => "write",
            Op::Clear { .. } => "clear",
        }
    }

    /// The names the operation spells (a symlink's target is not one).
    pub(super) fn paths(&self) -> Vec<&str> {
        match self {
            Op::Link { from, to } | Op::Rename { from, to, .. } => vec![from, to],
            Op::Create { path, .. }
            | Op::Mkdir { path, .. }
            | Op::Mknod { path, .. }
            | Op::Symlink { path, .. }
            | Op::Unlink { path }
            | Op::Rmdir { path }
            | Op::Chmod { path, .. }
            | Op::Chown { path, .. }
            | Op::Utimens { path, .. }
            | Op::Truncate { path, .. }
            | Op::Open { path, .. }
            | Op::Write { path, .. }
            | Op::Clear { path } => vec![path],
        }
    }
}

/// A path for reports: long components shortened to their first byte and length.
pub(super) fn show(p: &str) -> String {
    let parts: Vec<String> = p
        .split('/')
        .map(|c| match c.len() {
            0..=16 => c.to_string(),
            n => format!("{}×{n}", &c[..1]),
        })
        .collect();
    parts.join("/")
}

pub(super) fn open_flags(f: i32) -> String {
    let mut s = match f & libc::O_ACCMODE {
        libc::O_RDONLY => "RDONLY",
        libc::O_WRONLY => "WRONLY",
        _ => "RDWR",
    }
    .to_string();
    for (bit, name) in [
        (libc::O_CREAT, "CREAT"),
        (libc::O_EXCL, "EXCL"),
        (libc::O_TRUNC, "TRUNC"),
        (libc::O_APPEND, "APPEND"),
        (libc::O_DIRECTORY, "DIRECTORY"),
        (libc::O_NOFOLLOW, "NOFOLLOW"),
    ] {
        if f & bit != 0 {
            s.push('|');
            s.push_str(name);
        }
    }
    s
}

pub(super) fn time_spec((s, ns): (i64, i64)) -> String {
    match ns {
        libc::UTIME_NOW => "NOW".to_string(),
        libc::UTIME_OMIT => "OMIT".to_string(),
        _ => format!("{s}.{ns:09}"),
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nf = |n: &bool| if *n { ", NOFOLLOW" } else { "" };
        match self {
            Op::Create { path, flags, mode } => {
                write!(
                    f,
                    "create({}, {}, {mode:#o})",
                    show(path),
                    open_flags(*flags)
                )
            }
            Op::Mkdir { path, mode } => write!(f, "mkdir({}, {mode:#o})", show(path)),
            Op::Mknod { path, mode, rdev } => write!(
                f,
                "mknod({}, {}, {:#o}, {}:{})",
                show(path),
                type_name(mode & libc::S_IFMT),
                mode & 0o7777,
                libc::major(*rdev),
                libc::minor(*rdev)
            ),
            Op::Symlink { target, path } => {
                write!(f, "symlink({} -> {})", show(path), show(target))
            }
            Op::Link { from, to } => write!(f, "link({} -> {})", show(from), show(to)),
            Op::Rename { from, to, flags } => {
                let how = match *flags {
                    0 => "",
                    libc::RENAME_NOREPLACE => ", NOREPLACE",
                    _ => ", EXCHANGE",
                };
                write!(f, "rename({} -> {}{how})", show(from), show(to))
            }
            Op::Unlink { path } => write!(f, "unlink({})", show(path)),
            Op::Rmdir { path } => write!(f, "rmdir({})", show(path)),
            Op::Chmod {
                path,
                mode,
                nofollow,
            } => {
                write!(f, "chmod({}, {mode:#o}{})", show(path), nf(nofollow))
            }
            Op::Chown {
                path,
                uid,
                gid,
                nofollow,
            } => {
                let id = |i: &u32| if *i == u32::MAX { -1 } else { i64::from(*i) };
                write!(
                    f,
                    "chown({}, {}, {}{})",
                    show(path),
                    id(uid),
                    id(gid),
                    nf(nofollow)
                )
            }
            Op::Utimens {
                path,
                times,
                nofollow,
            } => write!(
                f,
                "utimensat({}, atime {}, mtime {}{})",
                show(path),
                time_spec(times[0]),
                time_spec(times[1]),
                nf(nofollow)
            ),
            Op::Truncate { path, size, create } => {
                let how = if *create {
                    "open(CREAT|RDWR, 0) + "
                } else {
                    ""
                };
                write!(f, "truncate({}, {size}) by {how}ftruncate", show(path))
            }
            Op::Open { path, flags, mode } => {
                write!(f, "open({}, {}, {mode:#o})", show(path), open_flags(*flags))
            }
            Op::Write { path, len, append } => {
                let how = if *append { ", APPEND" } else { "" };
                write!(f, "write({}, {len} bytes{how})", show(path))
            }
            Op::Clear { path } => write!(f, "rm -r {}", show(path)),
        }
    }
}

/// An operation's outcome: success with a value (bytes written, else 0), or the failing
/// call and its errno.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Res {
    Ok(i64),
    Err(&'static str, i32),
}

impl fmt::Display for Res {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Res::Ok(0) => write!(f, "ok"),
            Res::Ok(n) => write!(f, "ok {n}"),
            Res::Err(call, e) => write!(f, "{call}: {}", errno_name(*e)),
        }
    }
}

pub(super) fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EMLINK => "EMLINK",
        libc::ELOOP => "ELOOP",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOSYS => "ENOSYS",
        libc::ESTALE => "ESTALE",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

pub(super) fn type_name(fmt: u32) -> &'static str {
    match fmt {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "sock",
        libc::S_IFCHR => "chr",
        libc::S_IFBLK => "blk",
        _ => "?",
    }
}

pub(super) fn cs(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(super) fn sys(call: &'static str, r: i64) -> Result<i64, Res> {
    if r < 0 {
        Err(Res::Err(call, errno()))
    } else {
        Ok(r)
    }
}

/// openat, `f` on the descriptor, close. O_NONBLOCK always: a FIFO must never block the run
/// (O_WRONLY without a reader then fails with ENXIO on both trees alike).
pub(super) fn with_open(
    dir: RawFd,
    path: &str,
    flags: i32,
    mode: u32,
    f: impl FnOnce(RawFd) -> Result<i64, Res>,
) -> Result<i64, Res> {
    let p = cs(path);
    let flags = flags | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: p is a live NUL-terminated string.
    let fd = sys(
        "open",
        unsafe { libc::openat(dir, p.as_ptr(), flags, mode) }.into(),
    )?;
    let r = f(fd as RawFd);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd as RawFd) };
    r
}

pub(super) fn exec(dir: RawFd, op: &Op) -> Res {
    match apply(dir, op) {
        Ok(v) => Res::Ok(v),
        Err(e) => e,
    }
}

/// The operation on the tree whose root is `dir`, through *at calls with paths relative to
/// it, so both trees see the same names and the same path-length limits.
pub(super) fn apply(dir: RawFd, op: &Op) -> Result<i64, Res> {
    let nofollow = |n: &bool| if *n { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
    let paths: Vec<CString> = op.paths().into_iter().map(cs).collect();
    let p = paths[0].as_ptr();
    // SAFETY: every pointer is a live NUL-terminated string or a local array for the length
    // of the call; descriptors are ours.
    unsafe {
        match op {
            Op::Create { path, flags, mode } | Op::Open { path, flags, mode } => {
                with_open(dir, path, *flags, *mode, |_| Ok(0))
            }
            Op::Mkdir { mode, .. } => sys("mkdir", libc::mkdirat(dir, p, *mode).into()),
            Op::Mknod { mode, rdev, .. } => {
                sys("mknod", libc::mknodat(dir, p, *mode, *rdev).into())
            }
            Op::Symlink { target, .. } => {
                let t = cs(target);
                sys("symlink", libc::symlinkat(t.as_ptr(), dir, p).into())
            }
            Op::Link { .. } => {
                let to = paths[1].as_ptr();
                sys("link", libc::linkat(dir, p, dir, to, 0).into())
            }
            Op::Rename { flags, .. } => {
                let to = paths[1].as_ptr();
                sys("rename", libc::renameat2(dir, p, dir, to, *flags).into())
            }
            Op::Unlink { .. } => sys("unlink", libc::unlinkat(dir, p, 0).into()),
            Op::Rmdir { .. } => sys("rmdir", libc::unlinkat(dir, p, libc::AT_REMOVEDIR).into()),
            // fchmodat2 is the only chmod that can refuse to follow a symlink.
            Op::Chmod {
                mode,
                nofollow: true,
                ..
            } => sys(
                "fchmodat2",
                libc::syscall(
                    libc::SYS_fchmodat2,
                    dir,
                    p,
                    *mode,
                    libc::AT_SYMLINK_NOFOLLOW,
                ),
            ),
            Op::Chmod { mode, .. } => sys("chmod", libc::fchmodat(dir, p, *mode, 0).into()),
            Op::Chown {
                uid,
                gid,
                nofollow: n,
                ..
            } => sys(
                "chown",
                libc::fchownat(dir, p, *uid, *gid, nofollow(n)).into(),
            ),
            Op::Utimens {
                times, nofollow: n, ..
            } => {
                let ts = times.map(|(s, ns)| libc::timespec {
                    tv_sec: s,
                    tv_nsec: ns,
                });
                sys(
                    "utimensat",
                    libc::utimensat(dir, p, ts.as_ptr(), nofollow(n)).into(),
                )
            }
            Op::Truncate { path, size, create } => {
                let (flags, mode) = match create {
                    true => (libc::O_CREAT | libc::O_RDWR, 0),
                    false => (libc::O_WRONLY, 0),
                };
                with_open(dir, path, flags, mode, |fd| {
                    sys("ftruncate", libc::ftruncate(fd, *size).into())
                })
            }
            Op::Write { path, len, append } => {
                let flags = libc::O_WRONLY | if *append { libc::O_APPEND } else { 0 };
                let buf = vec![b'x'; *len];
                with_open(dir, path, flags, 0, |fd| {
                    let n = sys(
                        "write",
                        libc::write(fd, buf.as_ptr().cast(), buf.len()) as i64,
                    )?;
                    // And the mode fstat shows at once, before the close: set-id bits a
                    // write by someone but the owner takes off are gone right after
                    // the write (issue 47: the mount showed them until the close).
                    let mut st: libc::stat = std::mem::zeroed();
                    sys("fstat", libc::fstat(fd, &raw mut st).into())?;
                    Ok(n | (i64::from(st.st_mode & 0o7777) << 32))
                })
            }
            Op::Clear { path } => remove_tree(dir, path),
        }
    }
}
