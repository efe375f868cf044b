//! The mount's file data: opens (with what a lookup prefetched), reads, writes buffered
//! per open file and sent on flush, fsync and release, and the durability a close or an
//! fsync promises (docs/fuse.md "Durability").

use crate::handles::{Dirty, OpenFile, Slot, WRITE_BUFFER_MAX};
use myriad_client::FileHandle;
use myriad_proto::InodeId;
use myriad_proto::access as perm;
use myriad_proto::{Caller, FileKind, FsError};
use std::sync::Arc;

use super::{Mount, worth_retrying};

impl Mount {
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
                        let (path, i, d) = self.fetch_head_of(path, ino).await?;
                        let whole = d.len() as u64 == i.size;
                        let contents = whole.then(|| Arc::new(d)).or_else(|| self.written.of(&i));
                        Ok((path, i, contents, since))
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
        Some(self.finish_read_open(caller, (path, inode), (Some(data), since)))
    }

    /// The read-only open of a file this mount holds now: a loaded index or a valid
    /// lease answers `fetch_head` with no request, so the open is answered on the FUSE
    /// thread as the full path would answer it (a second reader of a file, an import
    /// storm's later processes). `None`: take the full path.
    pub fn open_held(
        &self,
        caller: &Caller,
        ino: InodeId,
        want: u32,
    ) -> Option<Result<(u64, bool), FsError>> {
        if want != perm::READ || self.handles.has_unsent(ino) {
            return None;
        }
        let path = self.path(ino).ok()?;
        let since = self.inodes.stamp();
        let (inode, data) = self
            .client
            .for_caller(caller.clone())
            .fetch_head_now(&path, self.client.inline_max())?
            .ok()?;
        if inode.ino != ino {
            return None;
        }
        let whole = data.len() as u64 == inode.size;
        let contents = whole
            .then(|| Arc::new(data))
            .or_else(|| self.written.of(&inode));
        Some(self.finish_read_open(caller, (path, inode), (contents, since)))
    }

    /// `finish_open` of a read-only open answered on the FUSE thread.
    fn finish_read_open(
        &self,
        caller: &Caller,
        (path, inode): (String, myriad_proto::Inode),
        contents: (Option<Arc<Vec<u8>>>, u64),
    ) -> Result<(u64, bool), FsError> {
        let ino = inode.ino;
        let file = FileHandle {
            path,
            inode,
            opened: false,
        };
        self.finish_open(caller, ino, perm::READ, false, file, contents)
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
        // As the file's opener, whoever made the flush happen (another process's read,
        // a write-back of mapped pages).
        let r = self
            .for_caller(opener)
            .send(slot, file.clone(), dirty.as_ref(), append)
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
            // A copy of the file is kept only from sends one at a time, and none past a
            // send that failed (its bytes may have landed in part).
            let ino = file.inode.ino;
            self.written.begin(ino);
            let inode = match self.client.write(&file, offset, &d.data).await {
                Ok(i) => i,
                Err(e) => {
                    self.written.drop_ino(ino);
                    self.written.end(ino);
                    return Err(e);
                }
            };
            tracing::trace!(target: "myriad_fuse::io", ino = inode.ino.0, offset, len = d.data.len(), size = inode.size, "buffered write sent");
            self.prefetch_lock().remove(&inode.ino);
            slot.lock().unsynced = false;
            self.handles.written(&inode);
            self.inodes.observe_own(&inode);
            if append && offset != d.offset {
                self.written.drop_ino(inode.ino);
            } else {
                self.written
                    .wrote(offset, &d.data, &inode, self.client.inline_max());
            }
            self.written.end(ino);
            if let Some(n) = self.notifier.get() {
                // The kernel may have taken the file's attributes while these bytes were
                // only buffered here (an fstat after the write), without this write's
                // times: it asks again. After an append it also cached the bytes where it
                // thought the end was.
                let pages = if append && offset != d.offset { 0 } else { -1 };
                let _ = n.inval_inode(self.ids.ino(file.inode.ino), pages, 0);
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
}
