//! Directory quotas in the cluster map (docs/quotas.md "Where the limits live"): each is a
//! path policy, so every server and client knows from the map alone which quotas enclose
//! a path. Sent only to peers that know them (`map_wire.rs`, protocol 37).

use serde::{Deserialize, Serialize};

use crate::path::{is_normal_below_root, is_within};

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
