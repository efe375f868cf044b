//! Finding an object or a bucket: the errors S3 gives for what is missing (NoSuchKey or
//! NoSuchBucket, told apart with one more request on the error path only), the check that
//! a name is an object (a regular file), and file times as S3 timestamps.

use std::time::{Duration, SystemTime};

use myriad_client::{Client, FileKind, FsError, Inode};
use s3s::dto::Timestamp;
use s3s::{S3Error, S3Result, s3_error};

use crate::errors::object_error;
use crate::keys::bucket_path;

/// The time `ns` nanoseconds after the Unix epoch (earlier times as the epoch).
pub fn timestamp(ns: i64) -> Timestamp {
    let ns = u64::try_from(ns).unwrap_or(0);
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
}

pub fn no_such_bucket() -> S3Error {
    s3_error!(NoSuchBucket, "the specified bucket does not exist")
}

pub fn no_such_key() -> S3Error {
    s3_error!(NoSuchKey, "the specified key does not exist")
}

/// `err`, met looking for an object in `bucket`: NoSuchBucket if the bucket is the missing
/// part (one more request, on this error path only).
pub async fn missing(client: &Client, bucket: &str, err: FsError) -> S3Error {
    if !matches!(err, FsError::NotFound | FsError::NotADirectory) {
        return object_error(err);
    }
    match bucket_path(bucket) {
        Ok(b) => match client.stat(&b).await {
            Ok(i) if i.kind == FileKind::Directory => no_such_key(),
            _ => no_such_bucket(),
        },
        Err(e) => e,
    }
}

/// The inode of the object at `path`, which must be a regular file.
pub fn object_inode(inode: Inode) -> S3Result<Inode> {
    if inode.kind == FileKind::File {
        Ok(inode)
    } else {
        // Directories (prefixes of other keys) and symlinks are not objects.
        Err(no_such_key())
    }
}
