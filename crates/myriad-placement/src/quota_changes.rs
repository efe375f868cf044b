//! Changes of the map's directory quotas and the questions asked of them (docs/quotas.md
//! "Where the limits live"): set, changed or cleared by an administrator's map change;
//! which quotas enclose a path.

use crate::map::{ClusterMap, MapError};
use crate::quotas::{QUOTAS_LEAVE_TRASH_SINCE, Quota, in_trash, root_ok};

impl ClusterMap {
    /// The next map with the quota on `path` set to these limits (0: no limit of that
    /// kind), replacing any limits it had there (the quota keeps its id, so its usage).
    pub fn with_quota(
        &self,
        path: &str,
        max_bytes: u64,
        max_files: u64,
    ) -> Result<ClusterMap, MapError> {
        if !root_ok(path) {
            return Err(MapError::BadQuota(path.to_string()));
        }
        let mut next = self.clone();
        next.epoch += 1;
        match next.ext.quotas.iter_mut().find(|q| q.path == path) {
            Some(q) => {
                q.max_bytes = max_bytes;
                q.max_files = max_files;
            }
            None => {
                let newest = next.ext.quotas.iter().map(|q| q.id).max().unwrap_or(0);
                next.ext.quotas.push(Quota {
                    id: next.epoch.max(newest + 1),
                    path: path.to_string(),
                    max_bytes,
                    max_files,
                });
                next.ext.quotas.sort_by(|a, b| a.path.cmp(&b.path));
            }
        }
        next.validate()?;
        Ok(next)
    }

    /// The next map without the quota on `path`.
    pub fn without_quota(&self, path: &str) -> Result<ClusterMap, MapError> {
        let mut next = self.clone();
        let before = next.ext.quotas.len();
        next.ext.quotas.retain(|q| q.path != path);
        if next.ext.quotas.len() == before {
            return Err(MapError::NoQuota(path.to_string()));
        }
        next.epoch += 1;
        next.validate()?;
        Ok(next)
    }

    /// The quota set exactly on `path`, if any.
    #[must_use]
    pub fn quota_at(&self, path: &str) -> Option<&Quota> {
        self.ext.quotas.iter().find(|q| q.path == path)
    }

    /// The quotas that cover `path` as `df` and `quota get` show them: those enclosing it
    /// and the one set on it (a quota root's own `df` shows its quota), outermost first.
    #[must_use]
    pub fn quotas_covering(&self, path: &str) -> Vec<&Quota> {
        let mut out = self.quotas_enclosing(path);
        out.extend(self.quota_at(path));
        out
    }

    /// Every quota whose tree holds `path` (a quota's own root is in the tree of the
    /// quotas above it, not in its own), outermost first. Once the floor is
    /// `QUOTAS_LEAVE_TRASH_SINCE`, the trash (its own name too) is in no quota not set in
    /// it, as the partitions count it.
    #[must_use]
    pub fn quotas_enclosing(&self, path: &str) -> Vec<&Quota> {
        let dir = crate::path::parent_of(path);
        let trash_apart = self.ext.protocol_floor >= QUOTAS_LEAVE_TRASH_SINCE && in_trash(path);
        let mut out: Vec<&Quota> = if path == "/" {
            Vec::new()
        } else {
            self.ext
                .quotas
                .iter()
                .filter(|q| q.encloses_dir(dir) && (!trash_apart || in_trash(&q.path)))
                .collect()
        };
        out.sort_by_key(|q| q.path.len());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> ClusterMap {
        ClusterMap::new(1, &["h1:1".to_string()])
    }

    #[test]
    fn a_quota_is_set_changed_and_cleared_keeping_its_id_while_it_lives() {
        let m = map()
            .with_quota("/lab", 10, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        let id = m.quota_at("/lab").map(|q| q.id);
        assert_eq!(id, Some(m.epoch));
        let m = m.with_quota("/lab", 0, 5).unwrap_or_else(|e| panic!("{e}"));
        let q = m.quota_at("/lab").cloned();
        assert_eq!(
            q.as_ref().map(|q| (q.id, q.max_bytes, q.max_files)),
            id.map(|i| (i, 0, 5))
        );
        let cleared = m.without_quota("/lab").unwrap_or_else(|e| panic!("{e}"));
        assert!(cleared.quota_at("/lab").is_none());
        assert_eq!(
            cleared.without_quota("/lab").err(),
            Some(MapError::NoQuota("/lab".into()))
        );
        let again = cleared
            .with_quota("/lab", 1, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(
            again.quota_at("/lab").map(|q| q.id),
            id,
            "a new quota, counted afresh"
        );
    }

    #[test]
    fn bad_quota_roots_and_duplicates_are_refused() {
        for bad in ["", "lab", "/lab/", "/a/../b", "/a//b"] {
            assert!(map().with_quota(bad, 1, 1).is_err(), "{bad:?}");
        }
        let mut m = map()
            .with_quota("/a", 1, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        let dup = m.ext.quotas[0].clone();
        m.ext.quotas.push(Quota {
            id: dup.id + 1,
            ..dup
        });
        assert!(m.validate().is_err(), "one quota per path");
        assert!(map().with_quota("/", 1, 1).is_ok(), "the root may have one");
    }

    #[test]
    fn the_quotas_enclosing_a_path_are_those_above_it_outermost_first() {
        let m = map()
            .with_quota("/a", 1, 1)
            .and_then(|m| m.with_quota("/a/b", 1, 1));
        let m = m
            .and_then(|m| m.with_quota("/ab", 1, 1))
            .unwrap_or_else(|e| panic!("{e}"));
        let paths = |p: &str| -> Vec<String> {
            m.quotas_enclosing(p)
                .iter()
                .map(|q| q.path.clone())
                .collect()
        };
        assert_eq!(paths("/a/b/c"), vec!["/a", "/a/b"]);
        assert_eq!(paths("/a/b"), vec!["/a"], "a root is not in its own tree");
        assert_eq!(paths("/a"), Vec::<String>::new());
        assert_eq!(paths("/ab/x"), vec!["/ab"], "/ab is not below /a");
        assert!(m.quota_at("/a/b").is_some_and(|q| q.encloses_dir("/a/b")));
    }

    #[test]
    fn a_quota_root_is_covered_by_its_own_quota_and_those_above() {
        let m = map()
            .with_quota("/lab", 10, 0)
            .and_then(|m| m.with_quota("/lab/a", 0, 5))
            .unwrap_or_else(|e| panic!("{e}"));
        let paths = |p: &str| -> Vec<String> {
            m.quotas_covering(p)
                .into_iter()
                .map(|q| q.path.clone())
                .collect()
        };
        assert_eq!(paths("/lab/a"), ["/lab", "/lab/a"]);
        assert_eq!(paths("/lab/a/x"), ["/lab", "/lab/a"]);
        assert_eq!(paths("/lab"), ["/lab"]);
        assert!(paths("/other").is_empty());
    }

    #[test]
    fn the_trash_is_in_no_quota_not_set_in_it_once_the_floor_says_so() {
        let m = map()
            .with_quota("/", 100, 0)
            .and_then(|m| m.with_quota("/.trash/2026-12-07", 5, 0))
            .unwrap_or_else(|e| panic!("{e}"));
        let paths = |m: &ClusterMap, p: &str| -> Vec<String> {
            m.quotas_covering(p)
                .into_iter()
                .map(|q| q.path.clone())
                .collect()
        };
        // Below the floor, partitions still count the trash in the quota on `/`.
        assert_eq!(paths(&m, "/.trash/x"), ["/"]);
        let m = m
            .with_protocol_floor(QUOTAS_LEAVE_TRASH_SINCE)
            .unwrap_or_else(|| panic!("the floor raised"));
        assert!(paths(&m, "/.trash").is_empty(), "nor its own name");
        assert!(paths(&m, "/.trash/x/y").is_empty());
        assert_eq!(
            paths(&m, "/.trash/2026-12-07/0/f"),
            ["/.trash/2026-12-07"],
            "a quota set in the trash counts it"
        );
        assert_eq!(paths(&m, "/.trashy/f"), ["/"]);
        assert_eq!(paths(&m, "/home/f"), ["/"]);
    }
}
