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

use fuser::uring_wire::{self as wire, ENT_PAYLOAD_SZ_AT, EntryBuffers};
use io_uring::{IoUring, cqueue, squeue, types};

use crate::abi::{self, InHeader};
use crate::probe_fs::{self, Answer, Counts};

/// The kernel refuses a payload buffer smaller than its largest request.
const PAYLOAD_LEN: usize = abi::MAX_WRITE as usize;

pub use wire::{
    kernel_enabled as enabled, possible_cpus, set_kernel_enabled as set_enabled, unavailable,
};

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
        wire::pin_to(qid);
    }
    let raw = fd.as_raw_fd();
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
        IoUring::builder().build((depth * 2) as u32)?;
    let mut entries: Vec<EntryBuffers> =
        (0..depth).map(|_| EntryBuffers::new(PAYLOAD_LEN)).collect();
    for (idx, e) in entries.iter().enumerate() {
        let sqe = wire::command(raw, qid, idx as u64, e.iov.as_ptr(), None);
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
                r if r == -libc::ENOTCONN || r == -libc::ECANCELED => return Ok(()),
                // Registered again: a queue that stopped would leave this CPU's callers
                // waiting for ever.
                r if r == -libc::EAGAIN || r == -libc::EINTR => None,
                r => {
                    eprintln!("ring queue {qid}: {}", io::Error::from_raw_os_error(-r));
                    std::thread::sleep(Duration::from_millis(10));
                    None
                }
            };
            let sqe = wire::command(raw, qid, idx as u64, e.iov.as_ptr(), next);
            // SAFETY: as at registration; at most `depth` commands are ever queued.
            unsafe { ring.submission().push(&sqe) }.map_err(io::Error::other)?;
        }
    }
    Ok(())
}

/// Answers the request in entry `e`; returns the commit id to send the reply under.
fn answer(e: &mut EntryBuffers, counts: &Counts, body: &mut Vec<u8>, out: &mut Vec<u8>) -> u64 {
    // Rebuilt as /dev/fuse lays a request out: what fuser's parser needs, as the mount's
    // ring does it (`fuser::uring_wire::request`), so its copy is part of what is measured.
    let commit_id = wire::commit_id(&e.header);
    let header = wire::request(&e.header, &e.payload, body).and_then(|()| InHeader::parse(body));
    let (error, len) = match header {
        Some(h) => {
            probe_fs::count(counts, true);
            match probe_fs::answer(&h, &body[abi::IN_HEADER_LEN..], out, true) {
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

#[cfg(test)]
mod wire_tests {
    use fuser::uring_wire::*;

    #[test]
    /// The mount's ring (vendor/fuser) rebuilds requests with this; tested here, where the
    /// workspace's tests run.
    fn a_request_is_rebuilt_in_device_layout() {
        let mut header = vec![0u8; HEADER_LEN];
        // A READ: in-header len 80 = 40 + fuse_read_in (40), no payload.
        header[0..4].copy_from_slice(&80u32.to_le_bytes());
        header[4..8].copy_from_slice(&15u32.to_le_bytes());
        header[OP_IN_AT] = 7;
        header[ENT_COMMIT_ID_AT..ENT_COMMIT_ID_AT + 8].copy_from_slice(&99u64.to_le_bytes());
        let mut buf = Vec::new();
        assert_eq!(commit_id(&header), 99);
        assert_eq!(request(&header, &[0u8; 16], &mut buf), Some(()));
        assert_eq!(buf.len(), 80);
        assert_eq!(buf[IN_HEADER_LEN], 7);
        // A LOOKUP of "f": len 42, a 2-byte payload, no op header.
        header[0..4].copy_from_slice(&42u32.to_le_bytes());
        header[ENT_PAYLOAD_SZ_AT..ENT_PAYLOAD_SZ_AT + 4].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(request(&header, b"f\0", &mut buf), Some(()));
        assert_eq!(&buf[IN_HEADER_LEN..], b"f\0");
        // Lengths that do not add up.
        header[0..4].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(request(&header, b"f\0", &mut buf), None);
    }
}
