//! Answering from the metadata indexes of frozen trees (docs/metadata-index.md): the
//! registry, kept under a lease on its directory; each index loaded on first use (from
//! the local cache directory when its copy there matches, else from the cluster); and
//! the answers, given with no request while the registry's lease holds (invariant I1:
//! `index drop` rewrites the registry, which recalls that lease from every client before
//! the tree can change again).
//!
//! Only with leases (`ClientConfig::leases` and `indexes`): without a lease nothing would
//! tell a client that an index was dropped.

mod auto_policy;
mod build;
mod hits;
mod register;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use myriad_placement::{join, split_parent};
use myriad_proto::tree_index::{
    Answer, INDEX_DIR, IndexView, PENDING_PREFIX, REGISTRY_TREES_MAX, RegisteredTree, Registry,
    TREES_DIR, TREES_NAME, TreeIndex,
};
use myriad_proto::{Caller, FileKind, FsError, Inode};
use tokio::time::Instant;

pub use crate::index_state::IndexStats;
pub use auto_policy::{AutoIndexPolicy, AutoIndexer, choose_roots};
pub use build::{BuildOptions, BuildReport};

use crate::client::Client;
use crate::index_state::{Held, Indexes, Known, Loaded, lock};
use myriad_proto::reply::Fetched;

/// After a failed read of the registry (or one no lease covers), no new try for this long:
/// an unreachable registry costs one request per period, not one per operation.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// And no two reads closer than this even when each got a lease: a lease mark moved by
/// a drop of an unrelated directory sharing its stripe would otherwise cost a read per
/// operation (no index answers meanwhile).
const REREAD_AFTER: Duration = Duration::from_millis(100);
/// The most a registry entry may take.
const ENTRY_BYTES_MAX: u64 = 64 << 10;

impl Client {
    fn indexes_on(&self) -> bool {
        self.config.leases && self.config.indexes
    }

    /// What the indexes saved so far.
    #[must_use]
    pub fn index_stats(&self) -> IndexStats {
        IndexStats {
            hits: self.indexes.hits.load(Ordering::Relaxed),
            loads: self.indexes.loads.load(Ordering::Relaxed),
        }
    }

    /// The reads (requests that change nothing) this client sent to the servers so far:
    /// a mount asks for automatic indexes only while it sends reads itself.
    #[must_use]
    pub fn server_reads(&self) -> u64 {
        self.indexes.server_reads.load(Ordering::Relaxed)
    }

    /// The answers this client gave from each index so far, by index file.
    #[must_use]
    pub fn index_hits(&self) -> std::collections::BTreeMap<String, u64> {
        let mut out: std::collections::BTreeMap<String, u64> = lock(&self.indexes.retired_hits)
            .iter()
            .map(|(f, n)| (f.clone(), *n))
            .collect();
        for (file, l) in lock(&self.indexes.loaded).iter() {
            *out.entry(file.clone()).or_insert(0) += l.hits.load(Ordering::Relaxed);
        }
        out.retain(|_, n| *n > 0);
        out
    }

    /// Forgets what this client read of the registry (after its own change of it, which
    /// recalls no lease of its own): read again before the next answer from an index.
    pub(crate) fn forget_registry(&self) {
        *lock(&self.indexes.known) = None;
        self.indexes.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The registry reads so far (`LeaseMark::index_epoch`).
    pub(crate) fn index_epoch(&self) -> u64 {
        self.indexes.epoch.load(Ordering::Acquire)
    }

    /// The registry, if what this client read of it is still true: its lease held with
    /// no drop since (or, when no index exists, for `RETRY_AFTER`). Marks the lease used,
    /// so renewals keep it while indexes answer.
    fn current_registry(&self) -> Option<Arc<Known>> {
        let known = lock(&self.indexes.known).clone()?;
        let me = &self.config.caller;
        let leased = match known.mark {
            Some(Held::Missing(m)) => {
                self.leases.mark(INDEX_DIR) == m
                    && self.leases.get(INDEX_DIR, TREES_NAME, me).is_some()
            }
            Some(Held::Listed(m)) => {
                self.leases.mark(TREES_DIR) == m
                    && match known.registry.trees.first() {
                        Some(t) => self.leases.get(TREES_DIR, &t.file, me).is_some(),
                        None => self.leases.listing(TREES_DIR, me).is_some(),
                    }
            }
            None => false,
        };
        // Read with no lease (none granted, or the read failed): an empty registry is
        // trusted until the next try (a new index is then found that much later; a
        // dropped one is never used: nothing is).
        let empty_fresh = known.mark.is_none()
            && known.registry.trees.is_empty()
            && Instant::now() < known.retry_at;
        (leased || empty_fresh).then_some(known)
    }

    /// The loaded index of the tree `path` is in, with no request.
    fn index_now(&self, path: &str) -> Option<Arc<Loaded>> {
        let known = self.current_registry()?;
        self.loaded(known.registry.tree_of(path)?)
    }

    /// `index_now`, reading the registry or loading the index first where needed. With
    /// no index to answer it costs two lock-free checks and one mutex; a registry read no
    /// lease covered, or an index that failed to load, is tried again after
    /// `RETRY_AFTER` only.
    async fn index_for(&self, path: &str) -> Option<Arc<Loaded>> {
        if !self.indexes_on() {
            return None;
        }
        let known = match self.current_registry() {
            Some(k) => k,
            None => {
                if self.registry_throttled() {
                    return None;
                }
                let _one = self.indexes.loading.lock().await;
                match self.current_registry() {
                    Some(k) => k,
                    None if self.registry_throttled() => return None,
                    None => self.read_registry().await,
                }
            }
        };
        let tree = known.registry.tree_of(path)?;
        if let Some(l) = self.loaded(tree) {
            return Some(l);
        }
        let failed_lately = |i: &Indexes| {
            lock(&i.failed)
                .get(&tree.file)
                .is_some_and(|at| Instant::now() < *at)
        };
        if failed_lately(&self.indexes) {
            return None;
        }
        let _one = self.indexes.loading.lock().await;
        if let Some(l) = self.loaded(tree) {
            return Some(l);
        }
        if failed_lately(&self.indexes) {
            return None;
        }
        match self.load_index(tree).await {
            Ok(view) => {
                let l = Arc::new(Loaded {
                    tree: tree.clone(),
                    view,
                    hits: AtomicU64::new(0),
                });
                let mut loaded = lock(&self.indexes.loaded);
                let mut retired = lock(&self.indexes.retired_hits);
                loaded.retain(|file, old| {
                    let keep = known.registry.trees.contains(&old.tree);
                    if !keep {
                        *retired.entry(file.clone()).or_insert(0) +=
                            old.hits.load(Ordering::Relaxed);
                    }
                    keep
                });
                drop(retired);
                loaded.insert(l.tree.file.clone(), l.clone());
                self.indexes.loads.fetch_add(1, Ordering::Relaxed);
                Some(l)
            }
            Err(e) => {
                tracing::warn!(root = tree.root, file = tree.file, "index not loaded: {e}");
                lock(&self.indexes.failed).insert(tree.file.clone(), Instant::now() + RETRY_AFTER);
                None
            }
        }
    }

    /// `tree`'s index if loaded.
    fn loaded(&self, tree: &RegisteredTree) -> Option<Arc<Loaded>> {
        lock(&self.indexes.loaded)
            .get(&tree.file)
            .filter(|l| l.tree == *tree)
            .cloned()
    }

    /// Whether the last read of the registry had no lease and is too recent to try again.
    fn registry_throttled(&self) -> bool {
        let now = Instant::now();
        lock(&self.indexes.known).as_ref().is_some_and(|k| {
            (k.mark.is_none() && now < k.retry_at) || now < k.read_at + REREAD_AFTER
        })
    }

    /// Reads the registry (as this client's own caller), under the lease on its
    /// directory, or on `INDEX_DIR` when it does not exist.
    async fn read_registry(&self) -> Arc<Known> {
        let epoch = self.index_epoch();
        let marks = (self.leases.mark(INDEX_DIR), self.leases.mark(TREES_DIR));
        let read = self.as_itself().registry_entries().await;
        let me = &self.config.caller;
        let (registry, mark) = match read {
            Ok(Some(reg)) => {
                let leased = self.leases.mark(TREES_DIR) == marks.1
                    && self.leases.listing(TREES_DIR, me).is_some();
                (reg, leased.then_some(Held::Listed(marks.1)))
            }
            Ok(None) => {
                let leased = self.leases.covers(INDEX_DIR, TREES_NAME, marks.0);
                (
                    Registry::default(),
                    leased.then_some(Held::Missing(marks.0)),
                )
            }
            Err(e) => {
                tracing::debug!("index registry not read: {e}");
                (Registry::default(), None)
            }
        };
        // This client's own change of the registry meanwhile (`forget_registry`, which
        // recalls none of its own leases): what was read may predate it.
        let mark = mark.filter(|_| self.index_epoch() == epoch);
        let now = Instant::now();
        let known = Arc::new(Known {
            registry,
            mark,
            retry_at: now + RETRY_AFTER,
            read_at: now,
        });
        *lock(&self.indexes.known) = Some(known.clone());
        self.indexes.epoch.fetch_add(1, Ordering::AcqRel);
        known
    }

    /// Every entry of the registry (`None`: its directory does not exist), read from the
    /// servers or a lease, never from an index. An entry unreadable or gone meanwhile is
    /// left out.
    pub(crate) async fn registry_entries(&self) -> Result<Option<Registry>, FsError> {
        let listing = match self.readdir_servers(TREES_DIR).await {
            Ok(l) => l,
            Err(FsError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut reg = Registry::default();
        for e in listing.into_iter().take(REGISTRY_TREES_MAX) {
            // An automatic build under way: not usable until renamed to its own name.
            if e.name.starts_with(PENDING_PREFIX) {
                continue;
            }
            let path = join(TREES_DIR, &e.name);
            match self.fetch_head_servers(&path, ENTRY_BYTES_MAX).await {
                Ok((_, bytes)) => match RegisteredTree::decode(&e.name, &bytes) {
                    Ok(t) => reg.trees.push(t),
                    Err(err) => tracing::warn!(path, "index registry entry left out: {err}"),
                },
                Err(FsError::NotFound) => {}
                Err(err) => return Err(err),
            }
        }
        reg.trees
            .sort_by(|a, b| a.root.cmp(&b.root).then(a.version.cmp(&b.version)));
        Ok(Some(reg))
    }

    /// Loads `tree`'s index: from the local cache when its copy there is this build's,
    /// else from the cluster (kept in the cache then).
    async fn load_index(&self, tree: &RegisteredTree) -> Result<IndexView, FsError> {
        let cached = self.cache_file(tree);
        if let Some(file) = &cached
            && let Ok(bytes) = std::fs::read(file)
            && matches(tree, &bytes)
        {
            return view_of(tree, &bytes);
        }
        let path = join(INDEX_DIR, &tree.file);
        let bytes = self.as_itself().read_unleased(&path).await?;
        if !matches(tree, &bytes) {
            return Err(FsError::Protocol(format!(
                "index {path}: not the build the registry names"
            )));
        }
        let view = view_of(tree, &bytes)?;
        if let Some(file) = cached {
            keep_in_cache(&file, &bytes);
        }
        Ok(view)
    }

    fn cache_file(&self, tree: &RegisteredTree) -> Option<PathBuf> {
        self.config
            .index_cache_dir
            .as_ref()
            .map(|d| d.join(&tree.file))
    }

    /// A whole file, read with no lease (an index is read once and kept here).
    async fn read_unleased(&self, path: &str) -> Result<Vec<u8>, FsError> {
        let max_bytes = self.chunk_size().min(myriad_proto::limits::IO_BYTES_MAX);
        let Fetched { inode, mut data } = self
            .entry_ask(path, myriad_proto::ask::fetch(path, max_bytes))
            .await?;
        if (data.len() as u64) < inode.size {
            let handle = crate::FileHandle {
                path: path.to_string(),
                inode: inode.clone(),
                opened: false,
            };
            let from = data.len() as u64;
            data.extend(self.read_servers(&handle, from, inode.size - from).await?);
        }
        Ok(data)
    }

    /// The attributes of `l`'s root as the calling task's caller reaches them (the
    /// root's own entry is outside the tree), from the lease on its parent when held;
    /// `None` if that caller cannot reach it.
    fn root_attrs_now(&self, l: &Loaded, caller: &Caller) -> Option<Inode> {
        let (dir, name) = split_parent(&l.tree.root);
        match self.leases.get(dir, name, caller)? {
            crate::leases::Cached::Found { inode, .. } => Some(inode),
            crate::leases::Cached::Missing => None,
        }
    }

    async fn root_attrs(&self, l: &Loaded) -> Option<Inode> {
        let caller = self.acting_caller();
        if let Some(i) = self.root_attrs_now(l, caller) {
            return Some(i);
        }
        self.stat_servers(&l.tree.root).await.ok()
    }

    /// What the index says of `path` for the calling task's caller: `None` to ask the
    /// servers; `Some(Err(NotFound))` for a name it knows is missing.
    /// `contents`: the file's contents are wanted (else not copied).
    pub(crate) async fn indexed(
        &self,
        path: &str,
        contents: bool,
    ) -> Option<Result<Indexed, FsError>> {
        let l = self.index_for(path).await?;
        let root = self.root_attrs(&l).await?;
        self.answer(&l, path, self.acting_caller(), &root, contents)
    }

    /// `indexed` with no request: only from what is loaded and leased now.
    pub(crate) fn indexed_now(
        &self,
        path: &str,
        caller: &Caller,
        contents: bool,
    ) -> Option<Result<Indexed, FsError>> {
        if !self.indexes_on() {
            return None;
        }
        let l = self.index_now(path)?;
        let root = self.root_attrs_now(&l, caller)?;
        self.answer(&l, path, caller, &root, contents)
    }

    fn answer(
        &self,
        l: &Loaded,
        path: &str,
        caller: &Caller,
        root: &Inode,
        contents: bool,
    ) -> Option<Result<Indexed, FsError>> {
        let r = match l.view.lookup(path, caller, root) {
            Answer::Found(entry, inode) => Ok(Indexed {
                inode: inode.clone(),
                contents: contents
                    .then(|| IndexView::contents(entry, caller).map(<[u8]>::to_vec))
                    .flatten(),
                readable: inode.kind != FileKind::File
                    || myriad_proto::access::allowed(inode, caller, myriad_proto::access::READ),
            }),
            Answer::Missing => Err(FsError::NotFound),
            Answer::Ask => return None,
        };
        self.indexes.hits.fetch_add(1, Ordering::Relaxed);
        l.hits.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(client = self.config.id, path, "answered from an index");
        Some(r)
    }

    /// A page of directory `path`'s listing from an index, in the servers' order (name
    /// hash, then name), after `after` and at most `limit` entries, with the cursor of the
    /// next page, for the calling task's caller.
    pub(crate) async fn indexed_page(
        &self,
        path: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Option<(Vec<myriad_proto::DirEntry>, Option<String>)> {
        let l = self.index_for(path).await?;
        let root = self.root_attrs(&l).await?;
        let listing = l.view.listing(path, self.acting_caller(), &root)?;
        let (from, to) =
            crate::dirs::page_bounds(listing.len(), |i| &listing.get(i).name, after, limit);
        // A whole listing has every entry's attributes (`IndexView::listing`).
        let page: Vec<myriad_proto::DirEntry> = (from..to)
            .filter_map(|i| {
                let e = listing.get(i);
                Some(myriad_proto::DirEntry {
                    name: e.name.clone(),
                    inode: e.inode.clone()?,
                })
            })
            .collect();
        let next = (to < listing.len())
            .then(|| page.last().map(|e| e.name.clone()))
            .flatten();
        self.indexes.hits.fetch_add(1, Ordering::Relaxed);
        l.hits.fetch_add(1, Ordering::Relaxed);
        Some((page, next))
    }

    /// Whether an index answers for `path` now, whoever asks (a mount lets the kernel
    /// keep such names until the registry's lease is dropped).
    pub(crate) fn index_covers(&self, path: &str) -> bool {
        self.indexes_on() && self.index_now(path).is_some_and(|l| l.view.knows(path))
    }

    /// When the registry's lease ends, if an index covers directory `dir`.
    pub(crate) fn index_lease_until(&self, dir: &str) -> Option<Instant> {
        if !self.indexes_on() || !self.index_now(dir).is_some_and(|l| l.view.has_dir(dir)) {
            return None;
        }
        // (No index is loaded while the registry's directory is missing.)
        self.leases.holds(TREES_DIR)
    }
}

/// An index's answer about one name.
pub(crate) struct Indexed {
    pub(crate) inode: Inode,
    /// Its whole contents, if asked for, kept, and the caller may read them.
    pub(crate) contents: Option<Vec<u8>>,
    /// Whether the caller may read it (a fetch of a file it may not is `PermissionDenied`).
    pub(crate) readable: bool,
}

impl Indexed {
    /// What `fetch_head` of `max_bytes` answers from it: the attributes and as much of
    /// the contents as the index holds, or `PermissionDenied` for a caller who may not
    /// read the file.
    /// What a lookup of `max_bytes` answers from it: the attributes, and the contents
    /// only for a caller who may read them (a lookup needs no read permission).
    pub(crate) fn looked_up(self, max_bytes: u64) -> (Inode, Vec<u8>) {
        let mut data = self.contents.unwrap_or_default();
        data.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
        (self.inode, data)
    }

    pub(crate) fn head(self, max_bytes: u64) -> Result<(Inode, Vec<u8>), FsError> {
        if !self.readable {
            return Err(FsError::PermissionDenied);
        }
        let mut data = self.contents.unwrap_or_default();
        data.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
        Ok((self.inode, data))
    }
}

/// Whether `bytes` are the index file `tree` names (size and checksum).
fn matches(tree: &RegisteredTree, bytes: &[u8]) -> bool {
    bytes.len() as u64 == tree.bytes && myriad_proto::tree_index::file_digest(bytes) == tree.sha256
}

fn view_of(tree: &RegisteredTree, bytes: &[u8]) -> Result<IndexView, FsError> {
    let index = TreeIndex::decode(bytes)?;
    if (index.root.as_str(), index.root_ino, index.version)
        != (tree.root.as_str(), tree.root_ino, tree.version)
    {
        return Err(FsError::Protocol(format!(
            "index {}: built for {} version {}, registered for {} version {}",
            tree.file, index.root, index.version, tree.root, tree.version
        )));
    }
    Ok(IndexView::new(index))
}

/// Keeps a copy of an index file on local disk (written whole, then renamed into place);
/// a failure only costs the next client a load from the cluster.
fn keep_in_cache(file: &std::path::Path, bytes: &[u8]) {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, file)
    };
    if let Err(e) = write() {
        tracing::debug!(file = %file.display(), "index not cached on disk: {e}");
    }
}
