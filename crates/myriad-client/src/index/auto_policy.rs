//! Which trees to index automatically (docs/metadata-index.md "Automatic indexes"): the
//! directories the servers saw read far more than changed, grouped into trees. Pure,
//! but for `Client::auto_index_round`, which asks the servers and builds.

use std::collections::HashMap;
use std::time::Duration;

use myriad_placement::parent_of;
use myriad_proto::FsError;
use myriad_proto::tree_index::{self, Registry};
use tokio::time::Instant;

use crate::client::Client;
use crate::index::build::{BuildOptions, BuildReport};

/// When a mount builds an automatic index.
#[derive(Clone, Copy, Debug)]
pub struct AutoIndexPolicy {
    /// A directory is hot once its servers saw it read this often in their popularity
    /// window (a minute): listings and lookups of its names by any client.
    pub min_reads: u64,
    /// ...and quiet once no change of it was seen for this long.
    pub quiet: Duration,
    /// The same tree is not tried again sooner than this after a build (whether it
    /// failed, was abandoned, or its index was later unregistered by a change).
    pub retry: Duration,
    /// The most an automatic index may take.
    pub max_bytes: u64,
}

impl Default for AutoIndexPolicy {
    fn default() -> AutoIndexPolicy {
        AutoIndexPolicy {
            min_reads: 16,
            quiet: Duration::from_secs(30),
            retry: Duration::from_secs(300),
            max_bytes: 64 << 20,
        }
    }
}

/// One hot directory as the servers report it: path, reads in the window, milliseconds
/// since its last change (`None`: none seen).
pub type Hot = (String, u64, Option<u64>);

/// The roots of the trees worth an automatic index: every hot, quiet directory whose
/// parent is not one (or is "/", which is never indexed), with no hot directory below it
/// that changed lately and no overlap with an indexed tree. Sorted.
#[must_use]
pub fn choose_roots(hot: &[Hot], quiet: Duration, registry: &Registry) -> Vec<String> {
    let quiet_ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX);
    let is_quiet = |since: Option<u64>| since.is_none_or(|ms| ms >= quiet_ms);
    let quiet_dirs: std::collections::HashSet<&str> = hot
        .iter()
        .filter(|(_, _, since)| is_quiet(*since))
        .map(|(d, _, _)| d.as_str())
        .collect();
    let changing: Vec<&str> = hot
        .iter()
        .filter(|(_, _, since)| !is_quiet(*since))
        .map(|(d, _, _)| d.as_str())
        .collect();
    let mut roots: Vec<String> = quiet_dirs
        .iter()
        .filter(|d| **d != "/" && tree_index::below("/.myriad", d).is_none())
        .filter(|d| {
            let parent = parent_of(d);
            parent == "/" || !quiet_dirs.contains(parent)
        })
        .filter(|d| !changing.iter().any(|c| tree_index::below(d, c).is_some()))
        .filter(|d| {
            !registry.trees.iter().any(|t| {
                tree_index::below(&t.root, d).is_some() || tree_index::below(d, &t.root).is_some()
            })
        })
        .map(|d| (*d).to_string())
        .collect();
    roots.sort();
    roots
}

/// What a mount remembers between rounds: when it last tried each tree.
#[derive(Debug, Default)]
pub struct AutoIndexer {
    tried: HashMap<String, Instant>,
}

impl Client {
    /// One round of automatic indexing, run by a mount every few seconds with a client
    /// of its own (root, no write-behind: `self`): asks every partition for its hot
    /// directories, picks the trees (`choose_roots`) not tried within `policy.retry`, and
    /// builds each (`build_index` with `auto`; another mount's build under way answers
    /// `Busy`). Returns each tree tried with its outcome.
    pub async fn auto_index_round(
        &self,
        policy: &AutoIndexPolicy,
        state: &mut AutoIndexer,
    ) -> Result<Vec<(String, Result<BuildReport, FsError>)>, FsError> {
        let hot = self
            .index_candidates(policy.min_reads, Duration::ZERO)
            .await?;
        if hot.is_empty() {
            return Ok(Vec::new());
        }
        let registry = self.index_registry().await?;
        let now = Instant::now();
        state
            .tried
            .retain(|_, at| now.duration_since(*at) < policy.retry);
        let mut out = Vec::new();
        for root in choose_roots(&hot, policy.quiet, &registry) {
            if state.tried.contains_key(&root) {
                continue;
            }
            state.tried.insert(root.clone(), now);
            let opts = BuildOptions {
                max_bytes: policy.max_bytes,
                auto: true,
                ..BuildOptions::default()
            };
            let built = self.build_index(&root, opts).await;
            out.push((root, built));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_proto::InodeId;
    use myriad_proto::tree_index::RegisteredTree;

    fn hot(d: &str, since: Option<u64>) -> Hot {
        (d.to_string(), 100, since)
    }

    #[test]
    fn trees_are_the_topmost_quiet_hot_directories_without_a_changing_one_below() {
        let q = Duration::from_secs(30);
        let dirs = [
            hot("/", None),
            hot("/sw", Some(60_000)),
            hot("/sw/lib", None),
            hot("/sw/lib/py", None),
            hot("/data", None),
            hot("/data/run", Some(1_000)),
            hot("/.myriad", None),
            hot("/.myriad/index", None),
            hot("/home/a/proj", None),
            hot("/home/a/proj/src", None),
        ];
        let none = Registry::default();
        assert_eq!(choose_roots(&dirs, q, &none), ["/home/a/proj", "/sw"]);
        // A tree already indexed (or inside one, or holding one) is left alone.
        let tree = RegisteredTree {
            root: "/sw/lib".into(),
            root_ino: InodeId(5),
            version: 1,
            file: "5.1".into(),
            bytes: 1,
            sha256: [0; 32],
            dirs: 1,
            entries: 1,
            built_ns: 0,
            auto: false,
        };
        let some = Registry { trees: vec![tree] };
        assert_eq!(choose_roots(&dirs, q, &some), ["/home/a/proj"]);
        // A change seen lately makes a directory, and the trees above it, not quiet.
        let q = Duration::from_secs(120);
        assert_eq!(choose_roots(&dirs, q, &none), ["/home/a/proj", "/sw/lib"]);
    }
}
