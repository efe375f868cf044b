//! The client's one-call file-system API: attributes, names made, removed and moved,
//! links and extended attributes. Each call builds its request and sends it through the
//! request loop (`client.rs`), answering from a lease or an index first where it may.

use myriad_proto::{
    ClientRequest, FileKind, FsError, Inode, RenameFlags, SetAttr, XattrMode, limits, validate_path,
};

use myriad_proto::ask;
use myriad_proto::reply::{Ask, Reply};

use super::{Client, Parents};

impl Client {
    pub async fn stat(&self, path: &str) -> Result<Inode, FsError> {
        if let Some(r) = self.indexed(path, false).await {
            return r.map(|i| i.inode);
        }
        self.stat_servers(path).await
    }

    /// `stat` as the servers (or a lease) answer it, no index.
    pub(crate) async fn stat_servers(&self, path: &str) -> Result<Inode, FsError> {
        self.read_entry(path, ask::stat(path), (0, Parents::Checked))
            .await
    }

    /// A read of one name, as the servers (or a lease) answer it: under a lease with
    /// leases on (bringing up to `max_bytes` of a small file's contents with it), else
    /// from the nearest copy allowed, else from the name's partition.
    async fn read_entry<R: Reply>(
        &self,
        path: &str,
        ask: Ask<R>,
        (max_bytes, parents): (u64, Parents),
    ) -> Result<R, FsError> {
        let answer = if self.config.leases {
            self.leased_entry(path, ask.request, max_bytes, parents)
                .await?
        } else if let Some(r) = self.entry_nearest(path, &ask.request, parents).await {
            r?
        } else {
            let req = myriad_proto::Request::from(ask.request);
            self.entry_op_under(path, req, parents).await?
        };
        ask.answer.of(answer)
    }

    /// Attributes of many names in one directory, in one round trip per 4096 names.
    pub async fn stat_many(
        &self,
        dir: &str,
        names: &[String],
    ) -> Result<Vec<Result<Inode, FsError>>, FsError> {
        validate_path(dir)?;
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(limits::STAT_MANY_MAX) {
            out.extend(self.stat_many_sharded(dir, chunk).await?);
        }
        Ok(out)
    }

    /// Attributes of any node plus, for a regular file, its first `max_bytes` bytes: always
    /// exactly one request (a FUSE lookup or open of a small file is served by this).
    /// Answered from a metadata index with no request: then the contents come only if
    /// the index holds them (a file bigger than its inline limit, or not readable by
    /// everyone, comes with none: its reader reads them, as `fetch` does).
    pub async fn fetch_head(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Result<(Inode, Vec<u8>), FsError> {
        if let Some(r) = self.indexed(path, true).await {
            self.count_answer(&self.answered_by_index);
            return r?.head(max_bytes);
        }
        self.fetch_head_servers(path, max_bytes).await
    }

    /// `fetch_head` as the servers (or a lease) answer it, no index.
    pub(crate) async fn fetch_head_servers(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Result<(Inode, Vec<u8>), FsError> {
        self.fetch_head_under(path, max_bytes, Parents::Checked)
            .await
    }

    /// `fetch_head_servers`, knowing what `parents` says of the path's parents.
    async fn fetch_head_under(
        &self,
        path: &str,
        max_bytes: u64,
        parents: Parents,
    ) -> Result<(Inode, Vec<u8>), FsError> {
        let fetch = ask::fetch(path, max_bytes);
        let f = self.read_entry(path, fetch, (max_bytes, parents)).await?;
        Ok((f.inode, f.data))
    }

    /// What a lookup needs: the entry's attributes, with up to `max_bytes` of its contents
    /// when they come at no cost. A name a lease holds is answered from it even without
    /// its contents (a listing keeps attributes only): the contents are asked for by
    /// whoever reads them (an open for reading fetches them then), so this costs no more
    /// requests than `fetch_head`, and a lookup before an unlink or a stat none at all.
    /// A lookup is of a name in a directory (the kernel's): a name not found is `NotFound`
    /// with no request to tell it from `NotADirectory`.
    pub async fn lookup_head(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Result<(Inode, Vec<u8>), FsError> {
        if let Some(r) = self.indexed(path, true).await {
            self.count_answer(&self.answered_by_index);
            return r.map(|i| i.looked_up(max_bytes));
        }
        if let Some(r) = self.lease_lookup(path, max_bytes) {
            return r;
        }
        // The index was asked above; the kernel looks names up in directories only.
        self.fetch_head_under(path, max_bytes, Parents::Directories)
            .await
    }

    /// Attributes and contents of a file in one round trip to one node when it fits in chunk
    /// 0 (every inline file does); bigger files continue with chunk reads.
    pub async fn fetch(&self, path: &str) -> Result<(Inode, Vec<u8>), FsError> {
        // Ask for up to a whole chunk: any file of up to 4 MiB comes back in this one request
        // (inline files always do).
        let max_bytes = self.st().map.chunk_size_bytes.min(limits::IO_BYTES_MAX);
        let (inode, mut data) = self.fetch_head(path, max_bytes).await?;
        if inode.kind == FileKind::Directory {
            return Err(FsError::IsADirectory);
        }
        if inode.kind == FileKind::File && (data.len() as u64) < inode.size {
            let handle = crate::FileHandle {
                path: path.to_string(),
                inode: inode.clone(),
                opened: false,
            };
            let rest = self
                .read(&handle, data.len() as u64, inode.size - data.len() as u64)
                .await?;
            data.extend_from_slice(&rest);
        }
        Ok((inode, data))
    }

    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<Inode, FsError> {
        validate_path(path)?;
        if let Some(r) = self.mkdir_behind(path, mode) {
            return r;
        }
        self.entry_ask(path, ask::mkdir(path, mode, 1)).await
    }

    /// Creates `path` and any missing ancestors; existing directories are fine. Each
    /// directory is looked up before it is made: a mkdir of an existing name is still a
    /// change attempt at its parent, which recalls every other client's lease there (for
    /// "/", every client's way to every path) for nothing.
    pub async fn mkdir_p(&self, path: &str, mode: u32) -> Result<(), FsError> {
        validate_path(path)?;
        if path == "/" {
            return Ok(());
        }
        match self.stat(path).await {
            Ok(i) if i.kind == FileKind::Directory => return Ok(()),
            Ok(_) => return Err(FsError::NotADirectory),
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let mut cur = String::new();
        // Below the first missing directory every one is missing: no lookup needed.
        let mut missing = false;
        for name in path[1..].split('/') {
            cur.push('/');
            cur.push_str(name);
            if !missing {
                match self.stat(&cur).await {
                    Ok(i) if i.kind == FileKind::Directory => continue,
                    Ok(_) => return Err(FsError::NotADirectory),
                    Err(FsError::NotFound) => missing = true,
                    Err(e) => return Err(e),
                }
            }
            match self.mkdir(&cur, mode).await {
                Ok(_) => {}
                Err(FsError::AlreadyExists) => {
                    if self.stat(&cur).await?.kind != FileKind::Directory {
                        return Err(FsError::NotADirectory);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub async fn rmdir(&self, path: &str) -> Result<(), FsError> {
        if let Some(r) = self.rmdir_behind(path) {
            return r;
        }
        // Answered behind once both the parent and the directory are held: an `rm -rf`
        // claimed the directory with its first unlink there, but not an empty one.
        if path != "/" {
            let (parent, own) = tokio::join!(
                self.claim_for_change(path),
                self.claim_dir(path, self.entry_partition(&format!("{path}/")))
            );
            if (parent || own)
                && let Some(r) = self.rmdir_behind(path)
            {
                return r;
            }
        }
        self.entry_op(
            path,
            myriad_proto::Request::from(ClientRequest::Rmdir {
                path: path.to_string(),
            }),
        )
        .await
        .map(|_| ())
    }

    pub async fn unlink(&self, path: &str) -> Result<(), FsError> {
        if let Some(r) = self.unlink_behind(path) {
            return r;
        }
        if self.claim_for_change(path).await
            && let Some(r) = self.unlink_behind(path)
        {
            return r;
        }
        self.entry_op(
            path,
            myriad_proto::Request::from(ClientRequest::Unlink {
                path: path.to_string(),
            }),
        )
        .await
        .map(|_| ())
    }

    pub async fn symlink(&self, target: &str, path: &str) -> Result<Inode, FsError> {
        self.entry_ask(path, ask::symlink(path, target)).await
    }

    /// Gives the regular file at `from` a second name `to` (a hard link); returns its inode
    /// with the new link count.
    pub async fn link(&self, from: &str, to: &str) -> Result<Inode, FsError> {
        validate_path(to)?;
        self.entry_ask(from, ask::link(from, to)).await
    }

    /// Creates a FIFO, socket or (as root) device node: metadata only; `rdev` names the
    /// device of a `CharDevice` or `BlockDevice` and is 0 otherwise.
    pub async fn mknod(
        &self,
        path: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Inode, FsError> {
        self.entry_ask(path, ask::mknod(path, kind, mode, rdev))
            .await
    }

    /// Sets (`Some`) or removes (`None`) a `user.` extended attribute. Reading them needs no
    /// call of its own: they come with the inode (`stat`, `readdir`, `fetch`).
    pub async fn set_xattr(
        &self,
        path: &str,
        name: &str,
        value: Option<&[u8]>,
        mode: XattrMode,
    ) -> Result<Inode, FsError> {
        self.entry_ask(path, ask::set_xattr(path, name, value, mode))
            .await
    }

    pub async fn readlink(&self, path: &str) -> Result<String, FsError> {
        if let Some(r) = self.indexed(path, false).await {
            // Not a link: the servers say how it is refused.
            if let Some(t) = r?.inode.symlink_target {
                return Ok(t);
            }
        }
        Ok(self.entry_ask(path, ask::readlink(path)).await?.0)
    }

    pub async fn setattr(&self, path: &str, set: SetAttr) -> Result<Inode, FsError> {
        if let Some(r) = self.setattr_behind(path, &set) {
            return r;
        }
        let access = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        // A directory's own attributes: what changes in it (and below it) answered behind
        // were answered by (a file's path names no directory lease: no cost).
        let _paused = access.then(|| self.leases.pause_behind(path));
        let inode = self.entry_ask(path, ask::set_attr(path, set)).await?;
        // A directory's own attributes: what its exclusive lease answers creates by
        // (nsx seed 1 step 531: a set-group-id bit taken away still gave new files the
        // directory's group).
        if access && inode.kind == FileKind::Directory {
            self.leases.refresh_exclusive(path, &inode);
        }
        Ok(inode)
    }

    pub async fn chmod(&self, path: &str, mode: u32) -> Result<Inode, FsError> {
        self.setattr(
            path,
            SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            },
        )
        .await
    }

    pub async fn chown(
        &self,
        path: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Inode, FsError> {
        self.setattr(
            path,
            SetAttr {
                uid,
                gid,
                ..SetAttr::default()
            },
        )
        .await
    }

    pub async fn utimens(
        &self,
        path: &str,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
    ) -> Result<Inode, FsError> {
        self.setattr(
            path,
            SetAttr {
                atime_ns,
                mtime_ns,
                ..SetAttr::default()
            },
        )
        .await
    }

    pub async fn rename(&self, from: &str, to: &str, flags: RenameFlags) -> Result<(), FsError> {
        validate_path(to)?;
        self.entry_op(
            from,
            myriad_proto::Request::from(ClientRequest::Rename {
                from: from.to_string(),
                to: to.to_string(),
                flags,
            }),
        )
        .await
        .map(|_| ())
    }
}
