//! A simulated disk: a whole server engine (`Kv`) in memory that knows what was synced.
//! Committed batches are visible at once and durable only after `sync`; a crash keeps the
//! synced state plus a prefix of the unsynced batches (whole batches: the engine's batches
//! are atomic), and ends the incarnation that wrote them: its handle fails from then on, so
//! tasks of a crashed server left running cannot touch the restarted one's disk.

use std::sync::{Arc, Mutex, MutexGuard};

use myriad_storage::{Batch, Kv, Pairs, Space, StorageError, Table, scan_table};

#[derive(Default)]
struct State {
    /// Incarnation: bumped by every crash.
    generation: u64,
    durable: Table,
    visible: Table,
    /// Committed since the last sync, in order.
    unsynced: Vec<Batch>,
    /// The next sync fails (a disk error: the syncer then refuses every later write).
    fail_next_sync: bool,
}

#[derive(Default)]
pub struct SimDisk {
    state: Mutex<State>,
}

fn apply(table: &mut Table, batch: &Batch) {
    for (space, key, value) in &batch.ops {
        match value {
            Some(v) => {
                table.insert((*space, key.clone()), v.clone());
            }
            None => {
                table.remove(&(*space, key.clone()));
            }
        }
    }
}

impl SimDisk {
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The engine as the current incarnation of its server sees it.
    pub fn handle(self: &Arc<Self>) -> DiskHandle {
        DiskHandle {
            disk: self.clone(),
            generation: self.lock().generation,
        }
    }

    /// A crash: of the batches not yet synced, the first `keep` reach the disk (capped),
    /// the rest are lost. Returns how many were lost. `broken`: the disk also loses what
    /// was synced of the file system's entries (a disk that lies about fsync).
    pub fn crash(&self, keep: usize, broken: bool) -> usize {
        let mut s = self.lock();
        let unsynced = std::mem::take(&mut s.unsynced);
        let lost = unsynced.len().saturating_sub(keep);
        let mut durable = std::mem::take(&mut s.durable);
        for b in unsynced.iter().take(keep) {
            apply(&mut durable, b);
        }
        if broken {
            durable.retain(|(space, _), _| *space != Space::Entries);
        }
        s.visible = durable.clone();
        s.durable = durable;
        s.generation += 1;
        s.fail_next_sync = false;
        lost
    }

    /// Batches committed and not yet synced.
    pub fn unsynced(&self) -> usize {
        self.lock().unsynced.len()
    }

    pub fn fail_next_sync(&self) {
        self.lock().fail_next_sync = true;
    }
}

/// One incarnation's view of a `SimDisk`.
pub struct DiskHandle {
    disk: Arc<SimDisk>,
    generation: u64,
}

impl DiskHandle {
    fn live(&self) -> Result<MutexGuard<'_, State>, StorageError> {
        let s = self.disk.lock();
        if s.generation != self.generation {
            return Err(StorageError::Engine("the server crashed".into()));
        }
        Ok(s)
    }
}

impl Kv for DiskHandle {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.live()?.visible.get(&(space, key.to_vec())).cloned())
    }

    fn scan(
        &self,
        space: Space,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Pairs, StorageError> {
        Ok(scan_table(
            &self.live()?.visible,
            space,
            prefix,
            after,
            limit,
        ))
    }

    fn commit(&self, batch: Batch) -> Result<(), StorageError> {
        let mut s = self.live()?;
        apply(&mut s.visible, &batch);
        s.unsynced.push(batch);
        Ok(())
    }

    fn sync(&self) -> Result<(), StorageError> {
        let mut s = self.live()?;
        if s.fail_next_sync {
            s.fail_next_sync = false;
            return Err(StorageError::Engine("injected fsync failure".into()));
        }
        let unsynced = std::mem::take(&mut s.unsynced);
        for b in &unsynced {
            apply(&mut s.durable, b);
        }
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> Batch {
        let mut b = Batch::new();
        b.put(
            Space::Meta,
            key.as_bytes().to_vec(),
            value.as_bytes().to_vec(),
        );
        b
    }

    #[test]
    fn a_crash_keeps_what_was_synced_and_a_prefix_of_the_rest() {
        let disk = Arc::new(SimDisk::default());
        let h = disk.handle();
        h.commit(put("a", "1")).ok();
        h.sync().ok();
        h.commit(put("b", "2")).ok();
        h.commit(put("c", "3")).ok();
        assert_eq!(h.get(Space::Meta, b"c").ok().flatten(), Some(b"3".to_vec()));
        assert_eq!(disk.crash(1, false), 1);
        // The old incarnation is cut off.
        assert!(h.get(Space::Meta, b"a").is_err());
        let h2 = disk.handle();
        assert_eq!(
            h2.get(Space::Meta, b"a").ok().flatten(),
            Some(b"1".to_vec())
        );
        assert_eq!(
            h2.get(Space::Meta, b"b").ok().flatten(),
            Some(b"2".to_vec())
        );
        assert_eq!(h2.get(Space::Meta, b"c").ok().flatten(), None);
    }

    #[test]
    fn an_injected_sync_failure_fails_once() {
        let disk = Arc::new(SimDisk::default());
        let h = disk.handle();
        h.commit(put("a", "1")).ok();
        disk.fail_next_sync();
        assert!(h.sync().is_err());
        assert!(h.sync().is_ok());
    }
}
