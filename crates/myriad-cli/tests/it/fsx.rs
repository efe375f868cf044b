//! A file-data integrity exerciser (in the spirit of fsx): one file, a long random sequence
//! of writes, extending writes, truncates up and down, reads, mapped reads and writes,
//! fallocate (allocate, keep-size, punch hole, zero range), copy_file_range and fsync, each
//! checked against an in-memory model of the file right after it (contents read back, size
//! by fstat and lseek(SEEK_END)). The file can be closed and reopened every N steps and
//! the descriptors can alternate between two mounts of one cluster (close-to-open: each
//! switch closes the file on one mount and opens it on the other).
//!
//! Everything is decided by one seed, so a failure names the seed and step that replay it:
//! `MYRIAD_FSX_SEED=S MYRIAD_FSX_STEPS=N cargo test -p myriad-cli --test it fsx_long -- --ignored`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::exerciser::Rng;

#[derive(Clone, Debug)]
pub struct FsxConfig {
    pub seed: u64,
    pub steps: u64,
    /// Largest file size the sequence makes.
    pub max_len: u64,
    /// Largest single read or write.
    pub max_op: u64,
    /// Close and reopen the file every this many steps (0: never).
    pub reopen_every: u64,
    /// Mapped reads and writes.
    pub mmap: bool,
    /// fallocate and copy_file_range.
    pub falloc: bool,
    /// Offsets near these boundaries are drawn more often (chunk and block edges).
    pub hot_offsets: Vec<u64>,
    /// Mostly the mix an outside exerciser failed with (issue 47: `msync` of a mapped
    /// write gave EACCES after a write, an extending fallocate, a punched hole and a
    /// truncate up): fallocates, truncates up and mapped writes with msync.
    pub falloc_map_mix: bool,
}

impl FsxConfig {
    pub fn new(seed: u64, steps: u64) -> FsxConfig {
        FsxConfig {
            seed,
            steps,
            max_len: 256 * 1024,
            max_op: 64 * 1024,
            reopen_every: 0,
            mmap: true,
            falloc: true,
            hot_offsets: vec![64 * 1024, 128 * 1024],
            falloc_map_mix: false,
        }
        .with_env()
    }
}

impl FsxConfig {
    /// Exploration knobs: MYRIAD_FSX_MMAP=0, MYRIAD_FSX_FALLOC=0, MYRIAD_FSX_MIX=falloc-map.
    fn with_env(mut self) -> FsxConfig {
        if std::env::var("MYRIAD_FSX_MMAP").as_deref() == Ok("0") {
            self.mmap = false;
        }
        if std::env::var("MYRIAD_FSX_FALLOC").as_deref() == Ok("0") {
            self.falloc = false;
        }
        if std::env::var("MYRIAD_FSX_MIX").as_deref() == Ok("falloc-map") {
            self.falloc_map_mix = true;
        }
        self
    }
}

#[derive(Clone, Debug)]
enum Op {
    Read { off: u64, len: u64 },
    Write { off: u64, len: u64 },
    MapRead { off: u64, len: u64 },
    MapWrite { off: u64, len: u64 },
    Truncate { size: u64 },
    Fallocate { mode: i32, off: u64, len: u64 },
    Copy { src: u64, dst: u64, len: u64 },
    Fsync,
    Reopen { mount: usize },
}

/// Where the failing step was, for the SIGBUS handler (a crash must still name its seed).
static CURRENT_SEED: AtomicU64 = AtomicU64::new(0);
static CURRENT_STEP: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigbus(_sig: libc::c_int) {
    let msg = format!(
        "fsx: SIGBUS at seed {} step {}\n",
        CURRENT_SEED.load(Ordering::Relaxed),
        CURRENT_STEP.load(Ordering::Relaxed)
    );
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer outlives the call.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(99);
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

fn last_errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

struct Run<'a> {
    cfg: &'a FsxConfig,
    files: Vec<PathBuf>,
    mount: usize,
    fd: i32,
    model: Vec<u8>,
    rng: Rng,
    log: Vec<String>,
    step: u64,
}

impl Run<'_> {
    fn fail(&self, what: &str) -> ! {
        let s = crate::exerciser::last_lines(&self.log, 25);
        panic!(
            "fsx seed {} step {} (file {}): {what}\nlast operations:\n{s}",
            self.cfg.seed,
            self.step,
            self.files[self.mount].display()
        );
    }

    fn open(&mut self) {
        let c = cpath(&self.files[self.mount]);
        // SAFETY: valid NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                // Close-on-exec: a child another test spawns meanwhile (a server that
                // lives on) must not inherit it and keep the mount busy at unmount.
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            self.fail(&format!("open: {}", last_errno()));
        }
        self.fd = fd;
    }

    fn close(&mut self) {
        // SAFETY: fd is ours.
        if unsafe { libc::close(self.fd) } != 0 {
            self.fail(&format!("close: {}", last_errno()));
        }
        self.fd = -1;
    }

    fn offset(&mut self, limit: u64) -> u64 {
        let limit = limit.max(1);
        if !self.cfg.hot_offsets.is_empty() && self.rng.chance(15) {
            let h =
                self.cfg.hot_offsets[self.rng.below(self.cfg.hot_offsets.len() as u64) as usize];
            let jitter = self.rng.below(8192);
            let o = (h + jitter).saturating_sub(4096);
            return o.min(limit - 1);
        }
        self.rng.below(limit)
    }

    fn len(&mut self) -> u64 {
        // Mostly small, sometimes up to max_op (fsx draws sizes the same way).
        if self.rng.chance(70) {
            1 + self.rng.below(self.cfg.max_op.min(8192))
        } else {
            1 + self.rng.below(self.cfg.max_op)
        }
    }

    /// An operation of the fallocate-and-mapped-write mix (`FsxConfig::falloc_map_mix`).
    fn pick_falloc_map(&mut self) -> Op {
        let size = self.model.len() as u64;
        let max = self.cfg.max_len;
        match self.rng.below(100) {
            0..=14 => {
                let off = self.offset(max);
                let len = self.len().min(max - off);
                Op::Write { off, len }
            }
            15..=34 => {
                let mode = if self.rng.chance(50) {
                    0
                } else {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                };
                let off = self.offset(max);
                let len = self.len().min(max - off);
                Op::Fallocate { mode, off, len }
            }
            35..=49 => Op::Truncate {
                size: size + self.rng.below(max.saturating_sub(size) + 1),
            },
            50..=84 => {
                let off = self.offset(max);
                let len = self.len().min(max - off);
                Op::MapWrite { off, len }
            }
            85..=94 => {
                let off = self.offset(size.max(1));
                let len = self.len();
                Op::Read { off, len }
            }
            _ => Op::Fsync,
        }
    }

    fn pick(&mut self) -> Op {
        if self.cfg.falloc_map_mix {
            return self.pick_falloc_map();
        }
        let size = self.model.len() as u64;
        let max = self.cfg.max_len;
        loop {
            let op = match self.rng.below(100) {
                0..=24 => {
                    let off = self.offset(size.max(1));
                    let len = self.len();
                    Op::Read { off, len }
                }
                25..=54 => {
                    let off = self.offset(max);
                    let len = self.len().min(max - off);
                    Op::Write { off, len }
                }
                55..=62 if self.cfg.mmap && size > 0 => {
                    let off = self.offset(size);
                    let len = self.len().min(size - off);
                    Op::MapRead { off, len }
                }
                63..=70 if self.cfg.mmap => {
                    let off = self.offset(max);
                    let len = self.len().min(max - off);
                    Op::MapWrite { off, len }
                }
                71..=78 => {
                    let size = if self.rng.chance(50) {
                        self.rng.below(size.max(1) + 1)
                    } else {
                        self.offset(max + 1)
                    };
                    Op::Truncate { size }
                }
                79..=88 if self.cfg.falloc => {
                    let mode = match self.rng.below(5) {
                        0 => 0,
                        1 => libc::FALLOC_FL_KEEP_SIZE,
                        2 => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        3 => libc::FALLOC_FL_ZERO_RANGE,
                        _ => libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                    };
                    let off = self.offset(max);
                    let len = self.len().min(max - off);
                    Op::Fallocate { mode, off, len }
                }
                89..=95 if self.cfg.falloc && size > 0 => {
                    let src = self.offset(size);
                    let len = self.len().min(size - src);
                    let dst = self.offset(max);
                    let len = len.min(max - dst);
                    // copy_file_range refuses overlapping ranges within one file.
                    if len == 0 || (src < dst + len && dst < src + len) {
                        continue;
                    }
                    Op::Copy { src, dst, len }
                }
                96..=99 => Op::Fsync,
                _ => continue,
            };
            return op;
        }
    }

    fn check_size(&self, when: &str) {
        let want = self.model.len() as u64;
        // SAFETY: st is plain data filled by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is ours, st is valid.
        if unsafe { libc::fstat(self.fd, &mut st) } != 0 {
            self.fail(&format!("fstat {when}: {}", last_errno()));
        }
        if st.st_size as u64 != want {
            self.fail(&format!(
                "fstat {when}: size {:#x}, model {want:#x}",
                st.st_size
            ));
        }
        // SAFETY: fd is ours.
        let end = unsafe { libc::lseek(self.fd, 0, libc::SEEK_END) };
        if end < 0 || end as u64 != want {
            self.fail(&format!(
                "lseek(SEEK_END) {when}: {end:#x}, model {want:#x}"
            ));
        }
    }

    fn compare(&self, what: &str, off: u64, got: &[u8]) {
        let size = self.model.len() as u64;
        let want_len = size.saturating_sub(off).min(got.len() as u64) as usize;
        let want = &self.model[off as usize..off as usize + want_len];
        if got.len() != want.len() {
            self.fail(&format!(
                "{what} at {off:#x}: {} bytes, model has {}",
                got.len(),
                want.len()
            ));
        }
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            let at = off + i as u64;
            let bad_end = got
                .iter()
                .zip(want)
                .rposition(|(a, b)| a != b)
                .map_or(at, |j| off + j as u64);
            self.fail(&format!(
                "{what} at {off:#x}+{:#x}: first wrong byte at {at:#x} (got {:#04x}, want \
                 {:#04x}), last wrong byte at {bad_end:#x}",
                got.len(),
                got[i],
                want[i]
            ));
        }
    }

    fn pread(&self, off: u64, len: u64) -> Vec<u8> {
        let mut buf = vec![0u8; len as usize];
        let mut done = 0usize;
        while done < buf.len() {
            // SAFETY: the buffer range is valid and ours.
            let n = unsafe {
                libc::pread(
                    self.fd,
                    buf[done..].as_mut_ptr().cast(),
                    buf.len() - done,
                    (off + done as u64) as i64,
                )
            };
            if n < 0 {
                self.fail(&format!("pread at {off:#x}: {}", last_errno()));
            }
            if n == 0 {
                break;
            }
            done += n as usize;
        }
        buf.truncate(done);
        buf
    }

    fn data(&mut self, len: u64) -> Vec<u8> {
        // A recognisable pattern: step number in every byte's neighbourhood.
        let tag = self.step as u8;
        (0..len)
            .map(|i| tag ^ ((self.rng.next_u64() as u8) | (i as u8 & 1)))
            .collect()
    }

    fn model_write(&mut self, off: u64, data: &[u8]) {
        let end = off as usize + data.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(data);
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Read { off, len } => {
                let got = self.pread(off, len);
                self.compare("read", off, &got);
            }
            Op::Write { off, len } => {
                let data = self.data(len);
                // SAFETY: data is valid for len bytes.
                let n =
                    unsafe { libc::pwrite(self.fd, data.as_ptr().cast(), data.len(), off as i64) };
                if n < 0 || n as usize != data.len() {
                    self.fail(&format!(
                        "pwrite at {off:#x}+{len:#x}: {n} ({})",
                        last_errno()
                    ));
                }
                self.model_write(off, &data);
            }
            Op::MapRead { off, len } => self.map_read(off, len),
            Op::MapWrite { off, len } => self.map_write(off, len),
            Op::Truncate { size } => {
                // SAFETY: fd is ours.
                if unsafe { libc::ftruncate(self.fd, size as i64) } != 0 {
                    self.fail(&format!("ftruncate {size:#x}: {}", last_errno()));
                }
                self.model.resize(size as usize, 0);
            }
            Op::Fallocate { mode, off, len } => {
                // SAFETY: fd is ours.
                let r = unsafe { libc::fallocate(self.fd, mode, off as i64, len as i64) };
                if r != 0 {
                    self.fail(&format!(
                        "fallocate mode {mode:#x} {off:#x}+{len:#x}: {}",
                        last_errno()
                    ));
                }
                let end = (off + len) as usize;
                let size = self.model.len();
                if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
                    let zero_end = end.min(size.max(if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
                        0
                    } else {
                        end
                    }));
                    if zero_end > off as usize {
                        let z = vec![0u8; zero_end - off as usize];
                        self.model_write(off, &z);
                    }
                }
                if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > self.model.len() {
                    self.model.resize(end, 0);
                }
            }
            Op::Copy { src, dst, len } => self.copy(src, dst, len),
            Op::Fsync => {
                // SAFETY: fd is ours.
                if unsafe { libc::fsync(self.fd) } != 0 {
                    self.fail(&format!("fsync: {}", last_errno()));
                }
            }
            Op::Reopen { mount } => {
                self.close();
                self.mount = mount;
                self.open();
                // A whole read after a reopen: close-to-open must show every byte.
                let got = self.pread(0, self.model.len() as u64 + 1);
                self.compare("read after reopen", 0, &got);
            }
        }
    }

    fn copy(&mut self, src: u64, dst: u64, len: u64) {
        let mut done = 0u64;
        while done < len {
            let mut s = (src + done) as i64;
            let mut d = (dst + done) as i64;
            // SAFETY: offsets are valid pointers to locals; fd is ours.
            let n = unsafe {
                libc::copy_file_range(self.fd, &mut s, self.fd, &mut d, (len - done) as usize, 0)
            };
            if n < 0 {
                self.fail(&format!(
                    "copy_file_range {src:#x} -> {dst:#x} +{len:#x}: {}",
                    last_errno()
                ));
            }
            if n == 0 {
                break;
            }
            done += n as u64;
        }
        let data = self.model[src as usize..(src + done) as usize].to_vec();
        if done != len {
            self.fail(&format!("copy_file_range copied {done:#x} of {len:#x}"));
        }
        self.model_write(dst, &data);
    }

    /// mmap of the whole file (which must be at least `end` long), then `f` on the map.
    fn with_map(&self, end: u64, write: bool, f: impl FnOnce(&mut [u8])) {
        let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
        // SAFETY: mapping a file we hold open; unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                end as usize,
                prot,
                libc::MAP_SHARED,
                self.fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            self.fail(&format!("mmap of {end:#x} bytes: {}", last_errno()));
        }
        // SAFETY: the map is end bytes long and ours until munmap.
        let s = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), end as usize) };
        f(s);
        // SAFETY: p and the length are the ones mapped.
        unsafe {
            if write && libc::msync(p, end as usize, libc::MS_SYNC) != 0 {
                self.fail(&format!("msync: {}", last_errno()));
            }
            libc::munmap(p, end as usize);
        }
    }

    fn map_read(&mut self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut got = Vec::new();
        self.with_map(off + len, false, |m| {
            got = m[off as usize..(off + len) as usize].to_vec();
        });
        self.compare("mapped read", off, &got);
    }

    fn map_write(&mut self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = off + len;
        if (self.model.len() as u64) < end {
            // As fsx: a mapped write beyond the end first extends the file.
            // SAFETY: fd is ours.
            if unsafe { libc::ftruncate(self.fd, end as i64) } != 0 {
                self.fail(&format!(
                    "ftruncate {end:#x} before a mapped write: {}",
                    last_errno()
                ));
            }
            self.model.resize(end as usize, 0);
        }
        let data = self.data(len);
        self.with_map(end, true, |m| {
            m[off as usize..end as usize].copy_from_slice(&data);
        });
        self.model_write(off, &data);
    }
}

/// Runs the sequence of `cfg` on `files` (one path per mount of the same file; one path:
/// a single mount). Panics with the seed, the step and the last operations on the first
/// difference from the model.
pub fn run(cfg: &FsxConfig, files: &[PathBuf]) {
    // SAFETY: installing a handler that only writes and exits.
    unsafe {
        libc::signal(libc::SIGBUS, on_sigbus as *const () as libc::sighandler_t);
    }
    CURRENT_SEED.store(cfg.seed, Ordering::Relaxed);
    let _ = std::fs::remove_file(&files[0]);
    let mut r = Run {
        cfg,
        files: files.to_vec(),
        mount: 0,
        fd: -1,
        model: Vec::new(),
        rng: Rng::new(cfg.seed),
        log: Vec::new(),
        step: 0,
    };
    r.open();
    let trace = std::env::var("MYRIAD_FSX_TRACE").as_deref() == Ok("1");
    for step in 1..=cfg.steps {
        r.step = step;
        CURRENT_STEP.store(step, Ordering::Relaxed);
        let op = if cfg.reopen_every > 0 && step % cfg.reopen_every == 0 {
            let mount = if files.len() > 1 {
                r.rng.below(files.len() as u64) as usize
            } else {
                0
            };
            Op::Reopen { mount }
        } else {
            r.pick()
        };
        r.log
            .push(format!("{step}: {op:?} (size before {:#x})", r.model.len()));
        if trace {
            // A crash (SIGBUS) leaves no log: MYRIAD_FSX_TRACE=1 prints each step first.
            eprintln!("{}", r.log[r.log.len() - 1]);
        }
        if r.log.len() > 1000 {
            r.log.drain(..500);
        }
        r.apply(&op);
        r.check_size(&format!("after {op:?}"));
    }
    // The end: every byte, through the descriptor and through a fresh open.
    let got = r.pread(0, r.model.len() as u64 + 1);
    r.compare("final read", 0, &got);
    r.close();
    let whole = std::fs::read(&files[0]).unwrap_or_else(|e| panic!("{e}"));
    r.compare("final read of a fresh open", 0, &whole);
}

/// Sanity of the exerciser itself: its model agrees with the local kernel's file system
/// (ext4 or whatever holds the temporary directory; tmpfs lacks FALLOC_FL_ZERO_RANGE).
#[test]
fn fsx_model_agrees_with_a_local_file_system() {
    let dir = tempfile::Builder::new()
        .prefix("myriad-fsx-local-")
        .tempdir()
        .unwrap_or_else(|e| panic!("{e}"));
    for seed in 1..=3 {
        let mut cfg = FsxConfig::new(seed, 3000);
        cfg.reopen_every = 97;
        run(&cfg, &[dir.path().join("f")]);
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The fixed seed set through a real mount of a 4-node cluster with 3 copies: plain, with
/// reopen every 50 steps, across two mounts, and over chunk boundaries.
#[test]
fn fsx_through_the_mount() {
    use crate::harness::TestCluster;
    use crate::mount::Mount;
    let cl = TestCluster::start_with(4, &["--replicas", "3"]);
    // The mounts trace their data path, so that a failure shows what the kernel asked.
    let env = [("MYRIAD_LOG", "info,openraft=off,myriad_fuse::io=trace")];
    let a = Mount::with_env(&cl, &[], &env);
    let b = Mount::with_env(&cl, &[], &env);
    let steps = env_u64("MYRIAD_FSX_STEPS").unwrap_or(4000);
    let with_logs = |cfg: &FsxConfig, files: &[PathBuf]| {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cfg, files)));
        if let Err(p) = r {
            for (name, m) in [("a", &a), ("b", &b)] {
                let log = m.log_text();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(120)..].join("\n");
                eprintln!("--- mount {name}: last lines of its log ---\n{tail}");
            }
            std::panic::resume_unwind(p);
        }
    };
    for seed in 1..=2 {
        with_logs(&FsxConfig::new(seed, steps), &[a.path("f")]);
    }
    let mut cfg = FsxConfig::new(3, steps);
    cfg.reopen_every = 50;
    with_logs(&cfg, &[a.path("g")]);
    let mut cfg = FsxConfig::new(4, steps);
    cfg.reopen_every = 40;
    with_logs(&cfg, &[a.path("h"), b.path("h")]);
    // The mix an outside exerciser failed with (issue 47): fallocate, punch, truncate
    // up, then mapped writes and msync, on a file root made, with write-behind on.
    let mut cfg = FsxConfig::new(42, steps / 2);
    cfg.falloc_map_mix = true;
    with_logs(&cfg, &[a.path("m")]);
    // Across chunk boundaries (chunk 0 lives with the inode, chunks 1 and 2 elsewhere).
    let mut cfg = FsxConfig::new(5, steps / 2);
    cfg.max_len = 9 << 20;
    cfg.hot_offsets = vec![4 << 20, 8 << 20, 64 << 10];
    cfg.reopen_every = 100;
    with_logs(&cfg, &[a.path("c"), b.path("c")]);
    for m in [&a, &b] {
        let log = m.log_text();
        assert!(!log.contains("Not Implemented"), "mount log: {log}");
    }
}

/// The long run (issue 16: at least 1,000,000 steps clean), and the replay of one seed:
/// `MYRIAD_FSX_SEED=S MYRIAD_FSX_STEPS=N MYRIAD_FSX_REOPEN=K cargo test --release -p
/// myriad-cli --test it fsx_long -- --ignored --nocapture`. Two mounts; every K steps
/// (default 1,000) the file is closed and reopened on one of them. MYRIAD_FSX_MAX_LEN
/// makes files bigger (9437184: over two chunk boundaries).
#[test]
#[ignore = "long: run by hand (see its doc)"]
fn fsx_long() {
    use crate::harness::TestCluster;
    use crate::mount::Mount;
    let cl = TestCluster::start_with(4, &["--replicas", "3"]);
    let a = Mount::new(&cl, &[]);
    let b = Mount::new(&cl, &[]);
    let mut cfg = FsxConfig::new(
        env_u64("MYRIAD_FSX_SEED").unwrap_or(1),
        env_u64("MYRIAD_FSX_STEPS").unwrap_or(1_000_000),
    );
    cfg.reopen_every = env_u64("MYRIAD_FSX_REOPEN").unwrap_or(1000);
    if let Some(len) = env_u64("MYRIAD_FSX_MAX_LEN") {
        // Bigger files: chunk boundaries (4 MiB) get hot offsets too.
        cfg.max_len = len;
        cfg.hot_offsets = vec![4 << 20, 8 << 20, 64 << 10];
    }
    let started = std::time::Instant::now();
    run(&cfg, &[a.path("long"), b.path("long")]);
    eprintln!(
        "fsx seed {} : {} steps clean in {:.0} s",
        cfg.seed,
        cfg.steps,
        started.elapsed().as_secs_f64()
    );
}
