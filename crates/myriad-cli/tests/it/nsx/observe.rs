//! What the exerciser sees of a name on each tree, and how two views are compared (times by
//! whether they changed, within what the clock can tell).

use super::*;

/// What fstatat(AT_SYMLINK_NOFOLLOW) shows of a name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct St {
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) fmt: u32,
    pub(super) perm: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) nlink: u64,
    pub(super) rdev: u64,
    pub(super) size: i64,
    /// atime, mtime, ctime as (seconds, nanoseconds).
    pub(super) times: [(i64, i64); 3],
}

/// A name's state: its stat, or the errno of looking it up.
pub(super) type Obs = Result<St, i32>;

pub(super) fn lstat(dir: RawFd, path: &str) -> Obs {
    let p = cs(path);
    // SAFETY: st is plain data filled by fstatat; p is live.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatat(dir, p.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(errno());
    }
    Ok(St {
        dev: st.st_dev,
        ino: st.st_ino,
        fmt: st.st_mode & libc::S_IFMT,
        perm: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        nlink: st.st_nlink,
        rdev: st.st_rdev,
        size: st.st_size,
        times: [
            (st.st_atime, st.st_atime_nsec),
            (st.st_mtime, st.st_mtime_nsec),
            (st.st_ctime, st.st_ctime_nsec),
        ],
    })
}

/// The names in directory `rel` of the tree, read with O_NOATIME so that looking does not
/// change what is compared.
pub(super) fn list(dir: RawFd, rel: &str) -> Vec<String> {
    let p = cs(rel);
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NOATIME;
    // SAFETY: p is live; the stream and its entries are used only before closedir.
    unsafe {
        let fd = libc::openat(dir, p.as_ptr(), flags | libc::O_CLOEXEC);
        if fd < 0 {
            return Vec::new();
        }
        let d = libc::fdopendir(fd);
        if d.is_null() {
            libc::close(fd);
            return Vec::new();
        }
        let mut names = Vec::new();
        loop {
            let e = libc::readdir(d);
            if e.is_null() {
                break;
            }
            let name = CStr::from_ptr((*e).d_name.as_ptr()).to_string_lossy();
            if name != "." && name != ".." {
                names.push(name.into_owned());
            }
        }
        libc::closedir(d);
        names
    }
}

/// Removes `path` and everything under it (children in name order, so both trees do the
/// same calls); the number of names removed.
pub(super) fn remove_tree(dir: RawFd, path: &str) -> Result<i64, Res> {
    let p = cs(path);
    let st = lstat(dir, path).map_err(|e| Res::Err("lstat", e))?;
    let mut removed = 1;
    let flags = if st.fmt == libc::S_IFDIR {
        let mut names = list(dir, path);
        names.sort();
        for n in names {
            removed += remove_tree(dir, &format!("{path}/{n}"))?;
        }
        libc::AT_REMOVEDIR
    } else {
        0
    };
    // SAFETY: p is a live NUL-terminated string.
    sys(
        "unlink",
        unsafe { libc::unlinkat(dir, p.as_ptr(), flags) }.into(),
    )?;
    Ok(removed)
}

/// Every name in the tree, as paths relative to its root.
pub(super) fn walk(dir: RawFd) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![".".to_string()];
    while let Some(d) = dirs.pop() {
        for name in list(dir, &d) {
            let p = if d == "." {
                name
            } else {
                format!("{d}/{name}")
            };
            if matches!(lstat(dir, &p), Ok(st) if st.fmt == libc::S_IFDIR) {
                dirs.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

/// A path with "." and ".." resolved by spelling, and every directory on the way: the names
/// an operation may change.
pub(super) fn with_parents(p: &str) -> Vec<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    (1..=parts.len()).map(|i| parts[..i].join("/")).collect()
}

/// What a step did to a name on one tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Change {
    /// Not observed before the step.
    Unknown,
    Absent,
    Appeared,
    Vanished,
    /// Another inode under the name afterwards.
    Replaced,
    /// The same inode; what happened to atime, mtime and ctime.
    Kept([Time; 3]),
}

/// What a step did to one timestamp: (before, after) and whether "unchanged" is certain.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Time {
    pub(super) before: (i64, i64),
    pub(super) after: (i64, i64),
    /// The verdict cannot be an artefact of the clock; see `settled`.
    pub(super) settled: bool,
}

/// Whether a tree's verdict on timestamp `i` (0 atime, 1 mtime, 2 ctime) of `b` proves
/// anything, `coarse` being CLOCK_REALTIME_COARSE just before the step ran on that tree.
///
/// Multigrain timestamps (Linux 6.13+) stamp a change with max(coarse clock, the newest
/// fine-grained stamp handed out anywhere, in either tree), so a change within a clock tick
/// of the previous one can leave the time as it was. Seen: tmpfs unlink stamps the directory
/// with the victim's new ctime, equal to the directory's own from a create ten steps before.
/// An "unchanged" of a time older than the coarse clock is certain: a change must show.
///
/// relatime updates atime on access when atime is not after mtime or ctime. Stamps taken
/// within a tick or two of each other fall either side (seen: atime 1.3 ms before ctime on
/// one tree, 1.5 ms after on the other), so then an access may or may not update atime.
pub(super) fn settled(b: &St, i: usize, changed: bool, coarse: (i64, i64)) -> bool {
    let t = b.times[i];
    let ns = |(s, n): (i64, i64)| s as i128 * 1_000_000_000 + n as i128;
    let near = |u| (ns(t) - ns(u)).abs() < 2 * coarse_resolution_ns();
    let raced = i == 0 && (near(b.times[1]) || near(b.times[2]));
    (changed || t < coarse) && !raced
}

pub(super) fn coarse_resolution_ns() -> i128 {
    // SAFETY: ts is plain data filled by clock_getres.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

impl Time {
    pub(super) fn changed(&self) -> bool {
        self.before != self.after
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (b, a) = (time_spec(self.before), time_spec(self.after));
        match self.changed() {
            true => write!(f, "changed {b} -> {a}")?,
            false => write!(f, "unchanged {b}")?,
        }
        match self.settled {
            true => Ok(()),
            false => write!(f, " (clock artefact?)"),
        }
    }
}

/// `coarse`: CLOCK_REALTIME_COARSE just before the step ran on this tree.
pub(super) fn change(before: Option<&Obs>, after: &Obs, coarse: (i64, i64)) -> Change {
    let time = |b: &St, a: &St, i: usize| Time {
        before: b.times[i],
        after: a.times[i],
        settled: settled(b, i, b.times[i] != a.times[i], coarse),
    };
    match (before, after) {
        (None, _) => Change::Unknown,
        (Some(Err(_)), Err(_)) => Change::Absent,
        (Some(Err(_)), Ok(_)) => Change::Appeared,
        (Some(Ok(_)), Err(_)) => Change::Vanished,
        (Some(Ok(b)), Ok(a)) if (b.dev, b.ino) != (a.dev, a.ino) => Change::Replaced,
        (Some(Ok(b)), Ok(a)) => Change::Kept([0, 1, 2].map(|i| time(b, a, i))),
    }
}

pub(super) const TIMES: [&str; 3] = ["atime", "mtime", "ctime"];

pub(super) struct Diff {
    pub(super) field: &'static str,
    pub(super) path: String,
    pub(super) a: String,
    pub(super) b: String,
}

impl Diff {
    pub(super) fn new(field: &'static str, path: &str, a: String, b: String) -> Diff {
        let path = path.to_string();
        Diff { field, path, a, b }
    }
}

pub(super) fn obs_str(o: &Obs) -> String {
    match o {
        Ok(st) => format!("{} {:#o}", type_name(st.fmt), st.perm),
        Err(e) => errno_name(*e),
    }
}

/// The post-step states of one name on A and B.
pub(super) fn compare_obs(path: &str, a: &Obs, b: &Obs, out: &mut Vec<Diff>) {
    let mut diff = |field, x: String, y: String| {
        if x != y {
            out.push(Diff::new(field, path, x, y));
        }
    };
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return diff("exists", obs_str(a), obs_str(b)),
    };
    if a.fmt != b.fmt {
        return diff("type", type_name(a.fmt).into(), type_name(b.fmt).into());
    }
    diff("mode", format!("{:#o}", a.perm), format!("{:#o}", b.perm));
    diff("uid", a.uid.to_string(), b.uid.to_string());
    diff("gid", a.gid.to_string(), b.gid.to_string());
    diff("nlink", a.nlink.to_string(), b.nlink.to_string());
    if a.fmt == libc::S_IFCHR || a.fmt == libc::S_IFBLK {
        diff("rdev", format!("{:#x}", a.rdev), format!("{:#x}", b.rdev));
    }
    // Directory sizes are the file system's business (tmpfs counts entries, ext4 blocks).
    if a.fmt == libc::S_IFREG || a.fmt == libc::S_IFLNK {
        diff("size", a.size.to_string(), b.size.to_string());
    }
    // Times set by utimensat are exact values; times from the clock differ by when each
    // tree ran the step, so those are compared only by whether a step changed them.
    for (i, field) in TIMES.iter().enumerate().take(2) {
        let (x, y) = (a.times[i], b.times[i]);
        if x.0 < EXPLICIT_BEFORE || y.0 < EXPLICIT_BEFORE {
            diff(field, time_spec(x), time_spec(y));
        }
    }
}

/// What the step did to one name on A and on B. Returns how many timestamp verdicts
/// differed where the clock allows it (counted, not failed).
pub(super) fn compare_change(path: &str, a: Change, b: Change, out: &mut Vec<Diff>) -> u64 {
    let mut push = |field, x: String, y: String| {
        out.push(Diff::new(field, path, x, y));
    };
    let mut clock_excused = 0;
    match (a, b) {
        (Change::Unknown, _) | (_, Change::Unknown) => {}
        (Change::Kept(x), Change::Kept(y)) => {
            for i in 0..3 {
                let (x, y) = (x[i], y[i]);
                if x.changed() == y.changed() {
                    continue;
                }
                if x.settled && y.settled {
                    push(TIMES[i], x.to_string(), y.to_string());
                } else {
                    clock_excused += 1;
                }
            }
        }
        (x, y) if std::mem::discriminant(&x) != std::mem::discriminant(&y) => {
            push("identity", format!("{x:?}"), format!("{y:?}"));
        }
        _ => {}
    }
    clock_excused
}

pub(super) fn coarse_now() -> (i64, i64) {
    // SAFETY: ts is plain data filled by clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    (ts.tv_sec, ts.tv_nsec)
}

/// For every name, the other names of the same inode, in one tree.
pub(super) fn link_sets(
    after: &BTreeMap<String, [Obs; 2]>,
    tree: usize,
) -> BTreeMap<&str, Vec<&str>> {
    let mut by_inode: BTreeMap<(u64, u64), Vec<&str>> = BTreeMap::new();
    for (name, obs) in after {
        if let Ok(st) = &obs[tree] {
            by_inode.entry((st.dev, st.ino)).or_default().push(name);
        }
    }
    let mut out = BTreeMap::new();
    for names in by_inode.values() {
        for n in names {
            out.insert(*n, names.iter().copied().filter(|m| m != n).collect());
        }
    }
    out
}
