//! The kernel's reads through a file it opened without asking (zero-message opens, on a
//! read-only mount): no handle, so the mount reads by the inode (`mount/unopened.rs`).

use fuser::{INodeNo, ReplyData, Request};

use crate::attr::errno;

use super::MyriadFs;

impl MyriadFs {
    pub(super) fn read_unopened(
        &self,
        req: &Request,
        ino: INodeNo,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) {
        let ino = self.inner.ids.id(ino);
        let reader = (&self.caller(req), req.pid());
        if let Some(d) = self.inner.read_held(reader, ino, offset, size) {
            return reply.data(&d);
        }
        self.spawn(req, move |fs, _| async move {
            match fs.read_unopened(ino, offset, size).await {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }
}
