//! FUSE over io_uring: Myriad's addition to fuser 0.18 (see `MYRIAD.md` beside this crate).
//!
//! Linux 6.14+ with the `fuse.enable_uring` module parameter set. After INIT (which offers
//! `FUSE_OVER_IO_URING` when `Config::uring` asks for it and the kernel offers it), one
//! thread per possible CPU, pinned to it, registers `queue_depth` ring entries with the
//! kernel, and more whenever few are free (up to `MAX_ENTRIES`). An entry is a header buffer (`struct fuse_uring_req_header`: in/out header, the
//! op's own header, the entry's commit id and payload size) and a payload buffer; the
//! kernel completes the registering `URING_CMD` with a request written into them. The
//! thread rebuilds it in /dev/fuse layout and dispatches it like a request read from the
//! device; its reply (from whatever thread answers) is written into the same buffers and
//! sent with `COMMIT_AND_FETCH`, which also hands the entry back for the next request.
//! The kernel sends a request to the queue of the CPU its caller runs on, so each queue's
//! thread is pinned there (unpinned, a lone caller's request wakes a thread on another CPU,
//! and one caller gets half the rate of /dev/fuse). FORGET, INTERRUPT and notifications
//! still go over /dev/fuse, whose reader threads keep running.
//!
//! Only the queue's own thread submits to its ring. io_uring ties a command to the thread
//! that submitted it and cancels it when that thread exits, so a commit (which also waits
//! for the entry's next request) sent from a short-lived replier would take the entry out
//! of the queue when the replier ends. A reply made on the queue's thread is committed at
//! once; one made elsewhere is queued (`pending`) and the queue's thread woken by an
//! eventfd, which it keeps a read posted on.

use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use log::{error, warn};

use crate::channel::{Channel, ChannelSender};

pub mod wire;

pub(crate) use wire::possible_cpus;
use wire::{ENT_PAYLOAD_SZ_AT, IN_HEADER_LEN, OP_IN_LEN, OUT_HEADER_LEN};

/// What a session asks of FUSE over io_uring (`Config::uring`).
#[derive(Debug, Clone)]
pub struct UringConfig {
    /// Entries per queue at the start (one queue per possible CPU). An entry is held from
    /// its request until the reply; when few are left free the queue registers more, up
    /// to 1,024 (as many requests in flight from one CPU's callers).
    pub queue_depth: usize,
    /// Counts the requests that came over the ring (none: the ring is not in use).
    pub requests: Arc<AtomicU64>,
}

impl PartialEq for UringConfig {
    fn eq(&self, other: &Self) -> bool {
        self.queue_depth == other.queue_depth && Arc::ptr_eq(&self.requests, &other.requests)
    }
}

impl Eq for UringConfig {}

/// The smallest payload buffer the kernel accepts: its largest request or reply.
pub(crate) fn payload_len(max_write: u32, max_pages: u16) -> usize {
    let page = page_size::get();
    8192.max(max_write as usize)
        .max(usize::from(max_pages) * page)
}

/// One entry's buffers. Written by the kernel while the entry is registered, read by the
/// queue's thread when the entry comes back with a request, and written by the request's
/// replier before the commit: never two of them at once.
struct Entry {
    buffers: wire::EntryBuffers,
    commit_id: AtomicU64,
}

impl Entry {
    fn new(payload: usize) -> Entry {
        Entry {
            buffers: wire::EntryBuffers::new(payload),
            commit_id: AtomicU64::new(0),
        }
    }
}

/// The most entries a queue grows to: as many requests in flight from one CPU's callers.
/// Each is a payload buffer of the largest request (1 MiB for the mount), address space
/// that is touched only as requests use it.
const MAX_ENTRIES: usize = 1024;

/// One queue: its ring, its entries, and the replies made on other threads waiting for
/// the queue's thread to commit them.
pub(crate) struct Queue {
    // Dropped first: closing the ring cancels the commands that name the entries.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Up to `MAX_ENTRIES`, made as needed (`grow`): the first `made` exist.
    entries: Box<[std::sync::OnceLock<Entry>]>,
    made: std::sync::atomic::AtomicUsize,
    /// Entries holding a request not yet committed (kept by the queue's thread).
    busy: std::sync::atomic::AtomicUsize,
    payload_len: usize,
    /// Entries answered on other threads, to be committed by the queue's thread.
    pending: Mutex<Vec<usize>>,
    /// Wakes the queue's thread for `pending` (a read of it is kept posted on the ring).
    wake: std::os::fd::OwnedFd,
    /// Where that read puts the eventfd's count.
    wake_buf: Box<[u8; 8]>,
    /// The queue's thread: the only one that submits to `ring`.
    owner: std::sync::OnceLock<std::thread::ThreadId>,
    qid: u16,
    fd: i32,
    /// Keeps the /dev/fuse file (and so `fd`) open while the queue lives.
    _ch: Channel,
}

/// The `user_data` of the eventfd read (entries use their index).
const WAKE: u64 = u64::MAX;

// SAFETY: the entries' buffers are raw memory handed between the kernel, the queue's
// thread and one replier at a time (see `Entry`); the ring is submitted to and its
// completions read only by the queue's thread (`owner`).
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

impl Queue {
    fn new(ch: &Channel, qid: u16, payload: usize) -> io::Result<Queue> {
        // Room for every entry's command and the eventfd's read at once.
        let ring = IoUring::builder().build((MAX_ENTRIES + 1).next_power_of_two() as u32)?;
        let entries = (0..MAX_ENTRIES)
            .map(|_| std::sync::OnceLock::new())
            .collect();
        // SAFETY: eventfd has no memory effects; the descriptor is owned below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created, owned by nothing else.
        let wake = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
        Ok(Queue {
            ring,
            entries,
            made: Default::default(),
            busy: Default::default(),
            payload_len: payload,
            pending: Mutex::new(Vec::new()),
            wake,
            wake_buf: Box::new([0u8; 8]),
            owner: std::sync::OnceLock::new(),
            qid,
            fd: ch.as_fd_raw(),
            _ch: ch.clone(),
        })
    }

    /// Entry `idx` (made: `idx` < `made`).
    fn entry(&self, idx: usize) -> &Entry {
        self.entries[idx].get_or_init(|| Entry::new(self.payload_len))
    }

    /// Makes and registers `n` more entries (at most up to `MAX_ENTRIES`).
    fn grow(&self, n: usize) -> io::Result<()> {
        let from = self.made.load(Ordering::Relaxed);
        let to = (from + n).min(MAX_ENTRIES);
        for idx in from..to {
            self.entry(idx);
            self.made.store(idx + 1, Ordering::Relaxed);
            self.submit(idx, None)?;
        }
        Ok(())
    }

    /// Registers more entries when few are left free: a request holds its entry until
    /// answered (a blocked lock wait for as long as it blocks), and a CPU whose entries are
    /// all held would hold back every other request from that CPU.
    fn keep_free(&self) -> io::Result<()> {
        let made = self.made.load(Ordering::Relaxed);
        let busy = self.busy.load(Ordering::Relaxed);
        if made < MAX_ENTRIES && made.saturating_sub(busy) < (made / 4).max(2) {
            self.grow(made)?;
        }
        Ok(())
    }

    fn on_owner(&self) -> bool {
        self.owner.get() == Some(&std::thread::current().id())
    }

    /// Pushes an SQE; the queue's thread submits it at its next wait. Only the queue's
    /// thread calls this.
    fn push(&self, sqe: &squeue::Entry128) -> io::Result<()> {
        // SAFETY: only the queue's thread pushes; what the SQE names (iovecs, buffers, the
        // eventfd's buffer) lives as long as the queue; at most one command per entry and
        // the eventfd's read are queued at once, and the ring has room for them all.
        unsafe {
            self.ring
                .submission_shared()
                .push(sqe)
                .map_err(|_| io::Error::other("the ring's submission queue is full"))
        }
    }

    /// Posts the read of the eventfd that wakes this thread for replies made elsewhere.
    fn arm_wake(&self) -> io::Result<()> {
        let read = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_buf.as_ptr() as *mut u8,
            8,
        )
        .build()
        .user_data(WAKE);
        self.push(&read.into())
    }

    /// Commits the replies made on other threads.
    fn commit_pending(&self) -> io::Result<()> {
        let ready = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for idx in ready {
            let id = self.entry(idx).commit_id.load(Ordering::Acquire);
            self.submit(idx, Some(id))?;
        }
        Ok(())
    }

    /// Pushes entry `idx`'s registration (`commit_id` None) or the commit of its reply
    /// (only on the queue's thread).
    fn submit(&self, idx: usize, commit_id: Option<u64>) -> io::Result<()> {
        if commit_id.is_some() {
            self.busy.fetch_sub(1, Ordering::Relaxed);
        }
        let iov = self.entry(idx).buffers.iov.as_ptr();
        let sqe = wire::command(self.fd, self.qid, idx as u64, iov, commit_id);
        self.push(&sqe)
    }

    /// The request in entry `idx` as /dev/fuse lays it out, into `buf`; remembers its
    /// commit id for the reply.
    fn request_of(&self, idx: usize, buf: &mut Vec<u8>) -> bool {
        let e = self.entry(idx);
        // The commit id first: even a request that cannot be parsed is answered under it.
        let b = &e.buffers;
        e.commit_id
            .store(wire::commit_id(&b.header), Ordering::Release);
        wire::request(&b.header, &b.payload, buf).is_some()
    }
}

/// Where one request's reply goes: its queue and entry.
#[derive(Clone)]
pub(crate) struct RingSlot {
    queue: Arc<Queue>,
    idx: usize,
    /// For what only /dev/fuse does (backing files).
    pub(crate) device: ChannelSender,
}

impl std::fmt::Debug for RingSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RingSlot(q{}, e{})", self.queue.qid, self.idx)
    }
}

impl RingSlot {
    /// Answers the request in this slot with `errno` (one that could not be parsed: the
    /// entry must still be committed, or this CPU's queue loses it).
    pub(crate) fn fail(&self, data: &[u8], errno: i32) -> io::Result<()> {
        let mut unique = [0u8; 8];
        if let Some(u) = data.get(8..16) {
            unique.copy_from_slice(u);
        }
        let mut header = [0u8; OUT_HEADER_LEN];
        header[0..4].copy_from_slice(&(OUT_HEADER_LEN as u32).to_le_bytes());
        header[4..8].copy_from_slice(&(-errno).to_le_bytes());
        header[8..16].copy_from_slice(&unique);
        self.send(&[IoSlice::new(&header)])
    }

    /// Writes the reply (out-header, then its payload) into the entry and commits it.
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let q = &self.queue;
        let e = q.entry(self.idx);
        let b = &e.buffers;
        let total: usize = data.iter().map(|s| s.len()).sum();
        if total < OUT_HEADER_LEN || total - OUT_HEADER_LEN > b.payload.len() {
            return Err(io::Error::other(format!(
                "a reply of {total} bytes does not fit a ring entry"
            )));
        }
        let header = b.header.as_ptr() as *mut u8;
        let payload = b.payload.as_ptr() as *mut u8;
        // The first OUT_HEADER_LEN bytes go to the header buffer, the rest to the payload.
        let mut at = 0usize;
        for s in data {
            let mut rest: &[u8] = s;
            while !rest.is_empty() {
                let (dst, room) = if at < OUT_HEADER_LEN {
                    // SAFETY: inside the header buffer; this replier alone writes the entry
                    // until it commits (see `Entry`).
                    (unsafe { header.add(at) }, OUT_HEADER_LEN - at)
                } else {
                    // SAFETY: inside the payload buffer (checked against its length above);
                    // this replier alone writes it until the commit.
                    (unsafe { payload.add(at - OUT_HEADER_LEN) }, rest.len())
                };
                let n = room.min(rest.len());
                // SAFETY: `n` bytes from a live slice into the entry's buffer.
                unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), dst, n) };
                rest = &rest[n..];
                at += n;
            }
        }
        let size = ((total - OUT_HEADER_LEN) as u32).to_le_bytes();
        // SAFETY: the payload size field inside the header buffer, written as above.
        unsafe { std::ptr::copy_nonoverlapping(size.as_ptr(), header.add(ENT_PAYLOAD_SZ_AT), 4) };
        if q.on_owner() {
            return q.submit(self.idx, Some(e.commit_id.load(Ordering::Acquire)));
        }
        q.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.idx);
        let one = 1u64.to_ne_bytes();
        // SAFETY: 8 bytes from a live array to our eventfd.
        if unsafe { libc::write(q.wake.as_raw_fd(), one.as_ptr().cast(), 8) } != 8 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Starts queue `qid` on the calling thread, which it pins to CPU `qid`: registers its
/// entries. Returns the queue for `serve`.
pub(crate) fn start(
    ch: &Channel,
    qid: u16,
    cfg: &UringConfig,
    payload: usize,
) -> io::Result<Arc<Queue>> {
    wire::pin_to(qid);
    let q = Arc::new(Queue::new(ch, qid, payload)?);
    let _ = q.owner.set(std::thread::current().id());
    q.grow(cfg.queue_depth.clamp(1, MAX_ENTRIES))?;
    q.arm_wake()?;
    q.ring.submit()?;
    Ok(q)
}

/// Serves queue `q` until `stop` is set or the connection ends: each request is handed to
/// `dispatch` with the slot its reply goes to.
pub(crate) fn serve(
    q: Arc<Queue>,
    device: ChannelSender,
    cfg: &UringConfig,
    stop: &AtomicBool,
    mut dispatch: impl FnMut(RingSlot, &[u8]),
) -> io::Result<()> {
    let wait = types::Timespec::from(Duration::from_millis(500));
    let mut buf = Vec::with_capacity(IN_HEADER_LEN + OP_IN_LEN + 4096);
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(MAX_ENTRIES);
    // A queue's thread must not end while the connection lives: the kernel keeps sending
    // this CPU's requests to it. An entry whose command failed is registered again, after
    // a pause once failures keep coming.
    let mut failures = 0u32;
    while !stop.load(Ordering::Relaxed) {
        q.commit_pending()?;
        q.keep_free()?;
        let args = types::SubmitArgs::new().timespec(&wait);
        match q.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                ) => {}
            Err(e) => {
                error!("ring queue {}: waiting failed: {e}", q.qid);
                return Err(e);
            }
        }
        done.clear();
        // SAFETY: only this thread reads the completion queue.
        done.extend(
            unsafe { q.ring.completion_shared() }.map(|c| (c.user_data() as usize, c.result())),
        );
        for &(data, res) in &done {
            if data as u64 == WAKE {
                if res == -libc::ECANCELED || res == -libc::ENOTCONN {
                    return Ok(());
                }
                if res < 0 && res != -libc::EINTR && res != -libc::EAGAIN {
                    return Err(io::Error::from_raw_os_error(-res));
                }
                q.arm_wake()?;
                continue;
            }
            let idx = data;
            if idx >= q.made.load(Ordering::Relaxed) {
                continue;
            }
            match res {
                0 => {
                    failures = 0;
                    q.busy.fetch_add(1, Ordering::Relaxed);
                    let slot = RingSlot {
                        queue: q.clone(),
                        idx,
                        device: device.clone(),
                    };
                    if !q.request_of(idx, &mut buf) {
                        // Answered, so that the entry comes back to the queue.
                        error!("ring queue {}: a malformed request, answered EIO", q.qid);
                        slot.fail(&q.entry(idx).buffers.header, libc::EIO)?;
                        continue;
                    }
                    cfg.requests.fetch_add(1, Ordering::Relaxed);
                    // A panic in a callback drops its reply, which answers EIO; the queue
                    // goes on.
                    let dispatched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        dispatch(slot, &buf)
                    }));
                    if dispatched.is_err() {
                        error!("ring queue {}: a request's callback panicked", q.qid);
                    }
                }
                r if r == -libc::ENOTCONN
                    || r == -libc::ECANCELED
                    || r == -libc::ENODEV
                    || r == -libc::ECONNABORTED =>
                {
                    return Ok(());
                }
                r => {
                    failures = failures.saturating_add(1);
                    if failures.is_power_of_two() {
                        warn!(
                            "ring queue {} entry {idx}: a command failed ({}; {failures} in a \
                             row); registered again",
                            q.qid,
                            io::Error::from_raw_os_error(-r)
                        );
                    }
                    if failures > 100 {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    q.submit(idx, None)?;
                }
            }
        }
    }
    Ok(())
}

impl Channel {
    fn as_fd_raw(&self) -> i32 {
        std::os::fd::AsFd::as_fd(self).as_raw_fd()
    }
}
