//! What the `Client` methods beyond reading and writing whole files do on the native client:
//! owners, times, truncation, hard links, access checks, extended attributes and copies on
//! the servers. Each is one async function the method runs with the GIL released.

use myriad_client::proto::{XattrMode, access};
use myriad_client::{Client, FsError, SetAttr};

/// `path`, or what it names when `follow` and it is a symbolic link.
async fn target(c: &Client, path: &str, follow: bool) -> Result<String, FsError> {
    if follow {
        Ok(c.resolve(path).await?.0)
    } else {
        Ok(path.to_string())
    }
}

/// A Python id argument: -1 (os.chown's "unchanged") or None leave it.
pub fn id_arg(v: Option<i64>) -> Result<Option<u32>, String> {
    match v {
        None | Some(-1) => Ok(None),
        Some(n) => u32::try_from(n)
            .map(Some)
            .map_err(|_| format!("{n} is not a user or group id")),
    }
}

pub async fn chown(
    c: &Client,
    path: &str,
    (uid, gid): (Option<u32>, Option<u32>),
    follow: bool,
) -> Result<(), FsError> {
    let p = target(c, path, follow).await?;
    c.chown(&p, uid, gid).await.map(|_| ())
}

/// Sets (atime, mtime) in nanoseconds, or both to the servers' now (`None`).
pub async fn utime(
    c: &Client,
    path: &str,
    ns: Option<(i64, i64)>,
    follow: bool,
) -> Result<(), FsError> {
    let p = target(c, path, follow).await?;
    let set = match ns {
        Some((atime, mtime)) => SetAttr {
            atime_ns: Some(atime),
            mtime_ns: Some(mtime),
            ..SetAttr::default()
        },
        None => SetAttr {
            touch: true,
            ..SetAttr::default()
        },
    };
    c.setattr(&p, set).await.map(|_| ())
}

/// Cuts or extends a file to `length` bytes, if the caller may write it (as truncate(2)).
pub async fn truncate(c: &Client, path: &str, length: u64) -> Result<(), FsError> {
    let h = c.open_follow(path).await?;
    if !access::allowed(&h.inode, c.caller(), access::WRITE) {
        return Err(FsError::PermissionDenied);
    }
    c.truncate(&h, length).await.map(|_| ())
}

/// Whether the caller may access `path` as `mode` asks (os.access: F_OK 0, R_OK 4, W_OK 2,
/// X_OK 1), by the attributes the servers check.
pub async fn access(c: &Client, path: &str, mode: u32) -> Result<bool, FsError> {
    match c.stat_follow(path).await {
        Ok(i) => Ok(access::allowed(&i, c.caller(), mode & 7)),
        Err(FsError::NotFound | FsError::NotADirectory) => Ok(false),
        Err(e) => Err(e),
    }
}

pub async fn getxattr(
    c: &Client,
    path: &str,
    name: &str,
    follow: bool,
) -> Result<Vec<u8>, FsError> {
    let inode = if follow {
        c.stat_follow(path).await?
    } else {
        c.stat(path).await?
    };
    inode
        .xattrs
        .into_iter()
        .find(|x| x.name == name)
        .map(|x| x.value)
        .ok_or(FsError::NoData)
}

pub async fn listxattr(c: &Client, path: &str, follow: bool) -> Result<Vec<String>, FsError> {
    let inode = if follow {
        c.stat_follow(path).await?
    } else {
        c.stat(path).await?
    };
    Ok(inode.xattrs.into_iter().map(|x| x.name).collect())
}

/// os.setxattr's flags: 0, XATTR_CREATE (1), XATTR_REPLACE (2).
pub fn xattr_mode(flags: i32) -> Result<XattrMode, String> {
    match flags {
        0 => Ok(XattrMode::Either),
        1 => Ok(XattrMode::Create),
        2 => Ok(XattrMode::Replace),
        other => Err(format!(
            "flags must be 0, XATTR_CREATE (1) or XATTR_REPLACE (2), not {other}"
        )),
    }
}

pub async fn setxattr(
    c: &Client,
    path: &str,
    (name, value): (&str, Option<&[u8]>),
    mode: XattrMode,
    follow: bool,
) -> Result<(), FsError> {
    let p = target(c, path, follow).await?;
    c.set_xattr(&p, name, value, mode).await.map(|_| ())
}

/// Copies the file `src` to `dst` (made, or emptied and rewritten) on the servers, with
/// `copy_range`: no byte passes through this process unless the servers cannot copy (then
/// a piece at a time). The bytes copied.
pub async fn copy(c: &Client, src: &str, dst: &str, mode: u32) -> Result<u64, FsError> {
    let source = c.open_follow(src).await?;
    if !access::allowed(&source.inode, c.caller(), access::READ) {
        return Err(FsError::PermissionDenied);
    }
    let target = match c.create(dst, mode, true, &[]).await {
        Ok(h) => h,
        Err(FsError::AlreadyExists) => {
            let h = c.open_follow(dst).await?;
            if h.inode.ino == source.inode.ino {
                // Emptying it would lose the bytes to copy (shutil's SameFileError).
                return Err(FsError::InvalidArgument(
                    "source and destination are the same file".into(),
                ));
            }
            if !access::allowed(&h.inode, c.caller(), access::WRITE) {
                return Err(FsError::PermissionDenied);
            }
            c.truncate(&h, 0).await?;
            h
        }
        Err(e) => return Err(e),
    };
    let size = source.inode.size;
    Ok(c.copy_all((&source, 0), (&target, 0), size).await?.1)
}

/// A hard link `dst` to the file `src`.
pub async fn link(c: &Client, src: &str, dst: &str) -> Result<(), FsError> {
    c.link(src, dst).await.map(|_| ())
}
