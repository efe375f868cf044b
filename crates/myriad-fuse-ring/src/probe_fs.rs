//! The do-nothing file system the transports are measured with: a root directory holding one
//! file, `f`, of `FILE_SIZE` zero bytes. Its answers cost next to nothing, so what a probe
//! measures is the transport: the kernel's request, its trip to the daemon and the reply.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::{self, Attr, InHeader};

pub const FILE_NAME: &str = "f";
pub const FILE_SIZE: u64 = 1 << 20;
const ROOT: u64 = 1;
const FILE: u64 = 2;

/// Requests answered, by the path they came by.
#[derive(Default)]
pub struct Counts {
    pub via_device: AtomicU64,
    pub via_ring: AtomicU64,
}

/// How a request is answered: an errno, or the reply's payload in the caller's buffer.
pub enum Answer {
    /// Payload of this many bytes written into the buffer.
    Ok(usize),
    Err(i32),
    /// FORGET and its kind: the kernel waits for no reply.
    None,
}

/// Flags the probe accepts at INIT; `ring` adds FUSE over io_uring.
pub fn wanted_flags(ring: bool) -> u64 {
    let base = abi::FUSE_ASYNC_READ | abi::FUSE_INIT_EXT | abi::FUSE_MAX_PAGES;
    if ring {
        base | abi::FUSE_OVER_IO_URING
    } else {
        base
    }
}

fn attr_of(ino: u64) -> Option<Attr> {
    match ino {
        ROOT => Some(Attr {
            ino: ROOT,
            size: 0,
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
        }),
        FILE => Some(Attr {
            ino: FILE,
            size: FILE_SIZE,
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
        }),
        _ => None,
    }
}

/// Answers request `h` whose body (its own header, then its variable part, as /dev/fuse
/// delivers it) is `body`, writing the reply's payload into `out` (cleared first).
pub fn answer(h: &InHeader, body: &[u8], out: &mut Vec<u8>, ring: bool) -> Answer {
    out.clear();
    match h.opcode {
        abi::INIT => {
            if body.len() < 20 {
                return Answer::Err(libc::EINVAL);
            }
            abi::init_out(out, body, wanted_flags(ring));
        }
        abi::LOOKUP => {
            let name = body.split(|b| *b == 0).next().unwrap_or_default();
            if h.nodeid != ROOT || name != FILE_NAME.as_bytes() {
                return Answer::Err(libc::ENOENT);
            }
            let Some(attr) = attr_of(FILE) else {
                return Answer::Err(libc::EIO);
            };
            abi::entry_out(out, &attr, 3600);
        }
        abi::GETATTR => match attr_of(h.nodeid) {
            Some(attr) => abi::attr_out(out, &attr),
            None => return Answer::Err(libc::ENOENT),
        },
        abi::OPEN | abi::OPENDIR => abi::open_out(out, 1, abi::FOPEN_DIRECT_IO),
        abi::READ => {
            if body.len() < 24 {
                return Answer::Err(libc::EINVAL);
            }
            let offset = abi::u64_at(body, 8);
            let size = u64::from(abi::u32_at(body, 16));
            let n = size.min(FILE_SIZE.saturating_sub(offset)) as usize;
            out.resize(n, 0);
        }
        abi::RELEASE | abi::RELEASEDIR | abi::FLUSH => {}
        abi::STATFS => abi::statfs_out(out),
        abi::FORGET | abi::BATCH_FORGET | abi::INTERRUPT => return Answer::None,
        _ => return Answer::Err(libc::ENOSYS),
    }
    Answer::Ok(out.len())
}

/// Counts one request answered by `ring` or by the device.
pub fn count(counts: &Counts, ring: bool) {
    let c = if ring {
        &counts.via_ring
    } else {
        &counts.via_device
    };
    c.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(opcode: u32, nodeid: u64) -> InHeader {
        InHeader {
            len: 0,
            opcode,
            unique: 9,
            nodeid,
        }
    }

    #[test]
    fn the_one_file_is_found_and_others_are_not() {
        let mut out = Vec::new();
        let found = answer(&header(abi::LOOKUP, ROOT), b"f\0", &mut out, false);
        assert!(matches!(found, Answer::Ok(128)));
        assert_eq!(abi::u64_at(&out, 0), FILE);
        let missing = answer(&header(abi::LOOKUP, ROOT), b"g\0", &mut out, false);
        assert!(matches!(missing, Answer::Err(libc::ENOENT)));
        let unknown = answer(&header(999, ROOT), b"", &mut out, false);
        assert!(matches!(unknown, Answer::Err(libc::ENOSYS)));
    }

    #[test]
    fn reads_stop_at_the_end_of_the_file() {
        let mut body = vec![0u8; 40];
        body[8..16].copy_from_slice(&(FILE_SIZE - 100).to_le_bytes());
        body[16..20].copy_from_slice(&4096u32.to_le_bytes());
        let mut out = Vec::new();
        let got = answer(&header(abi::READ, FILE), &body, &mut out, false);
        assert!(matches!(got, Answer::Ok(100)));
    }
}
