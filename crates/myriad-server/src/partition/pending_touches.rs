//! Directory touches in flight on a partition, coalesced per directory (`dirtimes.rs` sends
//! them).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use myriad_proto::Inode;

use crate::unpoisoned::lock;

/// One directory's touches on this partition: requests counted as they arrive, the count
/// covered by the last touch sent, and the directory's attributes that touch returned.
#[derive(Default)]
pub(super) struct TouchSlot {
    pub(super) send: tokio::sync::Mutex<()>,
    pub(super) requested: AtomicU64,
    pub(super) covered: AtomicU64,
    pub(super) last: Mutex<Option<Inode>>,
}

#[derive(Default)]
pub(crate) struct DirTouches {
    slots: Mutex<BTreeMap<String, Arc<TouchSlot>>>,
}

impl DirTouches {
    pub(super) fn slot(&self, dir: &str) -> Arc<TouchSlot> {
        let mut g = lock(&self.slots);
        g.entry(dir.to_string()).or_default().clone()
    }

    /// Forgets `dir`'s slot if nobody else holds it (bounded memory).
    pub(super) fn release(&self, dir: &str, slot: &Arc<TouchSlot>) {
        let mut g = lock(&self.slots);
        // The map's reference and ours: nobody waits on it.
        if Arc::strong_count(slot) <= 2 {
            g.remove(dir);
        }
    }
}
