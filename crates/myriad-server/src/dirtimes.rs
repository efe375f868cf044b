//! Directory times and link counts follow their entries.
//!
//! A directory's attributes live in its parent's entry (on the partition of the parent's
//! directory object), while its entries live in its own directory object, usually on
//! another partition. The partition that adds or removes an entry keeps the directory's
//! subdirectory count in the same batch (`DirRecord::subdirs`, so the count is exact), and
//! then, before answering the request, tells the partition holding the directory's entry:
//! `DirTouch { mtime = ctime = now, nlink = 2 + subdirs }` (`nlink` 1 once the directory is
//! split over several partitions: each holds only its own count, and 1 is what tools read
//! as "not counted", as on file systems that keep no count). So a `stat` after a create,
//! unlink, mkdir, rmdir, rename or link, from anyone, shows the new times and count.
//!
//! Touches of one directory from one partition are coalesced: while one is in flight, the
//! changes that follow wait for the next, which covers all of them (values are absolute,
//! read when the touch is sent), so a burst of creates in one directory costs a few
//! touches, not one each. A touch that fails (the other partition unavailable) is logged
//! and dropped: the change itself is durable already; only the times stay behind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use myriad_proto::{FsError, Request};

use crate::mutation::{Mutation, storage_err};
use crate::node::{Node, now_ns};

/// A touch waits at most this long for the partition holding the directory's entry; past
/// it the request goes on (the times may stay behind for that change).
const TOUCH_TIMEOUT: Duration = Duration::from_secs(2);

/// One directory's touches on this partition: requests counted as they arrive, and the
/// count covered by the last touch sent.
#[derive(Default)]
struct TouchSlot {
    send: tokio::sync::Mutex<()>,
    requested: AtomicU64,
    covered: AtomicU64,
}

#[derive(Default)]
pub(crate) struct DirTouches {
    slots: Mutex<HashMap<String, Arc<TouchSlot>>>,
}

impl DirTouches {
    fn slot(&self, dir: &str) -> Arc<TouchSlot> {
        let mut g = match self.slots.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.entry(dir.to_string()).or_default().clone()
    }

    /// Forgets `dir`'s slot if nobody else holds it (bounded memory).
    fn release(&self, dir: &str, slot: &Arc<TouchSlot>) {
        let mut g = match self.slots.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        // The map's reference and ours: nobody waits on it.
        if Arc::strong_count(slot) <= 2 {
            g.remove(dir);
        }
    }
}

impl Node {
    /// Entries of directory `dir` (its object is here) changed: bring its times and link
    /// count up to date where its entry lives, before the change is acknowledged.
    pub(crate) async fn touch_dir(self: &Arc<Self>, dir: &str) {
        let slot = self.dir_touches.slot(dir);
        let mine = slot.requested.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let _sending = slot.send.lock().await;
            if slot.covered.load(Ordering::SeqCst) < mine {
                // Everything requested so far is covered by what is read now.
                let upto = slot.requested.load(Ordering::SeqCst);
                if let Err(e) = self.send_touch(dir).await {
                    tracing::debug!(dir, "directory times not updated: {e}");
                }
                slot.covered.fetch_max(upto, Ordering::SeqCst);
            }
        }
        self.dir_touches.release(dir, &slot);
    }

    async fn send_touch(self: &Arc<Self>, dir: &str) -> Result<(), FsError> {
        let Some(rec) = self.store.dir(dir).map_err(storage_err)? else {
            return Ok(());
        };
        let nlink = if rec.is_whole() {
            rec.subdirs.saturating_add(2)
        } else {
            1
        };
        let now = now_ns();
        if dir == "/" && rec.root_attrs.is_some() {
            self.applier
                .run_visible(Mutation::DirTouch {
                    dir: "/".into(),
                    name: String::new(),
                    ino: rec.ino,
                    now,
                    nlink: Some(nlink),
                })
                .await?;
            return Ok(());
        }
        let req = Request::DirTouch {
            path: dir.to_string(),
            ino: rec.ino,
            now_ns: now,
            nlink: Some(nlink),
        };
        let sent = if dir == "/" {
            let home = self.state().ring.owner_of_dir("/");
            tokio::time::timeout(TOUCH_TIMEOUT, self.call_node(home, req)).await
        } else {
            tokio::time::timeout(TOUCH_TIMEOUT, self.call_entry(dir, req)).await
        };
        match sent {
            Ok(r) => r.map(|_| ()),
            Err(_) => Err(FsError::TimedOut("directory touch".into())),
        }
    }
}
