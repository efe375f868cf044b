//! Mutations that make or remove one file system object: the root, files, symlinks, device nodes and FIFOs, unlinks.

use crate::state::failure::StateError;
use myriad_proto::{FileKind, ROOT_INO, WireError};
use myriad_storage::{Batch, DirRecord, EntryRecord};

use crate::state::ops::{Ctx, Mutation, Outcome, not_routed};
use crate::state::records::{
    drop_file_data, drop_orphan, new_inode, put_visible, require_dir, require_free_name,
    require_writable, visible,
};
use myriad_proto::InodeId;

/// Executes one mutation of this family into `b`.
pub(super) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    let out = match m {
        Mutation::InitRoot { now, uid, gid } => {
            if ctx.store.dir("/")?.is_none() {
                let mut root = new_inode(ROOT_INO, FileKind::Directory, 0o755, uid, gid, now);
                root.nlink = 2;
                ctx.store.put_dir(
                    b,
                    "/",
                    &DirRecord {
                        root_attrs: Some(root),
                        ..DirRecord::new(ROOT_INO)
                    },
                );
            }
            Outcome::Unit
        }
        Mutation::CreateFile {
            dir,
            name,
            mode,
            uid,
            gid,
            exclusive,
            data,
            now,
            ino: reserved,
            then,
        } => {
            require_dir(ctx.store, &dir, &name)?;
            if data.len() as u64 > ctx.layout.chunk_size_bytes {
                return Err(WireError::InvalidArgument(
                    "initial data larger than one chunk".into(),
                )
                .into());
            }
            match ctx.store.entry(&dir, &name)? {
                Some(EntryRecord {
                    pending: Some(_), ..
                }) => return Err(WireError::Busy.into()),
                Some(EntryRecord {
                    inode: Some(existing),
                    ..
                }) => {
                    if exclusive {
                        return Err(WireError::AlreadyExists.into());
                    }
                    if existing.kind == FileKind::Directory {
                        return Err(WireError::IsADirectory.into());
                    }
                    // Non-exclusive create of an existing file opens it as is.
                    return Ok(Outcome::Inode(existing));
                }
                _ => {}
            }
            let ino = ctx.ids.take(ctx.store, b, reserved)?;
            let mut inode = new_inode(InodeId(ino), FileKind::File, mode & 0o7777, uid, gid, now);
            inode.size = data.len() as u64;
            if !data.is_empty() {
                ctx.store.write_range(b, InodeId(ino), 0, &data)?;
            }
            if let Some((set, at)) = then {
                myriad_proto::access::apply_setattr(&mut inode, &set, at);
            }
            put_visible(ctx.store, b, &dir, &name, &inode);
            Outcome::Created(inode)
        }
        Mutation::Symlink {
            dir,
            name,
            target,
            uid,
            gid,
            now,
        } => {
            require_free_name(ctx.store, &dir, &name)?;
            let ino = ctx.ids.next(ctx.store, b)?;
            let mut inode = new_inode(InodeId(ino), FileKind::Symlink, 0o777, uid, gid, now);
            inode.size = target.len() as u64;
            inode.symlink_target = Some(target);
            put_visible(ctx.store, b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::Mknod {
            dir,
            name,
            kind,
            mode,
            rdev,
            uid,
            gid,
            now,
        } => {
            if !kind.is_special() {
                return Err(WireError::InvalidArgument(
                    "mknod makes only FIFOs, sockets and devices".into(),
                )
                .into());
            }
            require_free_name(ctx.store, &dir, &name)?;
            let ino = ctx.ids.next(ctx.store, b)?;
            let mut inode = new_inode(InodeId(ino), kind, mode & 0o7777, uid, gid, now);
            if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
                inode.rdev = rdev;
            }
            put_visible(ctx.store, b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::Unlink { dir, name, now } => {
            require_writable(ctx.store, &dir, &name)?;
            let inode = visible(ctx.store, &dir, &name)?;
            if inode.kind == FileKind::Directory {
                return Err(WireError::IsADirectory.into());
            }
            ctx.store.delete_entry(b, &dir, &name);
            let gc = drop_file_data(ctx, b, &inode, now)?;
            // The removed inode: a hard-link name tells the node to drop a link at home.
            Outcome::InodeGc(inode, gc)
        }
        Mutation::DropOrphans { inos } => {
            let mut gcs = Vec::new();
            for ino in inos {
                gcs.extend(drop_orphan(ctx, b, ino)?);
            }
            Outcome::Gcs(gcs)
        }
        other => return Err(not_routed(&other).into()),
    };
    Ok(out)
}
