//! GetObject, HeadObject, PutObject, DeleteObject and DeleteObjects: objects as files.

use bytes::Bytes;
use futures::StreamExt;
use myriad_client::{Client, FsError};
use s3s::dto::{
    DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, DeletedObject,
    ETag, ETagCondition, Error as DeleteError, GetObjectInput, GetObjectOutput, HeadObjectInput,
    HeadObjectOutput, PutObjectInput, PutObjectOutput, StreamingBlob,
};
use s3s::{S3ErrorCode, S3Result, TrailingHeaders, s3_error};

use crate::body::{PIECE_BYTES, Pieces, stream_file};
use crate::checksums::{answer_checksums, wanted_of};
use crate::conditions::{check_read, conditions_of, names};
use crate::errors::object_error;
use crate::etag::{etag, etag_value};
use crate::folders;
use crate::headers::{
    DEFAULT_CONTENT_TYPE, answer_with, headers_of, new_record, overrides_of, shown,
};
use crate::keys::{bucket_path, implied_dirs, object_path};
use crate::lookup::{missing, no_such_bucket, object_inode, timestamp};
use crate::record::ObjectRecord;
use crate::store::{Base, Put, precondition_failed, write_object};

/// Keys of one DeleteObjects request deleted at once.
const DELETES_IN_FLIGHT: usize = 8;
/// Most keys one DeleteObjects request may name, as S3 allows.
const DELETES_MAX: usize = 1000;

/// Fills a GET's or HEAD's answer from the object's record: its stored headers and metadata
/// (with the request's `response-*` overrides), and its additional checksums when asked
/// for and the answer is the whole object (a range's bytes have other checksums).
macro_rules! answer_stored {
    ($output:expr, $inode:expr, $input:expr) => {{
        let record = ObjectRecord::of($inode);
        if $input.range.is_none()
            && checksums_asked($input.checksum_mode.as_ref())
            && let Some(kept) = record.valid_checksums($inode)
        {
            answer_checksums!($output, kept);
            $output.checksum_type = full_object(kept);
        }
        answer_with!($output, shown(record, overrides_of!($input)));
    }};
}

/// Whether a GET or HEAD asks for the object's additional checksums.
fn checksums_asked(mode: Option<&s3s::dto::ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str() == s3s::dto::ChecksumMode::ENABLED)
}

/// The checksum type of checksums kept for a whole object (none: no type).
fn full_object(
    kept: &std::collections::BTreeMap<String, String>,
) -> Option<s3s::dto::ChecksumType> {
    (!kept.is_empty())
        .then(|| s3s::dto::ChecksumType::from_static(s3s::dto::ChecksumType::FULL_OBJECT))
}

/// The bytes a `Range` header asks of an object of `size` bytes (all without one).
fn byte_range(range: Option<&s3s::dto::Range>, size: u64) -> S3Result<std::ops::Range<u64>> {
    match range {
        None => Ok(0..size),
        Some(r) => r.check(size).map_err(|_| {
            s3_error!(
                InvalidRange,
                "the requested range is not satisfiable (size {size})"
            )
        }),
    }
}

fn content_range(range: &std::ops::Range<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{size}",
        range.start,
        range.end.saturating_sub(1)
    )
}

pub async fn get(client: &Client, input: GetObjectInput) -> S3Result<GetObjectOutput> {
    if let Some(dir) = folders::folder_path(&input.bucket, &input.key) {
        let inode = folders::stat(client, &input.bucket, &dir?).await?;
        check_read(&conditions_of!(input), folders::EMPTY_MD5, inode.mtime_ns)?;
        return Ok(GetObjectOutput {
            body: Some(folders::empty_body()),
            content_length: Some(0),
            content_type: Some(DEFAULT_CONTENT_TYPE.into()),
            e_tag: Some(folders::etag()),
            last_modified: Some(folders::last_modified(&inode)),
            ..Default::default()
        });
    }
    let path = object_path(&input.bucket, &input.key)?;
    // Without a range the first piece comes with the attributes, in one request; with one
    // only the attributes do (the range may start anywhere).
    let head_bytes = if input.range.is_some() {
        0
    } else {
        PIECE_BYTES as u64
    };
    let (inode, mut first) = match client.fetch_head(&path, head_bytes).await {
        Ok(r) => r,
        Err(e) => return Err(missing(client, &input.bucket, e).await),
    };
    let inode = object_inode(inode)?;
    let tag = etag_value(&inode);
    check_read(&conditions_of!(input), &tag, inode.mtime_ns)?;
    let size = inode.size;
    let range = byte_range(input.range.as_ref(), size)?;
    if input.range.is_some() {
        first.clear();
    }
    first.truncate(usize::try_from(range.end - range.start).unwrap_or(usize::MAX));
    let content_range = input.range.map(|_| content_range(&range, size));
    let length = range.end - range.start;
    let mut output = GetObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: Some(i64::try_from(length).unwrap_or(i64::MAX)),
        content_range,
        e_tag: Some(ETag::Strong(tag)),
        last_modified: Some(timestamp(inode.mtime_ns)),
        ..Default::default()
    };
    answer_stored!(output, &inode, input);
    let body = if first.len() as u64 == length {
        StreamingBlob::from(s3s::Body::from(Bytes::from(first)))
    } else {
        stream_file(client.clone(), path, inode, range, first)
    };
    Ok(GetObjectOutput {
        body: Some(body),
        ..output
    })
}

pub async fn head(client: &Client, input: HeadObjectInput) -> S3Result<HeadObjectOutput> {
    if let Some(dir) = folders::folder_path(&input.bucket, &input.key) {
        let inode = folders::stat(client, &input.bucket, &dir?).await?;
        check_read(&conditions_of!(input), folders::EMPTY_MD5, inode.mtime_ns)?;
        return Ok(HeadObjectOutput {
            content_length: Some(0),
            content_type: Some(DEFAULT_CONTENT_TYPE.into()),
            e_tag: Some(folders::etag()),
            last_modified: Some(folders::last_modified(&inode)),
            ..Default::default()
        });
    }
    let path = object_path(&input.bucket, &input.key)?;
    let inode = match client.stat(&path).await {
        Ok(i) => object_inode(i)?,
        Err(e) => return Err(missing(client, &input.bucket, e).await),
    };
    let tag = etag_value(&inode);
    check_read(&conditions_of!(input), &tag, inode.mtime_ns)?;
    // A HEAD with a range answers for that range, as a GET of it would.
    let range = byte_range(input.range.as_ref(), inode.size)?;
    let mut output = HeadObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: Some(i64::try_from(range.end - range.start).unwrap_or(i64::MAX)),
        content_range: input.range.map(|_| content_range(&range, inode.size)),
        e_tag: Some(ETag::Strong(tag)),
        last_modified: Some(timestamp(inode.mtime_ns)),
        ..Default::default()
    };
    answer_stored!(output, &inode, input);
    Ok(output)
}

pub async fn put(
    client: &Client,
    input: PutObjectInput,
    trailer: Option<TrailingHeaders>,
) -> S3Result<PutObjectOutput> {
    if let Some(dir) = folders::folder_path(&input.bucket, &input.key) {
        folders::put(client, &input.bucket, &dir?, &mut Pieces::new(input.body)).await?;
        return Ok(PutObjectOutput {
            e_tag: Some(folders::etag()),
            size: Some(0),
            ..Default::default()
        });
    }
    let path = object_path(&input.bucket, &input.key)?;
    let bucket = bucket_path(&input.bucket)?;
    let base = Base {
        path: &bucket,
        missing: no_such_bucket,
    };
    if let Some(wanted) = &input.if_match {
        // Checked before the write, not atomically with it (docs/s3.md).
        let current = match client.stat(&path).await {
            Ok(i) => object_inode(i)?,
            Err(e) => return Err(missing(client, &input.bucket, e).await),
        };
        if !names(wanted, &etag_value(&current)) {
            return Err(precondition_failed());
        }
    }
    check_storage_class(input.storage_class.as_ref())?;
    let put = Put {
        record: new_record(headers_of!(input), input.metadata.as_ref())?,
        content_md5: input.content_md5.clone(),
        create_only: match &input.if_none_match {
            None => false,
            Some(ETagCondition::Any) => true,
            Some(ETagCondition::ETag(_)) => {
                return Err(s3_error!(
                    NotImplemented,
                    "If-None-Match on a PUT takes only *"
                ));
            }
        },
        checksums: wanted_of!(input),
        trailer,
    };
    let mut pieces = Pieces::new(input.body).with_checksums(put.checksums.hasher());
    let inode = write_object(client, &base, &path, &mut pieces, &put).await?;
    let mut output = PutObjectOutput {
        e_tag: Some(etag(&inode)),
        size: Some(i64::try_from(inode.size).unwrap_or(i64::MAX)),
        ..Default::default()
    };
    answer_checksums!(output, &ObjectRecord::of(&inode).checksums);
    Ok(output)
}

/// A storage class S3 knows (all are kept the same way here); InvalidStorageClass else.
pub fn check_storage_class(class: Option<&s3s::dto::StorageClass>) -> S3Result<()> {
    use s3s::dto::StorageClass as C;
    const KNOWN: [&str; 11] = [
        C::STANDARD,
        C::REDUCED_REDUNDANCY,
        C::STANDARD_IA,
        C::ONEZONE_IA,
        C::INTELLIGENT_TIERING,
        C::GLACIER,
        C::DEEP_ARCHIVE,
        C::OUTPOSTS,
        C::GLACIER_IR,
        C::SNOW,
        C::EXPRESS_ONEZONE,
    ];
    match class {
        Some(c) if !KNOWN.contains(&c.as_str()) => Err(s3_error!(
            InvalidStorageClass,
            "the storage class you specified is not valid"
        )),
        _ => Ok(()),
    }
}

/// Deletes one object, then the directories its key implied that are left empty. A key
/// that is not there is deleted already (as S3 answers).
async fn delete_one(client: &Client, bucket: &str, key: &str) -> S3Result<()> {
    if let Some(dir) = folders::folder_path(bucket, key) {
        return folders::delete(client, &dir?).await;
    }
    let path = object_path(bucket, key)?;
    match client.unlink(&path).await {
        Ok(()) => {}
        Err(e @ (FsError::NotFound | FsError::NotADirectory)) => {
            return match missing(client, bucket, e).await {
                e if *e.code() == S3ErrorCode::NoSuchKey => Ok(()),
                e => Err(e),
            };
        }
        // A directory is a prefix of other keys, not an object: nothing to delete.
        Err(FsError::IsADirectory) => return Ok(()),
        Err(e) => return Err(object_error(e)),
    }
    let base = bucket_path(bucket)?;
    for dir in implied_dirs(&base, &path) {
        // Stops at the first directory still holding something ("not empty"), or any
        // other refusal: the object itself is gone either way.
        if client.rmdir(&dir).await.is_err() {
            break;
        }
    }
    Ok(())
}

pub async fn delete(client: &Client, input: DeleteObjectInput) -> S3Result<DeleteObjectOutput> {
    delete_one(client, &input.bucket, &input.key).await?;
    Ok(DeleteObjectOutput::default())
}

pub async fn delete_many(
    client: &Client,
    input: DeleteObjectsInput,
) -> S3Result<DeleteObjectsOutput> {
    if input.delete.objects.len() > DELETES_MAX {
        return Err(s3_error!(
            MalformedXML,
            "a DeleteObjects request names at most {DELETES_MAX} keys"
        ));
    }
    let bucket = input.bucket;
    let quiet = input.delete.quiet.unwrap_or(false);
    let results: Vec<(String, S3Result<()>)> = futures::stream::iter(input.delete.objects)
        .map(|o| {
            let bucket = &bucket;
            async move {
                let r = delete_one(client, bucket, &o.key).await;
                (o.key, r)
            }
        })
        .buffered(DELETES_IN_FLIGHT)
        .collect()
        .await;
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for (key, r) in results {
        match r {
            Ok(()) if !quiet => deleted.push(DeletedObject {
                key: Some(key),
                ..Default::default()
            }),
            Ok(()) => {}
            Err(e) if *e.code() == S3ErrorCode::NoSuchBucket => return Err(e),
            Err(e) => errors.push(DeleteError {
                code: Some(e.code().as_str().to_string()),
                key: Some(key),
                message: e.message().map(str::to_string),
                ..Default::default()
            }),
        }
    }
    Ok(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    })
}
