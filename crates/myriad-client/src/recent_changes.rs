//! When this client last changed entries of each directory: a mount does not index a
//! tree automatically while it writes there itself (issue 47: automatic indexes were
//! built for small directories of a stress tree while the mount was writing it; each
//! build's listings recalled the mount's own exclusive leases, and each index went again
//! at the next change). The servers see other clients' changes; a mount's own, answered
//! behind, reach them later, so the mount asks itself first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use myriad_placement::split_parent;

/// Directories remembered at most: past it, every directory counts as changed at that
/// moment (never quieter than it was).
const KEPT_MAX: usize = 4096;

#[derive(Default)]
pub(crate) struct RecentChanges {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    at: HashMap<String, Instant>,
    /// Every directory changed at this moment or later.
    floor: Option<Instant>,
}

impl RecentChanges {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// A change of the names `paths` (their directories changed).
    pub(crate) fn note(&self, paths: &[String]) {
        let now = Instant::now();
        let mut g = self.lock();
        for p in paths {
            let dir = split_parent(p).0;
            if g.at.len() >= KEPT_MAX && !g.at.contains_key(dir) {
                g.at.clear();
                g.floor = Some(now);
            }
            g.at.insert(dir.to_string(), now);
        }
    }

    /// Whether this client changed a directory at or below `root` within `within`.
    pub(crate) fn below(&self, root: &str, within: Duration) -> bool {
        let g = self.lock();
        let recent = |t: &Instant| t.elapsed() < within;
        if g.floor.as_ref().is_some_and(recent) {
            return true;
        }
        let prefix = if root == "/" {
            "/".to_string()
        } else {
            format!("{root}/")
        };
        g.at.iter()
            .any(|(d, t)| (d == root || d.starts_with(&prefix)) && recent(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_below_a_root_is_recent_for_a_while() {
        let r = RecentChanges::default();
        r.note(&["/a/b/f".to_string()]);
        assert!(r.below("/a", Duration::from_secs(60)));
        assert!(r.below("/a/b", Duration::from_secs(60)));
        assert!(!r.below("/a/bc", Duration::from_secs(60)));
        assert!(!r.below("/x", Duration::from_secs(60)));
        assert!(!r.below("/a", Duration::ZERO));
    }

    #[test]
    fn past_its_bound_everything_counts_as_changed() {
        let r = RecentChanges::default();
        for i in 0..=KEPT_MAX {
            r.note(&[format!("/d{i}/f")]);
        }
        assert!(r.below("/elsewhere", Duration::from_secs(60)));
    }
}
