//! Automatic indexes, the builder's side (docs/metadata-index.md "Automatic indexes"):
//! the tree is marked, not frozen; the build registers itself *pending* before it marks
//! anything and makes the entry live with one rename after its walk, so a change at any
//! moment either kills the pending entry (the rename then fails and the build is
//! abandoned) or unlinks the live one (every client stops answering from it first).

use myriad_placement::join;
use myriad_proto::tree_index::{self, CLAIMS_DIR, INDEX_DIR, PENDING_PREFIX, TREES_DIR};
use myriad_proto::{FsError, Inode, InodeId, ReadOnlyMark, RenameFlags};

use crate::client::Client;
use crate::index::build::{BuildOptions, BuildReport};

/// A claim older than this is a builder that died: it is broken.
const CLAIM_STALE_NS: i64 = 60_000_000_000;

impl Client {
    /// Builds and registers an automatic index of `root` (`build_index` with `auto`):
    /// `Busy` if another client is building it, or if the tree changed during the walk.
    pub(super) async fn build_auto_index(
        &self,
        root: &str,
        root_attrs: &Inode,
        mark: ReadOnlyMark,
        opts: BuildOptions,
    ) -> Result<BuildReport, FsError> {
        let claim = self.claim_auto_build(mark.root).await?;
        let built = self.build_claimed(root, root_attrs, mark, opts).await;
        if let Err(e) = self.unlink(&claim).await {
            tracing::warn!(claim, "automatic index claim left behind: {e}");
        }
        built
    }

    async fn build_claimed(
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
        self.create(&pending, 0o444, true, b"").await?;
        self.forget_registry();
        let built = async {
            let dirs = self.mark_tree(root, mark, true).await?;
            let (mut report, bytes) = self.make_index(root, root_attrs, mark, opts).await?;
            report.frozen_dirs = dirs.len();
            self.write_index_file(&report.tree, &bytes).await?;
            let h = self.open(&pending).await?;
            self.write(&h, 0, &report.tree.encode()).await?;
            // Live in one step, if no change removed the pending entry meanwhile.
            let flags = RenameFlags {
                no_replace: true,
                exchange: false,
            };
            match self.rename(&pending, &live, flags).await {
                Ok(()) => Ok(report),
                Err(FsError::NotFound) => Err(FsError::Busy),
                Err(e) => Err(e),
            }
        }
        .await;
        self.forget_registry();
        match built {
            Ok(report) => {
                self.sweep_index_files(mark.root, mark.version).await;
                Ok(report)
            }
            Err(e) => {
                self.abandon_auto_build(root, &pending, &file).await;
                Err(e)
            }
        }
    }

    /// Takes the claim of the automatic build of the tree whose root is `ino`.
    async fn claim_auto_build(&self, ino: InodeId) -> Result<String, FsError> {
        let claim = join(CLAIMS_DIR, &ino.0.to_string());
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

    /// Undoes what a failed automatic build made: its pending entry (the live one was
    /// never made: the rename is the last step), its index file, its marks.
    async fn abandon_auto_build(&self, root: &str, pending: &str, file: &str) {
        for path in [pending.to_string(), join(INDEX_DIR, file)] {
            match self.unlink(&path).await {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(e) => tracing::warn!(path, "abandoned automatic index left behind: {e}"),
            }
        }
        self.forget_registry();
        // A mark left behind only costs its directory's next change a check.
        if let Err(e) = self.unmark_tree(root, true).await {
            tracing::debug!(root, "marks of an abandoned automatic index left: {e}");
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
