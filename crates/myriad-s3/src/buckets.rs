//! Buckets as the cluster's top-level directories: ListBuckets, CreateBucket, DeleteBucket,
//! HeadBucket, GetBucketLocation, GetBucketVersioning (never enabled), and canned bucket ACLs
//! as modes. A bucket belongs to the key that made it and is private (0700) by default. Top-level names starting with "." (the gateway's own
//! uploads directory among them) and names S3 does not allow are never listed.

use myriad_client::{Caller, Client, FileKind, FsError, Inode};
use s3s::dto::{
    Bucket, BucketCannedACL, CreateBucketInput, CreateBucketOutput, DeleteBucketInput,
    DeleteBucketOutput, GetBucketAclInput, GetBucketAclOutput, GetBucketLocationInput,
    GetBucketLocationOutput, GetBucketVersioningInput, GetBucketVersioningOutput, Grant, Grantee,
    HeadBucketInput, HeadBucketOutput, ListBucketsOutput, Owner, Permission, PutBucketAclInput,
    PutBucketAclOutput, Type,
};
use s3s::{S3Result, s3_error};

use crate::errors::bucket_error;
use crate::keys::bucket_path;
use crate::lookup::{no_such_bucket, timestamp};

/// A new bucket's mode: private to its owner.
const BUCKET_MODE: u32 = 0o700;

/// Whether `caller` may list the directory `inode` (read and search permission by its
/// mode bits, as the servers check them).
fn may_list(caller: &Caller, inode: &Inode) -> bool {
    let bits = if caller.uid == 0 {
        return true;
    } else if inode.uid == caller.uid {
        inode.mode >> 6
    } else if caller.in_group(inode.gid) {
        inode.mode >> 3
    } else {
        inode.mode
    };
    bits & 0o5 == 0o5
}

/// The buckets the key may list (its own, and others' whose mode lets it read them).
pub async fn list(client: &Client, caller: &Caller) -> S3Result<ListBucketsOutput> {
    let mut entries = client.readdir("/").await.map_err(bucket_error)?;
    entries.retain(|e| {
        e.inode.kind == FileKind::Directory
            && !e.name.starts_with('.')
            && s3s::path::check_bucket_name(&e.name)
            && may_list(caller, &e.inode)
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
        owner: Some(owner(caller.uid)),
        ..Default::default()
    })
}

fn owner(uid: u32) -> Owner {
    Owner {
        display_name: Some(format!("uid {uid}")),
        id: Some(uid.to_string()),
    }
}

/// S3's rules for a new bucket's name (beyond what s3s checks of every request's).
fn check_new_name(name: &str) -> S3Result<()> {
    let ok = s3s::path::check_bucket_name(name)
        && !name.contains(".-")
        && !name.contains("-.")
        && !name.starts_with("sthree-")
        && !name.ends_with("-s3alias")
        && !name.ends_with("--ol-s3");
    if ok {
        Ok(())
    } else {
        Err(s3_error!(
            InvalidBucketName,
            "bucket names are 3 to 63 lowercase letters, digits, '.' and '-', begin and end with a letter or digit, and have no '..', '.-' or '-.'"
        ))
    }
}

/// The mode of a bucket's directory for a canned ACL (none: `private`).
fn acl_mode(acl: Option<&BucketCannedACL>) -> S3Result<u32> {
    match acl.map(BucketCannedACL::as_str) {
        None | Some(BucketCannedACL::PRIVATE) => Ok(BUCKET_MODE),
        Some(BucketCannedACL::PUBLIC_READ | BucketCannedACL::AUTHENTICATED_READ) => Ok(0o755),
        Some(BucketCannedACL::PUBLIC_READ_WRITE) => Ok(0o777),
        Some(other) => Err(s3_error!(
            InvalidArgument,
            "canned ACL {other:?} is not supported (private, public-read, authenticated-read, public-read-write)"
        )),
    }
}

/// Makes a bucket owned by the key that asks, private unless its canned ACL says otherwise.
/// A key whose user may not write `/` gets it made by the gateway (`root`) and given to it,
/// as S3 lets any key make buckets; with the servers' `--root-squash` that is refused.
pub async fn create(
    (client, root): (&Client, Client),
    caller: &Caller,
    input: CreateBucketInput,
) -> S3Result<CreateBucketOutput> {
    check_new_name(&input.bucket)?;
    let path = bucket_path(&input.bucket)?;
    let mode = acl_mode(input.acl.as_ref())?;
    let made = match client.mkdir(&path, mode).await {
        Err(FsError::PermissionDenied) if caller.uid != 0 => make_for(&root, &path, caller).await,
        other => other.map(|_| ()),
    };
    match made {
        Ok(()) => {
            // The mode asked at mkdir may be narrowed; say it again.
            client.chmod(&path, mode).await.map_err(bucket_error)?;
            Ok(CreateBucketOutput {
                location: Some(path),
            })
        }
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

/// Makes `path` as `root` (private) and gives it to `caller`; undone if it cannot be given.
async fn make_for(root: &Client, path: &str, caller: &Caller) -> Result<(), FsError> {
    root.mkdir(path, BUCKET_MODE).await?;
    if let Err(e) = root.chown(path, Some(caller.uid), Some(caller.gid)).await {
        let _ = root.rmdir(path).await;
        return Err(e);
    }
    Ok(())
}

/// Removes an empty bucket: as the key's user, or by the gateway for the bucket's owner
/// when that user may not write `/`.
pub async fn delete(
    (client, root): (&Client, Client),
    caller: &Caller,
    input: DeleteBucketInput,
) -> S3Result<DeleteBucketOutput> {
    let path = bucket_path(&input.bucket)?;
    match client.rmdir(&path).await {
        Err(FsError::PermissionDenied) if caller.uid != 0 => {
            let owned = matches!(client.stat(&path).await, Ok(i) if i.uid == caller.uid);
            if !owned {
                return Err(bucket_error(FsError::PermissionDenied));
            }
            root.rmdir(&path).await.map_err(bucket_error)?;
        }
        other => other.map_err(bucket_error)?,
    }
    Ok(DeleteBucketOutput::default())
}

/// A canned ACL on an existing bucket: its mode (by its owner).
pub async fn put_acl(client: &Client, input: PutBucketAclInput) -> S3Result<PutBucketAclOutput> {
    let path = bucket_path(&input.bucket)?;
    if input.access_control_policy.is_some() || input.grant_read.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "only canned ACLs (x-amz-acl) are supported"
        ));
    }
    check(client, &input.bucket).await?;
    let mode = acl_mode(input.acl.as_ref())?;
    client.chmod(&path, mode).await.map_err(bucket_error)?;
    Ok(PutBucketAclOutput::default())
}

/// The bucket's ACL as its mode says: its owner has full control, everyone else may read
/// if others may list it.
pub async fn get_acl(client: &Client, input: GetBucketAclInput) -> S3Result<GetBucketAclOutput> {
    let path = bucket_path(&input.bucket)?;
    let inode = match client.stat(&path).await {
        Ok(i) if i.kind == FileKind::Directory => i,
        Ok(_) => return Err(no_such_bucket()),
        Err(e) => return Err(bucket_error(e)),
    };
    let owner = owner(inode.uid);
    let mut grants = vec![Grant {
        grantee: Some(Grantee {
            display_name: owner.display_name.clone(),
            email_address: None,
            id: owner.id.clone(),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }];
    if inode.mode & 0o5 == 0o5 {
        grants.push(Grant {
            grantee: Some(Grantee {
                display_name: None,
                email_address: None,
                id: None,
                type_: Type::from_static(Type::GROUP),
                uri: Some("http://acs.amazonaws.com/groups/global/AllUsers".into()),
            }),
            permission: Some(Permission::from_static(Permission::READ)),
        });
    }
    Ok(GetBucketAclOutput {
        grants: Some(grants),
        owner: Some(owner),
    })
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
