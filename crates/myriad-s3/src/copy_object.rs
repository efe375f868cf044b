//! CopyObject and UploadPartCopy: copies made on the servers (`copy_range` into a temporary
//! file beside the target, renamed over it), so no byte passes through the gateway. A copy
//! of a whole object keeps the source's ETag when the source's record is valid throughout,
//! and takes the source's headers and metadata (`COPY`) or the request's (`REPLACE`). A copy
//! onto itself that replaces the metadata writes the record only.

use myriad_client::{Client, FileHandle, Inode};
use s3s::dto::{
    CopyObjectInput, CopyObjectOutput, CopyObjectResult, CopyPartResult, CopySource, ETag,
    UploadPartCopyInput, UploadPartCopyOutput,
};
use s3s::{S3Result, s3_error};

use crate::conditions::{Conditions, check_copy_source};
use crate::errors::object_error;
use crate::etag::etag_value;
use crate::headers::{headers_of, new_record};
use crate::keys::{bucket_path, object_path, temp_beside};
use crate::lookup::{missing, no_such_bucket, object_inode, timestamp};
use crate::multipart::{check_part_number, no_such_upload, part_name, upload_dir};
use crate::record::ObjectRecord;
use crate::store::{Base, copy_into, create_temp, finish_beside, keep_record};

/// The copy conditions of a request with S3's field names (CopyObject, UploadPartCopy).
macro_rules! source_conditions_of {
    ($input:expr) => {
        Conditions {
            if_match: $input.copy_source_if_match.as_ref(),
            if_none_match: $input.copy_source_if_none_match.as_ref(),
            if_modified_since: $input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: $input.copy_source_if_unmodified_since.as_ref(),
        }
    };
}

/// A copy's source object, its conditions checked.
struct Source {
    handle: FileHandle,
    record: ObjectRecord,
    /// Its MD5 ETag, if its record is valid.
    md5: Option<String>,
}

async fn open_source(
    client: &Client,
    copy_source: &CopySource,
    conditions: &Conditions<'_>,
) -> S3Result<Source> {
    let (bucket, key) = match copy_source {
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
            (bucket, key)
        }
        _ => {
            return Err(s3_error!(
                NotImplemented,
                "copies from access points and outposts are not supported"
            ));
        }
    };
    let path = object_path(bucket, key)?;
    let inode = match client.stat(&path).await {
        Ok(i) => object_inode(i)?,
        Err(e) => return Err(missing(client, bucket, e).await),
    };
    check_copy_source(conditions, &etag_value(&inode), inode.mtime_ns)?;
    let record = ObjectRecord::of(&inode);
    let md5 = record.valid_etag(&inode).map(str::to_string);
    Ok(Source {
        handle: FileHandle {
            path,
            inode,
            opened: false,
        },
        record,
        md5,
    })
}

pub async fn copy(client: &Client, input: CopyObjectInput) -> S3Result<CopyObjectOutput> {
    let path = object_path(&input.bucket, &input.key)?;
    crate::objects::check_storage_class(input.storage_class.as_ref())?;
    let source = open_source(client, &input.copy_source, &source_conditions_of!(input)).await?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == "REPLACE");
    let mut record = if replace {
        new_record(headers_of!(input), input.metadata.as_ref())?
    } else {
        ObjectRecord {
            headers: source.record.headers.clone(),
            meta: source.record.meta.clone(),
            ..ObjectRecord::default()
        }
    };
    // Checksums describe the bytes, which a copy keeps whatever the metadata directive.
    record.checksums = source
        .record
        .valid_checksums(&source.handle.inode)
        .cloned()
        .unwrap_or_default();
    let inode = if source.handle.path == path {
        if !replace {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata"
            ));
        }
        record.upload = source.record.upload.clone();
        keep_record(client, &path, &record, source.md5, &source.handle.inode).await?
    } else {
        let bucket_dir = bucket_path(&input.bucket)?;
        let base = Base {
            path: &bucket_dir,
            missing: no_such_bucket,
        };
        let size = source.handle.inode.size;
        let from = (&source.handle, 0, size, source.md5.clone());
        copy_beside(client, &base, from, &path, &record).await?
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

/// The bytes `bytes=first-last` of a `x-amz-copy-source-range` names in an object of
/// `size` bytes: (first, length).
fn source_range(given: Option<&str>, size: u64) -> S3Result<(u64, u64)> {
    let Some(given) = given else {
        return Ok((0, size));
    };
    let parsed = given
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
    match parsed {
        Some((first, last)) if first <= last && last < size => Ok((first, last - first + 1)),
        _ => Err(s3_error!(
            InvalidRange,
            "the copy source range is not bytes=first-last within the object (size {size})"
        )),
    }
}

pub async fn upload_part_copy(
    client: &Client,
    input: UploadPartCopyInput,
) -> S3Result<UploadPartCopyOutput> {
    check_part_number(input.part_number)?;
    let dir = upload_dir(&input.bucket, &input.key, &input.upload_id)?;
    let source = open_source(client, &input.copy_source, &source_conditions_of!(input)).await?;
    let size = source.handle.inode.size;
    let (first, len) = source_range(input.copy_source_range.as_deref(), size)?;
    // The MD5 of a part of an object is not known without reading it.
    let md5 = source
        .md5
        .clone()
        .filter(|e| len == size && !e.contains('-'));
    let base = Base {
        path: &dir,
        missing: no_such_upload,
    };
    let path = format!("{dir}/{}", part_name(input.part_number));
    let inode = copy_beside(
        client,
        &base,
        (&source.handle, first, len, md5),
        &path,
        &ObjectRecord::default(),
    )
    .await?;
    Ok(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(ETag::Strong(etag_value(&inode))),
            last_modified: Some(timestamp(inode.mtime_ns)),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Copies `len` bytes of `source` from `first` (with their MD5, if known) into a temporary
/// file beside `path` below `base`, writes `record` on it, renames it over `path`.
async fn copy_beside(
    client: &Client,
    base: &Base<'_>,
    (source, first, len, md5): (&FileHandle, u64, u64, Option<String>),
    path: &str,
    record: &ObjectRecord,
) -> S3Result<Inode> {
    let temp = temp_beside(path);
    let target = create_temp(client, base, &temp, &[]).await?;
    let written = async {
        let copied = copy_into(client, (source, first, len), (&target, 0)).await?;
        // The source's MD5 (and checksums) hold for the copy only if the source did not
        // change under it: asked only when there is one to keep.
        let md5 = match md5 {
            Some(m) => {
                let after = client.stat(&source.path).await.map_err(object_error)?;
                let same = after.ino == source.inode.ino
                    && after.mtime_ns == source.inode.mtime_ns
                    && after.size == source.inode.size;
                same.then_some(m)
            }
            None => None,
        };
        keep_record(client, &temp, record, md5, &copied).await
    }
    .await;
    finish_beside(client, &temp, path, written, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_ranges_are_first_and_last_byte() {
        assert_eq!(source_range(None, 10).ok(), Some((0, 10)));
        assert_eq!(source_range(Some("bytes=0-9"), 10).ok(), Some((0, 10)));
        assert_eq!(source_range(Some("bytes=3-3"), 10).ok(), Some((3, 1)));
        for bad in ["bytes=0-10", "bytes=5-4", "bytes=-3", "0-3", "bytes=a-b"] {
            assert!(source_range(Some(bad), 10).is_err(), "{bad}");
        }
    }
}
