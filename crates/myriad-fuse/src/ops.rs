//! What each FUSE operation does, as async functions over the native client. The trait
//! impl in `fs.rs` only unpacks arguments, spawns these on the runtime and replies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use fuser::Notifier;
use myriad_client::{Client, FileHandle};
use myriad_proto::{Caller, FileKind, FsError, Inode, RenameFlags, SetAttr, XattrMode};

use crate::caller::Callers;
use crate::handles::{DirListing, Dirty, Handles, OpenFile, Slot, WRITE_BUFFER_MAX};
use crate::inodes::InodeTable;
use crate::kernel_ids::KernelIds;
use myriad_placement::join;
use myriad_proto::InodeId;
use myriad_proto::access as perm;

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
}

struct Prefetched {
    at: Instant,
    /// `InodeTable::stamp` before the fetch: a change made here since makes it stale.
    since: u64,
    pid: u32,
    inode: Inode,
    data: Arc<Vec<u8>>,
}

pub struct Inner {
    pub client: Client,
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
            | FsError::Redirect(_)
            | FsError::MapTooOld(_)
            | FsError::WrongShard { .. }
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

impl Inner {
    /// A mount whose root is the directory `top` at `path` (the whole file system: "/"
    /// and `ROOT_INO`).
    pub fn with_top(client: Client, cfg: FsConfig, path: &str, top: InodeId) -> Inner {
        Inner {
            client,
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
    /// one answers other than "permission denied" or "not found" (or "not there any
    /// more": `f` checks the inode). The kernel names an inode, not the path it came by,
    /// and a hard-linked file's other names may lie where the caller may not search.
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
                Err(FsError::NotFound) => {}
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
        let inode = self.inodes.newer_than(inode.ino, since).unwrap_or(inode);
        self.visible(inode)
    }

    /// Attributes of `ino` through any handle of it open here, by inode (an orphan after
    /// its last name went: the kernel's fstat does not always say which handle).
    pub async fn stat_open_ino(&self, ino: InodeId) -> Result<Inode, FsError> {
        let since = self.inodes.stamp();
        let slot = self.handles.of_ino(ino).pop().ok_or(FsError::Stale)?;
        let file = slot.lock().file.clone();
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
        let (inode, data) = match Client::in_known_directory(head).await {
            // A lookup needs search permission on the directories only: a file the
            // caller may not read is still found (its contents are not brought).
            Err(FsError::PermissionDenied) => (self.client.stat(path).await?, Vec::new()),
            other => other?,
        };
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
        Ok(self.visible(inode))
    }

    /// A change through this mount makes prefetched contents of `ino` stale.
    pub(crate) fn drop_prefetched(&self, ino: InodeId) {
        self.prefetch_lock().remove(&ino);
    }

    /// The contents a lookup by `pid` just brought, unless this mount wrote the file
    /// since (or holds writes to it not yet acknowledged): a read must see every write
    /// made before it.
    fn take_prefetched(&self, ino: InodeId, pid: u32) -> Option<(Inode, Arc<Vec<u8>>, u64)> {
        let p = self.prefetch_lock().remove(&ino)?;
        let current = p.pid == pid
            && p.at.elapsed() < PREFETCH_FRESH
            && !self.inodes.touched_since(ino, p.since)
            && !self.handles.has_unsent(ino);
        current.then_some((p.inode, p.data, p.since))
    }

    /// Opens a file: fresh attributes (close-to-open), and for a read-only open of a small
    /// file its whole contents, in one request. Returns the handle id and whether the
    /// kernel's cached pages are still valid.
    pub async fn open(
        &self,
        caller: &Caller,
        pid: u32,
        ino: InodeId,
        want: u32,
        append: bool,
    ) -> Result<(u64, bool), FsError> {
        // Writes buffered by other handles here are part of what this open must see.
        self.flush_ino(ino).await?;
        let read_only = want == perm::READ;
        let since = self.inodes.stamp();
        let (path, inode, contents, since) = match self.take_prefetched(ino, pid) {
            Some((i, d, at)) if read_only => (self.path(ino)?, i, Some(d), at),
            _ => {
                self.by_path(ino, |path| async move {
                    if read_only {
                        let (i, d) = self
                            .client
                            .fetch_head(&path, self.client.inline_max())
                            .await?;
                        if i.ino != ino {
                            return Err(FsError::NotFound);
                        }
                        let whole = d.len() as u64 == i.size;
                        Ok((path, i, whole.then(|| Arc::new(d)), since))
                    } else {
                        // EROFS here, at open, in a frozen tree.
                        let i = self.client.stat_to_write(&path).await?;
                        if i.ino != ino {
                            return Err(FsError::NotFound);
                        }
                        Ok((path, i, None, since))
                    }
                })
                .await?
            }
        };
        self.finish_open(
            caller,
            ino,
            want,
            append,
            FileHandle {
                path,
                inode,
                opened: want & perm::WRITE != 0,
            },
            (contents, since),
        )
    }

    /// The open of a small file whose lookup, by the same process just now, brought its
    /// contents: no request and no task (answered on the FUSE thread). `None`: take the
    /// full path.
    pub fn open_prefetched(
        &self,
        caller: &Caller,
        pid: u32,
        ino: InodeId,
        want: u32,
    ) -> Option<Result<(u64, bool), FsError>> {
        if want != perm::READ || self.handles.has_unsent(ino) {
            return None;
        }
        let (inode, data, since) = self.take_prefetched(ino, pid)?;
        let path = self.path(ino).ok()?;
        Some(self.finish_open(
            caller,
            ino,
            want,
            false,
            FileHandle {
                path,
                inode,
                opened: false,
            },
            (Some(data), since),
        ))
    }

    fn finish_open(
        &self,
        caller: &Caller,
        ino: InodeId,
        want: u32,
        append: bool,
        file: FileHandle,
        (contents, since): (Option<Arc<Vec<u8>>>, u64),
    ) -> Result<(u64, bool), FsError> {
        let read_only = want == perm::READ;
        // Contents read before a write of this mount was acknowledged, or while one is
        // unsent, would hide that write from every read of the handle.
        let contents = contents
            .filter(|_| !self.inodes.changed_since(ino, since) && !self.handles.has_unsent(ino));
        let inode = &file.inode;
        if inode.ino != ino {
            return Err(FsError::NotFound);
        }
        match inode.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(FsError::IsADirectory),
            _ => return Err(FsError::InvalidArgument("not a regular file".into())),
        }
        if !perm::allowed(inode, caller, want) {
            tracing::debug!(?inode, ?caller, want, "open refused");
            return Err(FsError::PermissionDenied);
        }
        let changed = self.inodes.open_check(inode, since);
        if changed {
            // Another client changed the file since this kernel cached it: drop its pages
            // and attributes before the open returns.
            if let Some(n) = self.notifier.get() {
                let _ = n.inval_inode(self.ids.ino(ino), 0, 0);
            }
        }
        let mut f = OpenFile::new(
            file,
            caller.clone(),
            if read_only { contents } else { None },
        );
        f.append = append;
        let fh = self.handles.open(f);
        Ok((fh, !changed))
    }

    /// A read the handle's fetched contents cannot answer (`fs.rs` serves those).
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let (file, _) = self.handles.snapshot(fh).ok_or(FsError::Stale)?;
        self.flush_ino(file.inode.ino).await?;
        // Taken again after the flush: what it sent changed the size the handle knows,
        // and a read past chunk 0 ends there (a short read would shrink the kernel's size).
        let (file, _) = self.handles.snapshot(fh).ok_or(FsError::Stale)?;
        self.client.read(&file, offset, u64::from(size)).await
    }

    /// Sends what `slot` holds unsent. Callers hold its io lock. If the send fails in a way
    /// a retry may cure (the servers unreachable, a failover, a timeout), the bytes stay
    /// buffered: the next flush, fsync or close sends them again (rewriting the same bytes
    /// at the same offset is harmless if the first attempt did land). Only a final refusal
    /// (no space, no permission, the file gone), or an append whose fate is unknown (sent
    /// twice it would land twice), drops them; the error then goes to the writer.
    async fn send_dirty(&self, slot: &Slot) -> Result<(), FsError> {
        let (file, dirty, append, opener) = {
            let mut g = slot.lock();
            let d = g.dirty.take();
            g.sending_end = d.as_ref().map(|d| d.offset + d.data.len() as u64);
            (g.file.clone(), d, g.append, g.opener.clone())
        };
        let uid = opener.uid;
        let r = Client::as_caller(
            opener,
            self.send(slot, file.clone(), dirty.as_ref(), append),
        )
        .await;
        let mut g = slot.lock();
        g.sending_end = None;
        if let Err(e) = &r {
            let kept = !append && worth_retrying(e);
            tracing::warn!(
                path = %file.path,
                kept,
                uid,
                "sending buffered writes failed: {e}"
            );
            // Nothing else fills the buffer while the io lock is held.
            if kept && g.dirty.is_none() {
                g.dirty = dirty;
            }
        }
        r
    }

    async fn send(
        &self,
        slot: &Slot,
        file: FileHandle,
        dirty: Option<&Dirty>,
        append: bool,
    ) -> Result<(), FsError> {
        if let Some(d) = dirty {
            // Appends of this mount to one file go one at a time: each reads the end the
            // servers know and writes there.
            let lock = if append {
                Some(self.append_lock(file.inode.ino))
            } else {
                None
            };
            let _serial = match &lock {
                Some(l) => Some(l.lock().await),
                None => None,
            };
            let offset = if append {
                let now = self.client.stat(&file.path).await?;
                if now.ino != file.inode.ino {
                    return Err(FsError::Stale);
                }
                now.size
            } else {
                d.offset
            };
            let inode = self.client.write(&file, offset, &d.data).await?;
            tracing::trace!(target: "myriad_fuse::io", ino = inode.ino.0, offset, len = d.data.len(), size = inode.size, "buffered write sent");
            self.drop_prefetched(inode.ino);
            slot.lock().unsynced = false;
            self.handles.written(&inode);
            self.inodes.observe_own(&inode);
            if append && offset != d.offset {
                // The kernel cached the bytes where it thought the end was.
                if let Some(n) = self.notifier.get() {
                    let _ = n.inval_inode(self.ids.ino(file.inode.ino), 0, 0);
                }
            }
        }
        Ok(())
    }

    /// Sends every write buffered by this mount for `ino` (before an operation that must
    /// see them). If a send fails, the operation fails too: acting on the servers' state
    /// without bytes a writer was told were written would read, copy or truncate the wrong
    /// data (the fsx exerciser caught a mapped read returning the bytes from before a
    /// write). Bytes a retry may still deliver stay buffered (`send_dirty`); bytes dropped
    /// for good leave their error on the writer's handle as well, for its next write,
    /// fsync or close.
    pub async fn flush_ino(&self, ino: InodeId) -> Result<(), FsError> {
        for slot in self.handles.of_ino(ino) {
            let _io = slot.io.lock().await;
            if let Err(e) = self.send_dirty(&slot).await {
                let mut g = slot.lock();
                if g.dirty.is_none() {
                    g.error = Some(e.clone());
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn append_lock(&self, ino: InodeId) -> Arc<tokio::sync::Mutex<()>> {
        let mut g = match self.append_locks.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.len() > 1024 {
            g.retain(|_, l| Arc::strong_count(l) > 1);
        }
        g.entry(ino).or_default().clone()
    }

    /// fsync: every write of this mount to the file is durable, not only this handle's;
    /// without `sync_close`, every change this mount had answered once applied too (the
    /// mount does not track which partitions hold which file's changes: a barrier on each
    /// partition with unsynced changes, a few dozen at most).
    pub async fn fsync(&self, fh: u64) -> Result<(), FsError> {
        let ino = self.handles.snapshot(fh).map(|(f, _)| f.inode.ino);
        if let Some(ino) = ino {
            self.flush_ino(ino).await?;
        }
        self.flush(fh).await?;
        let synced = self.sync_changes().await;
        // A change of this file answered behind and refused when applied.
        if let Some(e) = ino.and_then(|i| self.client.take_behind_error(i)) {
            return Err(e);
        }
        synced
    }

    /// fsyncdir, syncfs-like callers and unmount: every change of this mount durable.
    pub async fn sync_changes(&self) -> Result<(), FsError> {
        if self.cfg.sync_close {
            return Ok(());
        }
        self.client.sync_changes().await
    }

    /// Whether a flush of `fh` has nothing to do (answered on the FUSE thread).
    pub fn flush_is_noop(&self, fh: u64) -> bool {
        let sync_close = self.cfg.sync_close;
        self.handles.file(fh).is_none_or(|s| {
            let g = s.lock();
            g.dirty.is_none()
                && !(sync_close && g.unsynced)
                && !self.client.has_behind_error(g.file.inode.ino)
        })
    }

    /// Closes `fh` at once if its release has nothing to send or remove.
    pub fn release_if_trivial(&self, fh: u64) -> bool {
        let sync_close = self.cfg.sync_close;
        self.handles
            .close_if(fh, |f| f.dirty.is_none() && !(sync_close && f.unsynced))
    }

    /// flush (every close) and fsync: the handle's writes are durable when this returns.
    pub async fn flush(&self, fh: u64) -> Result<(), FsError> {
        let Some(slot) = self.handles.file(fh) else {
            return Ok(());
        };
        let _io = slot.io.lock().await;
        self.make_durable(&slot).await
    }

    /// Sends buffered writes; with `sync_close`, then, if the file's create was not
    /// durable and no write has covered it since, a barrier to its node. (Without it the
    /// bytes are applied, durable within a moment, and `fsync` vouches for them.) Callers
    /// hold the io lock.
    async fn make_durable(&self, slot: &Slot) -> Result<(), FsError> {
        if let Some(e) = slot.lock().error.take() {
            return Err(e);
        }
        self.send_dirty(slot).await?;
        let ino = slot.lock().file.inode.ino;
        if let Some(e) = self.client.take_behind_error(ino) {
            return Err(e);
        }
        if !self.cfg.sync_close {
            return Ok(());
        }
        let (unsynced, file) = {
            let g = slot.lock();
            (g.unsynced, g.file.clone())
        };
        if unsynced {
            self.client.sync(&file).await?;
            slot.lock().unsynced = false;
        }
        Ok(())
    }

    pub async fn write(&self, fh: u64, offset: u64, data: Vec<u8>) -> Result<(), FsError> {
        let slot = self.handles.file(fh).ok_or(FsError::Stale)?;
        let _io = slot.io.lock().await;
        if let Some(e) = slot.lock().error.take() {
            return Err(e);
        }
        let (ino, kills_setid) = {
            let g = slot.lock();
            let i = &g.file.inode;
            (
                i.ino,
                myriad_proto::access::setid_bits_killed(i, &g.opener) != 0,
            )
        };
        // Cached whole-file contents of any handle would hide this write.
        self.handles.drop_contents(ino);
        {
            let mut g = slot.lock();
            let append = g.append;
            if let Some(d) = &mut g.dirty
                && (append || d.offset + d.data.len() as u64 == offset)
                && d.data.len() + data.len() <= WRITE_BUFFER_MAX
                && !kills_setid
            {
                d.data.extend_from_slice(&data);
                return Ok(());
            }
        }
        self.send_dirty(&slot).await?;
        slot.lock().dirty = Some(Dirty { offset, data });
        if kills_setid {
            // A write by someone who is not the owner (or root) takes set-id bits off at
            // once (Linux, `setid_bits_killed`): sent now, so that the servers take them
            // off and an fstat right after the write sees the mode without them.
            self.send_dirty(&slot).await?;
        }
        Ok(())
    }

    /// Last close of a handle: unsent writes go out (their error is the close's). (A
    /// file unlinked while open is an orphan on the servers, kept while open anywhere:
    /// nothing to remove here.)
    pub async fn release(&self, fh: u64) -> Result<(), FsError> {
        let Some(slot) = self.handles.file(fh) else {
            return Ok(());
        };
        // Sent while the handle is still listed: until the servers have the bytes, reads
        // and opens of the file must find them (and wait for them) here.
        let _io = slot.io.lock().await;
        let sent = self.make_durable(&slot).await;
        self.handles.close(fh);
        sent
    }

    /// After an operation on entries of directories `parents`: the servers changed their
    /// times and link counts. The attributes they sent back replace the cached ones (the
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

    /// Attributes as the kernel must see them: with this mount's unsent writes.
    pub fn visible(&self, mut inode: Inode) -> Inode {
        inode.size = self.visible_size(&inode);
        inode
    }

    /// The size the kernel must see for `inode` (no copy of the inode: readdirplus calls
    /// this for every entry).
    pub fn visible_size(&self, inode: &Inode) -> u64 {
        if inode.kind == FileKind::File {
            self.handles.size_with_pending(inode.ino, inode.size)
        } else {
            inode.size
        }
    }

    pub async fn create(
        &self,
        caller: &Caller,
        path: &str,
        mode: u32,
        exclusive: bool,
        truncate: bool,
        append: bool,
    ) -> Result<(Inode, u64), FsError> {
        // Not durable yet: the write or barrier at close makes it so (one fsync wait per
        // new file instead of two). Exclusivity is still decided by the server now.
        let since = self.inodes.stamp();
        let mut h = self
            .client
            .create_with(path, mode & 0o7777, exclusive, &[], false)
            .await?;
        let ino = h.inode.ino;
        if truncate && (h.inode.size > 0 || self.handles.has_unsent(ino)) {
            // Writes this mount made before the open are older than its truncation.
            self.flush_ino(ino).await?;
            h.inode = self.client.truncate(&h, 0).await?;
            self.drop_prefetched(ino);
            self.handles.written(&h.inode);
            self.inodes.observe_own(&h.inode);
        }
        let inode = h.inode.clone();
        self.inodes.add(path, &inode, since);
        let mut f = OpenFile::new(h, caller.clone(), None);
        f.append = append;
        f.unsynced = true;
        let fh = self.handles.open(f);
        Ok((inode, fh))
    }

    pub async fn setattr(
        &self,
        caller: &Caller,
        ino: InodeId,
        fh: Option<u64>,
        size: Option<u64>,
        set: SetAttr,
        ctime: bool,
    ) -> Result<Inode, FsError> {
        let mut inode = None;
        let set = if set == SetAttr::default() && size.is_none() && ctime {
            self.change_of_nothing(caller, ino).await?
        } else {
            set
        };
        self.flush_ino(ino).await?;
        if let Some(size) = size {
            let file = match fh.and_then(|fh| self.handles.snapshot(fh)) {
                Some((f, _)) => f,
                None => {
                    self.by_path(ino, |path| async move {
                        let f = self.client.open(&path).await?;
                        if f.inode.ino != ino {
                            return Err(FsError::NotFound);
                        }
                        Ok(f)
                    })
                    .await?
                }
            };
            if file.inode.ino != ino {
                return Err(FsError::NotFound);
            }
            let i = self.client.truncate(&file, size).await?;
            tracing::trace!(target: "myriad_fuse::io", ino = i.ino.0, size, "truncated");
            self.drop_prefetched(i.ino);
            self.handles.written(&i);
            inode = Some(i);
        }
        // A change of nothing but ctime (chown(f, -1, -1)) still stamps ctime, as POSIX.
        if set != SetAttr::default() || (ctime && size.is_none()) {
            let i = self
                .by_path(ino, |path| {
                    let set = set.clone();
                    async move {
                        let i = self.client.setattr(&path, set).await?;
                        if i.ino != ino {
                            return Err(FsError::NotFound);
                        }
                        Ok(i)
                    }
                })
                .await?;
            inode = Some(i);
        }
        let inode = match inode {
            Some(i) => i,
            None => self.stat_ino(ino).await?,
        };
        self.inodes.observe_own(&inode);
        Ok(inode)
    }

    /// What a setattr that names no attribute means. The kernel sends one before a write
    /// that must take set-id bits away (the servers do that at the write itself: only
    /// ctime here), and for chown(f, -1, -1), which takes them away as any chown does:
    /// then it is a chown to the current owner, which the servers refuse to anyone but
    /// the owner and root (EPERM, as Linux), and otherwise it stamps ctime.
    async fn change_of_nothing(&self, caller: &Caller, ino: InodeId) -> Result<SetAttr, FsError> {
        if self.handles.has_writable(ino) {
            return Ok(SetAttr::default());
        }
        let inode = self.stat_ino(ino).await?;
        if perm::mode_after_chown(&inode, caller) == inode.mode & 0o7777 {
            return Ok(SetAttr::default());
        }
        Ok(SetAttr {
            uid: Some(inode.uid),
            ..SetAttr::default()
        })
    }

    /// Unlink. A file still open here stays usable through its descriptors: the servers
    /// keep it as an orphan while this mount keeps it open (`KeepOpen`), and its handles
    /// reach it by inode (docs/fuse.md "Open files unlinked"); no hidden name is left in
    /// the directory, which stays removable.
    pub async fn unlink(&self, path: &str) -> Result<(), FsError> {
        self.client.unlink(path).await?;
        self.inodes.unlinked(path);
        Ok(())
    }

    pub async fn rename(&self, from: &str, to: &str, flags: RenameFlags) -> Result<(), FsError> {
        // One step on the servers, a directory over an empty one included.
        self.client.rename(from, to, flags).await?;
        if flags.exchange {
            self.handles.exchanged(from, to);
            self.inodes.exchanged(from, to);
        } else {
            self.handles.renamed(from, to);
            self.inodes.renamed(from, to);
        }
        Ok(())
    }

    pub async fn mknod(&self, path: &str, mode: u32, rdev: u64) -> Result<Inode, FsError> {
        let perms = mode & 0o7777;
        let since = self.inodes.stamp();
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => {
                let inode = self.client.create(path, perms, true, &[]).await?.inode;
                self.inodes.add(path, &inode, since);
                return Ok(inode);
            }
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => return Err(FsError::InvalidArgument("unknown file type".into())),
        };
        let rdev = if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            rdev
        } else {
            0
        };
        let inode = self.client.mknod(path, kind, perms, rdev).await?;
        self.inodes.add(path, &inode, since);
        Ok(inode)
    }

    /// Makes sure the listing holds entry `index` (or is complete).
    pub async fn fill_listing(&self, d: &mut DirListing, index: usize) -> Result<(), FsError> {
        while !d.done && d.entries.len() <= index {
            let after = d.entries.last().map(|e| e.name.clone());
            let (page, next) = self
                .client
                .readdir_page(&d.path, after, READDIR_PAGE)
                .await?;
            d.done = next.is_none();
            d.entries.extend(page);
        }
        Ok(())
    }

    pub async fn opendir(&self, ino: InodeId) -> Result<u64, FsError> {
        let path = self.path(ino)?;
        let mut d = DirListing {
            mark: self.client.lease_mark(&path),
            path,
            since: self.inodes.stamp(),
            entries: Vec::new(),
            done: false,
        };
        // The first page now, so a permission error comes from opendir as locally.
        self.fill_listing(&mut d, 0).await?;
        Ok(self.handles.open_dir(d))
    }

    pub async fn get_xattr(
        &self,
        caller: &Caller,
        ino: InodeId,
        name: &str,
    ) -> Result<Vec<u8>, FsError> {
        let inode = self.stat_ino(ino).await?;
        if !perm::allowed(&inode, caller, perm::READ) {
            return Err(FsError::PermissionDenied);
        }
        inode
            .xattrs
            .into_iter()
            .find(|x| x.name == name)
            .map(|x| x.value)
            .ok_or(FsError::NoData)
    }

    pub async fn list_xattr(&self, caller: &Caller, ino: InodeId) -> Result<Vec<u8>, FsError> {
        let inode = self.stat_ino(ino).await?;
        if !perm::allowed(&inode, caller, perm::READ) {
            return Err(FsError::PermissionDenied);
        }
        let mut out = Vec::new();
        for x in inode.xattrs {
            out.extend_from_slice(x.name.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    pub async fn set_xattr(
        &self,
        ino: InodeId,
        name: &str,
        value: Option<&[u8]>,
        flags: i32,
    ) -> Result<(), FsError> {
        let path = self.path(ino)?;
        let mode = if flags & libc::XATTR_CREATE != 0 {
            XattrMode::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrMode::Replace
        } else {
            XattrMode::Either
        };
        let inode = self.client.set_xattr(&path, name, value, mode).await?;
        self.inodes.observe_own(&inode);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
