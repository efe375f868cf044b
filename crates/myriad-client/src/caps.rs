//! Chunk capabilities this client holds (docs/write-path.md, part 5), by inode and access:
//! each is used for half the time the server said it is good for (the servers' clocks and
//! ours need not agree), then asked for again.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use myriad_proto::InodeId;
use myriad_proto::auth::Capability;
use tokio::time::Instant;

/// Capabilities kept at most; past it, the expired go, then all (they are asked for again).
const CAPS_MAX: usize = 4096;

#[derive(Default)]
pub(crate) struct Caps {
    held: Mutex<BTreeMap<(InodeId, bool), (Capability, Instant)>>,
}

impl Caps {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(InodeId, bool), (Capability, Instant)>> {
        match self.held.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A capability for `ino` that grants `write` if asked, still good.
    pub(crate) fn get(&self, ino: InodeId, write: bool) -> Option<Capability> {
        let now = Instant::now();
        let g = self.lock();
        // A write capability serves reads too.
        [(ino, write), (ino, true)]
            .iter()
            .filter_map(|k| g.get(k))
            .find(|(_, until)| *until > now)
            .map(|(cap, _)| *cap)
    }

    pub(crate) fn put(&self, cap: Capability, valid: Duration) {
        let now = Instant::now();
        let mut g = self.lock();
        if g.len() >= CAPS_MAX {
            g.retain(|_, (_, until)| *until > now);
            if g.len() >= CAPS_MAX {
                g.clear();
            }
        }
        g.insert((cap.ino, cap.write), (cap, now + valid / 2));
    }

    pub(crate) fn forget(&self, ino: InodeId, write: bool) {
        let mut g = self.lock();
        g.remove(&(ino, write));
        g.remove(&(ino, true));
    }
}
