//! Hard links: moving an inode to its home's inode directory, names that refer to it, and its link count.

use crate::state::failure::StateError;
use myriad_proto::{FileKind, WireError};
use myriad_storage::{Batch, DirRecord};

use crate::state::ops::{Ctx, Mutation, Outcome, not_routed};
use crate::state::records::{
    INODE_DIR, drop_file_data, inode_name, link_ref, put_visible, require_free_name,
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
        Mutation::LinkSource {
            dir,
            name,
            me,
            now,
            anchored,
        } => {
            require_writable(ctx.store, &dir, &name)?;
            let mut inode = visible(ctx.store, &dir, &name)?;
            // Directories never get a second name; everything else may (Linux links
            // FIFOs, sockets, devices and symlinks too).
            if matches!(inode.kind, FileKind::Directory | FileKind::HardLink) {
                return Err(WireError::NotPermitted.into());
            }
            inode.nlink = inode.nlink.saturating_add(1);
            inode.ctime_ns = now;
            // Clients see where its changes are stamped from now on (`alone_in_its_entry`).
            inode.link_home = Some(me);
            if ctx.store.dir(INODE_DIR)?.is_none() {
                ctx.store.put_dir(b, INODE_DIR, &DirRecord::new(InodeId(0)));
            }
            let object = inode_name(inode.ino);
            put_visible(ctx.store, b, INODE_DIR, &object, &inode);
            // Its bytes stay in the quotas of the directory its first name is in.
            if anchored {
                ctx.store.put_quota_anchor(b, &object, &dir);
            }
            put_visible(ctx.store, b, &dir, &name, &link_ref(inode.ino, me));
            Outcome::Inode(inode)
        }
        Mutation::PutLinkRef {
            dir,
            name,
            ino,
            home,
            made_for,
        } => {
            require_free_name(ctx.store, &dir, &name)?;
            let r = link_ref(ino, home);
            put_visible(ctx.store, b, &dir, &name, &r);
            if let Some(mark) = made_for {
                let unit = myriad_proto::Response::Unit;
                crate::state::outcomes::record(
                    ctx.store,
                    ctx.outcomes,
                    b,
                    mark.id,
                    mark.at_ns,
                    unit,
                )?;
            }
            Outcome::Inode(r)
        }
        Mutation::AdjustLinks { ino, delta, now } => {
            let name = inode_name(ino);
            let mut inode = visible(ctx.store, INODE_DIR, &name)?;
            let n = i64::from(inode.nlink).saturating_add(delta).max(0);
            inode.nlink = u32::try_from(n).unwrap_or(u32::MAX);
            inode.ctime_ns = now;
            if inode.nlink == 0 {
                ctx.store.delete_entry(b, INODE_DIR, &name);
                ctx.store.delete_quota_anchor(b, &name);
                let gc = drop_file_data(ctx, b, &inode, now)?;
                Outcome::Gc(gc)
            } else {
                put_visible(ctx.store, b, INODE_DIR, &name, &inode);
                Outcome::Inode(inode)
            }
        }
        other => return Err(not_routed(&other).into()),
    };
    Ok(out)
}
