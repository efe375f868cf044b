//! A recalled directory lease, in the mount (docs/fuse.md "Directory leases"): the names
//! it covered are dropped from the mount's own attribute cache and from the kernel's
//! (FUSE invalidation notifications) before the lease is given back, so the change that
//! recalled it is seen at once here.
//!
//! The kernel takes a directory's lock to drop one of its entries, and a request of this
//! mount may hold that lock while it waits for the servers, so notifications are sent by
//! a thread of their own and the lease waits for them a bounded time (`WAIT`): past it,
//! the lease is given back anyway and the kernel's copy lasts at most its TTL.

use std::ffi::OsStr;
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::Duration;

use fuser::INodeNo;

use crate::inodes::join;
use crate::ops::Inner;

/// How long a recall waits for the kernel to drop its copies.
const WAIT: Duration = Duration::from_millis(200);

/// One kernel notification.
enum Inval {
    Entry(INodeNo, String),
    Attrs(INodeNo),
}

/// Sets the client's recall hook for this mount.
pub(crate) fn install(inner: &Arc<Inner>) {
    let (tx, rx) = mpsc::channel::<(Vec<Inval>, mpsc::Sender<()>)>();
    let notifier_of = Arc::downgrade(inner);
    let spawned = std::thread::Builder::new()
        .name("myriad-inval".into())
        .spawn(move || {
            while let Ok((invals, done)) = rx.recv() {
                let Some(fs) = notifier_of.upgrade() else {
                    return;
                };
                if let Some(n) = fs.notifier.get() {
                    for i in invals {
                        // ENOENT (the kernel had no such entry) is the common answer.
                        let _ = match i {
                            Inval::Entry(parent, name) => n.inval_entry(parent, OsStr::new(&name)),
                            Inval::Attrs(ino) => n.inval_inode(ino, -1, 0),
                        };
                    }
                }
                let _ = done.send(());
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no invalidation thread ({e}): directory leases stay off");
        return;
    }
    let fs: Weak<Inner> = Arc::downgrade(inner);
    let tx = std::sync::Mutex::new(tx);
    inner
        .client
        .set_recall_hook(Arc::new(move |dir: &str, names: &[String]| {
            let Some(fs) = fs.upgrade() else { return };
            let parent = fs.inodes.ino_of(dir);
            let mut invals = Vec::new();
            for name in names {
                if let Some(p) = parent {
                    invals.push(Inval::Entry(INodeNo(p.0), name.clone()));
                }
                if let Some(ino) = fs.inodes.ino_of(&join(dir, name)) {
                    fs.inodes.expire(ino);
                    invals.push(Inval::Attrs(INodeNo(ino.0)));
                }
            }
            if invals.is_empty() {
                return;
            }
            let (done, wait) = mpsc::channel();
            let sent = tx
                .lock()
                .map(|t| t.send((invals, done)).is_ok())
                .unwrap_or(false);
            if sent {
                let wait = || {
                    let _ = wait.recv_timeout(WAIT);
                };
                // On a worker of the mount's (multi-thread) runtime: let it move other
                // tasks off this thread while this waits. Elsewhere, just wait.
                match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                    Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                        tokio::task::block_in_place(wait);
                    }
                    _ => wait(),
                }
            }
        }));
}
