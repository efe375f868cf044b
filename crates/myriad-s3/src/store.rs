//! Writing objects so that readers see the old object or the new one, never a part.
//!
//! A new small object is one create request with its bytes. Anything else (an object
//! bigger than a piece, or one replacing another) is written under a temporary name in
//! its directory and renamed over its key. Directories a key implies are made when the
//! first create finds them missing, so a PUT into an existing directory costs nothing more.
//! Every object gets its record (docs/s3.md "The object record") with its MD5 ETag: after
//! its create, or on the temporary file before the rename.

use myriad_client::proto::XattrMode;
use myriad_client::{Client, FileHandle, FileKind, FsError, Inode, RenameFlags};
use s3s::{S3Error, S3Result, TrailingHeaders, s3_error};

use crate::body::{PIECE_BYTES, Pieces};
use crate::checksums::Wanted;
use crate::errors::{key_conflict, object_error};
use crate::etag::{content_md5_matches, hex};
use crate::keys::{parent, temp_beside};
use crate::record::{ObjectRecord, RECORD_XATTR};

/// Permission bits of objects and of the directories keys imply.
pub const FILE_MODE: u32 = 0o644;
pub const DIR_MODE: u32 = 0o755;

/// Where objects go: a bucket, or a multipart upload's directory.
pub struct Base<'a> {
    pub path: &'a str,
    /// What to answer when `path` itself is missing.
    pub missing: fn() -> S3Error,
}

/// What a PUT asks for beyond its bytes.
#[derive(Default)]
pub struct Put {
    /// Headers, metadata and upload for the object's record (its ETag is added here).
    pub record: ObjectRecord,
    /// The `Content-MD5` header, checked against the bytes.
    pub content_md5: Option<String>,
    /// `If-None-Match: *`: only if the key names nothing yet.
    pub create_only: bool,
    /// The additional checksums asked for, checked once the body is read.
    pub checksums: Wanted,
    /// The body's trailing headers (where an `aws-chunked` body carries its checksum).
    pub trailer: Option<TrailingHeaders>,
}

impl Put {
    /// The record to keep for a body with `md5` whose reading is done: BadDigest if the
    /// body is not what the client's Content-MD5 or checksums say.
    fn checked_record(&self, md5: &[u8; 16], pieces: &mut Pieces) -> S3Result<ObjectRecord> {
        check_md5(self, md5)?;
        let trailer = self.trailer.as_ref().and_then(|t| t.read(Clone::clone));
        let checksums = self
            .checksums
            .verify(&pieces.checksums(), trailer.as_ref())?;
        Ok(ObjectRecord {
            checksums,
            ..self.record.clone()
        })
    }
}

pub fn precondition_failed() -> S3Error {
    s3_error!(
        PreconditionFailed,
        "at least one of the preconditions you specified did not hold"
    )
}

/// BadDigest unless the body's `md5` is what `put` said it would be.
fn check_md5(put: &Put, md5: &[u8; 16]) -> S3Result<()> {
    match &put.content_md5 {
        Some(given) if !content_md5_matches(given, md5) => Err(s3_error!(
            BadDigest,
            "the Content-MD5 you specified did not match what was received"
        )),
        _ => Ok(()),
    }
}

/// Writes the object at `path` (below `base`) from `pieces` with its record; its inode.
pub async fn write_object(
    client: &Client,
    base: &Base<'_>,
    path: &str,
    pieces: &mut Pieces,
    put: &Put,
) -> S3Result<Inode> {
    let first = pieces.next().await?.unwrap_or_default();
    let second = if first.len() == PIECE_BYTES {
        pieces.next().await?
    } else {
        None
    };
    let Some(second) = second else {
        // All of it in one piece: one create, unless it replaces an object.
        let md5 = pieces.md5();
        let record = put.checked_record(&md5, pieces)?;
        return match create_in(client, base, path, &first).await {
            Ok(h) => keep_record(client, path, &record, Some(hex(&md5)), &h.inode).await,
            Err(Created::Exists) if put.create_only => Err(precondition_failed()),
            Err(Created::Exists) => {
                write_beside(client, base, path, (first, None), pieces, put).await
            }
            Err(Created::Failed(e)) => Err(e),
        };
    };
    write_beside(client, base, path, (first, Some(second)), pieces, put).await
}

/// Writes `record` (with `etag`, if known, taken of the file as `inode` shows it) on the
/// file at `path`; the file's inode with it.
pub async fn keep_record(
    client: &Client,
    path: &str,
    record: &ObjectRecord,
    etag: Option<String>,
    inode: &Inode,
) -> S3Result<Inode> {
    let record = match etag {
        Some(e) => record.clone().stamped(e, inode),
        None => record.clone().unstamped(),
    };
    client
        .set_xattr(
            path,
            RECORD_XATTR,
            Some(&record.encode()),
            XattrMode::default(),
        )
        .await
        .map_err(object_error)
}

/// Writes the pieces (`first` and `second` taken already) under a temporary name beside
/// `path` with their record, then renames it over `path`.
async fn write_beside(
    client: &Client,
    base: &Base<'_>,
    path: &str,
    (first, second): (Vec<u8>, Option<Vec<u8>>),
    pieces: &mut Pieces,
    put: &Put,
) -> S3Result<Inode> {
    let temp = temp_beside(path);
    let handle = create_temp(client, base, &temp, &first).await?;
    let written = async {
        let mut inode = handle.inode.clone();
        let mut at = first.len() as u64;
        let mut next = second;
        while let Some(piece) = next {
            inode = client
                .write(&handle, at, &piece)
                .await
                .map_err(object_error)?;
            at += piece.len() as u64;
            next = pieces.next().await?;
        }
        let md5 = pieces.md5();
        let record = put.checked_record(&md5, pieces)?;
        keep_record(client, &temp, &record, Some(hex(&md5)), &inode).await
    }
    .await;
    finish_beside(client, &temp, path, written, put.create_only).await
}

/// Puts the object written under `temp` in place at `path` once `written` says it is
/// whole (`create_only`: only if nothing has that name); otherwise (or if the rename
/// fails) removes `temp`.
pub async fn finish_beside(
    client: &Client,
    temp: &str,
    path: &str,
    written: S3Result<Inode>,
    create_only: bool,
) -> S3Result<Inode> {
    match written {
        Ok(inode) => {
            rename_over(client, temp, path, create_only).await?;
            Ok(inode)
        }
        Err(e) => {
            let _ = client.unlink(temp).await;
            Err(e)
        }
    }
}

/// Renames the finished object `temp` over `path` (`create_only`: only if nothing has that
/// name); removes `temp` if that fails.
async fn rename_over(client: &Client, temp: &str, path: &str, create_only: bool) -> S3Result<()> {
    let flags = RenameFlags {
        no_replace: create_only,
        ..RenameFlags::default()
    };
    match client.rename(temp, path, flags).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = client.unlink(temp).await;
            Err(match e {
                FsError::AlreadyExists if create_only => precondition_failed(),
                FsError::IsADirectory | FsError::NotEmpty | FsError::AlreadyExists => key_conflict(
                    "the key names a directory holding other keys, so it cannot be an object",
                ),
                other => object_error(other),
            })
        }
    }
}

/// Copies `len` bytes of `source` from `from` into `target` at `at`, on the servers where
/// they can (`Client::copy_all`). The target's inode after.
pub async fn copy_into(
    client: &Client,
    (source, from, len): (&FileHandle, u64, u64),
    (target, at): (&FileHandle, u64),
) -> S3Result<Inode> {
    let (inode, copied) = client
        .copy_all((source, from), (target, at), len)
        .await
        .map_err(object_error)?;
    if copied < len {
        return Err(became_shorter());
    }
    Ok(inode)
}

fn became_shorter() -> S3Error {
    s3_error!(
        InternalError,
        "the source became shorter while it was copied"
    )
}

/// Creates the temporary file `temp` with `data` (making missing directories up to `base`).
pub async fn create_temp(
    client: &Client,
    base: &Base<'_>,
    temp: &str,
    data: &[u8],
) -> S3Result<FileHandle> {
    match create_in(client, base, temp, data).await {
        Ok(h) => Ok(h),
        Err(Created::Exists) => Err(s3_error!(
            InternalError,
            "a temporary name was taken; try again"
        )),
        Err(Created::Failed(e)) => Err(e),
    }
}

pub enum Created {
    /// Something already has that name.
    Exists,
    Failed(S3Error),
}

/// Creates the file `path` (exclusively) with `data`, making the directories above it
/// that are missing, up to `base`.
pub async fn create_in(
    client: &Client,
    base: &Base<'_>,
    path: &str,
    data: &[u8],
) -> Result<FileHandle, Created> {
    match client.create(path, FILE_MODE, true, data).await {
        Ok(h) => return Ok(h),
        Err(FsError::AlreadyExists) => return Err(Created::Exists),
        Err(FsError::NotFound) => {}
        Err(e) => return Err(Created::Failed(create_error(e))),
    }
    match client.stat(base.path).await {
        Ok(i) if i.kind == FileKind::Directory => {}
        Ok(_) | Err(FsError::NotFound | FsError::NotADirectory) => {
            return Err(Created::Failed((base.missing)()));
        }
        Err(e) => return Err(Created::Failed(object_error(e))),
    }
    let dir = parent(path);
    if dir.len() > base.path.len() {
        client
            .mkdir_p(dir, DIR_MODE)
            .await
            .map_err(|e| Created::Failed(create_error(e)))?;
    }
    match client.create(path, FILE_MODE, true, data).await {
        Ok(h) => Ok(h),
        Err(FsError::AlreadyExists) => Err(Created::Exists),
        Err(e) => Err(Created::Failed(create_error(e))),
    }
}

fn create_error(e: FsError) -> S3Error {
    match e {
        FsError::NotADirectory => key_conflict(
            "a leading part of the key is an object (a file), so it cannot be a directory",
        ),
        other => object_error(other),
    }
}
