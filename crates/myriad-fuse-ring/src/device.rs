//! The classic FUSE channel: mount with a /dev/fuse descriptor, then threads that read one
//! request per `read(2)` and write one reply per `write(2)`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use crate::abi::{self, InHeader};
use crate::probe_fs::{self, Answer, Counts};

/// A read buffer that holds the largest request: a full write plus its headers.
pub const READ_BUFFER: usize = abi::MAX_WRITE as usize + 4096;

/// Opens /dev/fuse and mounts the probe file system on `target` (root only).
pub fn mount(target: &Path) -> io::Result<OwnedFd> {
    let dev = CString::new("/dev/fuse").map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated path; the descriptor returned is owned below.
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let opts = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
        fd.as_raw_fd()
    );
    let c = |s: &str| CString::new(s).map_err(io::Error::other);
    let (source, fstype, data) = (c("myriad-probe")?, c("fuse.myriad-probe")?, c(&opts)?);
    let target = c(&target.to_string_lossy())?;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// A second descriptor for the same connection (`FUSE_DEV_IOC_CLONE`): requests are spread
/// over the clones, and each answers on its own, as the mount's reader threads do.
pub fn clone_channel(fd: &OwnedFd) -> io::Result<OwnedFd> {
    const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500; // _IOR(229, 0, uint32_t)
    let dev = CString::new("/dev/fuse").map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated path; the descriptor returned is owned below.
    let raw = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just opened and is owned by nothing else.
    let clone = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut source = fd.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 from a live local.
    if unsafe { libc::ioctl(clone.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut source) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(clone)
}

/// Unmounts `target`; the kernel then ends the connection, and the loops return.
pub fn unmount(target: &Path) -> io::Result<()> {
    let target = CString::new(target.to_string_lossy().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(target.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `header` and `payload` as one reply.
fn reply(fd: i32, header: &[u8], payload: &[u8]) -> io::Result<()> {
    let iov = [
        libc::iovec {
            iov_base: header.as_ptr() as *mut libc::c_void,
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        },
    ];
    // SAFETY: both iovecs point into live slices of the given lengths.
    let n = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Serves requests from `fd` until the connection ends. `ring`: INIT offers FUSE over
/// io_uring (after which only forgets, interrupts and requests sent before the ring was
/// ready come this way). `on_init` runs once INIT is answered.
pub fn serve(fd: Arc<OwnedFd>, counts: Arc<Counts>, ring: bool, on_init: impl Fn()) {
    let mut buf = vec![0u8; READ_BUFFER];
    let mut out = Vec::with_capacity(READ_BUFFER);
    loop {
        // SAFETY: `buf` is a live, writable buffer of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::ENOENT) => continue,
                _ => return, // ENODEV: unmounted
            }
        }
        let Some(h) = InHeader::parse(&buf[..n as usize]) else {
            return;
        };
        let body = &buf[abi::IN_HEADER_LEN..n as usize];
        probe_fs::count(&counts, false);
        let (error, len) = match probe_fs::answer(&h, body, &mut out, ring) {
            Answer::None => continue,
            Answer::Ok(len) => (0, len),
            Answer::Err(e) => (-e, 0),
        };
        let header = abi::out_header(h.unique, error, len);
        if reply(fd.as_raw_fd(), &header, &out[..len]).is_err() && h.opcode != abi::INIT {
            continue; // an interrupted request's reply is refused: not fatal
        }
        if h.opcode == abi::INIT {
            on_init();
        }
    }
}
