//! The measurement: mount the probe file system over one transport, run callers that each
//! make one kernel request per call, and count calls, requests and CPU (the whole process's,
//! callers and daemon; and the whole machine's) per request.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::probe_fs::{Counts, FILE_NAME, FILE_SIZE};
use crate::{device, ring};

/// How the daemon talks to the kernel.
#[derive(Clone, Copy, Debug)]
pub enum Transport {
    /// `threads` threads reading /dev/fuse, each its own clone of the descriptor (as the
    /// mount's readers are).
    Device { threads: usize },
    /// One io_uring queue per possible CPU with `depth` entries; `pin`: each queue's thread
    /// on its CPU.
    Ring { depth: usize, pin: bool },
}

impl Transport {
    pub fn name(&self) -> String {
        match self {
            Transport::Device { threads } => format!("/dev/fuse, {threads} readers"),
            Transport::Ring { depth, pin } => format!(
                "io_uring, depth {depth}{}",
                if *pin { ", pinned" } else { "" }
            ),
        }
    }
}

/// What each caller repeats: one kernel request per call.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// `statx(AT_STATX_FORCE_SYNC)` of an open file: a GETATTR.
    Stat,
    /// `pread` of 4 KiB from a direct-I/O file: a READ with 4 KiB of payload.
    Read4k,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Stat => "getattr",
            Op::Read4k => "read 4 KiB",
        }
    }
}

/// One measured phase.
#[derive(Clone, Debug)]
pub struct Sample {
    pub transport: String,
    pub op: &'static str,
    pub callers: usize,
    pub calls_per_sec: f64,
    /// Requests the daemon answered per call (1.0 when every call is one request).
    pub requests_per_call: f64,
    /// Of the requests, the share that came over the ring.
    pub ring_share: f64,
    /// CPU of this process (callers and daemon) per request, microseconds.
    pub process_cpu_us: f64,
    /// CPU of the whole machine per request, microseconds.
    pub machine_cpu_us: f64,
}

/// A mounted probe: its daemon threads and where it is mounted.
struct Mounted {
    target: PathBuf,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

fn mount(dir: &Path, transport: Transport) -> io::Result<Mounted> {
    let target = dir.join("probe");
    std::fs::create_dir_all(&target)?;
    let fd: Arc<OwnedFd> = Arc::new(device::mount(&target)?);
    let mut m = Mounted {
        target,
        counts: Arc::new(Counts::default()),
        stop: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
    };
    match m.serve(fd, transport) {
        Ok(()) => Ok(m),
        Err(e) => {
            // Unmounted, so that no reader is left blocked and nothing stays mounted.
            let _ = m.finish();
            Err(e)
        }
    }
}

impl Mounted {
    /// Starts the daemon on the mount's descriptor `fd`: its /dev/fuse readers, INIT, and
    /// then the ring's queues if `transport` is the ring.
    fn serve(&mut self, fd: Arc<OwnedFd>, transport: Transport) -> io::Result<()> {
        let (init_tx, init_rx) = std::sync::mpsc::channel();
        let use_ring = matches!(transport, Transport::Ring { .. });
        let device_threads = match transport {
            Transport::Device { threads } => threads.max(1),
            Transport::Ring { .. } => 1, // INIT, forgets, interrupts
        };
        for i in 0..device_threads {
            // The first reader serves the mount's own descriptor, the others clones of it.
            let fd = if i == 0 {
                fd.clone()
            } else {
                Arc::new(device::clone_channel(&fd)?)
            };
            let (counts, init_tx) = (self.counts.clone(), init_tx.clone());
            self.threads.push(std::thread::spawn(move || {
                device::serve(fd, counts, use_ring, || {
                    let _ = init_tx.send(());
                });
                Ok(())
            }));
        }
        // The kernel sends INIT at the first access.
        let probe_target = self.target.clone();
        std::thread::spawn(move || std::fs::metadata(probe_target));
        init_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| io::Error::other("the kernel sent no INIT within 5 s"))?;
        if let Transport::Ring { depth, pin } = transport {
            for qid in 0..ring::possible_cpus()? {
                let (fd, counts, stop) = (fd.clone(), self.counts.clone(), self.stop.clone());
                self.threads.push(std::thread::spawn(move || {
                    ring::serve_queue(fd, qid, depth, pin, counts, stop)
                }));
            }
        }
        Ok(())
    }

    fn finish(self) -> io::Result<()> {
        let unmounted = device::unmount(&self.target);
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join()
                .map_err(|_| io::Error::other("a daemon thread panicked"))??;
        }
        unmounted
    }

    fn requests(&self) -> (u64, u64) {
        (
            self.counts.via_device.load(Ordering::Relaxed),
            self.counts.via_ring.load(Ordering::Relaxed),
        )
    }
}

/// CPU seconds of this process so far (all threads, user and system).
fn process_cpu() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Busy CPU seconds of the whole machine so far (/proc/stat, all but idle and iowait).
fn machine_cpu() -> io::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .next()
        .ok_or_else(|| io::Error::other("empty /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let busy: u64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, x)| x)
        .sum();
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(busy as f64 / hz)
}

/// One caller: repeats `op` on the probe file until `until`; returns its calls.
fn caller(file: PathBuf, op: Op, until: Instant) -> io::Result<u64> {
    let f = std::fs::File::open(file)?;
    let fd = f.as_raw_fd();
    let mut buf = vec![0u8; 4096];
    let empty = c"";
    let mut calls = 0u64;
    while Instant::now() < until {
        for _ in 0..32 {
            let rc = match op {
                Op::Stat => {
                    // SAFETY: a zeroed statx is valid output space; the path is "".
                    let mut st: libc::statx = unsafe { std::mem::zeroed() };
                    // SAFETY: valid descriptor, NUL-terminated path, live output struct.
                    let rc = unsafe {
                        libc::statx(
                            fd,
                            empty.as_ptr(),
                            libc::AT_EMPTY_PATH | libc::AT_STATX_FORCE_SYNC,
                            libc::STATX_BASIC_STATS,
                            &mut st,
                        ) as isize
                    };
                    if rc == 0 && st.stx_size != FILE_SIZE {
                        return Err(io::Error::other(format!("stat said {} bytes", st.stx_size)));
                    }
                    rc
                }
                // SAFETY: `buf` is live and writable for its length.
                Op::Read4k => unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) },
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            if matches!(op, Op::Read4k) && rc as usize != buf.len() {
                return Err(io::Error::other(format!(
                    "a 4 KiB read returned {rc} bytes"
                )));
            }
            calls += 1;
        }
    }
    Ok(calls)
}

fn phase(m: &Mounted, name: &str, op: Op, callers: usize, secs: f64) -> io::Result<Sample> {
    let file = m.target.join(FILE_NAME);
    let (dev0, ring0) = m.requests();
    let (cpu0, mach0, t0) = (process_cpu(), machine_cpu()?, Instant::now());
    let until = t0 + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..callers)
        .map(|_| {
            let file = file.clone();
            std::thread::spawn(move || caller(file, op, until))
        })
        .collect();
    let mut calls = 0u64;
    for h in handles {
        calls += h
            .join()
            .map_err(|_| io::Error::other("a caller panicked"))??;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (cpu1, mach1) = (process_cpu(), machine_cpu()?);
    let (dev1, ring1) = m.requests();
    let requests = ((dev1 - dev0) + (ring1 - ring0)).max(1) as f64;
    Ok(Sample {
        transport: name.to_string(),
        op: op.name(),
        callers,
        calls_per_sec: calls as f64 / elapsed,
        requests_per_call: requests / calls.max(1) as f64,
        ring_share: (ring1 - ring0) as f64 / requests,
        process_cpu_us: (cpu1 - cpu0) * 1e6 / requests,
        machine_cpu_us: (mach1 - mach0) * 1e6 / requests,
    })
}

/// Mounts the probe under `dir` over `transport` and measures each op at each number of
/// callers for `secs` seconds.
pub fn measure(
    dir: &Path,
    transport: Transport,
    ops: &[Op],
    callers: &[usize],
    secs: f64,
) -> io::Result<Vec<Sample>> {
    let m = mount(dir, transport)?;
    let name = transport.name();
    let result = (|| -> io::Result<Vec<Sample>> {
        // A short warm-up: the ring's queues register in the background.
        phase(&m, &name, Op::Stat, 1, 0.2)?;
        let mut out = Vec::new();
        for &op in ops {
            for &n in callers {
                out.push(phase(&m, &name, op, n, secs)?);
            }
        }
        Ok(out)
    })();
    let finished = m.finish();
    let samples = result?;
    finished?;
    Ok(samples)
}
