//! Directory listings for the kernel: "." and "..", then the entries page by page, and
//! `readdirplus` with each entry's attributes and how long the kernel may keep them.

use std::sync::Arc;

use fuser::{Errno, FileHandle, FileType, Generation, INodeNo, ReplyDirectoryPlus};
use myriad_proto::{DirEntry, FsError};

use crate::attr::{errno, file_attr};
use crate::handles::DirListing;
use crate::mount::Mount;
use myriad_placement::join;

use crate::kernel_ids::KernelIds;

/// One position of a listing: "." or "..", or an entry.
pub(super) enum Listed<'a> {
    Dot(&'static str),
    Named(&'a DirEntry),
}
use Listed::{Dot, Named};

/// Hands the listing's positions from `offset` on ("." and ".." first) to `add`, with the
/// offset of the position after each, until `add` says the reply is full or the listing
/// ends. Pages are fetched as needed.
pub(super) async fn walk(
    fs: &Mount,
    d: &mut DirListing,
    offset: u64,
    mut add: impl FnMut(u64, Listed<'_>) -> bool,
) -> Result<(), FsError> {
    let mut i = offset;
    loop {
        let full = match i {
            0 => add(1, Dot(".")),
            1 => add(2, Dot("..")),
            _ => {
                let idx = usize::try_from(i - 2).unwrap_or(usize::MAX);
                fs.fill_listing(d, idx).await?;
                let Some(e) = d.entries.get(idx) else {
                    return Ok(());
                };
                add(i + 1, Named(e))
            }
        };
        if full {
            return Ok(());
        }
        i += 1;
    }
}

/// A `readdirplus` page of directory handle `fh` from `offset`: each entry with its
/// attributes, kept by the kernel as long as the listing's lease allows.
pub(super) async fn list_plus(
    fs: Arc<Mount>,
    ids: KernelIds,
    (ino, fh, offset): (INodeNo, FileHandle, u64),
    mut reply: ReplyDirectoryPlus,
) {
    let Some(d) = fs.handles.dir(fh.0) else {
        return reply.error(Errno::EBADF);
    };
    let mut d = d.lock().await;
    // Names of this directory: as long as its lease (with leases).
    let ttl = fs.children_ttls(&d.path).0;
    let mut dot = file_attr(&crate::mount::placeholder());
    dot.ino = ino;
    dot.kind = FileType::Directory;
    let dir = d.path.clone();
    let since = d.since;
    let mark = d.mark;
    let inner = fs.clone();
    let r = walk(&fs, &mut d, offset, |next, entry| match entry {
        Dot(name) => reply.add(ino, next, name, &ttl, &dot, Generation(0)),
        Named(e) => {
            // The page may predate a change this mount made since: the kernel
            // must not be handed an older size than it knows (it would drop pages).
            let pending = inner.pending_of(&e.inode);
            let newer = inner.inodes.newer_than(e.inode.ino, since);
            let inode = newer.as_ref().unwrap_or(&e.inode);
            let attr = inner.kernel_attr_sized(inode, Mount::visible_size(inode, pending));
            let path = join(&dir, &e.name);
            // Covered by the listing's lease (files): until the lease goes.
            let leased = inner.leased_ttl(
                &path,
                mark,
                inode.kind == myriad_client::FileKind::Directory,
            );
            let full = reply.add(
                ids.ino(e.inode.ino),
                next,
                &e.name,
                leased.as_ref().unwrap_or(&ttl),
                &attr,
                Generation(0),
            );
            if !full {
                // The kernel now holds this inode: count the lookup.
                inner.inodes.add(&path, &e.inode, since);
                if leased.is_none() && inner.cfg.leases && !ttl.is_zero() {
                    // Dropped from the kernel with the directory's lease.
                    inner
                        .kernel_names
                        .note(&dir, &e.name, crate::kernel_names::Kept::Short);
                }
            }
            full
        }
    })
    .await;
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}
