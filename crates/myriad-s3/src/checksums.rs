//! S3's additional checksums (`x-amz-checksum-crc32`, `-crc32c`, `-crc64nvme`, `-sha1`,
//! `-sha256`), which the AWS SDKs send with every upload, in a header or in the trailer of
//! an `aws-chunked` body: computed as the body arrives, checked against what the client
//! sent (BadDigest, and nothing stored, if they differ), kept in the object's record and
//! given back by GET and HEAD with `x-amz-checksum-mode: ENABLED` while the file is as the
//! gateway wrote it.

use std::collections::BTreeMap;

use s3s::checksum::ChecksumHasher;
use s3s::dto::{Checksum, ChecksumAlgorithm};
use s3s::{S3Result, s3_error};

/// The algorithms S3 knows, by the names its headers and records use.
const ALGORITHMS: [&str; 5] = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"];

/// What a request asks to be checked: the algorithms, each with the value its header gave
/// (None: the value comes in the body's trailer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted(BTreeMap<&'static str, Option<String>>);

/// The checksum fields of a request (PutObjectInput, UploadPartInput: the same names).
macro_rules! wanted_of {
    ($input:expr) => {
        $crate::checksums::Wanted::of(
            [
                $input.checksum_crc32.clone(),
                $input.checksum_crc32c.clone(),
                $input.checksum_crc64nvme.clone(),
                $input.checksum_sha1.clone(),
                $input.checksum_sha256.clone(),
            ],
            $input.checksum_algorithm.as_ref(),
        )
    };
}
pub(crate) use wanted_of;

impl Wanted {
    /// From header values in `ALGORITHMS` order and the SDK's declared algorithm.
    pub fn of(values: [Option<String>; 5], declared: Option<&ChecksumAlgorithm>) -> Wanted {
        let mut wanted = BTreeMap::new();
        for (name, value) in ALGORITHMS.into_iter().zip(values) {
            if value.is_some() {
                wanted.insert(name, value);
            }
        }
        if let Some(d) = declared {
            let name = d.as_str().to_ascii_uppercase();
            if let Some(known) = ALGORITHMS.into_iter().find(|a| *a == name) {
                wanted.entry(known).or_insert(None);
            }
        }
        Wanted(wanted)
    }

    /// A hasher computing every wanted algorithm.
    pub fn hasher(&self) -> ChecksumHasher {
        let mut h = ChecksumHasher::default();
        for name in self.0.keys() {
            match *name {
                "CRC32" => h.crc32 = Some(Default::default()),
                "CRC32C" => h.crc32c = Some(Default::default()),
                "CRC64NVME" => h.crc64nvme = Some(Default::default()),
                "SHA1" => h.sha1 = Some(Default::default()),
                _ => h.sha256 = Some(Default::default()),
            }
        }
        h
    }

    /// The checksums to keep once `computed` matched what the client sent, in its headers
    /// or in `trailer` (the body's trailing headers, read once the body is all read);
    /// BadDigest for the first that does not.
    pub fn verify(
        &self,
        computed: &Checksum,
        trailer: Option<&hyper::HeaderMap>,
    ) -> S3Result<BTreeMap<String, String>> {
        let mut keep = BTreeMap::new();
        for (name, given) in &self.0 {
            let Some(ours) = value_of(computed, name) else {
                continue;
            };
            let header = format!("x-amz-checksum-{}", name.to_ascii_lowercase());
            let theirs = given.clone().or_else(|| {
                trailer
                    .and_then(|t| t.get(header.as_str()))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            });
            match theirs {
                Some(v) if v.trim() != ours => {
                    return Err(s3_error!(
                        BadDigest,
                        "the {name} you specified did not match the calculated checksum"
                    ));
                }
                // Declared but never sent: computed and kept, nothing to compare.
                _ => keep.insert((*name).to_string(), ours.to_string()),
            };
        }
        Ok(keep)
    }
}

fn value_of<'a>(c: &'a Checksum, name: &str) -> Option<&'a str> {
    match name {
        "CRC32" => c.checksum_crc32.as_deref(),
        "CRC32C" => c.checksum_crc32c.as_deref(),
        "CRC64NVME" => c.checksum_crc64nvme.as_deref(),
        "SHA1" => c.checksum_sha1.as_deref(),
        _ => c.checksum_sha256.as_deref(),
    }
}

/// Kept checksums in S3's answer fields.
pub fn answer(kept: &BTreeMap<String, String>) -> Checksum {
    let get = |n: &str| kept.get(n).cloned();
    Checksum {
        checksum_crc32: get("CRC32"),
        checksum_crc32c: get("CRC32C"),
        checksum_crc64nvme: get("CRC64NVME"),
        checksum_sha1: get("SHA1"),
        checksum_sha256: get("SHA256"),
        ..Checksum::default()
    }
}

/// Fills the checksum fields of an answer (GET, HEAD, PUT, UploadPart) from `kept`.
macro_rules! answer_checksums {
    ($output:expr, $kept:expr) => {{
        let c = $crate::checksums::answer($kept);
        if !$kept.is_empty() {
            $output.checksum_crc32 = c.checksum_crc32;
            $output.checksum_crc32c = c.checksum_crc32c;
            $output.checksum_crc64nvme = c.checksum_crc64nvme;
            $output.checksum_sha1 = c.checksum_sha1;
            $output.checksum_sha256 = c.checksum_sha256;
        }
    }};
}
pub(crate) use answer_checksums;

#[cfg(test)]
mod tests {
    use super::*;

    fn computed(wanted: &Wanted, data: &[u8]) -> Checksum {
        let mut h = wanted.hasher();
        h.update(data);
        h.finalize()
    }

    #[test]
    fn a_header_value_is_checked_and_kept() {
        // CRC32 of "hello" is 0x3610a686: base64 of its big-endian bytes.
        let w = Wanted::of([Some("NhCmhg==".into()), None, None, None, None], None);
        let kept = w.verify(&computed(&w, b"hello"), None);
        assert_eq!(
            kept.ok().and_then(|k| k.get("CRC32").cloned()).as_deref(),
            Some("NhCmhg==")
        );
        let e = w.verify(&computed(&w, b"hellO"), None).err();
        assert_eq!(
            e.map(|e| e.code().as_str().to_string()).as_deref(),
            Some("BadDigest")
        );
    }

    #[test]
    fn a_trailer_value_is_checked_once_the_body_is_read() {
        let declared = ChecksumAlgorithm::from_static(ChecksumAlgorithm::SHA256);
        let w = Wanted::of([None, None, None, None, None], Some(&declared));
        assert_ne!(w, Wanted::default());
        let ours = computed(&w, b"data");
        let mut trailer = hyper::HeaderMap::new();
        let good = ours.checksum_sha256.clone().unwrap_or_default();
        if let Ok(v) = good.parse() {
            trailer.insert("x-amz-checksum-sha256", v);
        }
        assert!(w.verify(&ours, Some(&trailer)).is_ok());
        if let Ok(v) = "AAAA".parse() {
            trailer.insert("x-amz-checksum-sha256", v);
        }
        assert!(w.verify(&ours, Some(&trailer)).is_err());
        // No trailer at all: computed and kept.
        assert!(
            w.verify(&ours, None)
                .is_ok_and(|k| k.contains_key("SHA256"))
        );
    }

    #[test]
    fn nothing_asked_nothing_computed() {
        let w = Wanted::of([None, None, None, None, None], None);
        assert_eq!(w, Wanted::default());
        assert!(
            w.verify(&computed(&w, b"x"), None)
                .is_ok_and(|k| k.is_empty())
        );
    }
}
