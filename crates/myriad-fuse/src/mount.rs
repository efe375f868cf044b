//! `Mount`: the mounted file system's state (the native client, the inode table, kernel
//! ids, open handles, callers, prefetched files) and what each FUSE operation does, as
//! async functions over the client: lookups and stats here, file data in
//! `mount/file_io.rs`, names and attributes in `mount/entries.rs`. The trait impl in
//! `fs.rs` only unpacks arguments, spawns these on the runtime and replies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use fuser::Notifier;
use myriad_client::Client;
use myriad_proto::{Caller, FileKind, FsError, Inode};

use crate::caller::Callers;
use crate::handles::Handles;
use crate::inodes::InodeTable;
use crate::kernel_ids::KernelIds;
use crate::mount_metrics::{AtHand, AttrFrom};
use myriad_placement::join;
use myriad_proto::InodeId;

/// A lookup's prefetched contents count for an open only if they are this fresh and the same
/// process asks: that is the `open()` whose path walk did the lookup, so close-to-open still
/// holds (the data is as new as the start of that very call).
const PREFETCH_FRESH: Duration = Duration::from_millis(200);
const PREFETCH_MAX_ENTRIES: usize = 4096;
/// Readdir page: the server's maximum useful page (N / 1024 requests for N entries).
pub(crate) const READDIR_PAGE: u32 = 1024;

#[derive(Clone, Debug)]
pub struct FsConfig {
    pub entry_ttl: Duration,
    pub attr_ttl: Duration,
    /// How long a "no such file" answer is cached by the kernel (0: not cached).
    pub negative_ttl: Duration,
    pub writeback_cache: bool,
    /// Extended attributes on (user.* stored). Off: the mount answers ENOSYS once and the
    /// kernel stops asking, which spares `ls -l` two round trips per entry (it queries
    /// security.selinux and the POSIX ACL of every file).
    pub xattrs: bool,
    /// Changes durable before they are answered, and close waiting for durability (off:
    /// durability at fsync, docs/fuse.md "Durability"). The client is made to match.
    pub sync_close: bool,
    /// Names and attributes kept under directory leases (docs/fuse.md "Directory
    /// leases").
    pub leases: bool,
    /// Creates, writes, setattrs and unlinks inside a directory this mount holds alone
    /// answered at once and sent behind (docs/fuse.md "Write-behind"); needs `leases` and
    /// not `sync_close`.
    pub write_behind: bool,
    /// The kernel opens and closes files with no request to the mount (FUSE's
    /// zero-message opens: the mount answers its first open ENOSYS): only for a read-only
    /// mount with leases, where an open has nothing to set up and recalls keep the
    /// kernel's pages true (docs/fuse.md "Zero-message opens").
    pub zero_message_opens: bool,
}

struct Prefetched {
    at: Instant,
    /// `InodeTable::stamp` before the fetch: a change made here since makes it stale.
    since: u64,
    pid: u32,
    inode: Inode,
    data: Arc<Vec<u8>>,
}

/// One view of the mounted file system: its state, which every view shares
/// (`MountState`, reached through `Deref`), and the client acting for the caller this view
/// serves. The FUSE callbacks make a view per kernel request (`for_caller`), so whatever
/// an operation asks the servers carries the identity of the process that asked; the
/// mount's own work (timers, write-behind, lock release at close) uses the view it was
/// made with, acting for the mount's configured caller.
pub struct Mount {
    state: Arc<MountState>,
    pub client: Client,
}

impl std::ops::Deref for Mount {
    type Target = MountState;

    fn deref(&self) -> &MountState {
        &self.state
    }
}

/// What every view of a mount shares.
pub struct MountState {
    pub cfg: FsConfig,
    pub inodes: InodeTable,
    /// Kernel inode numbers to Myriad ids and back (a subdirectory mount swaps two).
    pub ids: KernelIds,
    pub handles: Handles,
    pub callers: Callers,
    pub notifier: OnceLock<Notifier>,
    /// Names the kernel keeps under leases (invalidated when they are dropped).
    pub(crate) kernel_names: crate::kernel_names::KernelNames,
    /// Kernel requests and cache answers counted (`--metrics`).
    pub(crate) metrics: crate::mount_metrics::MountMetrics,
    prefetch: Mutex<HashMap<InodeId, Prefetched>>,
    append_locks: Mutex<HashMap<InodeId, Arc<tokio::sync::Mutex<()>>>>,
    /// Files this mount wrote whole, in order: a later read-only open reads them here.
    pub written: crate::written::WrittenCopies,
}

/// How long the kernel keeps a name, its absence or its attributes while a lease covers
/// them: they are invalidated when the lease is dropped, so this only bounds what a lost
/// invalidation could cost.
pub const LEASED_TTL: Duration = Duration::from_secs(60);

/// True if a send that failed with `e` may succeed when tried again (nothing about the
/// request was refused).
fn worth_retrying(e: &FsError) -> bool {
    matches!(
        e,
        FsError::Unavailable(_)
            | FsError::TimedOut(_)
            | FsError::Busy
            | FsError::Io(_)
            | FsError::Protocol(_)
    )
}

fn name_of(name: &std::ffi::OsStr) -> Result<String, FsError> {
    let s = name
        .to_str()
        .ok_or_else(|| FsError::InvalidArgument("file names must be UTF-8".into()))?;
    myriad_proto::validate_name(s)?;
    Ok(s.to_string())
}

/// Attributes for entries that have none of their own ("." and ".." in readdirplus, a
/// negative lookup); the kernel uses only their inode number and type.
pub fn placeholder() -> Inode {
    Inode {
        ino: InodeId(0),
        kind: FileKind::File,
        mode: 0,
        uid: 0,
        gid: 0,
        size: 0,
        nlink: 1,
        atime_ns: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        symlink_target: None,
        xattrs: Vec::new(),
        link_home: None,
        rdev: 0,
    }
}

pub fn now_ns() -> i64 {
    crate::attr::nanos(SystemTime::now())
}

impl Mount {
    /// A mount whose root is the directory `top` at `path` (the whole file system: "/"
    /// and `ROOT_INO`).
    pub fn with_top(client: Client, cfg: FsConfig, path: &str, top: InodeId) -> Mount {
        let state = MountState {
            cfg,
            inodes: InodeTable::with_top(path, top),
            ids: KernelIds::with_top(top),
            handles: Handles::default(),
            callers: Callers::default(),
            notifier: OnceLock::new(),
            kernel_names: crate::kernel_names::KernelNames::default(),
            metrics: crate::mount_metrics::MountMetrics::default(),
            prefetch: Mutex::new(HashMap::new()),
            append_locks: Mutex::new(HashMap::new()),
            written: crate::written::WrittenCopies::default(),
        };
        Mount {
            state: Arc::new(state),
            client,
        }
    }

    /// A view of this mount acting for `caller` (the process of one kernel request).
    #[must_use]
    pub fn for_caller(&self, caller: Caller) -> Mount {
        Mount {
            state: self.state.clone(),
            client: self.client.for_caller(caller),
        }
    }

    pub fn path(&self, ino: InodeId) -> Result<String, FsError> {
        self.inodes.path(ino).ok_or(FsError::Stale)
    }

    pub fn child(&self, parent: InodeId, name: &std::ffi::OsStr) -> Result<String, FsError> {
        Ok(join(&self.path(parent)?, &name_of(name)?))
    }

    /// The attributes the kernel is told for `i`: its own inode number for it.
    pub fn kernel_attr(&self, i: &Inode) -> fuser::FileAttr {
        self.kernel_attr_sized(i, i.size)
    }

    /// `kernel_attr` with another size (bytes this mount wrote but has not sent yet).
    pub fn kernel_attr_sized(&self, i: &Inode, size: u64) -> fuser::FileAttr {
        let mut a = crate::attr::file_attr_sized(i, size);
        a.ino = self.ids.ino(i.ino);
        a
    }

    /// Runs `f` on the names this mount knows for `ino`, the one seen last first, until
    /// one answers other than "permission denied", "not found" or "another file now"
    /// (`Stale`, from the servers; else `f` checks the inode). The kernel names an inode,
    /// not the path it came by, and a hard-linked file's other names may lie where the
    /// caller may not search.
    pub async fn by_path<T, F, Fut>(&self, ino: InodeId, f: F) -> Result<T, FsError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, FsError>>,
    {
        // No name of this mount's still names the inode (another client removed or
        // replaced it): ESTALE, on which the kernel looks the path up again and finds
        // what it names now (an open or stat of a name cached before the change).
        let mut last = Err(FsError::Stale);
        for path in self.inodes.paths(ino) {
            match f(path).await {
                Err(e @ FsError::PermissionDenied) => last = Err(e),
                Err(FsError::NotFound | FsError::Stale) => {}
                other => return other,
            }
        }
        last
    }

    /// Attributes of the file open as `fh`, by inode (it may have no name left).
    pub async fn stat_open(&self, fh: u64) -> Result<Inode, FsError> {
        let since = self.inodes.stamp();
        let (file, _) = self.handles.snapshot(fh).ok_or(FsError::Stale)?;
        let inode = self.client.stat_open(&file).await?;
        Ok(self.answer_of(inode, since))
    }

    /// What the kernel is told of `inode`, read by a request sent at `since`: if this
    /// mount's own change (a buffered write sent meanwhile) was acknowledged after that,
    /// the attributes its acknowledgement brought, which are newer. Else a getattr racing
    /// a write's send answered the size from before it once the send had ended, and the
    /// kernel cut its file short (fsx with two mounts: fstat 0x6dc0, model 0x24483).
    fn answer_of(&self, inode: Inode, since: u64) -> Inode {
        let pending = self.pending_of(&inode);
        let inode = self.inodes.newer_than(inode.ino, since).unwrap_or(inode);
        self.visible(inode, pending)
    }

    /// Attributes of `ino` through any handle of it open here, by inode (an orphan after
    /// its last name went: the kernel's fstat does not always say which handle).
    pub async fn stat_open_ino(&self, ino: InodeId) -> Result<Inode, FsError> {
        let since = self.inodes.stamp();
        let file = match self.handles.of_ino(ino).pop() {
            Some(slot) => slot.lock().file.clone(),
            // Opened with no request (zero-message opens): no handle to name it by.
            None if self.cfg.zero_message_opens => self.orphan_handle(ino)?,
            None => return Err(FsError::Stale),
        };
        let inode = self.client.stat_open(&file).await?;
        Ok(self.answer_of(inode, since))
    }

    /// Fresh attributes of `ino`, checking its path still names it.
    pub async fn stat_ino(&self, ino: InodeId) -> Result<Inode, FsError> {
        let since = self.inodes.stamp();
        let inode = self
            .by_path(ino, |path| async move {
                let inode = self.client.stat(&path).await?;
                if inode.ino != ino {
                    return Err(FsError::NotFound);
                }
                Ok(inode)
            })
            .await?;
        self.inodes.observe_remote(&inode, since);
        Ok(self.answer_of(inode, since))
    }

    fn prefetch_lock(&self) -> std::sync::MutexGuard<'_, HashMap<InodeId, Prefetched>> {
        match self.prefetch.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Lookup: one `fetch`, which also brings a small file's contents for the open that
    /// usually follows (a cold read of a small file is then one request in all).
    pub async fn lookup(&self, pid: u32, path: &str) -> Result<Inode, FsError> {
        let since = self.inodes.stamp();
        let head = self.client.lookup_head(path, self.client.inline_max());
        let (inode, data) = match head.await {
            // A lookup needs search permission on the directories only: a file the
            // caller may not read is still found (its contents are not brought).
            Err(FsError::PermissionDenied) => (self.client.stat(path).await?, Vec::new()),
            other => other?,
        };
        Ok(self.looked_up((pid, path, since), inode, data))
    }

    /// `lookup` answered on the FUSE thread: a name, or its absence, that a lease or a
    /// loaded index answers with no request (`Client::lookup_head_now`), and the lease's
    /// mark taken before it (for the time the kernel may keep the answer). `None`: the
    /// full `lookup` (a request or a wait, or an error to sort out there).
    pub fn lookup_at_hand(
        &self,
        caller: &Caller,
        pid: u32,
        path: &str,
    ) -> Option<(Result<Inode, FsError>, Option<myriad_client::LeaseMark>)> {
        if !self.cfg.leases {
            return None;
        }
        let mark = self.client.lease_mark(myriad_placement::parent_of(path));
        let since = self.inodes.stamp();
        let client = self.client.for_caller(caller.clone());
        let r = match client.lookup_head_now(path, self.client.inline_max())? {
            Ok((inode, data)) => Ok(self.looked_up((pid, path, since), inode, data)),
            Err(FsError::NotFound) => Err(FsError::NotFound),
            Err(_) => return None,
        };
        self.metrics.at_hand(AtHand::Lookup);
        Some((r, mark))
    }

    /// What a lookup by `pid` of `path` (begun at `since`) found: its contents kept for
    /// the open that follows, its inode noted; the attributes to answer.
    fn looked_up(
        &self,
        (pid, path, since): (u32, &str, u64),
        inode: Inode,
        data: Vec<u8>,
    ) -> Inode {
        if inode.kind == FileKind::File && data.len() as u64 == inode.size {
            let mut g = self.prefetch_lock();
            if g.len() >= PREFETCH_MAX_ENTRIES {
                g.retain(|_, p| p.at.elapsed() < PREFETCH_FRESH);
                if g.len() >= PREFETCH_MAX_ENTRIES {
                    g.clear();
                }
            }
            g.insert(
                inode.ino,
                Prefetched {
                    at: Instant::now(),
                    since,
                    pid,
                    inode: inode.clone(),
                    data: Arc::new(data),
                },
            );
        }
        self.inodes.add(path, &inode, since);
        self.answer_of(inode, since)
    }

    /// A change through this mount makes prefetched contents of `ino` stale, and its copy
    /// of what it wrote (`written`, but for the writes that extend it: `send`).
    pub(crate) fn drop_prefetched(&self, ino: InodeId) {
        self.prefetch_lock().remove(&ino);
        self.written.drop_ino(ino);
    }

    /// The contents a lookup by `pid` just brought, unless this mount wrote the file
    /// since (or holds writes to it not yet acknowledged): a read must see every write
    /// made before it. Nor if attributes seen since (a getattr's, which the kernel then
    /// holds) say the file changed: answered from older contents, a read comes back short
    /// of the size the kernel holds, and the kernel takes the short read as the file's
    /// new end (the read-only mount of `it::zero_open` once read a just-written file as
    /// empty).
    fn take_prefetched(&self, ino: InodeId, pid: u32) -> Option<(Inode, Arc<Vec<u8>>, u64)> {
        let p = self.prefetch_lock().remove(&ino)?;
        let current = p.pid == pid
            && p.at.elapsed() < PREFETCH_FRESH
            && !self.inodes.touched_since(ino, p.since)
            && !self.handles.has_unsent(ino)
            && self.inodes.seen(ino) == Some((p.inode.size, p.inode.mtime_ns));
        current.then_some((p.inode, p.data, p.since))
    }

    /// After an operation on entries of directories `parents` through this view: the
    /// servers changed their times and link counts. The attributes they sent back (with
    /// the view's last change, `Client::take_parent_attrs`) replace the cached ones (the
    /// kernel asks for them at once, to check the next access); without those, the
    /// cached ones are no longer answered.
    pub fn entries_changed<T>(&self, r: &Result<T, FsError>, parents: &[InodeId]) {
        if r.is_err() {
            return;
        }
        for &p in parents {
            let fresh = self
                .inodes
                .path(p)
                .and_then(|dir| self.client.take_parent_attrs(&dir))
                .filter(|i| i.ino == p);
            tracing::trace!(target: "myriad_fuse::io", parent = p.0, told = fresh.is_some(), "entries changed");
            match fresh {
                Some(i) => self.inodes.observe_own(&i),
                None => self.inodes.expire(p),
            }
        }
    }

    /// How long the kernel may keep the name `path` and its attributes (entry, attr):
    /// the configured TTLs; with leases, no longer than the lease on its directory lasts,
    /// and not at all without one, so that another client's change is seen at once (a
    /// recall invalidates what the kernel was given under the lease). The root has no
    /// directory to lease: the configured TTLs.
    pub fn ttls(&self, path: &str) -> (Duration, Duration) {
        if path == "/" {
            return (self.cfg.entry_ttl, self.cfg.attr_ttl);
        }
        let (dir, name) = myriad_placement::split_parent(path);
        let ttls = self.children_ttls(dir);
        if self.cfg.leases && !ttls.0.is_zero() {
            // Dropped from the kernel with the lease (before its short TTL ends).
            self.kernel_names
                .note(dir, name, crate::kernel_names::Kept::Short);
        }
        ttls
    }

    /// How long the kernel may keep what this mount read about `path` after `mark` (its
    /// directory's lease mark, read before the request): while a lease covers the answer
    /// and nothing dropped it since, until the lease is dropped (the name is noted here,
    /// and a drop invalidates it in the kernel: `kernel_names.rs`), which renewals put
    /// off for as long as the directory is used. `None`: not covered (`ttls` then).
    pub fn leased_ttl(
        &self,
        path: &str,
        mark: Option<myriad_client::LeaseMark>,
        is_dir: bool,
    ) -> Option<Duration> {
        // A directory's entry is told for no longer than its lease lasts now (`ttls`):
        // dropping it later would drop the kernel's whole subtree below it.
        if is_dir || !self.client.lease_covers(path, mark) {
            return None;
        }
        let (dir, name) = myriad_placement::split_parent(path);
        self.kernel_names
            .note(dir, name, crate::kernel_names::Kept::Long);
        // Again once noted: a drop in between may have taken the notes without this one.
        self.client.lease_covers(path, mark).then_some(LEASED_TTL)
    }

    /// `ttls` of every name in directory `dir`.
    pub fn children_ttls(&self, dir: &str) -> (Duration, Duration) {
        let (entry, attr) = (self.cfg.entry_ttl, self.cfg.attr_ttl);
        if !self.cfg.leases {
            return (entry, attr);
        }
        let left = self
            .client
            .lease_until(dir)
            .map_or(Duration::ZERO, |until| {
                until.saturating_duration_since(tokio::time::Instant::now())
            });
        (entry.min(left), attr.min(left))
    }

    /// `ttls` of the name this mount last saw `ino` under.
    pub fn ttls_of(&self, ino: InodeId) -> (Duration, Duration) {
        match self.inodes.path(ino) {
            Some(p) => self.ttls(&p),
            None if self.cfg.leases => (Duration::ZERO, Duration::ZERO),
            None => (self.cfg.entry_ttl, self.cfg.attr_ttl),
        }
    }

    /// Attributes of `ino` getattr answers on the kernel's thread, with no request: kept
    /// under a lease (for as long as it lasts), or seen by this mount within the TTL (a
    /// directory's after this mount's own change in it, above all). With their TTL.
    pub fn attr_at_hand(&self, ino: InodeId, caller: &Caller) -> Option<(Duration, Inode)> {
        let ttl = self.ttls_of(ino).1;
        // Before the cached attributes: `pending` says why.
        let pending = self.pending(ino);
        if self.cfg.leases
            && let Some(path) = self.inodes.path(ino)
        {
            let mark = self.client.lease_mark(myriad_placement::parent_of(&path));
            // A directory's attributes for no longer than its lease lasts now (`ttl`), as
            // a getattr that asks the client answers them.
            if let Some(i) = self.client.cached_attr(&path, caller)
                && i.ino == ino
                && let Some(ttl) = match self.leased_ttl(&path, mark, i.kind == FileKind::Directory)
                {
                    None if i.kind == FileKind::Directory && !ttl.is_zero() => Some(ttl),
                    leased => leased,
                }
            {
                self.metrics.attr_from(AttrFrom::Lease);
                tracing::trace!(target: "myriad_fuse::io", ino = ino.0, size = i.size, nlink = i.nlink, path, "getattr from a lease");
                return Some((ttl, self.visible(i, pending)));
            }
        }
        let i = self.inodes.fresh(ino, ttl)?;
        self.metrics.attr_from(AttrFrom::Cache);
        let i = self.visible(i, pending);
        tracing::trace!(target: "myriad_fuse::io", ino = ino.0, size = i.size, nlink = i.nlink, mtime = i.mtime_ns, "getattr from the cache");
        Some((ttl, i))
    }

    /// The end of this mount's unacknowledged writes to `ino`, read before the attributes
    /// it bounds. The order matters: a send clears its end only after its acknowledgement
    /// updated every cache (`observe_own`, the lease's attributes). Read after the
    /// attributes, it could miss a send that ended in between, and the size from before
    /// it would reach the kernel, which then cuts the file short (fsx seed 5 with two
    /// mounts: fstat after a write past a truncation answered the truncated size).
    pub fn pending(&self, ino: InodeId) -> Pending {
        Pending(self.handles.pending_end(ino))
    }

    /// `pending` of `inode`, known to be read before the attributes it is set against: a
    /// file's only (no other kind has writes in flight; readdirplus asks for every entry,
    /// and each ask looks through every open handle).
    pub fn pending_of(&self, inode: &Inode) -> Pending {
        if inode.kind == FileKind::File {
            self.pending(inode.ino)
        } else {
            Pending(None)
        }
    }

    /// Attributes as the kernel must see them: at least as long as the writes `pending`
    /// (read before `inode` was) still had in flight.
    pub fn visible(&self, mut inode: Inode, pending: Pending) -> Inode {
        inode.size = Self::visible_size(&inode, pending);
        inode
    }

    /// The size the kernel must see for `inode` (no copy of the inode: readdirplus calls
    /// this for every entry).
    pub fn visible_size(inode: &Inode, pending: Pending) -> u64 {
        match pending.0 {
            Some(end) if inode.kind == FileKind::File => inode.size.max(end),
            _ => inode.size,
        }
    }
}

/// The end of a file's unacknowledged writes at one moment (`Mount::pending`).
#[derive(Clone, Copy, Debug)]
pub struct Pending(Option<u64>);

pub(crate) mod capacity;
mod entries;
mod file_io;
pub(crate) mod quota_xattrs;
mod unopened;

#[cfg(test)]
mod tests;
