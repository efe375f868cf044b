//! Which trees to index automatically (docs/metadata-index.md "Automatic indexes"): the
//! directories the servers saw read far more than changed, grouped into trees. Pure,
//! but for `Client::auto_index_round`, which asks the servers and builds.

use std::collections::HashMap;
use std::time::Duration;

use myriad_placement::parent_of;
use myriad_proto::tree_index::{self, Registry};
use myriad_proto::{FsError, HotDir};
use tokio::time::Instant;

use crate::client::Client;
use crate::index::build::{BuildOptions, BuildReport};

/// When a mount builds an automatic index.
#[derive(Clone, Copy, Debug)]
pub struct AutoIndexPolicy {
    /// A directory is hot once its servers saw it read this often in their popularity
    /// window (a minute): listings and lookups of its names by any client...
    pub min_reads: u64,
    /// ...by at least this many clients (as their reads name them: a mount's do), or
    /// `alone` times as often by fewer: a tree worth an index is read from several mounts,
    /// or hard by one (issue 51 item 5; one mount reading once what another wrote is
    /// neither).
    pub min_readers: u32,
    /// See `min_readers`.
    pub alone: u64,
    /// ...and quiet once no change of it was seen for this long.
    pub quiet: Duration,
    /// The same tree is not tried again sooner than this after a build (whether it
    /// failed, was abandoned, or its index was later unregistered by a change).
    pub retry: Duration,
    /// The most an automatic index may take.
    pub max_bytes: u64,
    /// The most directories an automatic index may hold: a tree found bigger while it is
    /// marked is left (its walk stops there).
    pub max_dirs: usize,
    /// A tree this mount itself changed within this long is not indexed by it: it is
    /// being worked on here (unpacked, built, cloned, about to be removed), not read
    /// mostly. A mount reading what it wrote a minute ago indexed every crate directory of
    /// an untarred tree before its `rm -rf` (issue 51 item 5); another mount's reads of
    /// such a tree still count.
    pub own_changes: Duration,
    /// At most this many automatic builds per `retry` (each walks a whole tree, and a
    /// misjudged tree costs its build and, at its first change, an unregistering).
    pub max_builds: usize,
}

impl Default for AutoIndexPolicy {
    fn default() -> AutoIndexPolicy {
        AutoIndexPolicy {
            min_reads: 16,
            min_readers: 2,
            alone: 4,
            quiet: Duration::from_secs(30),
            retry: Duration::from_secs(300),
            max_bytes: 64 << 20,
            max_dirs: 20_000,
            own_changes: Duration::from_secs(600),
            max_builds: 4,
        }
    }
}

impl AutoIndexPolicy {
    /// How far back a mount's own changes below a tree keep it from indexing the tree.
    #[must_use]
    pub fn own_changes_horizon(&self) -> Duration {
        self.quiet.max(self.own_changes)
    }

    /// Whether the servers' report of a directory makes it hot (`min_reads`, `min_readers`).
    #[must_use]
    pub fn is_hot(&self, d: &HotDir) -> bool {
        d.reads >= self.min_reads
            && (d.readers >= self.min_readers
                || d.reads >= self.min_reads.saturating_mul(self.alone))
    }
}

/// The roots of the trees worth an automatic index, from every directory the servers
/// track (`tracked`: read at least once in their window, with the time since its last
/// change and its readers): a *hot* directory (`AutoIndexPolicy::is_hot`) that is quiet
/// (no change for `policy.quiet`), climbed up through its parents while they are tracked
/// and quiet too (a tree's upper directories are read about once per client: not hot,
/// but one index for the whole tree beats one per hot corner), below "/" (never indexed) and outside
/// `/.myriad`; then only the topmost of them, with no tracked directory below that
/// changed lately, inside no indexed tree and holding no manual one (an automatic index
/// below one is replaced: `auto_index_round` drops it first). Sorted.
///
/// A climb stopped by a tracked parent that changed lately waits while the tree it
/// reached has been quiet for less than twice `quiet`: a tree copied or unpacked gets
/// its upper directories' times set last, so its corners turn quiet first, and indexing
/// them then would index corners instead of the tree a few seconds later (the import
/// storm's automatic mode built 4-7 corners that way, issue 51 item 5). A parent that
/// keeps changing (a busy directory holding a read-mostly tree) holds its tree back by
/// that much only.
#[must_use]
pub fn choose_roots(
    tracked: &[HotDir],
    policy: &AutoIndexPolicy,
    registry: &Registry,
) -> Vec<String> {
    let quiet_ms = u64::try_from(policy.quiet.as_millis()).unwrap_or(u64::MAX);
    let is_quiet = |since: Option<u64>| since.is_none_or(|ms| ms >= quiet_ms);
    // Every tracked directory with the time since its last change.
    let since_of: HashMap<&str, Option<u64>> = tracked
        .iter()
        .map(|d| (d.path.as_str(), d.since_ms))
        .collect();
    let calm = |d: &str| since_of.get(d).is_some_and(|s| is_quiet(*s));
    let changing: Vec<&str> = tracked
        .iter()
        .filter(|d| !is_quiet(d.since_ms))
        .map(|d| d.path.as_str())
        .collect();
    let settled = |root: &str| {
        let parent = parent_of(root);
        let held_back = parent != "/"
            && since_of.get(parent).is_some_and(|s| !is_quiet(*s))
            && since_of
                .get(root)
                .copied()
                .flatten()
                .is_some_and(|ms| ms < quiet_ms.saturating_mul(2));
        !held_back
    };
    let climbed: std::collections::BTreeSet<&str> = tracked
        .iter()
        .filter(|d| policy.is_hot(d) && is_quiet(d.since_ms) && d.path != "/")
        .map(|d| {
            let mut root = d.path.as_str();
            while parent_of(root) != "/" && calm(parent_of(root)) {
                root = parent_of(root);
            }
            root
        })
        .filter(|root| settled(root))
        .collect();
    climbed
        .iter()
        .filter(|d| tree_index::below("/.myriad", d).is_none())
        .filter(|d| {
            !climbed
                .iter()
                .any(|other| other != *d && tree_index::below(other, d).is_some())
        })
        .filter(|d| !changing.iter().any(|c| tree_index::below(d, c).is_some()))
        .filter(|d| {
            !registry.trees.iter().any(|t| {
                tree_index::below(&t.root, d).is_some()
                    || (!t.auto && tree_index::below(d, &t.root).is_some())
            })
        })
        .map(|d| (*d).to_string())
        .collect()
}

/// What a mount remembers between rounds: when it last tried each tree, and when it
/// built lately (`AutoIndexPolicy::max_builds`).
#[derive(Debug, Default)]
pub struct AutoIndexer {
    tried: HashMap<String, Instant>,
    built: std::collections::VecDeque<Instant>,
}

impl AutoIndexer {
    /// Whether `root` is a tree tried within the retry period, or inside one. A tree whose
    /// index a change unregistered is being changed (unpacked, moved, removed), and its
    /// quiet parts are next: a mount that read a tree another mount then removed built its
    /// index, then, as the `rm -rf` went through it, three of its crate directories still
    /// waiting their turn (`scripts/auto-index-misfires.sh` with `WRITER=other`). A tree
    /// holding one tried lately may still be tried: an index of the whole replaces one of a
    /// part.
    fn tried_lately(&self, root: &str) -> bool {
        self.tried
            .keys()
            .any(|t| tree_index::below(t, root).is_some())
    }

    /// Whether one more build may start at `now`; if so, it is counted.
    fn take_build(&mut self, policy: &AutoIndexPolicy, now: Instant) -> bool {
        while self
            .built
            .front()
            .is_some_and(|t| now.duration_since(*t) >= policy.retry)
        {
            self.built.pop_front();
        }
        if self.built.len() >= policy.max_builds {
            return false;
        }
        self.built.push_back(now);
        true
    }
}

impl Client {
    /// One round of automatic indexing, run by a mount every few seconds with a client
    /// of its own (root, no write-behind: `self`): asks every partition for its hot
    /// directories, picks the trees (`choose_roots`) not tried within `policy.retry`, and
    /// builds each (`build_index` with `auto`; another mount's build under way answers
    /// `Busy`). Returns each tree tried with its outcome.
    /// `busy`: trees not to index now whatever the servers say (a mount's own writes
    /// there within `AutoIndexPolicy::own_changes_horizon`: `Client::changed_lately`).
    /// At most `policy.max_builds` builds start per `policy.retry`.
    pub async fn auto_index_round(
        &self,
        policy: &AutoIndexPolicy,
        state: &mut AutoIndexer,
        busy: &(dyn Fn(&str) -> bool + Send + Sync),
    ) -> Result<Vec<(String, Result<BuildReport, FsError>)>, FsError> {
        // Every directory the servers track, hot or not: a tree's upper directories
        // are read about once per client.
        let tracked = self.index_candidates(1, Duration::ZERO).await?;
        if !tracked.iter().any(|d| policy.is_hot(d)) {
            return Ok(Vec::new());
        }
        let registry = self.index_registry().await?;
        let now = Instant::now();
        state
            .tried
            .retain(|_, at| now.duration_since(*at) < policy.retry);
        let mut out = Vec::new();
        for root in choose_roots(&tracked, policy, &registry) {
            if state.tried_lately(&root) || busy(&root) {
                continue;
            }
            if !state.take_build(policy, now) {
                tracing::debug!(root, "automatic index left for later: builds rate-limited");
                break;
            }
            state.tried.insert(root.clone(), now);
            // Automatic indexes of parts of the tree (built while the rest was not quiet
            // yet) give way to one of the whole.
            for t in registry.trees.iter().filter(|t| t.auto) {
                if tree_index::below(&root, &t.root).is_some()
                    && let Err(e) = self.drop_index(&t.root).await
                {
                    tracing::debug!(root = t.root, "automatic index not replaced: {e}");
                }
            }
            let opts = BuildOptions {
                max_bytes: policy.max_bytes,
                max_dirs: Some(policy.max_dirs),
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

    /// A directory read by two clients.
    fn dir(d: &str, reads: u64, since: Option<u64>) -> HotDir {
        HotDir {
            path: d.to_string(),
            reads,
            since_ms: since,
            readers: 2,
        }
    }

    fn policy(min_reads: u64, quiet: Duration) -> AutoIndexPolicy {
        AutoIndexPolicy {
            min_reads,
            quiet,
            ..AutoIndexPolicy::default()
        }
    }

    #[test]
    fn trees_are_the_topmost_quiet_read_directories_above_hot_ones() {
        let q = Duration::from_secs(30);
        let dirs = [
            dir("/", 50, None),
            // A tree read once per client at the top, hot below.
            dir("/sw", 2, Some(60_000)),
            dir("/sw/lib", 3, None),
            dir("/sw/lib/py", 40, None),
            dir("/sw/lib/py/enc", 30, None),
            // Hot, but something below it changes.
            dir("/data", 30, None),
            dir("/data/run", 1, Some(1_000)),
            dir("/.myriad", 30, None),
            dir("/.myriad/index", 30, None),
            // Its parent is not tracked: the climb stops.
            dir("/home/a/proj", 20, None),
            dir("/home/a/proj/src", 20, None),
            // Read, not hot: no tree of its own.
            dir("/tmp", 2, None),
        ];
        let none = Registry::default();
        assert_eq!(
            choose_roots(&dirs, &policy(16, q), &none),
            ["/home/a/proj", "/sw"]
        );
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
        let some = Registry {
            trees: vec![tree.clone()],
        };
        assert_eq!(choose_roots(&dirs, &policy(16, q), &some), ["/home/a/proj"]);
        // An automatic index of a part gives way to one of the whole.
        let part = Registry {
            trees: vec![RegisteredTree { auto: true, ..tree }],
        };
        assert_eq!(
            choose_roots(&dirs, &policy(16, q), &part),
            ["/home/a/proj", "/sw"]
        );
        // A change seen lately stops the climb, and keeps the trees above it out.
        let q = Duration::from_secs(120);
        assert_eq!(
            choose_roots(&dirs, &policy(16, q), &none),
            ["/home/a/proj", "/sw/lib"]
        );
        // Nothing hot enough: nothing.
        assert!(choose_roots(&dirs, &policy(100, q), &none).is_empty());
    }

    #[test]
    fn a_tree_whose_top_changed_last_is_indexed_whole_once_its_top_is_quiet() {
        let q = Duration::from_secs(30);
        // A tree just copied: the copy set its upper directories' times last, so its
        // corners have been quiet for 31-38 s and its top for 22 s.
        let at = |extra: u64| {
            vec![
                dir("/", 50, None),
                dir("/py", 3, Some(22_000 + extra)),
                dir("/py/lib", 3, Some(22_000 + extra)),
                dir("/py/lib/sympy", 40, Some(31_000 + extra)),
                dir("/py/lib/sympy/core", 40, Some(33_000 + extra)),
                dir("/py/lib/mpmath", 30, Some(38_000 + extra)),
            ]
        };
        let none = Registry::default();
        assert!(
            choose_roots(&at(0), &policy(16, q), &none).is_empty(),
            "corners were chosen while the top of their tree was not quiet yet"
        );
        // Ten seconds later the whole tree is quiet: one index of it all.
        assert_eq!(choose_roots(&at(10_000), &policy(16, q), &none), ["/py"]);
        // A directory that keeps changing holds a read-mostly tree below it back only
        // until that tree has been quiet for twice the quiet period.
        let busy = |quiet_for: u64| {
            vec![
                dir("/scratch", 5, Some(1_000)),
                dir("/scratch/sw", 2, Some(quiet_for)),
                dir("/scratch/sw/lib", 40, Some(quiet_for)),
            ]
        };
        assert!(choose_roots(&busy(45_000), &policy(16, q), &none).is_empty());
        assert_eq!(
            choose_roots(&busy(61_000), &policy(16, q), &none),
            ["/scratch/sw"]
        );
    }

    #[test]
    fn a_tree_read_by_one_client_must_be_read_hard_to_be_indexed() {
        let q = Duration::from_secs(30);
        let p = policy(16, q);
        let tree = |reads: u64, readers: u32| {
            vec![
                HotDir {
                    readers,
                    ..dir("/sw", 1, None)
                },
                HotDir {
                    readers,
                    ..dir("/sw/lib", reads, None)
                },
            ]
        };
        let none = Registry::default();
        // Two mounts reading it: hot at `min_reads`.
        assert_eq!(choose_roots(&tree(16, 2), &p, &none), ["/sw"]);
        // One client (or readers not named: a client without leases, an older server)
        // reading it as often: not yet.
        assert!(choose_roots(&tree(16, 1), &p, &none).is_empty());
        assert!(choose_roots(&tree(63, 0), &p, &none).is_empty());
        // ...but reading it `alone` times as hard: hot.
        assert_eq!(choose_roots(&tree(64, 1), &p, &none), ["/sw"]);
        assert_eq!(choose_roots(&tree(64, 0), &p, &none), ["/sw"]);
    }

    #[test]
    fn a_tree_tried_lately_keeps_its_parts_out_but_not_the_trees_above_it() {
        let mut state = AutoIndexer::default();
        state.tried.insert("/proj".to_string(), Instant::now());
        assert!(state.tried_lately("/proj"));
        assert!(state.tried_lately("/proj/crate0"));
        assert!(state.tried_lately("/proj/crate0/src"));
        assert!(
            !state.tried_lately("/projects"),
            "a sibling whose name it starts"
        );
        assert!(!state.tried_lately("/"), "the tree above it");
        assert!(!state.tried_lately("/other"));
    }

    #[test]
    fn builds_are_rate_limited_per_retry_period() {
        let policy = AutoIndexPolicy::default();
        let mut state = AutoIndexer::default();
        let t0 = Instant::now();
        for _ in 0..policy.max_builds {
            assert!(state.take_build(&policy, t0));
        }
        assert!(!state.take_build(&policy, t0), "one build past the limit");
        let later = t0 + policy.retry / 2;
        assert!(!state.take_build(&policy, later), "still within the period");
        let after = t0 + policy.retry;
        assert!(
            state.take_build(&policy, after),
            "a period later, builds again"
        );
    }

    #[test]
    fn a_mounts_own_changes_keep_a_tree_out_for_longer_than_quiet() {
        let policy = AutoIndexPolicy::default();
        assert!(policy.own_changes_horizon() >= Duration::from_secs(300));
        let short = AutoIndexPolicy {
            quiet: Duration::from_secs(900),
            ..AutoIndexPolicy::default()
        };
        assert_eq!(short.own_changes_horizon(), Duration::from_secs(900));
    }
}
