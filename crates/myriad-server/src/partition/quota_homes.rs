//! What a partition keeps in memory as the home of directory quotas (docs/quotas.md "The
//! ledger's protocol"): each quota's grant lock, under which every grant and settle of it
//! is made, and how many times each partition asked (its slices double); and, as an
//! asker, each quota's ask lock (one ask of a quota out at a time).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub(crate) struct QuotaHomes {
    locks: Mutex<BTreeMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    asks: Mutex<BTreeMap<(u64, u32), u32>>,
    ask_locks: Mutex<BTreeMap<u64, Arc<tokio::sync::Mutex<()>>>>,
}

impl QuotaHomes {
    /// Quota `quota`'s grant lock.
    pub(crate) fn grant_lock(&self, quota: u64) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(quota).or_default().clone()
    }

    /// Quota `quota`'s ask lock (held while this partition asks its home).
    pub(crate) fn ask_lock(&self, quota: u64) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.ask_locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(quota).or_default().clone()
    }

    /// How many times partition `from` asked for `quota` before this ask (counted).
    pub(crate) fn asked(&self, quota: u64, from: u32) -> u32 {
        let mut asks = self.asks.lock().unwrap_or_else(|p| p.into_inner());
        let n = asks.entry((quota, from)).or_default();
        *n += 1;
        *n - 1
    }
}
