//! "Folder" keys: a key ending in `/` (a zero-byte object consoles and some tools make to
//! show an empty folder) is the directory it names. PUT makes it (and the directories above
//! it) and takes no bytes; GET and HEAD answer an empty object while the directory is
//! there; DELETE removes it if it is empty. Listings show directories as they show any
//! directory (common prefixes), not as keys.

use bytes::Bytes;
use myriad_client::{Client, FileKind, FsError, Inode};
use s3s::dto::{ETag, StreamingBlob};
use s3s::{S3Result, s3_error};

use crate::body::Pieces;
use crate::errors::object_error;
use crate::keys::object_path;
use crate::lookup::{missing, no_such_key, timestamp};
use crate::store::DIR_MODE;

/// The MD5 of no bytes: a folder's ETag.
pub const EMPTY_MD5: &str = "d41d8cd98f00b204e9800998ecf8427e";

/// The directory a folder key names, if `key` is one.
pub fn folder_path(bucket: &str, key: &str) -> Option<S3Result<String>> {
    let stem = key.strip_suffix('/')?;
    Some(object_path(bucket, stem))
}

/// The folder's directory, or NoSuchKey.
pub async fn stat(client: &Client, bucket: &str, path: &str) -> S3Result<Inode> {
    match client.stat(path).await {
        Ok(i) if i.kind == FileKind::Directory => Ok(i),
        Ok(_) => Err(no_such_key()),
        Err(e) => Err(missing(client, bucket, e).await),
    }
}

/// An empty body.
pub fn empty_body() -> StreamingBlob {
    StreamingBlob::from(s3s::Body::from(Bytes::new()))
}

pub fn etag() -> ETag {
    ETag::Strong(EMPTY_MD5.into())
}

pub fn last_modified(inode: &Inode) -> s3s::dto::Timestamp {
    timestamp(inode.mtime_ns)
}

/// PUT of a folder key: the directory, made with those above it; its body must be empty.
pub async fn put(client: &Client, bucket: &str, path: &str, body: &mut Pieces) -> S3Result<()> {
    if body.next().await?.is_some_and(|p| !p.is_empty()) {
        return Err(s3_error!(
            InvalidArgument,
            "a key ending in '/' names a folder (a directory), which holds no bytes"
        ));
    }
    crate::buckets::check(client, bucket).await?;
    match client.mkdir_p(path, DIR_MODE).await {
        Ok(()) => Ok(()),
        Err(FsError::AlreadyExists | FsError::NotADirectory) => Err(crate::errors::key_conflict(
            "a part of the folder's key is an object (a file)",
        )),
        Err(e) => Err(object_error(e)),
    }
}

/// DELETE of a folder key: the directory goes if it is empty; a folder holding keys, or
/// none at all, is deleted already (S3 would delete only the marker).
pub async fn delete(client: &Client, path: &str) -> S3Result<()> {
    match client.rmdir(path).await {
        Ok(()) | Err(FsError::NotFound | FsError::NotEmpty | FsError::NotADirectory) => Ok(()),
        Err(e) => Err(object_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_ending_in_a_slash_are_folders() {
        assert_eq!(
            folder_path("b", "x/y/").map(|r| r.ok()),
            Some(Some("/b/x/y".to_string()))
        );
        assert!(folder_path("b", "x/y").is_none());
        assert!(matches!(folder_path("b", "/"), Some(Err(_))));
        assert!(matches!(folder_path("b", "x//"), Some(Err(_))));
        assert!(matches!(folder_path("b", "../"), Some(Err(_))));
    }
}
