//! A disk for unit tests that fails on demand: fsyncs that fail (a disk error) and commits
//! that stop being taken after a count (a crash: what came after is lost). Tests of commit
//! and replication share it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use myriad_storage::{Batch, Kv, MemKv, Pairs, Space, StorageError};

pub(crate) struct FaultyDisk {
    inner: MemKv,
    /// Every fsync fails while set.
    pub(crate) failing: AtomicBool,
    /// Fsyncs asked for.
    pub(crate) syncs: AtomicU64,
    /// Commits still taken; every later one fails.
    pub(crate) commits_left: AtomicUsize,
}

impl FaultyDisk {
    pub(crate) fn new() -> FaultyDisk {
        FaultyDisk {
            inner: MemKv::new(),
            failing: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            commits_left: AtomicUsize::new(usize::MAX),
        }
    }

    /// Takes `n` more commits, then fails every one.
    pub(crate) fn crash_after(&self, n: usize) {
        self.commits_left.store(n, Ordering::SeqCst);
    }

    /// Takes commits again (the server restarted).
    pub(crate) fn restart(&self) {
        self.commits_left.store(usize::MAX, Ordering::SeqCst);
    }
}

impl Kv for FaultyDisk {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(space, key)
    }
    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        self.inner.scan(space, prefix, after, limit)
    }
    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        let taken = self
            .commits_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if taken.is_err() {
            return Err(StorageError::Engine("injected crash: commit lost".into()));
        }
        self.inner.commit(batch)
    }
    fn sync(&self) -> Result<(), StorageError> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(StorageError::Engine("injected fsync failure".into()));
        }
        self.inner.sync()
    }
    fn disk_bytes(&self) -> u64 {
        0
    }
}
