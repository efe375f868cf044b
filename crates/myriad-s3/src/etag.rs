//! ETags. An object the gateway wrote carries its ETag as S3 makes it (the MD5 of its bytes;
//! for a multipart upload the MD5 of the parts' MD5s with `-<parts>`) in its record,
//! valid while the file is as the gateway wrote it. Any other file gets a hash of its inode
//! number, mtime and size with the suffix `-1`: S3's form of an ETag that is not an MD5 of
//! the bytes, so that tools verifying downloads do not take it for one (docs/s3.md).

use md5::{Digest, Md5};
use myriad_client::Inode;
use s3s::dto::ETag;
use xxhash_rust::xxh3::xxh3_128;

use crate::record::ObjectRecord;

/// The extended attribute where builds before the object record kept the part count of an
/// object a multipart upload made (still read, for such objects' ETags).
const OLD_PARTS_XATTR: &str = "user.myriad-s3.parts";

/// The ETag value (unquoted) of the object stored in `inode`.
pub fn etag_value(inode: &Inode) -> String {
    match ObjectRecord::of(inode).valid_etag(inode) {
        Some(e) => e.to_string(),
        None => fallback(inode),
    }
}

/// The ETag of the object stored in `inode`.
pub fn etag(inode: &Inode) -> ETag {
    ETag::Strong(etag_value(inode))
}

/// The ETag of a file whose MD5 is not known.
fn fallback(inode: &Inode) -> String {
    let mut bytes = [0u8; 24];
    bytes[..8].copy_from_slice(&inode.ino.0.to_le_bytes());
    bytes[8..16].copy_from_slice(&inode.mtime_ns.to_le_bytes());
    bytes[16..].copy_from_slice(&inode.size.to_le_bytes());
    let parts = inode
        .xattrs
        .iter()
        .find(|x| x.name == OLD_PARTS_XATTR)
        .and_then(|x| std::str::from_utf8(&x.value).ok()?.parse::<u32>().ok())
        .unwrap_or(1);
    format!("{:032x}-{parts}", xxh3_128(&bytes))
}

/// Whether the ETag a client gave (quoted or not) names this value.
pub fn matches(given: &ETag, value: &str) -> bool {
    given.value().trim_matches('"') == value
}

/// The MD5 of bytes given a piece at a time.
#[derive(Clone, Default)]
pub struct Md5Sum(Md5);

impl Md5Sum {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> [u8; 16] {
        self.0.finalize().into()
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The ETag of an object assembled from parts with these ETags: the MD5 of their binary
/// MD5s, `-`, their count (a part's ETag that is no MD5 counts by its hex digits).
pub fn multipart(part_etags: &[String]) -> String {
    let mut sum = Md5Sum::default();
    for e in part_etags {
        let digits = e.split('-').next().unwrap_or_default();
        sum.update(&unhex(digits).unwrap_or_else(|| digits.as_bytes().to_vec()));
    }
    format!("{}-{}", hex(&sum.finish()), part_etags.len())
}

/// Whether a `Content-MD5` header (base64 of the 16 bytes) names `md5`.
pub fn content_md5_matches(header: &str, md5: &[u8; 16]) -> bool {
    base64(md5) == header.trim()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{ObjectRecord, RECORD_XATTR};
    use myriad_client::proto::Xattr;
    use myriad_client::{FileKind, InodeId};

    fn inode(ino: u64, mtime_ns: i64, size: u64) -> Inode {
        let mut i = Inode::new(InodeId(ino), FileKind::File, 0o644, (1, 1), mtime_ns);
        i.size = size;
        i
    }

    fn md5_hex(bytes: &[u8]) -> String {
        let mut s = Md5Sum::default();
        s.update(bytes);
        hex(&s.finish())
    }

    #[test]
    fn md5_as_s3_gives_it() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"hello"), "5d41402abc4b2a76b9719d911017c592");
        let mut s = Md5Sum::default();
        s.update(b"hel");
        s.update(b"lo");
        assert!(content_md5_matches(
            " XUFAKrxLKna5cZ2REBfFkg==",
            &s.finish()
        ));
    }

    #[test]
    fn base64_pads_as_the_standard_says() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
    }

    #[test]
    fn a_multipart_etag_is_the_md5_of_the_part_md5s() {
        // As S3 (and `aws s3 cp`'s docs) compute it: md5(md5(p1) || md5(p2)) "-2".
        let (p1, p2) = (md5_hex(b"part one"), md5_hex(b"part two"));
        let mut joined = unhex(&p1).unwrap_or_default();
        joined.extend(unhex(&p2).unwrap_or_default());
        assert_eq!(multipart(&[p1, p2]), format!("{}-2", md5_hex(&joined)));
    }

    #[test]
    fn a_file_without_a_valid_record_gets_an_etag_that_is_no_md5() {
        let a = etag_value(&inode(7, 100, 5));
        assert!(a.ends_with("-1"), "{a}");
        assert_eq!(a, etag_value(&inode(7, 100, 5)));
        assert_ne!(a, etag_value(&inode(8, 100, 5)));
        assert_ne!(a, etag_value(&inode(7, 101, 5)));
        assert_ne!(a, etag_value(&inode(7, 100, 6)));
        let mut old = inode(7, 100, 5);
        old.xattrs.push(Xattr {
            name: OLD_PARTS_XATTR.into(),
            value: b"3".to_vec(),
        });
        assert!(etag_value(&old).ends_with("-3"));
    }

    #[test]
    fn a_valid_record_gives_its_md5() {
        let mut i = inode(7, 100, 5);
        let r = ObjectRecord::default().stamped(md5_hex(b"hello"), &i);
        i.xattrs.push(Xattr {
            name: RECORD_XATTR.into(),
            value: r.encode(),
        });
        assert_eq!(etag_value(&i), "5d41402abc4b2a76b9719d911017c592");
        assert!(matches(
            &ETag::Strong("\"5d41402abc4b2a76b9719d911017c592\"".into()),
            &etag_value(&i)
        ));
        i.mtime_ns += 1;
        assert!(etag_value(&i).ends_with("-1"));
    }
}
