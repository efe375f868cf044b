//! Bucket names and object keys as cluster paths.
//!
//! Invariant: a key names exactly one path, `/<bucket>/<key>`, or it is refused. Nothing is
//! normalized: "a//b", "a/./b" and "a/../b" are refused, never read as "a/b" or "b", so two
//! different keys never name one file and no key reaches outside its bucket.

use myriad_client::proto::limits::{NAME_BYTES_MAX, PATH_BYTES_MAX, PATH_DEPTH_MAX};
use myriad_client::proto::validate_path;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

/// Where multipart uploads keep their parts until completed or aborted. Top-level names
/// starting with "." are never buckets, so this is not one.
pub const UPLOADS_DIR: &str = "/.myriad-s3-uploads";

/// Names of objects being written (a PUT streaming its body, a multipart upload being
/// assembled) before they are renamed over their key. Listings skip them and no key may
/// name one, so a half-written object is never seen.
pub const TEMP_PREFIX: &str = ".myriad-s3-tmp.";

/// S3's own limit on a key's length in bytes.
pub const KEY_BYTES_MAX: usize = 1024;

/// The directory of bucket `bucket`: `/<bucket>`.
pub fn bucket_path(bucket: &str) -> S3Result<String> {
    let ok = !bucket.is_empty()
        && bucket.len() <= NAME_BYTES_MAX
        && !bucket.starts_with('.')
        && !bucket.contains(['/', '\0']);
    if !ok {
        return Err(s3_error!(
            InvalidBucketName,
            "bucket names are top-level directory names not starting with '.'"
        ));
    }
    Ok(format!("/{bucket}"))
}

/// The file of object `key` in bucket `bucket`: `/<bucket>/<key>`, or a refusal saying why
/// the key cannot be a path.
pub fn object_path(bucket: &str, key: &str) -> S3Result<String> {
    let base = bucket_path(bucket)?;
    if key.is_empty() {
        return Err(invalid_key(key, "the key is empty"));
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(s3_error!(
            KeyTooLongError,
            "keys are at most {KEY_BYTES_MAX} bytes"
        ));
    }
    for (depth, name) in key.split('/').enumerate() {
        if depth + 1 >= PATH_DEPTH_MAX {
            return Err(s3_error!(
                KeyTooLongError,
                "a key has at most {} '/'-separated parts",
                PATH_DEPTH_MAX - 1
            ));
        }
        if name.is_empty() {
            return Err(invalid_key(
                key,
                "it has an empty part (a leading, trailing or doubled '/')",
            ));
        }
        if name == "." || name == ".." {
            return Err(invalid_key(key, "it has a \".\" or \"..\" part"));
        }
        if name.contains('\0') {
            return Err(invalid_key(key, "it contains a NUL byte"));
        }
        if name.len() > NAME_BYTES_MAX {
            return Err(s3_error!(
                KeyTooLongError,
                "each '/'-separated part of a key is at most {NAME_BYTES_MAX} bytes (a file name)"
            ));
        }
        if name.starts_with(TEMP_PREFIX) {
            return Err(invalid_key(
                key,
                "names starting with \".myriad-s3-tmp.\" are reserved",
            ));
        }
    }
    let path = format!("{base}/{key}");
    if path.len() > PATH_BYTES_MAX {
        return Err(s3_error!(
            KeyTooLongError,
            "bucket and key make a path longer than {PATH_BYTES_MAX} bytes"
        ));
    }
    // The rules above are the path rules; this only guards against the two drifting apart.
    validate_path(&path).map_err(|e| invalid_key(key, &e.to_string()))?;
    Ok(path)
}

fn invalid_key(key: &str, why: &str) -> S3Error {
    let shown: String = key
        .chars()
        .take(64)
        .collect::<String>()
        .replace('\0', "\\0");
    S3Error::with_message(
        S3ErrorCode::InvalidArgument,
        format!("key {shown:?} cannot be a file path: {why}"),
    )
}

/// The directory holding `path` (a valid path other than "/").
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(at) => &path[..at],
    }
}

/// The directories a key implied below its bucket, deepest first: for `/b/x/y/k`,
/// `/b/x/y` then `/b/x`. A DELETE removes those left empty.
pub fn implied_dirs(bucket_path: &str, object_path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut dir = parent(object_path);
    while dir.len() > bucket_path.len() && dir.starts_with(bucket_path) {
        out.push(dir.to_string());
        dir = parent(dir);
    }
    out
}

/// A fresh temporary name in the directory of `path`, for writing an object before it is
/// renamed over `path`.
pub fn temp_beside(path: &str) -> String {
    let dir = parent(path);
    let sep = if dir == "/" { "" } else { "/" };
    format!("{dir}{sep}{TEMP_PREFIX}{:032x}", rand::random::<u128>())
}

/// Whether a directory entry is one of the gateway's own (a temporary object): never
/// listed.
pub fn is_hidden_entry(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(key: &str) -> S3ErrorCode {
        match object_path("bkt", key) {
            Ok(p) => panic!("{key:?} mapped to {p:?}"),
            Err(e) => e.code().clone(),
        }
    }

    #[test]
    fn plain_keys_are_paths_under_their_bucket() {
        assert_eq!(
            object_path("bkt", "a").unwrap_or_else(|e| panic!("{e:?}")),
            "/bkt/a"
        );
        assert_eq!(
            object_path("bkt", "a/b/c.txt").unwrap_or_else(|e| panic!("{e:?}")),
            "/bkt/a/b/c.txt"
        );
        assert_eq!(
            object_path("bkt", "ünï code/x y").unwrap_or_else(|e| panic!("{e:?}")),
            "/bkt/ünï code/x y"
        );
        assert_eq!(
            object_path("bkt", ".hidden/..x/x..").unwrap_or_else(|e| panic!("{e:?}")),
            "/bkt/.hidden/..x/x.."
        );
    }

    #[test]
    fn hostile_keys_are_refused_never_remapped() {
        for key in [
            "",
            "/a",
            "a/",
            "a//b",
            ".",
            "..",
            "./a",
            "a/.",
            "a/./b",
            "../a",
            "a/..",
            "a/../b",
            "a/../../etc/passwd",
            "a\0b",
            "/",
            "//",
        ] {
            assert_eq!(refused(key), S3ErrorCode::InvalidArgument, "{key:?}");
        }
        assert_eq!(
            refused(&format!("a/{TEMP_PREFIX}0123")),
            S3ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn long_keys_are_refused_with_key_too_long() {
        assert_eq!(refused(&"x".repeat(256)), S3ErrorCode::KeyTooLongError);
        assert!(object_path("bkt", &"x".repeat(255)).is_ok());
        assert_eq!(refused(&"x".repeat(1025)), S3ErrorCode::KeyTooLongError);
        let at_limit = vec!["y".repeat(200); 5].join("/");
        assert_eq!(at_limit.len(), 1004);
        assert!(object_path("bkt", &at_limit).is_ok());
    }

    #[test]
    fn bucket_names_that_are_not_plain_top_level_names_are_refused() {
        assert_eq!(
            bucket_path("photos").unwrap_or_else(|e| panic!("{e:?}")),
            "/photos"
        );
        for b in ["", ".myriad-s3-uploads", ".x", "a/b", "a\0"] {
            assert_eq!(
                *bucket_path(b)
                    .err()
                    .unwrap_or_else(|| panic!("expected an error"))
                    .code(),
                S3ErrorCode::InvalidBucketName,
                "{b:?}"
            );
        }
    }

    #[test]
    fn implied_dirs_stop_at_the_bucket() {
        assert_eq!(implied_dirs("/b", "/b/x/y/k"), vec!["/b/x/y", "/b/x"]);
        assert!(implied_dirs("/b", "/b/k").is_empty());
    }

    #[test]
    fn temporary_names_sit_beside_their_object_and_are_hidden() {
        let t = temp_beside("/b/x/k");
        assert!(t.starts_with("/b/x/.myriad-s3-tmp."), "{t}");
        assert!(is_hidden_entry(&t["/b/x/".len()..]));
        assert!(validate_path(&t).is_ok());
        assert_ne!(temp_beside("/b/x/k"), t);
    }
}
