//! Buckets as the cluster's top-level directories: ListBuckets, CreateBucket, DeleteBucket,
//! HeadBucket, GetBucketLocation, GetBucketVersioning (never enabled). Top-level names starting with "." (the gateway's own
//! uploads directory among them) and names S3 does not allow are never listed.

use myriad_client::{Caller, Client, FileKind, FsError};
use s3s::dto::{
    Bucket, CreateBucketInput, CreateBucketOutput, DeleteBucketInput, DeleteBucketOutput,
    GetBucketLocationInput, GetBucketLocationOutput, GetBucketVersioningInput,
    GetBucketVersioningOutput, HeadBucketInput, HeadBucketOutput, ListBucketsOutput, Owner,
};
use s3s::{S3Result, s3_error};

use crate::errors::bucket_error;
use crate::keys::bucket_path;
use crate::objects::{no_such_bucket, timestamp};
use crate::store::DIR_MODE;

pub async fn list(client: &Client, caller: &Caller) -> S3Result<ListBucketsOutput> {
    let mut entries = client.readdir("/").await.map_err(bucket_error)?;
    entries.retain(|e| {
        e.inode.kind == FileKind::Directory
            && !e.name.starts_with('.')
            && s3s::path::check_bucket_name(&e.name)
    });
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let buckets = entries
        .into_iter()
        .map(|e| Bucket {
            creation_date: Some(timestamp(e.inode.mtime_ns)),
            name: Some(e.name),
            ..Default::default()
        })
        .collect();
    Ok(ListBucketsOutput {
        buckets: Some(buckets),
        owner: Some(Owner {
            display_name: Some(format!("uid {}", caller.uid)),
            id: Some(caller.uid.to_string()),
        }),
        ..Default::default()
    })
}

pub async fn create(
    client: &Client,
    caller: &Caller,
    input: CreateBucketInput,
) -> S3Result<CreateBucketOutput> {
    let path = bucket_path(&input.bucket)?;
    match client.mkdir(&path, DIR_MODE).await {
        Ok(_) => Ok(CreateBucketOutput {
            location: Some(path),
        }),
        Err(FsError::AlreadyExists) => match client.stat(&path).await {
            Ok(i) if i.kind == FileKind::Directory && i.uid == caller.uid => Err(s3_error!(
                BucketAlreadyOwnedByYou,
                "the bucket exists and is yours"
            )),
            _ => Err(s3_error!(
                BucketAlreadyExists,
                "the name is taken (by another user's directory or a file)"
            )),
        },
        Err(e) => Err(bucket_error(e)),
    }
}

pub async fn delete(client: &Client, input: DeleteBucketInput) -> S3Result<DeleteBucketOutput> {
    let path = bucket_path(&input.bucket)?;
    client.rmdir(&path).await.map_err(bucket_error)?;
    Ok(DeleteBucketOutput::default())
}

/// That the bucket exists, as a directory.
pub async fn check(client: &Client, bucket: &str) -> S3Result<()> {
    let path = bucket_path(bucket)?;
    match client.stat(&path).await {
        Ok(i) if i.kind == FileKind::Directory => Ok(()),
        Ok(_) => Err(no_such_bucket()),
        Err(e) => Err(bucket_error(e)),
    }
}

pub async fn head(client: &Client, input: HeadBucketInput) -> S3Result<HeadBucketOutput> {
    check(client, &input.bucket).await?;
    Ok(HeadBucketOutput::default())
}

pub async fn location(
    client: &Client,
    input: GetBucketLocationInput,
) -> S3Result<GetBucketLocationOutput> {
    check(client, &input.bucket).await?;
    Ok(GetBucketLocationOutput::default())
}

/// Versioning was never enabled on any bucket: the answer has no status (as S3 gives for
/// such a bucket), so tools that only ask go on.
pub async fn versioning(
    client: &Client,
    input: GetBucketVersioningInput,
) -> S3Result<GetBucketVersioningOutput> {
    check(client, &input.bucket).await?;
    Ok(GetBucketVersioningOutput::default())
}
