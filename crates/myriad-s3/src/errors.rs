//! File system errors as S3 errors: the one place they are mapped. Callers that know more
//! (a missing name was the bucket, a non-empty directory was a bucket) say so first.

use myriad_client::FsError;
use s3s::{S3Error, S3ErrorCode};

/// HTTP 507 Insufficient Storage, for a full cluster.
const INSUFFICIENT_STORAGE: u16 = 507;

/// `err`, met while working on an object, as S3 says it.
pub fn object_error(err: FsError) -> S3Error {
    use FsError as E;
    let (code, message) = match &err {
        // A missing name, or a file where the key needs a directory: the key is not there.
        E::NotFound | E::NotADirectory | E::IsADirectory => (
            S3ErrorCode::NoSuchKey,
            "the specified key does not exist".to_string(),
        ),
        E::PermissionDenied | E::NotPermitted => (
            S3ErrorCode::AccessDenied,
            "the cluster refused this user: permission denied".to_string(),
        ),
        E::ReadOnly => (S3ErrorCode::AccessDenied, err.to_string()),
        E::NameTooLong => (S3ErrorCode::KeyTooLongError, err.to_string()),
        E::InvalidArgument(m) => (S3ErrorCode::InvalidArgument, m.clone()),
        E::TooLarge => (S3ErrorCode::EntityTooLarge, err.to_string()),
        E::Busy => (S3ErrorCode::SlowDown, err.to_string()),
        E::Unavailable(_) | E::TimedOut(_) => (S3ErrorCode::ServiceUnavailable, err.to_string()),
        E::NoSpace => {
            let mut e = S3Error::with_message(
                S3ErrorCode::from_bytes(b"InsufficientStorage")
                    .unwrap_or(S3ErrorCode::InternalError),
                "the cluster is out of space",
            );
            if let Ok(status) = hyper::StatusCode::from_u16(INSUFFICIENT_STORAGE) {
                e.set_status_code(status);
            }
            return e;
        }
        E::QuotaExceeded => {
            // As MinIO answers a bucket past its quota: 403 with a code naming it.
            let mut e = S3Error::with_message(
                S3ErrorCode::from_bytes(b"QuotaExceeded").unwrap_or(S3ErrorCode::AccessDenied),
                "a directory quota of this bucket's tree is exceeded (`myriad quota get`)",
            );
            e.set_status_code(hyper::StatusCode::FORBIDDEN);
            return e;
        }
        _ => (S3ErrorCode::InternalError, err.to_string()),
    };
    S3Error::with_message(code, message)
}

/// `err`, met while working on a bucket itself.
pub fn bucket_error(err: FsError) -> S3Error {
    match err {
        FsError::NotFound | FsError::NotADirectory => S3Error::with_message(
            S3ErrorCode::NoSuchBucket,
            "the specified bucket does not exist",
        ),
        FsError::NotEmpty => S3Error::with_message(
            S3ErrorCode::BucketNotEmpty,
            "the bucket is not empty (its directory holds files or directories)",
        ),
        other => object_error(other),
    }
}

/// A key that cannot be a file because of the files already there: a key whose leading
/// part is an object ("a" exists, "a/b" is put) or that names a directory of other keys.
pub fn key_conflict(message: &'static str) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::from_bytes(b"KeyConflict").unwrap_or(S3ErrorCode::InvalidRequest),
        message,
    );
    e.set_status_code(hyper::StatusCode::CONFLICT);
    e
}

/// An object body that could not be read from the request.
pub fn body_error(err: &(dyn std::error::Error + Send + Sync + 'static)) -> S3Error {
    if let Some(e) = err.downcast_ref::<S3Error>() {
        let mut out = S3Error::new(e.code().clone());
        if let Some(m) = e.message() {
            out.set_message(m.to_string());
        }
        return out;
    }
    S3Error::with_message(
        S3ErrorCode::IncompleteBody,
        format!("reading the request body failed: {err}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_s3_codes() {
        assert_eq!(
            *object_error(FsError::NotFound).code(),
            S3ErrorCode::NoSuchKey
        );
        assert_eq!(
            *bucket_error(FsError::NotFound).code(),
            S3ErrorCode::NoSuchBucket
        );
        assert_eq!(
            *bucket_error(FsError::NotEmpty).code(),
            S3ErrorCode::BucketNotEmpty
        );
        assert_eq!(
            *object_error(FsError::PermissionDenied).code(),
            S3ErrorCode::AccessDenied
        );
        assert_eq!(
            *object_error(FsError::TimedOut("x".into())).code(),
            S3ErrorCode::ServiceUnavailable
        );
        assert_eq!(*object_error(FsError::Busy).code(), S3ErrorCode::SlowDown);
        let full = object_error(FsError::NoSpace);
        assert_eq!(full.status_code().map(|s| s.as_u16()), Some(507));
        assert_eq!(full.code().as_str(), "InsufficientStorage");
        let over = object_error(FsError::QuotaExceeded);
        assert_eq!(over.status_code().map(|s| s.as_u16()), Some(403));
        assert_eq!(over.code().as_str(), "QuotaExceeded");
    }
}
