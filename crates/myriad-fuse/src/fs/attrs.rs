//! GETATTR: answered on the FUSE thread from what a lease or the attribute cache holds,
//! else by a task that asks the servers (after sending what this mount buffered for the
//! file, so a stat after a write shows the write's times).

use fuser::{FileHandle, INodeNo, ReplyAttr, Request};
use myriad_proto::FsError;

use crate::attr::errno;
use crate::handles::NO_HANDLE;
use crate::mount_metrics::{AttrFrom, KernelOp};

use super::MyriadFs;

impl MyriadFs {
    pub(super) fn getattr_of(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Getattr);
        let unsent = self.inner.handles.has_unsent(ids.id(ino));
        if !unsent && let Some((ttl, i)) = self.inner.attr_at_hand(ids.id(ino), &self.caller(req)) {
            return reply.attr(&ttl, &self.inner.kernel_attr(&i));
        }
        self.inner.metrics.attr_from(AttrFrom::Server);
        self.spawn(req, move |fs, _| async move {
            // A stat after a write this mount only buffered shows that write's times, and
            // the close changes them no more: the bytes are sent first (answered behind at
            // once where a lease covers the file). POSIX sets the times a write marked at
            // the next stat; `git checkout` records each file's mtime by an `fstat` before
            // its close, and a time moved by the close made `git status` hash every file.
            // A failed send leaves its error on the writer's handle (its next write,
            // fsync or close reports it): the stat is answered as before.
            if unsent && let Err(e) = fs.flush_ino(ids.id(ino)).await {
                tracing::debug!(ino = ino.0, "buffered bytes not sent before a getattr: {e}");
            }
            let path = fs.inodes.path(ids.id(ino));
            let mark = path
                .as_deref()
                .and_then(|p| fs.client.lease_mark(myriad_placement::parent_of(p)));
            let (found, by_name) = match fs.stat_ino(ids.id(ino)).await {
                // An open file another client unlinked: by its inode (fstat, and the
                // kernel's size check before a read).
                Err(FsError::Stale) if let Some(fh) = fh.filter(|f| f.0 != NO_HANDLE) => {
                    (fs.stat_open(fh.0).await, false)
                }
                Err(FsError::Stale) => (fs.stat_open_ino(ids.id(ino)).await, false),
                other => (other, true),
            };
            match found {
                Ok(i) => {
                    tracing::trace!(target: "myriad_fuse::io", ino = ino.0, size = i.size, nlink = i.nlink, mtime = i.mtime_ns, "getattr from a server");
                    let leased = path
                        .filter(|_| by_name)
                        .and_then(|p| fs.leased_ttl(&p, mark, i.kind == myriad_client::FileKind::Directory));
                    let ttl = leased.unwrap_or_else(|| fs.ttls_of(ids.id(ino)).1);
                    reply.attr(&ttl, &fs.kernel_attr(&i))
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }
}
