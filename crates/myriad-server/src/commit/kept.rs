//! The partition's kept fsstats as its single writer holds them (docs/redundancy.md
//! "Cluster-wide fsstats"): read from the store once, changed in memory by every batch
//! staged, and written once into each committed batch, so that a round of many creates
//! pays one statistics record, not one per create (measured: 7% of create throughput).

use myriad_proto::fsstats::FsStats;
use myriad_storage::{Batch, DirCache, StorageError, Store};

#[derive(Default)]
pub(super) struct Kept {
    /// The statistics as the stage holds them, with the number of their last write
    /// (`None`: not built yet, or not loaded).
    stats: Option<(u64, FsStats)>,
    loaded: bool,
    /// Changed since the last committed batch.
    dirty: bool,
    /// Directories' counts and shapes as last written.
    dirs: DirCache,
}

impl Kept {
    /// Counts `batch`'s changes (before it is staged).
    pub(super) fn account(&mut self, store: &Store, batch: &mut Batch) -> Result<(), StorageError> {
        if store.rebuilds_stats(batch) {
            // Counted from scratch: read back from the stage next time.
            self.forget();
            return Ok(());
        }
        if !self.loaded {
            self.stats = store.load_kept_stats()?;
            self.loaded = true;
        }
        if let Some((_, s)) = self.stats.as_mut()
            && store.account_stats(batch, s, &mut self.dirs)?
        {
            self.dirty = true;
        }
        Ok(())
    }

    /// Writes the statistics into the batch being committed, if they changed.
    pub(super) fn finish(&mut self, store: &Store, batch: &mut Batch) {
        if self.dirty
            && let Some((n, s)) = self.stats.as_mut()
        {
            *n += 1;
            store.put_kept_stats(batch, *n, s);
        }
        self.dirty = false;
    }

    /// The stage was dropped (or could not take a batch): read the statistics again from
    /// what the store holds.
    pub(super) fn forget(&mut self) {
        *self = Kept::default();
    }
}
