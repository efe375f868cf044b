//! Expiry of the trash (docs/trash.md "Expiry"): each partition frees, in the background,
//! what it holds of the days the trash has kept long enough (`myriad_proto::trash::expired`).
//! A pass reads the trash's directory records held here (in path order, so the oldest
//! days first, and it stops at the first day still kept), removes the files and symbolic
//! links of expired days whose names it holds (an unlink inside the trash frees, as
//! `myriad trash purge` does: orphans if open, chunks by their GC intents), then tries an
//! rmdir of each directory name it holds there, deepest first. A directory still holding
//! names on another partition answers `NotEmpty` and is tried at a later pass: a day is
//! gone after about as many passes as its tree is deep. At most `REMOVALS_MAX` names a
//! pass, so that expiry does not starve the partition's clients.

use std::sync::Arc;

use myriad_placement::join;
use myriad_proto::trash::{TRASH_ROOT, date_in, expired};
use myriad_proto::{ClientRequest, FileKind, WireError};

use crate::partition::core::Partition;
use crate::state::failure::storage_err;

/// Names one pass removes at most.
pub(crate) const REMOVALS_MAX: usize = 500;
/// Directory records of the trash one pass reads at most.
const DIRS_READ_MAX: usize = 2_000;

/// What one pass found to remove: files (and symbolic links, devices, names of hard-linked
/// files) and directories, by path.
#[derive(Default)]
struct Expired {
    files: Vec<String>,
    dirs: Vec<String>,
}

impl Expired {
    fn len(&self) -> usize {
        self.files.len() + self.dirs.len()
    }
}

impl Partition {
    /// One pass of the trash's expiry on this partition: how many names it removed.
    pub(crate) async fn expire_trash(self: &Arc<Self>) -> Result<usize, WireError> {
        let days = self.state().map.ext.trash_days;
        if days == 0 {
            return Ok(0);
        }
        let now = self.env.now_ns();
        let found = self.expired_names(|date| expired(date, days, now))?;
        let mut removed = 0;
        for path in found.files {
            let unlink = ClientRequest::Unlink { path: path.clone() };
            match self.call_entry(&path, unlink.into()).await {
                Ok(_) => removed += 1,
                Err(WireError::NotFound) => {}
                Err(e) => tracing::debug!(partition = %self.me, path, "trash expiry: {e}"),
            }
        }
        for path in found.dirs {
            let rmdir = ClientRequest::Rmdir { path: path.clone() };
            match self.call_entry(&path, rmdir.into()).await {
                Ok(_) => removed += 1,
                // Names left on other partitions (or still here, past this pass's share).
                Err(WireError::NotEmpty | WireError::NotFound | WireError::Busy) => {}
                Err(e) => tracing::debug!(partition = %self.me, path, "trash expiry: {e}"),
            }
        }
        Ok(removed)
    }

    /// The names held here, in the trash, of days `gone` says have expired: files first,
    /// then directories deepest first; at most `REMOVALS_MAX` of them.
    fn expired_names(&self, gone: impl Fn(&str) -> bool) -> Result<Expired, WireError> {
        let mut out = Expired::default();
        // The trash's own directory: its names are the days.
        if self.store.dir(TRASH_ROOT).map_err(storage_err)?.is_some() {
            self.expired_in(TRASH_ROOT, &gone, &mut out)?;
        }
        // Then the days' directories, in path order: oldest days first, so the first day
        // still kept ends the scan.
        let below = format!("{TRASH_ROOT}/");
        let mut after = TRASH_ROOT.to_string();
        let mut read = 0;
        'scan: while read < DIRS_READ_MAX && out.len() < REMOVALS_MAX {
            let page = self.store.dirs(Some(&after), 256).map_err(storage_err)?;
            let Some((last, _)) = page.last() else {
                break;
            };
            after = last.clone();
            for (path, _) in &page {
                read += 1;
                if !path.starts_with(&below) {
                    // ("/.trash-old" sorts between "/.trash" and "/.trash/".)
                    if path.as_str() > below.as_str() {
                        break 'scan;
                    }
                    continue;
                }
                if !date_in(path).is_some_and(&gone) {
                    break 'scan;
                }
                self.expired_in(path, &gone, &mut out)?;
                if out.len() >= REMOVALS_MAX {
                    break 'scan;
                }
            }
        }
        out.dirs
            .sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
        Ok(out)
    }

    /// Adds the visible names of directory `dir` held here that are in an expired day.
    fn expired_in(
        &self,
        dir: &str,
        gone: &impl Fn(&str) -> bool,
        out: &mut Expired,
    ) -> Result<(), WireError> {
        let mut after: Option<String> = None;
        loop {
            let room = REMOVALS_MAX.saturating_sub(out.len());
            if room == 0 {
                return Ok(());
            }
            let page = self
                .store
                .entries(dir, after.as_deref(), room.min(256))
                .map_err(storage_err)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            for (name, rec) in page {
                let Some(inode) = rec.inode.filter(|_| rec.pending.is_none()) else {
                    continue;
                };
                let path = join(dir, &name);
                if !date_in(&path).is_some_and(gone) {
                    continue;
                }
                match inode.kind {
                    FileKind::Directory => out.dirs.push(path),
                    _ => out.files.push(path),
                }
            }
        }
    }
}
