//! A random namespace and data stress worker (in the spirit of fsstress, with a model):
//! one process works in a directory of its own through any file system (a Myriad mount,
//! bindfs, local disk), making random creates, mkdirs, renames and links across its
//! directories (directory renames too), unlinks, rmdirs, symlinks, chmods, truncates,
//! writes, reads, fsyncs, listings, stats, readlinks, fallocates (keep-size, punch hole,
//! zero range, extend) and mapped writes with msync, a fixed number of them from a seed.
//!
//! Unlike fsstress it keeps a model of its tree (names, hard links, contents, modes), so
//! every answer is checked: every operation the model says succeeds must succeed (the
//! only modeled failure is rmdir of a non-empty directory, ENOTEMPTY, which must fail);
//! reads, listings, stats and readlinks must match the model; and at the end every name
//! is read back and every directory listed. Several processes run side by side, each in
//! its own directory, as fsstress's do. `myriad bench stress` times it; `it::stress`
//! runs it through a mount as several users.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::workload::Rng;

/// Largest file the worker makes: writes, truncates and fallocates stay below it.
const FILE_BYTES_MAX: u64 = 128 * 1024;
/// Largest single write or fallocate.
const OP_BYTES_MAX: u64 = 16 * 1024;
/// Files and directories a worker keeps at most: past them creates give way to removes.
const FILES_MAX: usize = 400;
const DIRS_MAX: usize = 60;

/// One worker (hidden subcommand `myriad bench stress-worker`).
#[derive(Args, Clone, Debug)]
pub struct StressWorkerArgs {
    /// The directory to work in (made if missing; it must be empty).
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub ops: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Leave out mapped writes (a file system without shared writable mappings).
    #[arg(long)]
    pub no_mmap: bool,
    /// Leave out fallocate (bindfs and some others answer EOPNOTSUPP).
    #[arg(long)]
    pub no_fallocate: bool,
    /// Instead of the random mix: this many cross-directory renames, then as many hard
    /// links across directories, one at a time, each timed (`rename`, `link`).
    #[arg(long)]
    pub latency: Option<u64>,
}

/// What a worker prints (one JSON line): latencies by operation, and every mismatch.
#[derive(Serialize, Deserialize, Default, Debug)]
pub struct StressReport {
    pub ops: u64,
    pub secs: f64,
    /// Microseconds of each operation, by operation.
    pub micros: BTreeMap<String, Vec<u32>>,
    /// What went other than the model says (empty when all is well): op, path, what.
    pub mismatches: Vec<String>,
}

#[derive(Clone, Debug)]
struct File {
    data: Vec<u8>,
    mode: u32,
    names: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Creat,
    Mkdir,
    Rename,
    RenameDir,
    Link,
    Unlink,
    Rmdir,
    Symlink,
    Chmod,
    Truncate,
    Write,
    Read,
    Fsync,
    Getdents,
    Stat,
    Readlink,
    Fallocate,
    MapWrite,
}

/// Relative weights, about fsstress's default mix.
const WEIGHTS: [(Op, u64); 18] = [
    (Op::Creat, 8),
    (Op::Mkdir, 3),
    (Op::Rename, 4),
    (Op::RenameDir, 1),
    (Op::Link, 3),
    (Op::Unlink, 4),
    (Op::Rmdir, 1),
    (Op::Symlink, 2),
    (Op::Chmod, 2),
    (Op::Truncate, 3),
    (Op::Write, 8),
    (Op::Read, 6),
    (Op::Fsync, 1),
    (Op::Getdents, 2),
    (Op::Stat, 6),
    (Op::Readlink, 1),
    (Op::Fallocate, 2),
    (Op::MapWrite, 2),
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Creat => "creat",
            Op::Mkdir => "mkdir",
            Op::Rename => "rename",
            Op::RenameDir => "rename_dir",
            Op::Link => "link",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Symlink => "symlink",
            Op::Chmod => "chmod",
            Op::Truncate => "truncate",
            Op::Write => "write",
            Op::Read => "read",
            Op::Fsync => "fsync",
            Op::Getdents => "getdents",
            Op::Stat => "stat",
            Op::Readlink => "readlink",
            Op::Fallocate => "fallocate",
            Op::MapWrite => "map_write",
        }
    }
}

/// The worker's tree as it must be.
struct Model {
    files: Vec<File>,
    /// Directories, the worker's own first (never removed or renamed).
    dirs: Vec<PathBuf>,
    /// Symbolic links and their targets.
    links: BTreeMap<PathBuf, String>,
    made: u64,
}

impl Model {
    fn new_name(&mut self, dir: &Path) -> PathBuf {
        self.made += 1;
        dir.join(format!("n{}", self.made))
    }

    /// Everything directly in `dir`: names of files, links and directories.
    fn children(&self, dir: &Path) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut add = |p: &Path| {
            if p.parent() == Some(dir)
                && let Some(n) = p.file_name()
            {
                out.insert(n.to_string_lossy().into_owned());
            }
        };
        self.files
            .iter()
            .flat_map(|f| &f.names)
            .for_each(|n| add(n));
        self.links.keys().for_each(|n| add(n));
        self.dirs.iter().for_each(|n| add(n));
        out
    }

    /// Every path at or below `from` moves below `to` (a directory rename).
    fn moved(&mut self, from: &Path, to: &Path) {
        let re = |p: &mut PathBuf| {
            if let Ok(rest) = p.strip_prefix(from) {
                *p = to.join(rest);
            }
        };
        self.files
            .iter_mut()
            .flat_map(|f| f.names.iter_mut())
            .for_each(re);
        self.dirs.iter_mut().for_each(re);
        self.links = std::mem::take(&mut self.links)
            .into_iter()
            .map(|(mut p, t)| {
                re(&mut p);
                (p, t)
            })
            .collect();
    }
}

struct Worker {
    rng: Rng,
    model: Model,
    report: StressReport,
    no_mmap: bool,
    no_fallocate: bool,
}

fn errno_of(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => format!("errno {n} ({e})"),
        None => e.to_string(),
    }
}

fn pick<T>(rng: &mut Rng, v: &[T]) -> Option<usize> {
    (!v.is_empty()).then(|| usize::try_from(rng.below(v.len() as u64)).unwrap_or(0))
}

impl Worker {
    fn mismatch(&mut self, op: Op, path: &Path, what: String) {
        self.report
            .mismatches
            .push(format!("{} {}: {what}", op.name(), path.display()));
    }

    /// Runs `f` on `path`, counting its time; a failure is a mismatch.
    fn expect<T>(&mut self, op: Op, path: &Path, r: std::io::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.mismatch(op, path, errno_of(&e));
                None
            }
        }
    }

    fn bytes(&mut self, len: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        while (out.len() as u64) < len {
            out.extend_from_slice(&self.rng.next_u64().to_le_bytes());
        }
        out.truncate(usize::try_from(len).unwrap_or(0));
        out
    }

    fn choose(&mut self) -> Op {
        let total: u64 = WEIGHTS.iter().map(|w| w.1).sum();
        let mut x = self.rng.below(total);
        for (op, w) in WEIGHTS {
            if x < w {
                return op;
            }
            x -= w;
        }
        Op::Stat
    }

    fn random_dir(&mut self) -> PathBuf {
        let i = pick(&mut self.rng, &self.model.dirs).unwrap_or(0);
        self.model.dirs[i].clone()
    }

    /// A random file and one of its names.
    fn random_name(&mut self) -> Option<(usize, PathBuf)> {
        let f = pick(&mut self.rng, &self.model.files)?;
        let n = pick(&mut self.rng, &self.model.files[f].names)?;
        Some((f, self.model.files[f].names[n].clone()))
    }

    /// One operation (skipped when the model has nothing to apply it to); `true` if it ran.
    fn step(&mut self, op: Op) -> bool {
        match op {
            Op::Creat => self.creat(),
            Op::Mkdir => self.mkdir(),
            Op::Rename => self.rename(),
            Op::RenameDir => self.rename_dir(),
            Op::Link => self.link(),
            Op::Unlink => self.unlink(),
            Op::Rmdir => self.rmdir(),
            Op::Symlink => self.symlink(),
            Op::Chmod => self.chmod(),
            Op::Truncate => self.truncate(),
            Op::Write => self.write(),
            Op::Read => self.read(),
            Op::Fsync => self.fsync(),
            Op::Getdents => self.getdents(),
            Op::Stat => self.stat(),
            Op::Readlink => self.readlink(),
            Op::Fallocate => !self.no_fallocate && self.fallocate(),
            Op::MapWrite => !self.no_mmap && self.map_write(),
        }
    }

    fn creat(&mut self) -> bool {
        if self.model.files.len() >= FILES_MAX {
            return false;
        }
        let dir = self.random_dir();
        let p = self.model.new_name(&dir);
        let r = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&p);
        if self.expect(Op::Creat, &p, r).is_some() {
            self.model.files.push(File {
                data: Vec::new(),
                mode: 0o644,
                names: vec![p],
            });
        }
        true
    }

    fn mkdir(&mut self) -> bool {
        if self.model.dirs.len() >= DIRS_MAX {
            return false;
        }
        let dir = self.random_dir();
        let p = self.model.new_name(&dir);
        if self
            .expect(Op::Mkdir, &p, std::fs::create_dir(&p))
            .is_some()
        {
            self.model.dirs.push(p);
        }
        true
    }

    fn rename(&mut self) -> bool {
        let Some((f, from)) = self.random_name() else {
            return false;
        };
        let dir = self.random_dir();
        let to = self.model.new_name(&dir);
        if self
            .expect(Op::Rename, &from, std::fs::rename(&from, &to))
            .is_some()
        {
            for n in &mut self.model.files[f].names {
                if *n == from {
                    *n = to.clone();
                }
            }
        }
        true
    }

    fn rename_dir(&mut self) -> bool {
        if self.model.dirs.len() < 3 {
            return false;
        }
        let i = 1 + usize::try_from(self.rng.below(self.model.dirs.len() as u64 - 1)).unwrap_or(0);
        let from = self.model.dirs[i].clone();
        let dest = self.random_dir();
        if dest.starts_with(&from) {
            return false;
        }
        let to = self.model.new_name(&dest);
        if self
            .expect(Op::RenameDir, &from, std::fs::rename(&from, &to))
            .is_some()
        {
            self.model.moved(&from, &to);
        }
        true
    }

    fn link(&mut self) -> bool {
        let Some((f, from)) = self.random_name() else {
            return false;
        };
        let dir = self.random_dir();
        let to = self.model.new_name(&dir);
        if self
            .expect(Op::Link, &from, std::fs::hard_link(&from, &to))
            .is_some()
        {
            self.model.files[f].names.push(to);
        }
        true
    }

    fn unlink(&mut self) -> bool {
        // Links and files alike.
        if !self.model.links.is_empty() && self.rng.below(4) == 0 {
            let i = usize::try_from(self.rng.below(self.model.links.len() as u64)).unwrap_or(0);
            let Some(p) = self.model.links.keys().nth(i).cloned() else {
                return false;
            };
            if self
                .expect(Op::Unlink, &p, std::fs::remove_file(&p))
                .is_some()
            {
                self.model.links.remove(&p);
            }
            return true;
        }
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        if self
            .expect(Op::Unlink, &p, std::fs::remove_file(&p))
            .is_some()
        {
            self.model.files[f].names.retain(|n| *n != p);
            if self.model.files[f].names.is_empty() {
                self.model.files.swap_remove(f);
            }
        }
        true
    }

    fn rmdir(&mut self) -> bool {
        if self.model.dirs.len() < 2 {
            return false;
        }
        let i = 1 + usize::try_from(self.rng.below(self.model.dirs.len() as u64 - 1)).unwrap_or(0);
        let p = self.model.dirs[i].clone();
        let empty = self.model.children(&p).is_empty();
        match (std::fs::remove_dir(&p), empty) {
            (Ok(()), true) => {
                self.model.dirs.swap_remove(i);
            }
            (Err(e), false) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
            (Ok(()), false) => {
                self.mismatch(
                    Op::Rmdir,
                    &p,
                    "removed a directory that is not empty".into(),
                );
                self.model.dirs.swap_remove(i);
            }
            (Err(e), _) => self.mismatch(Op::Rmdir, &p, errno_of(&e)),
        }
        true
    }

    fn symlink(&mut self) -> bool {
        let dir = self.random_dir();
        let p = self.model.new_name(&dir);
        let target = format!("../target-{}", self.rng.below(1000));
        if self
            .expect(Op::Symlink, &p, std::os::unix::fs::symlink(&target, &p))
            .is_some()
        {
            self.model.links.insert(p, target);
        }
        true
    }

    fn chmod(&mut self) -> bool {
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        let mode = [0o644, 0o600, 0o755, 0o640][usize::try_from(self.rng.below(4)).unwrap_or(0)];
        let r = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode));
        if self.expect(Op::Chmod, &p, r).is_some() {
            self.model.files[f].mode = mode;
        }
        true
    }

    fn open_rw(&mut self, op: Op, p: &Path) -> Option<std::fs::File> {
        let r = std::fs::OpenOptions::new().read(true).write(true).open(p);
        self.expect(op, p, r)
    }

    fn truncate(&mut self) -> bool {
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        let size = self.rng.below(FILE_BYTES_MAX + 1);
        let Some(file) = self.open_rw(Op::Truncate, &p) else {
            return true;
        };
        if self.expect(Op::Truncate, &p, file.set_len(size)).is_some() {
            self.model.files[f]
                .data
                .resize(usize::try_from(size).unwrap_or(0), 0);
        }
        true
    }

    fn write(&mut self) -> bool {
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        let len = 1 + self.rng.below(OP_BYTES_MAX);
        let off = self.rng.below(FILE_BYTES_MAX - len);
        let data = self.bytes(len);
        let Some(file) = self.open_rw(Op::Write, &p) else {
            return true;
        };
        let r = std::os::unix::fs::FileExt::write_all_at(&file, &data, off);
        let r = r.and_then(|()| {
            // Errors of buffered writes are the close's: close explicitly.
            let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
            // SAFETY: our descriptor, closed once.
            if unsafe { libc::close(fd) } == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
        if self.expect(Op::Write, &p, r).is_some() {
            let d = &mut self.model.files[f].data;
            let end = usize::try_from(off + len).unwrap_or(0);
            if d.len() < end {
                d.resize(end, 0);
            }
            let start = usize::try_from(off).unwrap_or(0);
            d[start..end].copy_from_slice(&data);
        }
        true
    }

    fn read(&mut self) -> bool {
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        if let Some(got) = self.expect(Op::Read, &p, std::fs::read(&p)) {
            self.compare(Op::Read, f, &p, &got);
        }
        true
    }

    fn compare(&mut self, op: Op, f: usize, p: &Path, got: &[u8]) {
        let want = &self.model.files[f].data;
        if got != want.as_slice() {
            let at = got.iter().zip(want.iter()).position(|(a, b)| a != b);
            let what = format!(
                "contents differ: {} bytes read, {} expected, first difference at {at:?}",
                got.len(),
                want.len()
            );
            self.mismatch(op, p, what);
        }
    }

    fn fsync(&mut self) -> bool {
        let Some((_, p)) = self.random_name() else {
            return false;
        };
        if let Some(file) = self.open_rw(Op::Fsync, &p) {
            let r = file.sync_all();
            self.expect(Op::Fsync, &p, r);
        }
        true
    }

    fn getdents(&mut self) -> bool {
        let dir = self.random_dir();
        self.check_listing(Op::Getdents, &dir);
        true
    }

    fn check_listing(&mut self, op: Op, dir: &Path) {
        let r = std::fs::read_dir(dir).and_then(|it| {
            it.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<std::io::Result<BTreeSet<String>>>()
        });
        if let Some(got) = self.expect(op, dir, r) {
            let want = self.model.children(dir);
            if got != want {
                let extra: Vec<_> = got.difference(&want).collect();
                let missing: Vec<_> = want.difference(&got).collect();
                self.mismatch(
                    op,
                    dir,
                    format!("listing: extra {extra:?}, missing {missing:?}"),
                );
            }
        }
    }

    fn stat(&mut self) -> bool {
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        self.check_stat(Op::Stat, f, &p);
        true
    }

    fn check_stat(&mut self, op: Op, f: usize, p: &Path) {
        if let Some(m) = self.expect(op, p, std::fs::symlink_metadata(p)) {
            let want = &self.model.files[f];
            let (size, nlink, mode) = (want.data.len() as u64, want.names.len() as u64, want.mode);
            if !m.is_file() || m.len() != size || m.nlink() != nlink || m.mode() & 0o7777 != mode {
                self.mismatch(
                    op,
                    p,
                    format!(
                        "stat: size {} nlink {} mode {:o}, expected {size} {nlink} {mode:o}",
                        m.len(),
                        m.nlink(),
                        m.mode() & 0o7777
                    ),
                );
            }
        }
    }

    fn readlink(&mut self) -> bool {
        if self.model.links.is_empty() {
            return false;
        }
        let i = usize::try_from(self.rng.below(self.model.links.len() as u64)).unwrap_or(0);
        let Some((p, want)) = self
            .model
            .links
            .iter()
            .nth(i)
            .map(|(p, t)| (p.clone(), t.clone()))
        else {
            return false;
        };
        if let Some(got) = self.expect(Op::Readlink, &p, std::fs::read_link(&p))
            && got.as_os_str().as_bytes() != want.as_bytes()
        {
            self.mismatch(
                Op::Readlink,
                &p,
                format!("target {got:?}, expected {want:?}"),
            );
        }
        true
    }

    fn fallocate(&mut self) -> bool {
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        let len = 1 + self.rng.below(OP_BYTES_MAX);
        let off = self.rng.below(FILE_BYTES_MAX - len);
        let (mode, what) = match self.rng.below(4) {
            0 => (0, "allocate"),
            1 => (libc::FALLOC_FL_KEEP_SIZE, "keep size"),
            2 => (
                libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE,
                "punch",
            ),
            _ => (libc::FALLOC_FL_ZERO_RANGE, "zero range"),
        };
        let Some(file) = self.open_rw(Op::Fallocate, &p) else {
            return true;
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let (o, l) = (
            i64::try_from(off).unwrap_or(0),
            i64::try_from(len).unwrap_or(0),
        );
        // SAFETY: our descriptor.
        let r = if unsafe { libc::fallocate(fd, mode, o, l) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        };
        if r.as_ref()
            .err()
            .is_some_and(|e| e.raw_os_error() == Some(libc::EOPNOTSUPP))
        {
            self.no_fallocate = true;
            return true;
        }
        if self.expect(Op::Fallocate, &p, r).is_some() {
            let d = &mut self.model.files[f].data;
            let end = usize::try_from(off + len).unwrap_or(0);
            let start = usize::try_from(off).unwrap_or(0);
            let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
            if !keep && d.len() < end {
                d.resize(end, 0);
            }
            if what == "punch" || what == "zero range" {
                let stop = end.min(d.len());
                if start < stop {
                    d[start..stop].fill(0);
                }
            }
        }
        true
    }

    fn map_write(&mut self) -> bool {
        let Some((f, p)) = self.random_name() else {
            return false;
        };
        let size = self.model.files[f].data.len() as u64;
        if size == 0 {
            return false;
        }
        let off = self.rng.below(size);
        let len = (1 + self.rng.below(4096)).min(size - off);
        let data = self.bytes(len);
        let Some(file) = self.open_rw(Op::MapWrite, &p) else {
            return true;
        };
        // The size the model knows, set through this descriptor: a file system whose
        // kernel cache missed a truncate through another name (bindfs) must not turn the
        // mapped write into SIGBUS. A no-op where sizes are right.
        if self.expect(Op::MapWrite, &p, file.set_len(size)).is_none() {
            return true;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let map_len = usize::try_from(size).unwrap_or(0);
        // SAFETY: a shared mapping of our descriptor over the file's size (the model's,
        // which is the file's: nobody else writes this tree), written within it, synced
        // and unmapped here.
        let r = unsafe {
            let m = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if m == libc::MAP_FAILED {
                Err(std::io::Error::last_os_error())
            } else {
                let start = usize::try_from(off).unwrap_or(0);
                std::ptr::copy_nonoverlapping(data.as_ptr(), m.cast::<u8>().add(start), data.len());
                let synced = if libc::msync(m, map_len, libc::MS_SYNC) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                };
                libc::munmap(m, map_len);
                synced
            }
        };
        if self.expect(Op::MapWrite, &p, r).is_some() {
            let start = usize::try_from(off).unwrap_or(0);
            self.model.files[f].data[start..start + data.len()].copy_from_slice(&data);
        }
        true
    }

    /// Every name read back and every directory listed, against the model.
    fn verify_all(&mut self) {
        for f in 0..self.model.files.len() {
            for p in self.model.files[f].names.clone() {
                self.check_stat(Op::Stat, f, &p);
                if let Some(got) = self.expect(Op::Read, &p, std::fs::read(&p)) {
                    self.compare(Op::Read, f, &p, &got);
                }
            }
        }
        for d in self.model.dirs.clone() {
            self.check_listing(Op::Getdents, &d);
        }
    }
}

/// Runs one worker in `args.dir`; its report (mismatches included: the caller decides).
pub fn run_worker(args: &StressWorkerArgs) -> anyhow::Result<StressReport> {
    std::fs::create_dir_all(&args.dir)?;
    if std::fs::read_dir(&args.dir)?.next().is_some() {
        anyhow::bail!("{} is not empty", args.dir.display());
    }
    let mut w = Worker {
        rng: Rng::new(args.seed.wrapping_mul(0x9e37_79b9).wrapping_add(17)),
        model: Model {
            files: Vec::new(),
            dirs: vec![args.dir.clone()],
            links: BTreeMap::new(),
            made: 0,
        },
        report: StressReport::default(),
        no_mmap: args.no_mmap,
        no_fallocate: args.no_fallocate,
    };
    let started = Instant::now();
    let mut done = 0;
    while done < args.ops {
        let op = w.choose();
        let t = Instant::now();
        if w.step(op) {
            let us = u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX);
            w.report
                .micros
                .entry(op.name().into())
                .or_default()
                .push(us);
            done += 1;
        }
    }
    w.report.secs = started.elapsed().as_secs_f64();
    w.report.ops = done;
    w.verify_all();
    Ok(w.report)
}

/// `n` renames of a file from one directory to another, then `n` hard links from the
/// second into the first, one at a time: each one's time (`rename`, `link`); the files
/// are made first, untimed, and synced. Mismatches: any failure, and names not where
/// they must be.
pub fn run_latency(dir: &Path, n: u64) -> anyhow::Result<StressReport> {
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a)?;
    std::fs::create_dir_all(&b)?;
    for i in 0..n {
        std::fs::write(a.join(format!("f{i}")), b"x")?;
    }
    // Made durable and left to settle: the renames are timed on an idle file system,
    // not beside the creates still being sent and synced.
    std::fs::File::open(&a)?.sync_all()?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut report = StressReport::default();
    let started = Instant::now();
    let mut timed = |what: &str, r: std::io::Result<()>, t: Instant, p: &Path| {
        let us = u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX);
        report.micros.entry(what.into()).or_default().push(us);
        if let Err(e) = r {
            report
                .mismatches
                .push(format!("{what} {}: {}", p.display(), errno_of(&e)));
        }
    };
    for i in 0..n {
        let (from, to) = (a.join(format!("f{i}")), b.join(format!("f{i}")));
        let t = Instant::now();
        timed("rename", std::fs::rename(&from, &to), t, &from);
    }
    for i in 0..n {
        let (from, to) = (b.join(format!("f{i}")), a.join(format!("l{i}")));
        let t = Instant::now();
        timed("link", std::fs::hard_link(&from, &to), t, &from);
    }
    report.secs = started.elapsed().as_secs_f64();
    report.ops = 2 * n;
    for i in 0..n {
        let m = std::fs::metadata(b.join(format!("f{i}")));
        if !m.as_ref().is_ok_and(|m| m.nlink() == 2) || a.join(format!("f{i}")).exists() {
            report
                .mismatches
                .push(format!("f{i}: not renamed and linked ({m:?})"));
        }
    }
    Ok(report)
}

/// The hidden subcommand: runs and prints the report as one JSON line.
pub fn worker_main(args: &StressWorkerArgs) -> anyhow::Result<()> {
    let report = match args.latency {
        Some(n) => run_latency(&args.dir, n)?,
        None => run_worker(args)?,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// A percentile (0..=100) of sorted microseconds, in milliseconds.
#[must_use]
pub fn percentile_ms(sorted: &[u32], pct: u64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = (sorted.len() as u64 - 1) * pct / 100;
    f64::from(sorted[usize::try_from(i).unwrap_or(0)]) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_agrees_with_a_local_file_system() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let args = StressWorkerArgs {
            dir: dir.path().join("w"),
            ops: 3000,
            seed: 7,
            no_mmap: false,
            no_fallocate: false,
            latency: None,
        };
        let r = run_worker(&args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.mismatches, Vec::<String>::new());
        assert_eq!(r.ops, 3000);
        assert!(r.micros.len() >= 15, "{:?}", r.micros.keys());
    }

    #[test]
    fn latency_mode_renames_and_links_every_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let r = run_latency(dir.path(), 50).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.mismatches, Vec::<String>::new());
        assert_eq!(r.micros["rename"].len(), 50);
        assert_eq!(r.micros["link"].len(), 50);
    }

    #[test]
    fn a_wrong_answer_is_a_mismatch() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path().join("w");
        std::fs::create_dir(&root).unwrap_or_else(|e| panic!("{e}"));
        let mut w = Worker {
            rng: Rng::new(1),
            model: Model {
                files: Vec::new(),
                dirs: vec![root.clone()],
                links: BTreeMap::new(),
                made: 0,
            },
            report: StressReport::default(),
            no_mmap: false,
            no_fallocate: false,
        };
        assert!(w.creat());
        assert!(w.write());
        // Someone else changes the file behind the model's back.
        let p = w.model.files[0].names[0].clone();
        std::fs::write(&p, b"not what was written").unwrap_or_else(|e| panic!("{e}"));
        w.verify_all();
        assert!(!w.report.mismatches.is_empty());
    }
}
