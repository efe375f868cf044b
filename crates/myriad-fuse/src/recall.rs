//! A dropped directory lease, in the mount (docs/fuse.md "Directory leases"): the names
//! it covered, and every name of the directory the kernel was let keep
//! (`kernel_names.rs`), are dropped from the mount's own attribute cache and from the
//! kernel's (FUSE invalidation notifications) before the lease is given back, so the
//! change that recalled it is seen at once here. The same when this mount moves or
//! removes a directory: the kernel keeps the moved names under the new path, where no
//! lease of this mount covers them.
//!
//! A recall waits for the kernel at most `WAIT`: a request of this mount may hold the
//! directory's lock the kernel needs; past it, the lease is given back anyway and the
//! kernel drops its copy once that request ends.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use myriad_client::Dropped;
use myriad_placement::join;

use crate::kernel_names::{Inval, LISTING};
use crate::mount::Mount;

/// How long a recall waits for the kernel to drop its copies.
const WAIT: Duration = Duration::from_millis(200);

/// The notifications that drop `names` of `dir` from the kernel (and from the mount's
/// attribute cache).
fn invals(fs: &Mount, dir: &str, names: impl IntoIterator<Item = String>) -> Vec<Inval> {
    let parent = fs.inodes.ino_of(dir);
    let mut out = Vec::new();
    let mut listing = false;
    for name in names {
        if name == LISTING {
            listing = true;
            continue;
        }
        if let Some(ino) = fs.inodes.ino_of(&join(dir, &name)) {
            fs.inodes.expire(ino);
            out.push(Inval::Attrs(fs.ids.ino(ino)));
        }
        if let Some(p) = parent {
            out.push(Inval::Entry(fs.ids.ino(p), name));
        }
    }
    // Last: after the names, as the kernel lists them again.
    if let (true, Some(p)) = (listing, parent) {
        out.push(Inval::Listing(fs.ids.ino(p)));
    }
    out
}

/// Sets the client's recall hook for this mount and starts its notification thread.
pub(crate) fn install(inner: &Arc<Mount>) {
    let Some(notifier) = inner.notifier.get() else {
        return;
    };
    if let Err(e) = inner.kernel_names.start(notifier.clone()) {
        tracing::warn!("no invalidation thread ({e}): directory leases stay off");
        return;
    }
    let fs: Weak<Mount> = Arc::downgrade(inner);
    inner.client.set_recall_hook(Arc::new(
        move |dir: &str, names: &[String], why: Dropped| {
            let Some(fs) = fs.upgrade() else { return };
            let gone = match why {
                // Every name the kernel or this mount may hold.
                Dropped::Changed => {
                    let mut all: HashSet<String> = names.iter().cloned().collect();
                    all.extend(fs.kernel_names.take(dir, false));
                    all
                }
                // Only what the kernel may keep past the lease's end: names told with the
                // lease's time left (directories) have expired by now, and dropping a
                // directory's entry would drop the kernel's whole subtree below it.
                Dropped::Ended => fs.kernel_names.take(dir, true).into_iter().collect(),
            };
            let invals = invals(&fs, dir, gone);
            fs.kernel_names.send(invals, Some(WAIT));
        },
    ));
}

/// This mount is about to move or remove directory `top` (or a name that may be one):
/// the kernel is to forget what it was let keep beneath it. Not waited for (the kernel
/// holds locks for the change itself).
pub(crate) fn forget_subtree(fs: &Mount, top: &str) {
    if !fs.cfg.leases {
        return;
    }
    let mut out = Vec::new();
    for (dir, names) in fs.kernel_names.take_subtree(top) {
        out.extend(invals(fs, &dir, names));
    }
    fs.kernel_names.send(out, None);
}
