//! The kernel's side of FUSE over io_uring, as bytes and commands: what both the session's
//! ring (`ring.rs`) and Myriad's transport probe (crate `myriad-fuse-ring`) speak. Exported
//! as `fuser::uring_wire`.

use std::io;

use io_uring::{opcode, squeue, types};

/// `FUSE_IO_URING_CMD_REGISTER`: hands an entry's buffers to the kernel.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: answers the entry's request, waits for the next.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `struct fuse_uring_req_header`: in/out header (128), op header (128), ent_in_out (32).
pub const HEADER_LEN: usize = 288;
/// Where the op's own header (`fuse_read_in`, ...) starts in it.
pub const OP_IN_AT: usize = 128;
/// The room for the op's own header.
pub const OP_IN_LEN: usize = 128;
/// `fuse_uring_ent_in_out.commit_id` in the header.
pub const ENT_COMMIT_ID_AT: usize = 264;
/// `fuse_uring_ent_in_out.payload_sz` in the header.
pub const ENT_PAYLOAD_SZ_AT: usize = 272;
/// `struct fuse_in_header`.
pub const IN_HEADER_LEN: usize = 40;
/// `struct fuse_out_header`.
pub const OUT_HEADER_LEN: usize = 16;

/// One ring entry's two buffers and the iovecs that name them at registration. The
/// buffers are on the heap, so the iovecs stay right wherever the value moves.
#[derive(Debug)]
pub struct EntryBuffers {
    /// `struct fuse_uring_req_header` (`HEADER_LEN` bytes).
    pub header: Box<[u8]>,
    /// The request's payload, then the reply's: at least the kernel's largest request.
    pub payload: Box<[u8]>,
    /// Header and payload, for `command`'s registration.
    pub iov: [libc::iovec; 2],
}

impl EntryBuffers {
    /// Buffers with a payload of `payload` bytes (zeroed pages: touched only when used).
    pub fn new(payload: usize) -> EntryBuffers {
        let mut header = vec![0u8; HEADER_LEN].into_boxed_slice();
        let mut payload = vec![0u8; payload].into_boxed_slice();
        let iov = [
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: header.len(),
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            },
        ];
        EntryBuffers {
            header,
            payload,
            iov,
        }
    }
}

/// The SQE for entry `user_data` of queue `qid` whose two iovecs (header, payload) are at
/// `iov`: its registration (`commit_id` None) or the commit of its reply to `commit_id`,
/// which also fetches the next request. `fd` is the connection's /dev/fuse descriptor.
pub fn command(
    fd: i32,
    qid: u16,
    user_data: u64,
    iov: *const libc::iovec,
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
        .addr(Some(iov as u64))
        .build()
        .user_data(user_data);
    // io-uring 0.7 has no setter for the SQE's `len`, which must be the number of iovecs
    // (2). `Entry128` is `repr(C)`: the 128 bytes of the SQE, `len` at offset 24.
    // SAFETY: same size; any bytes are a valid [u8; 128], and back a valid SQE.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[24..28].copy_from_slice(&2u32.to_le_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute(bytes) }
}

/// The id an entry's request is answered under (its `COMMIT_AND_FETCH`), from its header.
pub fn commit_id(header: &[u8]) -> u64 {
    let mut id = [0u8; 8];
    if let Some(b) = header.get(ENT_COMMIT_ID_AT..ENT_COMMIT_ID_AT + 8) {
        id.copy_from_slice(b);
    }
    u64::from_le_bytes(id)
}

/// The request in an entry's `header` and `payload`, laid out as /dev/fuse delivers it
/// (in-header, op header, the rest), into `buf`. `None`: lengths that do not add up.
pub fn request(header: &[u8], payload: &[u8], buf: &mut Vec<u8>) -> Option<()> {
    let word = |at: usize| -> Option<[u8; 4]> { header.get(at..at + 4)?.try_into().ok() };
    let payload_sz = (u32::from_le_bytes(word(ENT_PAYLOAD_SZ_AT)?) as usize).min(payload.len());
    // The in-header's `len` is the request's length on /dev/fuse: the op's own header is
    // what the payload does not account for.
    let len = u32::from_le_bytes(word(0)?) as usize;
    let op_len = len.checked_sub(IN_HEADER_LEN + payload_sz)?;
    if op_len > OP_IN_LEN {
        return None;
    }
    buf.clear();
    buf.extend_from_slice(header.get(..IN_HEADER_LEN)?);
    buf.extend_from_slice(header.get(OP_IN_AT..OP_IN_AT + op_len)?);
    buf.extend_from_slice(&payload[..payload_sz]);
    Some(())
}

/// The module parameter that lets daemons use FUSE over io_uring (off by default; it
/// only lets connections that ask for the ring at INIT use it).
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the kernel lets daemons use FUSE over io_uring (`fuse.enable_uring`).
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string(ENABLE_PARAM)
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

/// Sets `fuse.enable_uring` (root only); returns what it was.
pub fn set_kernel_enabled(on: bool) -> io::Result<bool> {
    let was = kernel_enabled();
    std::fs::write(ENABLE_PARAM, if on { "Y" } else { "N" })?;
    Ok(was)
}

/// Why this machine cannot run FUSE over io_uring, if it cannot: a kernel without it (no
/// `fuse.enable_uring` parameter: before 6.14 or without `CONFIG_FUSE_IO_URING`), or
/// io_uring turned off (`kernel.io_uring_disabled`).
pub fn unavailable() -> Option<String> {
    if !std::path::Path::new(ENABLE_PARAM).exists() {
        return Some("this kernel has no FUSE over io_uring (Linux 6.14+)".into());
    }
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim() != "0")
        .unwrap_or(false);
    disabled.then(|| "io_uring is turned off here (kernel.io_uring_disabled)".into())
}

/// The CPUs the kernel may route requests from: each needs a queue before the ring is used.
pub fn possible_cpus() -> io::Result<u16> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    s.trim()
        .rsplit([',', '-'])
        .next()
        .and_then(|n| n.parse::<u16>().ok())
        .map(|last| last + 1)
        .ok_or_else(|| io::Error::other(format!("cannot read possible CPUs from {s:?}")))
}

/// Pins the calling thread to `cpu`: a queue's requests come from callers on that CPU.
pub fn pin_to(cpu: u16) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(usize::from(cpu), &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
