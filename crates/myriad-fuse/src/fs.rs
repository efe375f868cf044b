//! The `fuser::Filesystem` implementation. FUSE threads never wait on the network: each
//! method unpacks its arguments, spawns the operation (`mount.rs`) on the tokio runtime with
//! the caller's identity, and the task sends the reply.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, PollEvents,
    PollFlags, PollNotifier, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen,
    ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use myriad_proto::{FsError, SetAttr};

use crate::attr::{errno, file_type};
use crate::handles::NO_HANDLE;
use crate::mount::Mount;
use crate::mount::capacity::BLOCK;
use crate::mount::quota_xattrs::is_quota_xattr;
use crate::mount_metrics::KernelOp;
use myriad_proto::access as perm;

/// Largest write the kernel sends in one request (it needs `max_pages`): 1 MiB keeps a big
/// sequential write at few requests while each stays far below the 4 MiB I/O limit.
const MAX_WRITE: u32 = 1024 * 1024;

pub struct MyriadFs {
    pub inner: Arc<Mount>,
    pub rt: tokio::runtime::Handle,
}

impl Filesystem for MyriadFs {
    fn destroy(&mut self) {
        // Unmount: every change of this mount durable before the process goes (the kernel
        // passes neither sync(2) nor syncfs(2) to a FUSE file system: the servers make
        // changes durable within a moment anyway; this vouches for them).
        if let Err(e) = self.rt.block_on(self.inner.sync_changes()) {
            tracing::error!("at unmount, some changes could not be confirmed durable: {e}");
        }
        // Others need not wait for this mount's locks and leases to expire.
        self.rt.block_on(self.inner.client.release_all_locks());
        self.rt.block_on(self.inner.client.release_leases());
        let used = self.inner.client.index_stats();
        if used.loads > 0 {
            tracing::info!(
                answers = used.hits,
                loads = used.loads,
                "metadata indexes answered this mount's requests"
            );
        }
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // readdirplus always: entries carry their inodes, so attributes cost nothing extra.
        // The servers take set-id bits off on writes, truncates and chowns, with Linux's
        // whole rule (the kernel's own FUSE fallback knows only part of it).
        let mut want = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_HANDLE_KILLPRIV
            // fcntl and flock locks go to the servers, so mounts see each other's.
            | InitFlags::FUSE_POSIX_LOCKS
            // The kernel keeps a symlink's target in the inode's page cache: a target never
            // changes (a symlink "changed" is a new one, a new inode the kernel asks again),
            // so each symlink is read once, not at every readlink or path walk through it.
            | InitFlags::FUSE_CACHE_SYMLINKS;
        if self.inner.cfg.zero_message_opens {
            // No open revalidates a file's pages: a size or mtime the kernel learns from
            // a lookup or getattr that differs from its own drops them. And no release
            // says when a flock goes (fcntl locks go at each close, which still comes):
            // flocks stay in this kernel.
            want |= InitFlags::FUSE_AUTO_INVAL_DATA;
        } else {
            want |= InitFlags::FUSE_FLOCK_LOCKS;
        }
        if self.inner.cfg.writeback_cache {
            // The kernel then keeps its own size and times of every regular file and takes
            // none from the servers (docs/fuse.md, "The kernel's writeback cache").
            tracing::warn!(
                "--writeback-cache: files other mounts or clients change may show their old \
                 size here; use it only for a mount that is its files' only client"
            );
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let have = config.capabilities();
        let _ = config.add_capabilities(want & have);
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Lookup);
        let path = match self.inner.child(ids.id(parent), name) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        let pid = req.pid();
        if let Some((r, mark)) = self.inner.lookup_at_hand(&self.caller(req), pid, &path) {
            return reply_lookup(&self.inner, &path, mark, r, reply);
        }
        self.spawn(req, move |fs, _| async move {
            let mark = fs.client.lease_mark(myriad_placement::parent_of(&path));
            let r = fs.lookup(pid, &path).await;
            reply_lookup(&fs, &path, mark, r, reply);
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Forget);
        self.inner.inodes.forget(ids.id(ino), nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.getattr_of(req, ino, fh, reply);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Setattr);
        // Both times "now" is the touch POSIX allows every writer (utimensat(UTIME_NOW,
        // UTIME_NOW), utime(NULL)); the server stamps it with its own clock.
        let touch = matches!((atime, mtime), (Some(TimeOrNow::Now), Some(TimeOrNow::Now)));
        let set = if touch {
            SetAttr {
                mode: mode.map(|m| m & 0o7777),
                uid,
                gid,
                touch: true,
                ..SetAttr::default()
            }
        } else {
            SetAttr {
                mode: mode.map(|m| m & 0o7777),
                uid,
                gid,
                atime_ns: time_ns(atime),
                mtime_ns: time_ns(mtime),
                ..SetAttr::default()
            }
        };
        // The kernel sends a setattr of nothing for chown(f, -1, -1): a change all the
        // same, whose only effect is ctime (it passes ctime itself only with writeback).
        let nothing = mode.is_none()
            && uid.is_none()
            && gid.is_none()
            && size.is_none()
            && atime.is_none()
            && mtime.is_none();
        let bump_ctime = ctime.is_some() || nothing;
        self.spawn_here(req, move |fs, caller| async move {
            match fs
                .setattr(&caller, ids.id(ino), fh.map(|f| f.0), size, set, bump_ctime)
                .await
            {
                Ok(i) => reply.attr(&fs.ttls_of(ids.id(ino)).1, &fs.kernel_attr(&i)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Readlink);
        self.spawn(req, move |fs, _| async move {
            let r = fs
                .by_path(ids.id(ino), |path| {
                    let fs = fs.clone();
                    async move { fs.client.readlink(&path).await }
                })
                .await;
            match r {
                Ok(t) => reply.data(t.as_bytes()),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Mknod);
        let path = match self.inner.child(ids.id(parent), name) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        self.spawn(req, move |fs, _| async move {
            let r = fs
                .mknod(&path, mode, crate::attr::dev_from_kernel(rdev))
                .await;
            fs.entries_changed(&r, &[ids.id(parent)]);
            reply_entry(&fs, &path, r, reply);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Mkdir);
        let path = match self.inner.child(ids.id(parent), name) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        self.spawn_here(req, move |fs, _| async move {
            let since = fs.inodes.stamp();
            let r = fs.client.mkdir(&path, mode & 0o7777).await;
            if let Ok(i) = &r {
                fs.inodes.add(&path, i, since);
            }
            fs.entries_changed(&r, &[ids.id(parent)]);
            if r.is_ok() && fs.cfg.leases {
                // A new directory is usually filled next (tar, cp -r, git checkout): its
                // listing under a lease, whole while it is empty, answers the lookups of
                // the names about to be created without a request each; asked exclusive,
                // so that what this mount creates there is answered at once and sent
                // behind (docs/fuse.md "Write-behind"). Before the reply: the creates
                // follow at once, and a listing crossing one of them is not kept.
                let page = (None, crate::mount::READDIR_PAGE);
                let filling = myriad_client::ListFor::Filling;
                let _ = fs.client.readdir_page_for(&path, page, filling).await;
            }
            reply_entry(&fs, &path, r, reply);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Unlink);
        let path = match self.inner.child(ids.id(parent), name) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        self.spawn_here(req, move |fs, _| async move {
            let r = fs.unlink(&path).await;
            fs.entries_changed(&r, &[ids.id(parent)]);
            reply_empty(r, reply);
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Rmdir);
        let path = match self.inner.child(ids.id(parent), name) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        self.spawn_here(req, move |fs, _| async move {
            crate::recall::forget_subtree(&fs, &path);
            let r = fs.client.rmdir(&path).await;
            fs.entries_changed(&r, &[ids.id(parent)]);
            reply_empty(r, reply);
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Symlink);
        let path = match self.inner.child(ids.id(parent), link_name) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        let Some(target) = target.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        self.spawn(req, move |fs, _| async move {
            let since = fs.inodes.stamp();
            let r = fs.client.symlink(&target, &path).await;
            if let Ok(i) = &r {
                fs.inodes.add(&path, i, since);
            }
            fs.entries_changed(&r, &[ids.id(parent)]);
            reply_entry(&fs, &path, r, reply);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Rename);
        let paths = self
            .inner
            .child(ids.id(parent), name)
            .and_then(|f| Ok((f, self.inner.child(ids.id(newparent), newname)?)));
        let (from, to) = match paths {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            // Overlay file systems' business; not supported (documented in docs/fuse.md).
            return reply.error(Errno::EINVAL);
        }
        let flags = myriad_proto::RenameFlags {
            no_replace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        self.spawn(req, move |fs, _| async move {
            // Either may be a directory whose names the kernel keeps under leases.
            crate::recall::forget_subtree(&fs, &from);
            crate::recall::forget_subtree(&fs, &to);
            let r = fs.rename(&from, &to, flags).await;
            fs.entries_changed(&r, &[ids.id(parent), ids.id(newparent)]);
            reply_empty(r, reply);
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Link);
        let to = match self.inner.child(ids.id(newparent), newname) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        self.spawn(req, move |fs, _| async move {
            let since = fs.inodes.stamp();
            // Of the file's names, one the caller may reach (nsx seed 5 step 7079).
            let r = fs
                .by_path(ids.id(ino), |from| {
                    let (fs, to) = (fs.clone(), to.clone());
                    async move { fs.client.link(&from, &to).await }
                })
                .await;
            if let Ok(i) = &r {
                fs.inodes.add(&to, i, since);
                fs.inodes.expire(i.ino); // its link count and ctime, under every name
            }
            fs.entries_changed(&r, &[ids.id(newparent)]);
            reply_entry(&fs, &to, r, reply);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Open);
        if self.inner.cfg.zero_message_opens {
            // The kernel takes ENOSYS as "open without asking" and sends no open, and no
            // release, again on this mount: reads come with no handle (`NO_HANDLE`).
            return reply.error(Errno::ENOSYS);
        }
        let pid = req.pid();
        let want = want_of(flags);
        // With the writeback cache the kernel places appends itself (it refreshes the size
        // first) and writes whole pages back: its offsets are the truth.
        let append = flags.0 & libc::O_APPEND != 0 && !self.inner.cfg.writeback_cache;
        let reply_file = move |r: Result<(u64, bool), FsError>, reply: ReplyOpen| {
            reply_open(r.map(|(fh, keep)| (fh, file_flags(keep, want))), reply);
        };
        let caller = self.caller(req);
        if let Some(r) = self.inner.open_prefetched(&caller, pid, ids.id(ino), want) {
            return reply_file(r, reply);
        }
        if let Some(r) = self.inner.open_held(&caller, ids.id(ino), want) {
            return reply_file(r, reply);
        }
        self.spawn(req, move |fs, caller| async move {
            reply_file(
                fs.open(&caller, pid, ids.id(ino), want, append).await,
                reply,
            );
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.inner.metrics.kernel(KernelOp::Read);
        if fh.0 == NO_HANDLE {
            return self.read_unopened(req, ino, offset, size, reply);
        }
        // Served from the handle without a task when the open brought the whole file.
        if let Some((_, Some(c))) = self.inner.handles.snapshot(fh.0) {
            let got = crate::handles::part(&c, offset, size);
            tracing::trace!(target: "myriad_fuse::io", fh = fh.0, offset, size, got = got.len(), "read from the open's contents");
            return reply.data(got);
        }
        tracing::trace!(target: "myriad_fuse::io", fh = fh.0, offset, size, uid = req.uid(), pid = req.pid(), "read asked");
        self.spawn(req, move |fs, _| async move {
            match fs.read(fh.0, offset, size).await {
                Ok(d) => {
                    tracing::trace!(target: "myriad_fuse::io", fh = fh.0, offset, got = d.len(), "read answered");
                    reply.data(&d)
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.inner.metrics.kernel(KernelOp::Write);
        let data = data.to_vec();
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
        tracing::trace!(target: "myriad_fuse::io", fh = fh.0, offset, len = n, uid = req.uid(), pid = req.pid(), "write asked");
        self.spawn_here(req, move |fs, _| async move {
            match fs.write(fh.0, offset, data).await {
                Ok(()) => reply.written(n),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Flush);
        // Every close: the closing process's POSIX locks on the file go (the kernel leaves
        // that to us), and buffered writes become durable before close returns.
        let locks = self.inner.holds_locks(ids.id(ino), lock_owner.0);
        if !locks && self.inner.flush_is_noop(fh.0) {
            return reply.ok();
        }
        self.spawn_here(req, move |fs, _| async move {
            if locks {
                fs.release_locks(ids.id(ino), lock_owner.0).await;
            }
            reply_empty(fs.flush(fh.0).await, reply);
        });
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Release);
        // The last close of a file with a flock: the flock goes.
        if let Some(owner) = lock_owner
            && self.inner.holds_locks(ids.id(ino), owner.0)
        {
            let inner = self.inner.clone();
            self.rt.spawn(async move {
                inner.release_locks(ids.id(ino), owner.0).await;
            });
        }
        if self.inner.release_if_trivial(fh.0) {
            return reply.ok();
        }
        self.spawn_here(req, move |fs, _| async move {
            reply_empty(fs.release(fh.0).await, reply);
        });
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Getlk);
        self.spawn(req, move |fs, _| async move {
            match fs.getlk(ids.id(ino), lock_owner.0, start, end, typ).await {
                Ok((start, end, typ, pid)) => reply.locked(start, end, typ, pid),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Setlk);
        let tid = req.pid();
        self.spawn(req, move |fs, _| async move {
            match fs
                .setlk(ids.id(ino), lock_owner.0, start, end, typ, pid, sleep, tid)
                .await
            {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn fsync(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.inner.metrics.kernel(KernelOp::Fsync);
        // Servers acknowledge a write only once it is fsynced: sending what is buffered is
        // all an fsync needs.
        self.spawn(req, move |fs, _| async move {
            reply_empty(fs.fsync(fh.0).await, reply);
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Opendir);
        if let Some(opened) = self.inner.opendir_at_hand(&self.caller(req), ids.id(ino)) {
            return reply_open(Ok(opened), reply);
        }
        self.spawn_here(req, move |fs, _| async move {
            reply_open(fs.opendir(ids.id(ino)).await, reply)
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Readdir);
        self.spawn_here(req, move |fs, _| async move {
            let Some(d) = fs.handles.dir(fh.0) else {
                return reply.error(Errno::EBADF);
            };
            let mut d = d.lock().await;
            let r = walk(&fs, &mut d, offset, |next, entry| match entry {
                Dot(name) => reply.add(ino, next, FileType::Directory, name),
                Named(e) => reply.add(ids.ino(e.inode.ino), next, file_type(e.inode.kind), &e.name),
            })
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Readdirplus);
        // A page the lease holds is listed here, with no task (`spawn_here`).
        self.spawn_here(req, move |fs, _| {
            list_plus(fs, ids, (ino, fh, offset), reply)
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.inner.metrics.kernel(KernelOp::Releasedir);
        self.inner.handles.close_dir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.inner.metrics.kernel(KernelOp::Fsyncdir);
        // A directory's entries and times are changes like any other: durable at its fsync.
        self.spawn(req, move |fs, _| async move {
            reply_empty(fs.sync_changes().await, reply);
        });
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Statfs);
        self.spawn(req, move |fs, _| async move {
            match fs.capacity(ids.id(ino)).await {
                Ok(c) => {
                    let (b, n) = (BLOCK as u32, 255);
                    reply.statfs(
                        c.blocks,
                        c.free_blocks,
                        c.free_blocks,
                        c.files,
                        c.free_files,
                        b,
                        n,
                        b,
                    );
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Setxattr);
        if !self.inner.cfg.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        let value = value.to_vec();
        self.spawn(req, move |fs, caller| async move {
            let done = if is_quota_xattr(&name) {
                fs.set_quota_xattr(&caller, ids.id(ino), &name, Some(&value))
                    .await
            } else {
                fs.set_xattr(ids.id(ino), &name, Some(&value), flags).await
            };
            reply_empty(done, reply);
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Getxattr);
        if !self.inner.cfg.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        if !name.starts_with("user.") && !is_quota_xattr(&name) {
            // Only user.* is stored: ACL and security-label lookups (ls, cp) are answered
            // here without a request.
            return reply.error(Errno::from_i32(libc::ENODATA));
        }
        self.spawn(req, move |fs, caller| async move {
            let got = if is_quota_xattr(&name) {
                fs.get_quota_xattr(ids.id(ino), &name).await
            } else {
                fs.get_xattr(&caller, ids.id(ino), &name).await
            };
            match got {
                Ok(v) => reply_xattr(&v, size, reply),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Listxattr);
        if !self.inner.cfg.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        self.spawn(req, move |fs, caller| async move {
            match fs.list_xattr(&caller, ids.id(ino)).await {
                Ok(v) => reply_xattr(&v, size, reply),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Removexattr);
        if !self.inner.cfg.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        self.spawn(req, move |fs, caller| async move {
            let done = if is_quota_xattr(&name) {
                fs.set_quota_xattr(&caller, ids.id(ino), &name, None).await
            } else {
                fs.set_xattr(ids.id(ino), &name, None, 0).await
            };
            reply_empty(done, reply);
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Access);
        let want = u32::try_from(mask.bits()).unwrap_or(0) & 7;
        self.spawn(req, move |fs, caller| async move {
            let r = fs.stat_ino(ids.id(ino)).await.and_then(|i| {
                if perm::allowed(&i, &caller, want) {
                    Ok(())
                } else {
                    Err(FsError::PermissionDenied)
                }
            });
            reply_empty(r, reply);
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.inner.metrics.kernel(KernelOp::Fallocate);
        self.spawn(req, move |fs, _| async move {
            reply_empty(
                fs.fallocate(fh.0, offset, length, mode).await.map(|_| ()),
                reply,
            );
        });
    }

    fn copy_file_range(
        &self,
        req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.inner.metrics.kernel(KernelOp::CopyFileRange);
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        self.spawn(req, move |fs, _| async move {
            let r = fs
                .copy_range((fh_in.0, offset_in), (fh_out.0, offset_out), len)
                .await;
            match r {
                Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.inner.metrics.kernel(KernelOp::Lseek);
        let ids = self.inner.ids;
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return reply.error(Errno::EINVAL);
        }
        self.spawn(req, move |fs, _| async move {
            match fs.seek_data_hole((fh.0, ids.id(ino)), offset, whence).await {
                Ok(o) => reply.offset(o),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.inner.metrics.kernel(KernelOp::Ioctl);
        // No file-system-specific ioctls (attribute flags, reflinks, fiemap): the answer
        // every file system gives for an ioctl it does not have.
        reply.error(Errno::ENOTTY);
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: PollNotifier,
        _events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        self.inner.metrics.kernel(KernelOp::Poll);
        // A regular file is always ready, as on a local file system.
        reply.poll(
            PollEvents::POLLIN
                | PollEvents::POLLOUT
                | PollEvents::POLLRDNORM
                | PollEvents::POLLWRNORM,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let ids = self.inner.ids;
        self.inner.metrics.kernel(KernelOp::Create);
        let path = match self.inner.child(ids.id(parent), name) {
            Ok(p) => p,
            Err(e) => return reply.error(errno(&e)),
        };
        let exclusive = flags & libc::O_EXCL != 0;
        let truncate = flags & libc::O_TRUNC != 0;
        let append = flags & libc::O_APPEND != 0 && !self.inner.cfg.writeback_cache;
        self.spawn_here(req, move |fs, caller| async move {
            let mark = fs.client.lease_mark(myriad_placement::parent_of(&path));
            let r = fs
                .create(&caller, &path, mode, exclusive, truncate, append)
                .await;
            fs.entries_changed(&r, &[ids.id(parent)]);
            let ttl = fs
                .leased_ttl(&path, mark, false)
                .unwrap_or_else(|| fs.ttls(&path).0);
            match r {
                Ok((i, fh)) => reply.created(
                    &ttl,
                    &fs.kernel_attr(&i),
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }
}

mod attrs;
mod listing;
mod replies;
mod spawning;
mod unopened;

use listing::{
    Listed::{Dot, Named},
    list_plus, walk,
};
use replies::{
    file_flags, reply_empty, reply_entry, reply_lookup, reply_open, reply_xattr, time_ns, want_of,
};
