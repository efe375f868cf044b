//! CopyObject: a copy made on the servers (`copy_range` into a temporary file beside the
//! target, renamed over it), so no byte passes through the gateway. The copy keeps the
//! source's ETag when the source's record is valid throughout, and takes the source's
//! headers and metadata (`COPY`) or the request's (`REPLACE`). A copy onto itself that
//! replaces the metadata writes the record only.

use myriad_client::{Client, FileHandle, Inode};
use s3s::dto::{CopyObjectInput, CopyObjectOutput, CopyObjectResult, CopySource, ETag};
use s3s::{S3Result, s3_error};

use crate::conditions::{Conditions, check_copy_source};
use crate::errors::object_error;
use crate::etag::etag_value;
use crate::headers::{headers_of, new_record};
use crate::keys::{bucket_path, object_path, temp_beside};
use crate::objects::{missing, no_such_bucket, object_inode, timestamp};
use crate::record::ObjectRecord;
use crate::store::{Base, copy_into, create_temp, finish_beside, keep_record};

/// The source's bucket and key.
fn source_of(input: &CopyObjectInput) -> S3Result<(&str, &str)> {
    match &input.copy_source {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => {
            if version_id.as_deref().is_some_and(|v| v != "null") {
                return Err(s3_error!(
                    NoSuchVersion,
                    "versioning is not enabled: the only version is null"
                ));
            }
            Ok((bucket, key))
        }
        _ => Err(s3_error!(
            NotImplemented,
            "copies from access points and outposts are not supported"
        )),
    }
}

async fn source_inode(client: &Client, bucket: &str, path: &str) -> S3Result<Inode> {
    match client.stat(path).await {
        Ok(i) => object_inode(i),
        Err(e) => Err(missing(client, bucket, e).await),
    }
}

pub async fn copy(client: &Client, input: CopyObjectInput) -> S3Result<CopyObjectOutput> {
    let (src_bucket, src_key) = source_of(&input)?;
    let src_path = object_path(src_bucket, src_key)?;
    let path = object_path(&input.bucket, &input.key)?;
    let source = source_inode(client, src_bucket, &src_path).await?;
    let conditions = Conditions {
        if_match: input.copy_source_if_match.as_ref(),
        if_none_match: input.copy_source_if_none_match.as_ref(),
        if_modified_since: input.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
    };
    check_copy_source(&conditions, &etag_value(&source), source.mtime_ns)?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == "REPLACE");
    let src_record = ObjectRecord::of(&source);
    let mut record = if replace {
        new_record(headers_of!(input), input.metadata.as_ref())?
    } else {
        ObjectRecord {
            headers: src_record.headers.clone(),
            meta: src_record.meta.clone(),
            ..ObjectRecord::default()
        }
    };
    let etag = src_record.valid_etag(&source).map(str::to_string);
    let inode = if src_path == path {
        if !replace {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata"
            ));
        }
        record.upload = src_record.upload.clone();
        keep_record(client, &path, &record, etag, &source).await?
    } else {
        let handle = FileHandle {
            path: src_path.clone(),
            inode: source,
            opened: false,
        };
        copy_beside(client, &input.bucket, (&handle, etag), &path, &record).await?
    };
    Ok(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(ETag::Strong(etag_value(&inode))),
            last_modified: Some(timestamp(inode.mtime_ns)),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Copies `source` (with its ETag, if known) into a temporary file beside `path` in
/// `bucket`, writes `record` on it, renames it over `path`.
async fn copy_beside(
    client: &Client,
    bucket: &str,
    (source, etag): (&FileHandle, Option<String>),
    path: &str,
    record: &ObjectRecord,
) -> S3Result<Inode> {
    let bucket_dir = bucket_path(bucket)?;
    let base = Base {
        path: &bucket_dir,
        missing: no_such_bucket,
    };
    let temp = temp_beside(path);
    let target = create_temp(client, &base, &temp, &[]).await?;
    let written = async {
        let copied = if source.inode.size > 0 {
            copy_into(client, source, &target, 0).await?
        } else {
            target.inode.clone()
        };
        // The source's ETag holds for the copy only if the source did not change under it.
        let after = client.stat(&source.path).await.map_err(object_error)?;
        let same = after.ino == source.inode.ino
            && after.mtime_ns == source.inode.mtime_ns
            && after.size == source.inode.size;
        keep_record(client, &temp, record, etag.filter(|_| same), &copied).await
    }
    .await;
    finish_beside(client, &temp, path, written, false).await
}
