//! Files whose last name went while a client may still have them open (docs/fuse.md
//! "Open files unlinked elsewhere"): an unlink or a rename over a regular file leaves its
//! inode and data in `ORPHAN_DIR` (`state/records.rs`); reads and read grants by inode
//! find them there; clients with open files tell the partition every
//! `KEEP_OPEN_EVERY` (`KeepOpen`); an orphan is dropped once `ORPHAN_HOLD` passed since
//! its unlink and since the last keep naming it.
//!
//! Keeps live in the primary's memory: a new primary sweeps nothing for `ORPHAN_HOLD`
//! after it opens, so every client with a file open has kept it by then.

use std::sync::Arc;

use myriad_proto::limits::{KEEP_OPEN_MAX, ORPHAN_HOLD};
use myriad_proto::{Caller, FileKind, Inode, InodeId, Response, WireError};
use tokio::time::Instant;

use crate::partition::core::Partition;
use crate::state::mutation::{Mutation, ORPHAN_DIR, Outcome, inode_name, storage_err};
use crate::unpoisoned::lock;

/// How often the partition looks for orphans to drop.
pub(crate) const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Open files a partition keeps track of at most (keeps beyond are `Busy`: memory stays
/// bounded whatever clients send).
const KEPT_MAX: usize = 1 << 20;
/// Orphans looked at per sweep batch.
const SWEEP_BATCH: usize = 1024;

impl Partition {
    /// Orphan `ino` on this partition, if there is one.
    pub(crate) fn orphan(&self, ino: InodeId) -> Result<Option<Inode>, WireError> {
        Ok(self
            .store
            .entry(ORPHAN_DIR, &inode_name(ino))
            .map_err(storage_err)?
            .and_then(|r| r.inode))
    }

    /// The regular file `ino` that a client opened as `path`: what `path` names (the
    /// caller may search its way there, it is not a directory, a hard-link name is
    /// resolved, `Stale` if it names another inode now), or, with `orphans`, the orphan
    /// `ino` left when another client removed or replaced that name.
    pub(crate) async fn open_file(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
        ino: InodeId,
        orphans: bool,
    ) -> Result<Inode, WireError> {
        let found = self.lookup(path).await;
        let named = matches!(&found, Ok(i) if i.ino == ino);
        if !named
            && orphans
            && let Some(o) = self.orphan(ino)?
        {
            return Ok(o);
        }
        self.search(caller, path).await?;
        let inode = self.resolve(found?).await?;
        if inode.kind == FileKind::Directory {
            return Err(WireError::IsADirectory);
        }
        if inode.ino != ino {
            return Err(WireError::Stale);
        }
        Ok(inode)
    }

    /// Where a change of the contents or size of file `ino`, open as `path`, applies,
    /// once `caller` may make it: the entry `path` names while it names `ino` (write
    /// permission checked as `may_write_file` does); else the orphan `ino` its last name
    /// left, while a client keeps it open (a descriptor stays usable after an unlink,
    /// as POSIX has it: a mount no longer renames a file it has open to a hidden name
    /// in its directory, which kept that directory from being removed, issue 47). An
    /// orphan has no path to search: its mode alone decides. Returns the record's
    /// directory and name, and (but for root) the inode checked, for `kill_setid`.
    pub(crate) async fn file_to_change(
        self: &Arc<Self>,
        st: &crate::cluster::MapState,
        caller: &Caller,
        path: &str,
        ino: InodeId,
        opened: bool,
    ) -> Result<(String, String, Option<Inode>), WireError> {
        let (dir, name) = self.file_target(st, path)?;
        let named = matches!(self.lookup(path).await, Ok(i) if i.ino == ino);
        if !named && let Some(orphan) = self.orphan(ino)? {
            let checked = if caller.uid == 0 {
                None
            } else {
                crate::state::perm::require_write(&orphan, caller, opened)?;
                Some(orphan)
            };
            return Ok((ORPHAN_DIR.to_string(), inode_name(ino), checked));
        }
        let checked = self.may_write_file(caller, path, opened).await?;
        Ok((dir, name, checked))
    }

    pub(super) fn keep_open(&self, inos: &[InodeId]) -> Result<Response, WireError> {
        if inos.len() > KEEP_OPEN_MAX {
            return Err(WireError::InvalidArgument(format!(
                "at most {KEEP_OPEN_MAX} open files per keep"
            )));
        }
        let now = Instant::now();
        let until = now + ORPHAN_HOLD;
        let mut g = lock(&self.open_files.kept);
        if g.len() + inos.len() > KEPT_MAX {
            g.retain(|_, u| *u > now);
            if g.len() + inos.len() > KEPT_MAX {
                return Err(WireError::Busy);
            }
        }
        for ino in inos {
            g.insert(*ino, until);
        }
        Ok(Response::Unit)
    }

    /// Drops the orphans nobody keeps open any more (a round of the sweeper task).
    pub(crate) async fn sweep_orphans(self: &Arc<Self>) -> Result<usize, WireError> {
        let now = Instant::now();
        if now < self.open_files.opened + ORPHAN_HOLD {
            return Ok(0);
        }
        lock(&self.open_files.kept).retain(|_, until| *until > now);
        let hold_ns = i64::try_from(ORPHAN_HOLD.as_nanos()).unwrap_or(i64::MAX);
        let before_ns = self.env.now_ns().saturating_sub(hold_ns);
        let mut dropped = 0;
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store
                .entries(ORPHAN_DIR, after.as_deref(), SWEEP_BATCH)
                .map_err(storage_err)?;
            let Some((last, _)) = page.last() else {
                break;
            };
            after = Some(last.clone());
            let done: Vec<InodeId> = {
                let kept = lock(&self.open_files.kept);
                page.iter()
                    .filter_map(|(_, r)| r.inode.as_ref())
                    .filter(|i| i.ctime_ns < before_ns && !kept.contains_key(&i.ino))
                    .map(|i| i.ino)
                    .collect()
            };
            if !done.is_empty() {
                if !self.env.serves(self.me) {
                    return Ok(dropped);
                }
                dropped += done.len();
                if let Outcome::Gcs(gcs) = self
                    .applier
                    .run(Mutation::DropOrphans { inos: done })
                    .await?
                {
                    for txid in gcs {
                        self.spawn_gc(txid);
                    }
                }
            }
            if page.len() < SWEEP_BATCH {
                break;
            }
        }
        Ok(dropped)
    }
}
