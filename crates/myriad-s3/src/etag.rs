//! ETags. Not the MD5 of the contents (that would mean reading every object written): a hash
//! of what changes whenever the contents may have, the file's inode number, modification
//! time and size, so a PUT costs no extra request and GET, HEAD and LIST agree. An object
//! assembled by a multipart upload carries its part count in an extended attribute and gets
//! S3's form `"<hex>-<parts>"`.

use myriad_client::Inode;
use s3s::dto::ETag;
use xxhash_rust::xxh3::xxh3_128;

/// The extended attribute holding the part count of an object a multipart upload made.
pub const PARTS_XATTR: &str = "user.myriad-s3.parts";

/// The ETag value (unquoted) of the object stored in `inode`.
pub fn etag_value(inode: &Inode) -> String {
    let hex = inode_hash(inode);
    match parts_count(inode) {
        Some(n) => format!("{hex}-{n}"),
        None => hex,
    }
}

/// The ETag of the object stored in `inode`.
pub fn etag(inode: &Inode) -> ETag {
    ETag::Strong(etag_value(inode))
}

fn inode_hash(inode: &Inode) -> String {
    let mut bytes = [0u8; 24];
    bytes[..8].copy_from_slice(&inode.ino.0.to_le_bytes());
    bytes[8..16].copy_from_slice(&inode.mtime_ns.to_le_bytes());
    bytes[16..].copy_from_slice(&inode.size.to_le_bytes());
    format!("{:032x}", xxh3_128(&bytes))
}

/// The part count recorded on an object a multipart upload made.
pub fn parts_count(inode: &Inode) -> Option<u32> {
    let x = inode.xattrs.iter().find(|x| x.name == PARTS_XATTR)?;
    std::str::from_utf8(&x.value).ok()?.parse().ok()
}

/// Whether the ETag a client gave (quoted or not) names this value.
pub fn matches(given: &ETag, value: &str) -> bool {
    given.value().trim_matches('"') == value
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_client::proto::Xattr;
    use myriad_client::{FileKind, InodeId};

    fn inode(ino: u64, mtime_ns: i64, size: u64) -> Inode {
        let mut i = Inode::new(InodeId(ino), FileKind::File, 0o644, (1, 1), mtime_ns);
        i.size = size;
        i
    }

    #[test]
    fn etag_changes_with_inode_time_or_size_only() {
        let a = etag_value(&inode(7, 100, 5));
        assert_eq!(a.len(), 32);
        assert_eq!(a, etag_value(&inode(7, 100, 5)));
        assert_ne!(a, etag_value(&inode(8, 100, 5)));
        assert_ne!(a, etag_value(&inode(7, 101, 5)));
        assert_ne!(a, etag_value(&inode(7, 100, 6)));
    }

    #[test]
    fn multipart_objects_get_the_s3_form() {
        let mut i = inode(7, 100, 5);
        let plain = etag_value(&i);
        i.xattrs.push(Xattr {
            name: PARTS_XATTR.into(),
            value: b"3".to_vec(),
        });
        assert_eq!(etag_value(&i), format!("{plain}-3"));
        assert!(matches(
            &ETag::Strong(format!("\"{plain}-3\"")),
            &etag_value(&i)
        ));
    }
}
