//! The mount's changes of names and attributes: create, setattr (with what a change of
//! nothing still checks), unlink, rename, mknod, directory listings and opens, extended
//! attributes.

use crate::handles::{DirListing, OpenFile};
use crate::kernel_names::{Kept, LISTING};
use fuser::FopenFlags;
use myriad_proto::InodeId;
use myriad_proto::access as perm;
use myriad_proto::{Caller, FileKind, FsError, Inode, RenameFlags, SetAttr, XattrMode};

use super::{Mount, READDIR_PAGE};

impl Mount {
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
            // Refused by the servers if the name now holds another file (`SetAttr::of`).
            let set = SetAttr {
                of: Some(ino),
                ..set
            };
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

    /// Opens directory `ino` for listing: the handle, and the flags of the open. A
    /// directory this mount holds whole under a lease for the caller is opened with
    /// `FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE`: the kernel keeps its listing and lists it
    /// again with no request until the lease is dropped (docs/fuse.md "Listings the
    /// kernel keeps"). Any other open drops what the kernel kept.
    pub async fn opendir(&self, ino: InodeId) -> Result<(u64, FopenFlags), FsError> {
        let path = self.path(ino)?;
        let mut d = DirListing {
            mark: self.client.lease_mark(&path),
            path,
            since: self.inodes.stamp(),
            entries: Vec::new(),
            done: false,
        };
        // The first page now, so a permission error comes from opendir as locally (the
        // kernel checked the mode already: `default_permissions`), unless the listing
        // would wait for this mount's changes answered behind to reach the servers: then
        // the first READDIR lists it. `find` and `du` open "." and never list it; after a
        // `tar -x` that open waited for the whole tree to reach the servers.
        if !self.client.listing_waits(&d.path) {
            self.fill_listing(&mut d, 0).await?;
        }
        let flags = if self.listing_kept(&self.client, &d.path, d.mark) {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        };
        Ok((self.handles.open_dir(d), flags))
    }

    /// `opendir` answered on the FUSE thread (no task, no page listed): a directory this
    /// mount holds whole under a lease for `caller`, whose listing the kernel keeps
    /// (`listing_kept`). The caller listed it whole under that lease, which ends before
    /// any change to its names or to its own mode or owner, so the open cannot fail now,
    /// and a READDIR (the kernel's copy dropped meanwhile) lists pages then, as always.
    /// `None`: the full `opendir`. (`du` of 361 directories: one task hand-off each.)
    pub fn opendir_at_hand(&self, caller: &Caller, ino: InodeId) -> Option<(u64, FopenFlags)> {
        if !self.cfg.leases {
            return None;
        }
        let path = self.path(ino).ok()?;
        let client = self.client.for_caller(caller.clone());
        let mark = client.lease_mark(&path);
        if !self.listing_kept(&client, &path, mark) {
            return None;
        }
        let d = DirListing {
            mark,
            path,
            since: self.inodes.stamp(),
            entries: Vec::new(),
            done: false,
        };
        let flags = FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE;
        self.metrics.at_hand(crate::mount_metrics::AtHand::Opendir);
        Some((self.handles.open_dir(d), flags))
    }

    /// Whether the kernel may keep `dir`'s listing, answered since `mark`: while a lease
    /// covers it whole, noted so that the lease's drop takes it from the kernel
    /// (`recall.rs`). Checked again once noted: a drop in between may have taken the
    /// notes without this one.
    /// `client` acts for the caller the listing is for.
    fn listing_kept(
        &self,
        client: &myriad_client::Client,
        dir: &str,
        mark: Option<myriad_client::LeaseMark>,
    ) -> bool {
        if !self.cfg.leases || !client.listing_covered(dir, mark) {
            return false;
        }
        self.kernel_names.note(dir, LISTING, Kept::Long);
        client.listing_covered(dir, mark)
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
