//! What the clients did and saw, and the checks against it.
//!
//! Each file has one writer (the client owning its directory), so its versions are totally
//! ordered: version 0 is "absent", every put or delete takes the next version. A write is
//! acknowledged when its call returned success, in doubt when it failed or timed out (it
//! may or may not have happened). The rule every read must keep: it returns the state of a
//! version at least as new as every write acknowledged before the read began (no
//! acknowledged write is lost, no read is stale), and one that had been attempted by the
//! time the read ended (nothing invented). The known relaxation (a write visible for the
//! moment before its fsync, then lost in a crash) is allowed: it was never acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use tokio::time::Instant;

struct Version {
    delete: bool,
    /// What a read of this version returns (a file's contents, "dir" for a directory).
    token: String,
    invoked: Instant,
    acked: Option<Instant>,
    /// Answered to its writer, a client that keeps its changes until they are durable (a
    /// mount's: `visible`): from then on that client's own reads must see it, even across
    /// crashes of any server, unless the client reports it lost (`unack_writer`). Others
    /// count on it only once `acked`.
    writer_acked: Option<(Instant, u32)>,
}

/// One name of the shared directory: when its create and its removal were invoked and
/// acknowledged.
#[derive(Clone, Copy, Default)]
struct Listed {
    created: Option<Instant>,
    created_acked: Option<Instant>,
    removed: Option<Instant>,
    removed_acked: Option<Instant>,
}

#[derive(Default)]
struct State {
    /// Path -> its versions (index = version - 1).
    files: BTreeMap<String, Vec<Version>>,
    /// Names created (and maybe removed) in the shared directory.
    listed: BTreeMap<String, Listed>,
    /// Path -> its removals by `delete`: (version, what the unlink answered).
    removals: BTreeMap<String, Vec<(u64, Removal)>>,
}

/// What a delete's unlink answered (`--trash`: what the trash must keep).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Removed: one file the trash keeps (once the delete is acknowledged for good).
    Removed,
    /// Nothing there (or so its answer says).
    NotFound,
    /// In doubt: it may have removed one.
    InDoubt,
}

#[derive(Default)]
pub struct History {
    state: Mutex<State>,
}

impl History {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The next version `path` will get.
    pub fn next_version(&self, path: &str) -> u64 {
        self.lock()
            .files
            .get(path)
            .map_or(1, |v| v.len() as u64 + 1)
    }

    /// A put of `token` (or a delete: `None`) at `path` begins; its version.
    pub fn begin(&self, path: &str, token: Option<String>) -> u64 {
        let mut s = self.lock();
        let v = s.files.entry(path.to_string()).or_default();
        v.push(Version {
            delete: token.is_none(),
            token: token.unwrap_or_default(),
            invoked: Instant::now(),
            acked: None,
            writer_acked: None,
        });
        v.len() as u64
    }

    /// The token of `path`'s last version if that version is an acknowledged put (what a
    /// rename of it moves), else `None`.
    pub fn settled_token(&self, path: &str) -> Option<String> {
        self.settled(path).flatten()
    }

    /// `path`'s state if its last version is acknowledged (or it has none): `Some(token)`
    /// for a put, `None` for a delete or nothing; `None` (outer) while it is in doubt.
    pub fn settled(&self, path: &str) -> Option<Option<String>> {
        let s = self.lock();
        let Some(last) = s.files.get(path).and_then(|v| v.last()) else {
            return Some(None);
        };
        last.acked?;
        Some((!last.delete).then(|| last.token.clone()))
    }

    /// `path`'s state if every version it ever had is acknowledged: nothing of it was in
    /// doubt, so no change of it can still take effect late (a request of a call that
    /// gave up, delivered after its deadline). `None` otherwise.
    pub fn certain(&self, path: &str) -> Option<Option<String>> {
        let s = self.lock();
        match s.files.get(path) {
            None => Some(None),
            Some(versions) if versions.iter().all(|v| v.acked.is_some()) => {
                let last = versions.last()?;
                Some((!last.delete).then(|| last.token.clone()))
            }
            Some(_) => None,
        }
    }

    pub fn ack(&self, path: &str, version: u64) {
        let mut s = self.lock();
        if let Some(v) = s
            .files
            .get_mut(path)
            .and_then(|v| v.get_mut(version as usize - 1))
        {
            v.acked = Some(Instant::now());
        }
    }

    /// Version `version` of `path` was answered to its writer, client `writer`, which
    /// keeps it until it is durable (`Version::writer_acked`).
    pub fn ack_writer(&self, path: &str, version: u64, writer: u32) {
        self.with_version(path, version, |v| {
            v.writer_acked = Some((Instant::now(), writer));
        });
    }

    /// The unlink of `delete` version `version` of `path` answered `r` (version 0: of a
    /// shared name, which has no versions: acknowledged when answered).
    pub fn note_removal(&self, path: &str, version: u64, r: Removal) {
        self.lock()
            .removals
            .entry(path.to_string())
            .or_default()
            .push((version, r));
    }

    /// How many files the trash must keep from each removed path, at least and at most:
    /// at least one per removal answered `Removed` whose delete is acknowledged (for a
    /// mount's client: durable, not reported lost), at most one per removal tried (an
    /// answer may have been lost with its record, `NotFound` then).
    pub fn trash_bounds(&self) -> BTreeMap<String, (u64, u64)> {
        let s = self.lock();
        s.removals
            .iter()
            .map(|(path, rs)| {
                // Version 0: a shared name's removal, acknowledged when answered.
                let acked = |v: u64| {
                    v == 0
                        || s.files
                            .get(path)
                            .and_then(|vs| vs.get(usize::try_from(v).unwrap_or(0).wrapping_sub(1)))
                            .is_some_and(|w| w.acked.is_some())
                };
                let least = rs
                    .iter()
                    .filter(|(v, r)| *r == Removal::Removed && acked(*v))
                    .count() as u64;
                (path.clone(), (least, rs.len() as u64))
            })
            .collect()
    }

    /// Its writer reported version `version` of `path` lost: its own reads need not see it.
    pub fn unack_writer(&self, path: &str, version: u64) {
        self.with_version(path, version, |v| v.writer_acked = None);
    }

    fn with_version(&self, path: &str, version: u64, f: impl FnOnce(&mut Version)) {
        let mut s = self.lock();
        let i = usize::try_from(version).unwrap_or(0);
        if let Some(v) = s
            .files
            .get_mut(path)
            .and_then(|v| v.get_mut(i.wrapping_sub(1)))
        {
            f(v);
        }
    }

    /// `path`'s last version `version` was refused (it never happened, and no later one
    /// began: one writer per file): forgotten, so no read may see it.
    pub fn refuse(&self, path: &str, version: u64) {
        let mut s = self.lock();
        if let Some(v) = s.files.get_mut(path)
            && v.len() as u64 == version
        {
            v.pop();
        }
    }

    /// Checks a read of `path` invoked at `invoked` that saw `seen` (a version's contents,
    /// or `None`: absent).
    pub fn check_read(
        &self,
        path: &str,
        invoked: Instant,
        seen: Option<&str>,
    ) -> Result<(), String> {
        self.check_read_by(path, invoked, seen, None)
    }

    /// `check_read` of a read by client `reader` (if known): the versions answered to it
    /// as their writer count too (`ack_writer`).
    pub fn check_read_by(
        &self,
        path: &str,
        invoked: Instant,
        seen: Option<&str>,
        reader: Option<u32>,
    ) -> Result<(), String> {
        let s = self.lock();
        let now = Instant::now();
        let empty = Vec::new();
        let versions = s.files.get(path).unwrap_or(&empty);
        let floor = versions
            .iter()
            .enumerate()
            .filter(|(_, v)| {
                v.acked.is_some_and(|a| a <= invoked)
                    || v.writer_acked
                        .is_some_and(|(a, w)| a <= invoked && Some(w) == reader)
            })
            .map(|(i, _)| i as u64 + 1)
            .max()
            .unwrap_or(0);
        let ok = match seen {
            Some(t) => versions.iter().enumerate().any(|(i, w)| {
                i as u64 + 1 >= floor && !w.delete && w.token == t && w.invoked <= now
            }),
            None => {
                (floor == 0)
                    || versions
                        .iter()
                        .enumerate()
                        .any(|(i, w)| i as u64 + 1 >= floor && w.delete && w.invoked <= now)
            }
        };
        if ok {
            return Ok(());
        }
        let acked: Vec<String> = versions
            .iter()
            .enumerate()
            .map(|(i, w)| {
                format!(
                    "v{}{}{}",
                    i + 1,
                    if w.delete { " delete" } else { "" },
                    if w.acked.is_some() {
                        " acked"
                    } else if w.writer_acked.is_some() {
                        " answered to its writer"
                    } else {
                        " in doubt"
                    }
                )
            })
            .collect();
        Err(format!(
            "stale or invented read of {path}: saw {seen:?}, but version {floor} was acknowledged before the read began (versions: {})",
            acked.join(", ")
        ))
    }

    /// The newest acknowledged version of every file, and whether it is a delete.
    pub fn final_floors(&self) -> Vec<(String, u64)> {
        self.lock()
            .files
            .iter()
            .map(|(p, v)| {
                let floor = v
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.acked.is_some())
                    .map(|(i, _)| i as u64 + 1)
                    .max()
                    .unwrap_or(0);
                (p.clone(), floor)
            })
            .collect()
    }

    pub fn begin_listed(&self, name: &str) {
        self.lock()
            .listed
            .entry(name.to_string())
            .or_default()
            .created = Some(Instant::now());
    }

    pub fn ack_listed(&self, name: &str) {
        if let Some(e) = self.lock().listed.get_mut(name) {
            e.created_acked = Some(Instant::now());
        }
    }

    pub fn begin_unlisted(&self, name: &str) {
        if let Some(e) = self.lock().listed.get_mut(name) {
            e.removed = Some(Instant::now());
        }
    }

    pub fn ack_unlisted(&self, name: &str) {
        if let Some(e) = self.lock().listed.get_mut(name) {
            e.removed_acked = Some(Instant::now());
        }
    }

    /// Checks a listing of the shared directory invoked at `invoked`: no name twice; no
    /// name that nobody tried to create, or whose removal was acknowledged before the
    /// listing began; and every name created (acknowledged) before it began and not being
    /// removed by the time it ended, exactly once.
    pub fn check_listing(&self, invoked: Instant, names: &[String]) -> Result<(), String> {
        let s = self.lock();
        let now = Instant::now();
        let mut seen = BTreeSet::new();
        for n in names {
            if !seen.insert(n.as_str()) {
                return Err(format!("listing returned {n} twice"));
            }
            match s.listed.get(n) {
                None => return Err(format!("listing returned {n}, which nobody created")),
                Some(l) if l.removed_acked.is_some_and(|a| a <= invoked) => {
                    return Err(format!(
                        "listing returned {n}, whose removal was acknowledged before it began"
                    ));
                }
                Some(_) => {}
            }
        }
        let missing: Vec<&String> = s
            .listed
            .iter()
            .filter(|(_, l)| l.created_acked.is_some_and(|a| a <= invoked))
            .filter(|(_, l)| l.removed.is_none_or(|r| r > now))
            .map(|(n, _)| n)
            .filter(|n| !seen.contains(n.as_str()))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "listing missed {} acknowledged name(s): {:?} (it returned {} names)",
                missing.len(),
                missing.iter().take(5).collect::<Vec<_>>(),
                names.len()
            ))
        }
    }
}
