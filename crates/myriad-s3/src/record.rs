//! The object record: what S3 keeps about an object beyond its bytes (its MD5 ETag, the
//! headers and `x-amz-meta-*` pairs it was stored with, the upload that made it), one JSON
//! extended attribute of the object's file (docs/s3.md "The object record").

use std::collections::BTreeMap;

use myriad_client::Inode;
use serde::{Deserialize, Serialize};

/// The extended attribute holding an object's record.
pub const RECORD_XATTR: &str = "user.myriad-s3.object";

/// Most bytes of `x-amz-meta-*` names and values together, as S3 allows.
pub const META_BYTES_MAX: usize = 2048;
/// Most bytes of an encoded record: the headers are bounded only by HTTP's header limits,
/// and the record must fit beside a file's other extended attributes
/// (`limits::XATTR_TOTAL_BYTES_MAX`, 64 KiB). Refused before anything is written, so a
/// PUT never stores an object whose record then cannot be kept.
pub const RECORD_BYTES_MAX: usize = 16 * 1024;

/// The headers S3 stores with an object and answers GET and HEAD with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Headers {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// As an HTTP date.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

/// Inode number, mtime (ns) and size of a file when its ETag was taken.
pub type Stamp = (u64, i64, u64);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectRecord {
    /// The ETag as S3 makes it (unquoted): valid while the file matches `stamp`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stamp: Option<Stamp>,
    pub headers: Headers,
    /// `x-amz-meta-*` pairs, names without the prefix, in lower case.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
    /// The multipart upload that made the object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload: Option<String>,
    /// Additional checksums (`CRC32`, `SHA256`, ...: base64), valid with the ETag.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub checksums: BTreeMap<String, String>,
}

fn stamp_of(inode: &Inode) -> Stamp {
    (inode.ino.0, inode.mtime_ns, inode.size)
}

impl ObjectRecord {
    /// The record kept on `inode`; an empty one if it has none (a file no PUT wrote) or it
    /// cannot be read.
    pub fn of(inode: &Inode) -> ObjectRecord {
        inode
            .xattrs
            .iter()
            .find(|x| x.name == RECORD_XATTR)
            .and_then(|x| serde_json::from_slice(&x.value).ok())
            .unwrap_or_default()
    }

    /// The stored ETag, if the file is still as it was when the ETag was taken.
    pub fn valid_etag(&self, inode: &Inode) -> Option<&str> {
        match (&self.etag, self.stamp) {
            (Some(e), Some(s)) if s == stamp_of(inode) => Some(e),
            _ => None,
        }
    }

    /// The stored checksums, if the file is still as it was when they were taken.
    pub fn valid_checksums(&self, inode: &Inode) -> Option<&BTreeMap<String, String>> {
        self.valid_etag(inode).map(|_| &self.checksums)
    }

    /// This record with `etag` taken of the file as `inode` shows it.
    pub fn stamped(mut self, etag: String, inode: &Inode) -> ObjectRecord {
        self.etag = Some(etag);
        self.stamp = Some(stamp_of(inode));
        self
    }

    /// This record without an ETag (for a file whose MD5 is not known).
    pub fn unstamped(mut self) -> ObjectRecord {
        self.etag = None;
        self.stamp = None;
        self.checksums.clear();
        self
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Bytes of the `x-amz-meta-*` names and values, as S3 counts them against its limit.
    pub fn meta_bytes(&self) -> usize {
        self.meta.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
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

    fn with_record(mut i: Inode, r: &ObjectRecord) -> Inode {
        i.xattrs.push(Xattr {
            name: RECORD_XATTR.into(),
            value: r.encode(),
        });
        i
    }

    #[test]
    fn a_record_round_trips_through_its_attribute() {
        let mut r = ObjectRecord::default();
        r.headers.content_type = Some("text/plain".into());
        r.meta.insert("color".into(), "blue".into());
        let r = r.stamped("abc".into(), &inode(7, 100, 5));
        let i = with_record(inode(7, 100, 5), &r);
        assert_eq!(ObjectRecord::of(&i), r);
        assert_eq!(ObjectRecord::of(&i).valid_etag(&i), Some("abc"));
        assert_eq!(r.meta_bytes(), 9);
    }

    #[test]
    fn the_etag_is_valid_only_while_the_file_is_unchanged() {
        let r = ObjectRecord::default().stamped("abc".into(), &inode(7, 100, 5));
        for changed in [inode(8, 100, 5), inode(7, 101, 5), inode(7, 100, 6)] {
            assert_eq!(r.valid_etag(&changed), None);
        }
        assert_eq!(r.clone().unstamped().valid_etag(&inode(7, 100, 5)), None);
    }

    #[test]
    fn no_or_garbled_attribute_reads_as_an_empty_record() {
        assert_eq!(ObjectRecord::of(&inode(1, 1, 1)), ObjectRecord::default());
        let mut i = inode(1, 1, 1);
        i.xattrs.push(Xattr {
            name: RECORD_XATTR.into(),
            value: b"{not json".to_vec(),
        });
        assert_eq!(ObjectRecord::of(&i), ObjectRecord::default());
    }
}
