//! Registering a build (docs/metadata-index.md "The registry"): the build registers
//! itself *pending* before it marks anything and makes the entry live with one rename
//! after its walk. For an automatic index (the tree marked, not frozen) a change at any
//! moment either removes the pending entry (the rename then fails and the build is
//! abandoned) or unlinks the live one (every client stops answering from it first). For
//! both kinds, a failed build removes the pending entry before the live one, so a rename
//! still in flight can never land after the failure was handled.

use myriad_placement::join;
use myriad_proto::tree_index::{self, CLAIMS_DIR, INDEX_DIR, PENDING_PREFIX, TREES_DIR};
use myriad_proto::{FsError, Inode, InodeId, ReadOnlyMark, RenameFlags};

use crate::client::Client;
use crate::index::build::{BuildOptions, BuildReport};

/// A claim older than this is a builder that died: it is broken (longer than any build
/// of `AutoIndexPolicy::max_dirs` directories takes).
const CLAIM_STALE_NS: i64 = 600_000_000_000;

impl Client {
    /// Marks the tree (frozen, or for an automatic index), writes its index and
    /// registers it. An automatic build answers `Busy` if the tree changed during it.
    pub(super) async fn build_registered(
        &self,
        root: &str,
        root_attrs: &Inode,
        mark: ReadOnlyMark,
        opts: BuildOptions,
    ) -> Result<BuildReport, FsError> {
        let file = tree_index::index_file_name(mark.root, mark.version);
        let pending = join(TREES_DIR, &format!("{PENDING_PREFIX}{file}"));
        let live = join(TREES_DIR, &file);
        self.mkdir_p(TREES_DIR, 0o755).await?;
        // Before any mark: from the first mark on, a change removes it.
        let handle = self.create(&pending, 0o444, true, b"").await?;
        self.forget_registry();
        let built = async {
            let most = opts.max_dirs.unwrap_or(usize::MAX);
            let dirs = self.mark_tree_within(root, mark, opts.auto, most).await?;
            let (mut report, bytes) = self.make_index(root, root_attrs, mark, opts).await?;
            report.frozen_dirs = dirs.len();
            self.write_index_file(&report.tree, &bytes).await?;
            // By the handle: if a change unlinked the entry meanwhile, the rename fails.
            self.write(&handle, 0, &report.tree.encode()).await?;
            // Live in one step (clients may use it from here on), if no change removed
            // the pending entry meanwhile.
            let flags = RenameFlags {
                no_replace: true,
                exchange: false,
            };
            match self.rename(&pending, &live, flags).await {
                Ok(()) => Ok(report),
                Err(FsError::NotFound) if opts.auto => Err(FsError::Busy),
                Err(e) => Err(e),
            }
        }
        .await;
        self.forget_registry();
        match built {
            Ok(report) => {
                if opts.auto {
                    self.sweep_index_files(mark.root, mark.version).await;
                }
                Ok(report)
            }
            Err(e) => {
                self.abandon_build(root, &file, opts.auto, &e).await;
                Err(e)
            }
        }
    }

    /// Takes the claim of automatic builds (one at a time in the cluster).
    pub(super) async fn claim_auto_build(&self) -> Result<String, FsError> {
        let claim = join(CLAIMS_DIR, "auto");
        self.mkdir_p(CLAIMS_DIR, 0o755).await?;
        for _ in 0..2 {
            match self.create(&claim, 0o444, true, b"").await {
                Ok(_) => return Ok(claim),
                Err(FsError::AlreadyExists) => {
                    let held = self.stat_servers(&claim).await?;
                    if super::build::now_ns().saturating_sub(held.mtime_ns) < CLAIM_STALE_NS {
                        return Err(FsError::Busy);
                    }
                    match self.unlink(&claim).await {
                        Ok(()) | Err(FsError::NotFound) => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(FsError::Busy)
    }

    /// Undoes what a failed build made. Its registry entries go first, pending then live
    /// (a rename whose answer was lost may have made the live one; one still in flight
    /// finds no pending entry any more), each unlink recalling every client's registry
    /// lease before it applies; only then are the marks taken off (I1). If the registry
    /// cannot be cleaned, the marks stay: a frozen tree for `myriad index drop`, an
    /// automatic index's marks to unregister it at the first change.
    async fn abandon_build(&self, root: &str, file: &str, auto: bool, why: &FsError) {
        let pending = join(TREES_DIR, &format!("{PENDING_PREFIX}{file}"));
        let mut unlisted = Ok(());
        for path in [pending, join(TREES_DIR, file)] {
            match self.unlink(&path).await {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(e) => unlisted = Err(e),
            }
        }
        self.forget_registry();
        if let Err(u) = unlisted {
            tracing::warn!(
                root,
                "build failed ({why}) and the registry could not be cleaned ({u}): marks left; `myriad index drop {root}` removes them"
            );
            return;
        }
        if let Err(e) = self.unlink(&join(INDEX_DIR, file)).await {
            tracing::debug!(root, "index file of a failed build left: {e}");
        }
        if let Err(t) = self.unmark_tree(root, auto).await {
            tracing::warn!(
                root,
                "build failed ({why}); taking its marks off failed too: {t}"
            );
        }
    }

    /// Removes the index files of earlier builds of the tree rooted at `ino` that the
    /// registry no longer lists (automatic indexes unregistered by a change).
    async fn sweep_index_files(&self, ino: InodeId, keep: u64) {
        let Ok(listing) = self.readdir_servers(INDEX_DIR).await else {
            return;
        };
        let Ok(registry) = self.index_registry().await else {
            return;
        };
        let prefix = format!("{}.", ino.0);
        for e in listing {
            let Some(v) = e
                .name
                .strip_prefix(&prefix)
                .and_then(|v| v.parse::<u64>().ok())
            else {
                continue;
            };
            if v == keep || registry.trees.iter().any(|t| t.file == e.name) {
                continue;
            }
            if let Err(err) = self.unlink(&join(INDEX_DIR, &e.name)).await {
                tracing::debug!(name = e.name, "old index file left: {err}");
            }
        }
    }
}
