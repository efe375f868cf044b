//! The FUSE kernel protocol, as far as the transport probe speaks it (include/uapi/linux/fuse.h):
//! opcodes, the fixed headers, and the little-endian encodings of the replies it sends.
//! Encoded by hand, field by field, so no struct is cast to or from bytes.

pub const LOOKUP: u32 = 1;
pub const FORGET: u32 = 2;
pub const GETATTR: u32 = 3;
pub const OPEN: u32 = 14;
pub const READ: u32 = 15;
pub const STATFS: u32 = 17;
pub const RELEASE: u32 = 18;
pub const FLUSH: u32 = 25;
pub const INIT: u32 = 26;
pub const OPENDIR: u32 = 27;
pub const RELEASEDIR: u32 = 29;
pub const INTERRUPT: u32 = 36;
pub const DESTROY: u32 = 38;
pub const BATCH_FORGET: u32 = 42;

/// `struct fuse_in_header`: what precedes every request on /dev/fuse.
pub const IN_HEADER_LEN: usize = 40;
/// `struct fuse_out_header`: what precedes every reply.
pub const OUT_HEADER_LEN: usize = 16;

// INIT flags (`fuse_init_in.flags`, and `flags2` for bits 32 and up).
pub const FUSE_ASYNC_READ: u64 = 1 << 0;
pub const FUSE_INIT_EXT: u64 = 1 << 30;
pub const FUSE_MAX_PAGES: u64 = 1 << 22;
pub const FUSE_OVER_IO_URING: u64 = 1 << 41;

/// `fuse_open_out.open_flags`: every read reaches the daemon (no page cache).
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;

/// The largest write (and read) the probe offers the kernel.
pub const MAX_WRITE: u32 = 128 * 1024;
/// Pages per request (`max_pages`), so that `MAX_WRITE` fits.
pub const MAX_PAGES: u16 = (MAX_WRITE / 4096) as u16;

/// A request's `struct fuse_in_header`.
#[derive(Clone, Copy, Debug)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
}

impl InHeader {
    pub fn parse(b: &[u8]) -> Option<InHeader> {
        if b.len() < IN_HEADER_LEN {
            return None;
        }
        Some(InHeader {
            len: u32_at(b, 0),
            opcode: u32_at(b, 4),
            unique: u64_at(b, 8),
            nodeid: u64_at(b, 16),
        })
    }
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// `struct fuse_out_header` for a reply of `payload` bytes to request `unique`.
pub fn out_header(unique: u64, error: i32, payload: usize) -> [u8; OUT_HEADER_LEN] {
    let mut h = [0u8; OUT_HEADER_LEN];
    h[0..4].copy_from_slice(&((OUT_HEADER_LEN + payload) as u32).to_le_bytes());
    h[4..8].copy_from_slice(&error.to_le_bytes());
    h[8..16].copy_from_slice(&unique.to_le_bytes());
    h
}

/// What the probe says of an inode (`struct fuse_attr`, 88 bytes).
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u32,
}

impl Attr {
    fn put(&self, out: &mut Vec<u8>) {
        for v in [self.ino, self.size, self.size.div_ceil(512), 0, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        // atimensec, mtimensec, ctimensec, mode, nlink, uid, gid, rdev, blksize, flags
        for v in [0, 0, 0, self.mode, self.nlink, 0, 0, 0, 4096, 0u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// `struct fuse_entry_out`: `attr` named, the name kept for `entry_secs`, the attributes for
/// none (every stat asks).
pub fn entry_out(out: &mut Vec<u8>, attr: &Attr, entry_secs: u64) {
    for v in [attr.ino, 0, entry_secs, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&[0u8; 8]);
    attr.put(out);
}

/// `struct fuse_attr_out` with attributes kept for no time.
pub fn attr_out(out: &mut Vec<u8>, attr: &Attr) {
    out.extend_from_slice(&[0u8; 16]);
    attr.put(out);
}

/// `struct fuse_open_out`.
pub fn open_out(out: &mut Vec<u8>, fh: u64, open_flags: u32) {
    out.extend_from_slice(&fh.to_le_bytes());
    out.extend_from_slice(&open_flags.to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
}

/// `struct fuse_statfs_out` of an empty file system.
pub fn statfs_out(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0u8; 40]);
    for v in [4096u32, 255, 4096, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&[0u8; 24]);
}

/// `struct fuse_init_out` answering the kernel's `fuse_init_in` (`body`), offering `want`
/// of the flags the kernel offered.
pub fn init_out(out: &mut Vec<u8>, body: &[u8], want: u64) {
    let major = u32_at(body, 0);
    let minor = u32_at(body, 4);
    let flags = u64::from(u32_at(body, 12)) | (u64::from(u32_at(body, 16)) << 32);
    let chosen = flags & want;
    out.extend_from_slice(&major.to_le_bytes());
    out.extend_from_slice(&minor.to_le_bytes());
    out.extend_from_slice(&(128u32 * 1024).to_le_bytes()); // max_readahead
    out.extend_from_slice(&(chosen as u32).to_le_bytes());
    out.extend_from_slice(&64u16.to_le_bytes()); // max_background
    out.extend_from_slice(&48u16.to_le_bytes()); // congestion_threshold
    out.extend_from_slice(&MAX_WRITE.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // time_gran
    out.extend_from_slice(&MAX_PAGES.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // map_alignment
    out.extend_from_slice(&((chosen >> 32) as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4 + 2 + 22]); // max_stack_depth, request_timeout, unused
}

/// The kernel's offered flags in a `fuse_init_in` body (both words).
pub fn init_flags(body: &[u8]) -> u64 {
    u64::from(u32_at(body, 12)) | (u64::from(u32_at(body, 16)) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_have_the_kernels_sizes() {
        let attr = Attr {
            ino: 2,
            size: 1,
            mode: 0o100644,
            nlink: 1,
        };
        let mut v = Vec::new();
        entry_out(&mut v, &attr, 1);
        assert_eq!(v.len(), 128);
        v.clear();
        attr_out(&mut v, &attr);
        assert_eq!(v.len(), 104);
        v.clear();
        open_out(&mut v, 1, 0);
        assert_eq!(v.len(), 16);
        v.clear();
        statfs_out(&mut v);
        assert_eq!(v.len(), 80);
        v.clear();
        let mut init_in = vec![0u8; 64];
        init_in[0..4].copy_from_slice(&7u32.to_le_bytes());
        init_in[4..8].copy_from_slice(&44u32.to_le_bytes());
        init_in[12..16].copy_from_slice(&(FUSE_INIT_EXT as u32).to_le_bytes());
        init_in[16..20].copy_from_slice(&((FUSE_OVER_IO_URING >> 32) as u32).to_le_bytes());
        init_out(&mut v, &init_in, FUSE_INIT_EXT | FUSE_OVER_IO_URING);
        assert_eq!(v.len(), 64);
        assert_eq!(init_flags(&init_in), FUSE_INIT_EXT | FUSE_OVER_IO_URING);
        // flags2 (offset 32) carries bit 41 as bit 9.
        assert_eq!(u32_at(&v, 32), 1 << 9);
        assert_eq!(u32_at(&v, 12), FUSE_INIT_EXT as u32);
    }

    #[test]
    fn out_header_counts_itself() {
        let h = out_header(7, -2, 10);
        assert_eq!(u32_at(&h, 0), 26);
        assert_eq!(u32_at(&h, 4) as i32, -2);
        assert_eq!(u64_at(&h, 8), 7);
    }
}
