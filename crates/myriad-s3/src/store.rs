//! Writing objects so that readers see the old object or the new one, never a part.
//!
//! A new small object is one create request with its bytes. Anything else (an object
//! bigger than a piece, or one replacing another) is written under a temporary name in
//! its directory and renamed over its key. Directories a key implies are made when the
//! first create finds them missing, so a PUT into an existing directory costs nothing more.

use myriad_client::{Client, FileHandle, FileKind, FsError, Inode, RenameFlags};
use s3s::{S3Error, S3Result};

use crate::body::{PIECE_BYTES, Pieces};
use crate::errors::{key_conflict, object_error};
use crate::keys::{parent, temp_beside};

/// Permission bits of objects and of the directories keys imply.
pub const FILE_MODE: u32 = 0o644;
pub const DIR_MODE: u32 = 0o755;

/// Where objects go: a bucket, or a multipart upload's directory.
pub struct Base<'a> {
    pub path: &'a str,
    /// What to answer when `path` itself is missing.
    pub missing: fn() -> S3Error,
}

/// Writes the object at `path` (below `base`) from `pieces`; its inode.
pub async fn write_object(
    client: &Client,
    base: &Base<'_>,
    path: &str,
    pieces: &mut Pieces,
) -> S3Result<Inode> {
    let first = pieces.next().await?.unwrap_or_default();
    let second = if first.len() == PIECE_BYTES {
        pieces.next().await?
    } else {
        None
    };
    let Some(second) = second else {
        // All of it in one piece: one create, unless it replaces an object.
        return match create_in(client, base, path, &first).await {
            Ok(h) => Ok(h.inode),
            Err(Created::Exists) => write_beside(client, base, path, first, None, pieces).await,
            Err(Created::Failed(e)) => Err(e),
        };
    };
    write_beside(client, base, path, first, Some(second), pieces).await
}

/// Writes the pieces under a temporary name beside `path`, then renames it over `path`.
async fn write_beside(
    client: &Client,
    base: &Base<'_>,
    path: &str,
    first: Vec<u8>,
    second: Option<Vec<u8>>,
    pieces: &mut Pieces,
) -> S3Result<Inode> {
    let temp = temp_beside(path);
    let handle = match create_in(client, base, &temp, &first).await {
        Ok(h) => h,
        Err(Created::Exists) => {
            return Err(S3Error::with_message(
                s3s::S3ErrorCode::InternalError,
                "a temporary name was taken; try again",
            ));
        }
        Err(Created::Failed(e)) => return Err(e),
    };
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
        Ok::<Inode, S3Error>(inode)
    }
    .await;
    finish_beside(client, &temp, path, written).await
}

/// Puts the object written under `temp` in place at `path` once `written` says it is
/// whole; otherwise (or if the rename fails) removes `temp`.
pub async fn finish_beside(
    client: &Client,
    temp: &str,
    path: &str,
    written: S3Result<Inode>,
) -> S3Result<Inode> {
    match written {
        Ok(inode) => {
            rename_over(client, temp, path).await?;
            Ok(inode)
        }
        Err(e) => {
            let _ = client.unlink(temp).await;
            Err(e)
        }
    }
}

/// Renames the finished object `temp` over `path`; removes `temp` if that fails.
pub async fn rename_over(client: &Client, temp: &str, path: &str) -> S3Result<()> {
    match client.rename(temp, path, RenameFlags::default()).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = client.unlink(temp).await;
            Err(match e {
                FsError::IsADirectory | FsError::NotEmpty | FsError::AlreadyExists => key_conflict(
                    "the key names a directory holding other keys, so it cannot be an object",
                ),
                other => object_error(other),
            })
        }
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
