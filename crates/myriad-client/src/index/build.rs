//! `myriad index build`, `drop` and `status` (docs/metadata-index.md): freeze a tree,
//! write its index and register it; unregister (which recalls every client's registry
//! lease before it applies), then thaw.

use futures::StreamExt;
use myriad_placement::{join, parent_of};
use myriad_proto::tree_index::{
    self, INDEX_DIR, IndexedDir, IndexedEntry, RegisteredTree, Registry, TREES_DIR, TreeIndex,
    public,
};
use myriad_proto::{DirEntry, FileKind, FsError, HotDir, Inode, ReadOnlyMark};

use crate::client::Client;

/// Contents fetched at once while building.
const FETCH_PARALLEL: usize = 64;

/// The protocol whose servers count the readers of their hot directories
/// (`ClientRequest::IndexReaders`).
const INDEX_READERS_PROTOCOL: u16 = 33;

#[derive(Clone, Copy, Debug)]
pub struct BuildOptions {
    /// Contents kept for public files up to this size.
    pub inline_bytes: u64,
    /// The most the index file may take.
    pub max_bytes: u64,
    /// The build's version (`None`: the time in milliseconds; a simulation, whose runs
    /// must repeat, gives its own).
    pub version: Option<u64>,
    /// Refuse a tree with more directories than this (found while it is marked: the
    /// walk stops there). Automatic builds set it.
    pub max_dirs: Option<usize>,
    /// An automatic index: the tree is marked, not frozen, and its first change
    /// unregisters the index (`index/auto.rs`).
    pub auto: bool,
}

impl Default for BuildOptions {
    fn default() -> BuildOptions {
        BuildOptions {
            inline_bytes: tree_index::DEFAULT_INLINE_BYTES,
            max_bytes: tree_index::DEFAULT_MAX_BYTES,
            version: None,
            max_dirs: None,
            auto: false,
        }
    }
}

/// What a build made.
#[derive(Clone, Debug)]
pub struct BuildReport {
    pub tree: RegisteredTree,
    /// Directories frozen (or marked, for an automatic index), and those whose listing
    /// is in the index (public ones).
    pub frozen_dirs: usize,
    pub indexed_dirs: usize,
    /// Files whose contents are in the index.
    pub inline_files: usize,
}

impl Client {
    /// Freezes the tree under `root`, writes its index and registers it. Root only. A
    /// failure thaws what it froze.
    pub async fn build_index(
        &self,
        root: &str,
        opts: BuildOptions,
    ) -> Result<BuildReport, FsError> {
        myriad_proto::validate_path(root)?;
        let most = self.chunk_size().min(myriad_proto::limits::IO_BYTES_MAX);
        if opts.inline_bytes > most {
            return Err(FsError::InvalidArgument(format!(
                "--inline-bytes {} is more than a chunk ({most} bytes)",
                opts.inline_bytes
            )));
        }
        if root == "/" || tree_index::below("/.myriad", root).is_some() {
            return Err(FsError::InvalidArgument(format!(
                "{root} cannot be indexed (the root and /.myriad hold the indexes themselves)"
            )));
        }
        if opts.auto {
            // One automatic build at a time in the cluster, its checks made under the
            // claim: two mounts never index one tree, or two trees one inside the other.
            let claim = self.claim_auto_build().await?;
            let built = self.build_checked(root, opts).await;
            if let Err(e) = self.unlink(&claim).await {
                tracing::warn!(claim, "automatic index claim left behind: {e}");
            }
            return built;
        }
        self.build_checked(root, opts).await
    }

    /// `build_index` past its argument checks.
    async fn build_checked(&self, root: &str, opts: BuildOptions) -> Result<BuildReport, FsError> {
        let registry = self.index_registry().await?;
        if let Some(t) = registry.trees.iter().find(|t| {
            tree_index::below(&t.root, root).is_some() || tree_index::below(root, &t.root).is_some()
        }) {
            return Err(FsError::InvalidArgument(format!(
                "{} is indexed already (version {}); `myriad index drop {}` first",
                t.root, t.version, t.root
            )));
        }
        let root_attrs = self.stat_servers(root).await?;
        if root_attrs.kind != FileKind::Directory {
            return Err(FsError::NotADirectory);
        }
        self.require_public_path(root).await?;
        let version = opts
            .version
            .unwrap_or_else(|| u64::try_from(now_ns() / 1_000_000).unwrap_or(1))
            .max(1);
        let mark = ReadOnlyMark {
            root: root_attrs.ino,
            version,
        };
        self.build_registered(root, &root_attrs, mark, opts).await
    }

    /// Unregisters the index of `root` (every client stops answering from it before the
    /// registry changes: the change recalls their leases on it), then thaws the tree and
    /// removes the index file. Also thaws a tree a failed build left frozen. Returns the
    /// directories thawed.
    pub async fn drop_index(&self, root: &str) -> Result<usize, FsError> {
        myriad_proto::validate_path(root)?;
        let registry = self.index_registry().await?;
        let gone: Vec<RegisteredTree> = registry
            .trees
            .into_iter()
            .filter(|t| t.root == root)
            .collect();
        // An automatic index's tree was never frozen: its marks are cleared instead.
        let auto = gone.iter().any(|t| t.auto);
        // Unregistered first (each unlink recalls every client's lease on the registry
        // before it applies), thawed only then (I1).
        for t in &gone {
            let unlisted = self.unlink(&join(TREES_DIR, &t.file)).await;
            // This client's own change recalls no lease of its own: what it read of the
            // registry goes now.
            self.forget_registry();
            match unlisted {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        self.unlist_pending(root).await?;
        let thawed = self.unmark_tree(root, auto).await?;
        for t in &gone {
            match self.unlink(&join(INDEX_DIR, &t.file)).await {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(thawed)
    }

    /// Unlinks what failed builds of `root` left pending in the registry (clients never
    /// use a pending entry; a build in flight then fails its rename).
    async fn unlist_pending(&self, root: &str) -> Result<(), FsError> {
        let Ok(attrs) = self.stat_servers(root).await else {
            return Ok(());
        };
        let listing = match self.readdir_servers(TREES_DIR).await {
            Ok(l) => l,
            Err(FsError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mine = format!("{}{}.", tree_index::PENDING_PREFIX, attrs.ino.0);
        for e in listing.into_iter().filter(|e| e.name.starts_with(&mine)) {
            match self.unlink(&join(TREES_DIR, &e.name)).await {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(err) => return Err(err),
            }
        }
        self.forget_registry();
        Ok(())
    }

    /// The directories read at least `min_reads` times in their servers' popularity
    /// window and not changed for `quiet`, from every partition, with the time since
    /// their last change and how many clients read them (`HotDir`), most read first. The
    /// candidates for automatic indexes (docs/metadata-index.md).
    pub async fn index_candidates(
        &self,
        min_reads: u64,
        quiet: std::time::Duration,
    ) -> Result<Vec<HotDir>, FsError> {
        let quiet_ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX);
        let map = self.map();
        let asks = map.partitions.iter().map(|p| async move {
            let route = crate::client::Route::Partition(p.id);
            // A server of protocol 32 or older (or one not spoken to yet) is asked the
            // old way, which an older server decodes: its directories' readers are not
            // known (0).
            if self.protocol_of(p.id) >= INDEX_READERS_PROTOCOL {
                let ask = myriad_proto::ask::index_readers(min_reads, quiet_ms);
                return Ok(self.ask(route, ask).await?.0);
            }
            let ask = myriad_proto::ask::index_candidates(min_reads, quiet_ms);
            let old = self.ask(route, ask).await?.0;
            Ok::<_, FsError>(
                old.into_iter()
                    .map(|(path, reads, since_ms)| HotDir {
                        path,
                        reads,
                        since_ms,
                        readers: 0,
                    })
                    .collect(),
            )
        });
        let mut out = Vec::new();
        for answer in futures::future::join_all(asks).await {
            out.extend(answer?);
        }
        out.sort_by(|a, b| b.reads.cmp(&a.reads).then_with(|| a.path.cmp(&b.path)));
        Ok(out)
    }

    /// The registry of indexes as the cluster holds it now (empty if none was built).
    pub async fn index_registry(&self) -> Result<Registry, FsError> {
        Ok(self.registry_entries().await?.unwrap_or_default())
    }

    /// Refuses a tree whose index everyone could read but not everyone could reach:
    /// every directory above it must be searchable by all (invariant I2).
    async fn require_public_path(&self, root: &str) -> Result<(), FsError> {
        let mut dir = parent_of(root).to_string();
        loop {
            let attrs = self.stat_servers(&dir).await?;
            if attrs.mode & 0o001 == 0 {
                return Err(FsError::InvalidArgument(format!(
                    "{dir} (mode {:o}) is not searchable by everyone, and an index is readable by everyone: index a tree every user can reach",
                    attrs.mode
                )));
            }
            if dir == "/" {
                return Ok(());
            }
            dir = parent_of(&dir).to_string();
        }
    }

    /// The index of the tree under `root`, marked as `mark`, encoded and checked against
    /// `--max-bytes`, with its registry entry (`frozen_dirs` left 0 for the caller).
    pub(super) async fn make_index(
        &self,
        root: &str,
        root_attrs: &Inode,
        mark: ReadOnlyMark,
        opts: BuildOptions,
    ) -> Result<(BuildReport, Vec<u8>), FsError> {
        let (index, inline_files) = self.gather(root, root_attrs, mark, opts).await?;
        let bytes = index.encode();
        if bytes.len() as u64 > opts.max_bytes {
            return Err(FsError::InvalidArgument(format!(
                "the index of {root} takes {} bytes, more than --max-bytes {}",
                bytes.len(),
                opts.max_bytes
            )));
        }
        let tree = RegisteredTree {
            root: root.to_string(),
            root_ino: mark.root,
            version: mark.version,
            file: tree_index::index_file_name(mark.root, mark.version),
            bytes: bytes.len() as u64,
            sha256: tree_index::file_digest(&bytes),
            dirs: index.dirs.len() as u64,
            entries: index.entry_count(),
            built_ns: index.built_ns,
            auto: opts.auto,
        };
        let report = BuildReport {
            indexed_dirs: index.dirs.len(),
            tree,
            frozen_dirs: 0,
            inline_files,
        };
        Ok((report, bytes))
    }

    /// Writes the index file of `tree` into `INDEX_DIR` (made by the first build).
    pub(super) async fn write_index_file(
        &self,
        tree: &RegisteredTree,
        bytes: &[u8],
    ) -> Result<(), FsError> {
        self.mkdir_p(INDEX_DIR, 0o755).await?;
        self.create(&join(INDEX_DIR, &tree.file), 0o444, true, bytes)
            .await
            .map(drop)
    }

    /// The index of the marked tree under `root`: every public listing, top down, with
    /// the contents of public small files.
    async fn gather(
        &self,
        root: &str,
        root_attrs: &Inode,
        mark: ReadOnlyMark,
        opts: BuildOptions,
    ) -> Result<(TreeIndex, usize), FsError> {
        let mut dirs = Vec::new();
        let mut inline_files = 0;
        let mut todo = Vec::new();
        if public::listable(root_attrs) {
            todo.push(String::new());
        }
        while let Some(rel) = todo.pop() {
            let path = if rel.is_empty() {
                root.to_string()
            } else {
                join(root, &rel)
            };
            let mut listing = self.readdir_servers(&path).await?;
            listing.sort_by(|a, b| a.name.cmp(&b.name));
            for e in &listing {
                if public::attributes(&e.inode) && public::listable(&e.inode) {
                    todo.push(join_rel(&rel, &e.name));
                }
            }
            let entries = self.entries_of(&path, listing, opts.inline_bytes).await?;
            inline_files += entries.iter().filter(|e| e.contents.is_some()).count();
            dirs.push(IndexedDir { rel, entries });
        }
        dirs.sort_by(|a, b| a.rel.cmp(&b.rel));
        let index = TreeIndex {
            root: root.to_string(),
            root_ino: mark.root,
            version: mark.version,
            built_ns: if opts.version.is_some() { 0 } else { now_ns() },
            inline_limit: opts.inline_bytes,
            dirs,
        };
        Ok((index, inline_files))
    }

    /// A listing's entries as the index keeps them, public small files with contents.
    async fn entries_of(
        &self,
        dir: &str,
        listing: Vec<DirEntry>,
        inline_bytes: u64,
    ) -> Result<Vec<IndexedEntry>, FsError> {
        let fetches = listing.into_iter().map(|e| async move {
            let public_attrs = public::attributes(&e.inode);
            let contents = if public::contents(&e.inode, inline_bytes) && e.inode.size > 0 {
                let (inode, data) = self
                    .fetch_head_servers(&join(dir, &e.name), inline_bytes)
                    .await?;
                // Frozen: nothing can have changed it since the listing. Marked for an
                // automatic index: a change unregistered the build (try again later).
                if inode != e.inode || data.len() as u64 != inode.size {
                    return Err(FsError::Busy);
                }
                Some(serde_bytes::ByteBuf::from(data))
            } else if public::contents(&e.inode, inline_bytes) {
                Some(serde_bytes::ByteBuf::new())
            } else {
                None
            };
            Ok(IndexedEntry {
                name: e.name,
                inode: public_attrs.then_some(e.inode),
                contents,
            })
        });
        futures::stream::iter(fetches)
            .buffered(FETCH_PARALLEL)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }
}

fn join_rel(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

pub(super) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
