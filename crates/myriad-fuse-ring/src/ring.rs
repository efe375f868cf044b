//! FUSE over io_uring (Linux 6.14+, the `fuse.enable_uring` module parameter; the kernel's
//! fuse-io-uring.rst): one queue per possible CPU, each a thread with its own ring holding
//! `depth` entries. An entry is a header buffer and a payload buffer registered with the
//! kernel by a `URING_CMD`; the kernel completes that command with a request written into
//! them, and the daemon answers by writing the reply into the same buffers and sending
//! `COMMIT_AND_FETCH`, which also hands the entry back for the next request. One
//! submission per reply and no `read`/`write` system call per request.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::abi::{self, InHeader};
use crate::probe_fs::{self, Answer, Counts};

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `struct fuse_uring_req_header`: the in/out header (128), the op's own header (128) and
/// `struct fuse_uring_ent_in_out` (32).
const HEADER_LEN: usize = 288;
const OP_IN_AT: usize = 128;
const OP_IN_LEN: usize = 128;
const ENT_COMMIT_ID_AT: usize = 264;
const ENT_PAYLOAD_SZ_AT: usize = 272;
/// The kernel refuses a payload buffer smaller than its largest request.
const PAYLOAD_LEN: usize = abi::MAX_WRITE as usize;

/// One ring entry's buffers, and the iovecs that name them at registration.
struct Entry {
    header: Vec<u8>,
    payload: Vec<u8>,
    iov: [libc::iovec; 2],
}

impl Entry {
    fn new() -> Box<Entry> {
        let mut e = Box::new(Entry {
            header: vec![0u8; HEADER_LEN],
            payload: vec![0u8; PAYLOAD_LEN],
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 2],
        });
        e.iov = [
            libc::iovec {
                iov_base: e.header.as_mut_ptr().cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: e.payload.as_mut_ptr().cast(),
                iov_len: PAYLOAD_LEN,
            },
        ];
        e
    }
}

/// The submission for entry `idx` of queue `qid`: a registration (the iovecs) or a commit of
/// the reply to `commit_id` that also fetches the next request.
fn command(
    fd: i32,
    qid: u16,
    idx: usize,
    entry: &Entry,
    commit_id: Option<u64>,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.unwrap_or(0).to_le_bytes());
    cmd[16..18].copy_from_slice(&qid.to_le_bytes());
    let op = if commit_id.is_some() {
        CMD_COMMIT_AND_FETCH
    } else {
        CMD_REGISTER
    };
    let sqe = opcode::UringCmd80::new(types::Fd(fd), op)
        .cmd(cmd)
        .addr(Some(entry.iov.as_ptr() as u64))
        .build()
        .user_data(idx as u64);
    // The crate has no setter for the SQE's `len`, which a registration must set to the
    // number of iovecs (2). `Entry128` is `repr(C)`: the 128 bytes of the SQE.
    // SAFETY: same size; every byte pattern is a valid [u8; 128] and a valid SQE.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[24..28].copy_from_slice(&2u32.to_le_bytes());
    // SAFETY: as above, back to the SQE with its `len` set.
    unsafe { std::mem::transmute(bytes) }
}

/// The CPUs the kernel may route requests from: every one needs a queue before the ring is
/// used.
pub fn possible_cpus() -> io::Result<u16> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let last = s
        .trim()
        .rsplit([',', '-'])
        .next()
        .and_then(|n| n.parse::<u16>().ok())
        .ok_or_else(|| io::Error::other(format!("cannot read possible CPUs from {s:?}")))?;
    Ok(last + 1)
}

/// Whether the kernel lets daemons use FUSE over io_uring.
pub fn enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

/// Sets `fuse.enable_uring` (root only); returns what it was.
pub fn set_enabled(on: bool) -> io::Result<bool> {
    let was = enabled();
    std::fs::write(
        "/sys/module/fuse/parameters/enable_uring",
        if on { "Y" } else { "N" },
    )?;
    Ok(was)
}

fn pin_to(cpu: u16) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(usize::from(cpu), &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Serves queue `qid` with `depth` entries until `stop` is set or the connection ends.
/// `pin`: run on CPU `qid`, as libfuse does.
pub fn serve_queue(
    fd: Arc<OwnedFd>,
    qid: u16,
    depth: usize,
    pin: bool,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    if pin {
        pin_to(qid);
    }
    let raw = fd.as_raw_fd();
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
        IoUring::builder().build((depth * 2) as u32)?;
    let mut entries: Vec<Box<Entry>> = (0..depth).map(|_| Entry::new()).collect();
    for (idx, e) in entries.iter().enumerate() {
        let sqe = command(raw, qid, idx, e, None);
        // SAFETY: the entry's buffers and iovecs live in `entries` for as long as the ring.
        unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
    }
    ring.submit()?;
    let wait = types::Timespec::from(Duration::from_millis(100));
    let mut out = Vec::with_capacity(PAYLOAD_LEN);
    let mut body = Vec::with_capacity(PAYLOAD_LEN + 128);
    let mut done = Vec::with_capacity(depth);
    while !stop.load(Ordering::Relaxed) {
        let args = types::SubmitArgs::new().timespec(&wait);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        for &(idx, res) in &done {
            let e = &mut entries[idx];
            let next = match res {
                0 => Some(answer(e, &counts, &mut body, &mut out)),
                r if r == -libc::EAGAIN || r == -libc::EINTR => None, // register again
                r if r == -libc::ENOTCONN || r == -libc::ECANCELED => return Ok(()),
                r => return Err(io::Error::from_raw_os_error(-r)),
            };
            let sqe = command(raw, qid, idx, e, next);
            // SAFETY: as at registration; at most `depth` commands are ever queued.
            unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
        }
    }
    Ok(())
}

/// Answers the request in entry `e`; returns the commit id to send the reply under.
fn answer(e: &mut Entry, counts: &Counts, body: &mut Vec<u8>, out: &mut Vec<u8>) -> u64 {
    let commit_id = abi::u64_at(&e.header, ENT_COMMIT_ID_AT);
    let payload_sz = (abi::u32_at(&e.header, ENT_PAYLOAD_SZ_AT) as usize).min(PAYLOAD_LEN);
    let (error, len) = match InHeader::parse(&e.header) {
        Some(h) => {
            probe_fs::count(counts, true);
            // Rebuilt as /dev/fuse lays a request out: what a parser written for the device
            // (fuser's) would need, so its copy is part of what is measured.
            // The kernel sets the in-header's `len` to the request's length on /dev/fuse,
            // so the op's own header is what the payload does not account for.
            let op_len = (h.len as usize)
                .saturating_sub(abi::IN_HEADER_LEN + payload_sz)
                .min(OP_IN_LEN);
            body.clear();
            body.extend_from_slice(&e.header[OP_IN_AT..OP_IN_AT + op_len]);
            body.extend_from_slice(&e.payload[..payload_sz]);
            match probe_fs::answer(&h, body, out, true) {
                Answer::Ok(len) => {
                    e.payload[..len].copy_from_slice(&out[..len]);
                    (0, len)
                }
                Answer::Err(errno) => (-errno, 0),
                Answer::None => (0, 0),
            }
        }
        None => (-libc::EIO, 0),
    };
    let unique = abi::u64_at(&e.header, 8);
    let header = abi::out_header(unique, error, len);
    e.header[..abi::OUT_HEADER_LEN].copy_from_slice(&header);
    e.header[ENT_PAYLOAD_SZ_AT..ENT_PAYLOAD_SZ_AT + 4].copy_from_slice(&(len as u32).to_le_bytes());
    commit_id
}
