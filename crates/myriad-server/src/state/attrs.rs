//! Mutations of attributes only: `setattr`, and a directory's times and link count (`DirTouch`, docs dirtimes).

use crate::state::failure::StateError;
use myriad_proto::{FileKind, Inode, WireError};
use myriad_storage::{Batch, EntryRecord};

use crate::state::ops::{Ctx, DirTouchOne, Mutation, Outcome, not_routed};
use crate::state::records::{apply_change, dir_here, put_visible, require_writable, visible};

/// Executes one mutation of this family into `b`.
pub(super) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    let out = match m {
        Mutation::SetAttr {
            dir,
            name,
            change,
            now,
        } => {
            if dir == "/" && name.is_empty() {
                let mut rec = dir_here(ctx.store, "/")?;
                let mut root = rec.root_attrs.clone().ok_or(WireError::NotFound)?;
                apply_change(&mut root, change, now)?;
                rec.root_attrs = Some(root.clone());
                ctx.store.put_dir(b, "/", &rec);
                Outcome::Inode(root)
            } else {
                require_writable(ctx.store, &dir, &name)?;
                let mut inode = visible(ctx.store, &dir, &name)?;
                apply_change(&mut inode, change, now)?;
                put_visible(ctx.store, b, &dir, &name, &inode);
                Outcome::Inode(inode)
            }
        }
        Mutation::DirTouch {
            dir,
            name,
            ino,
            now,
            nlink,
        } => match touch(
            ctx,
            b,
            DirTouchOne {
                dir,
                name,
                ino,
                now,
                nlink,
            },
        )? {
            Some(i) => Outcome::Inode(i),
            None => Outcome::Unit,
        },
        Mutation::DirTouches(touches) => {
            let mut out = Vec::with_capacity(touches.len());
            for t in touches {
                out.push(touch(ctx, b, t)?);
            }
            Outcome::Touched(out)
        }
        other => return Err(not_routed(&other).into()),
    };
    Ok(out)
}

/// A directory's times and link count (`DirTouch`): its attributes after, or `None` if the
/// entry names another inode, none, or is pending (nothing changes).
fn touch(ctx: &mut Ctx<'_>, b: &mut Batch, t: DirTouchOne) -> Result<Option<Inode>, StateError> {
    let DirTouchOne {
        dir,
        name,
        ino,
        now,
        nlink,
    } = t;
    let touch = |i: &mut Inode| {
        i.mtime_ns = now;
        i.ctime_ns = i.ctime_ns.max(now);
        if let Some(n) = nlink {
            i.nlink = n;
        }
    };
    if dir == "/" && name.is_empty() {
        if let Some(mut rec) = ctx.store.dir("/")?
            && let Some(mut root) = rec.root_attrs.take()
            && root.ino == ino
        {
            touch(&mut root);
            rec.root_attrs = Some(root.clone());
            ctx.store.put_dir(b, "/", &rec);
            return Ok(Some(root));
        }
        return Ok(None);
    }
    if let Some(EntryRecord {
        inode: Some(mut i),
        pending: None,
    }) = ctx.store.entry(&dir, &name)?
        && i.ino == ino
        && i.kind == FileKind::Directory
    {
        touch(&mut i);
        put_visible(ctx.store, b, &dir, &name, &i);
        return Ok(Some(i));
    }
    Ok(None)
}
