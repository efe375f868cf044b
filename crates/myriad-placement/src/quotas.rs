//! Directory quotas in the cluster map (docs/quotas.md "Where the limits live"): each is a
//! path policy, so every server and client knows from the map alone which quotas enclose
//! a path. Sent only to peers that know them (`map_wire.rs`, protocol 37).

use serde::{Deserialize, Serialize};

use crate::path::{is_normal_below_root, is_within};

/// The trash's root directory (docs/trash.md; `myriad_proto::trash` re-exports it).
pub const TRASH_ROOT: &str = "/.trash";

/// The first protocol whose servers leave the trash out of every quota not set in it:
/// partitions switch to it (counting the quotas it changes afresh) once the map's floor
/// is this, and the map then shows no such quota enclosing a path in the trash.
pub const QUOTAS_LEAVE_TRASH_SINCE: u16 = 40;

/// Whether `path` is the trash or inside it.
#[must_use]
pub fn in_trash(path: &str) -> bool {
    path == TRASH_ROOT
        || path
            .strip_prefix(TRASH_ROOT)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The most quotas one map holds: each change of entries tests its directory against
/// every one of them.
pub const QUOTAS_MAX: usize = 4096;

/// A limit on the tree below `path` (the root's own name not counted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Never reused: the epoch of the map that set it (or one above the newest quota's).
    /// Partitions key their usage by it, so a quota cleared and set again is counted afresh.
    pub id: u64,
    /// The tree's root directory, normalized.
    pub path: String,
    /// Bytes of regular files (their logical sizes) the tree may hold; 0: no limit.
    pub max_bytes: u64,
    /// Names the tree may hold; 0: no limit.
    pub max_files: u64,
}

impl Quota {
    /// Whether the entries of directory `dir` are in this quota's tree.
    #[must_use]
    pub fn encloses_dir(&self, dir: &str) -> bool {
        is_within(dir, &self.path)
    }
}

/// A quota root: `/` or a normalized path below it.
pub(crate) fn root_ok(path: &str) -> bool {
    path == "/" || is_normal_below_root(path)
}

/// Checks the map's quotas (`ClusterMap::validate`); the error names the bad one.
pub(crate) fn check(quotas: &[Quota]) -> Result<(), String> {
    if quotas.len() > QUOTAS_MAX {
        return Err(format!("{} quotas (at most {QUOTAS_MAX})", quotas.len()));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut paths = std::collections::BTreeSet::new();
    for q in quotas {
        if q.id == 0 || !ids.insert(q.id) || !paths.insert(q.path.as_str()) || !root_ok(&q.path) {
            return Err(q.path.clone());
        }
    }
    Ok(())
}
