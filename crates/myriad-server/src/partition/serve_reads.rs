//! A partition's answers to client requests that only read: attributes, contents,
//! directory pages, link targets. Routed here by `client_ops::serve_client`.

use std::sync::Arc;

use myriad_proto::{
    Caller, FileKind, HotDir, Inode, InodeId, InodeOp, PeerRequest, Request, Response, WireError,
    limits, validate_path,
};

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::state::mutation::storage_err;
use crate::state::perm;

/// Reads of a file's first chunk tried again because its entry changed while its bytes
/// were read (`still_holds`), before the client is told `Busy` and tries again itself.
const READ_TRIES: usize = 4;

impl Partition {
    /// The entry a request names, as its caller may see it: the path valid and owned here,
    /// search permission on every ancestor, then the entry itself (a hard link's name, not
    /// yet resolved at its home).
    pub(super) async fn named_entry(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: &Caller,
        path: &str,
    ) -> Result<myriad_proto::Inode, WireError> {
        validate_path(path)?;
        self.own_entry(st, path)?;
        self.search(caller, path).await?;
        self.lookup(path).await
    }

    /// The attributes of a file about to be opened for writing (refused in a frozen tree).
    pub(super) async fn client_open_write(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
    ) -> Result<Response, WireError> {
        let i = self.named_entry(st, &caller, &path).await?;
        // The file itself first: a missing one is NotFound wherever it would be.
        self.require_not_frozen(myriad_placement::parent_of(&path))?;
        Ok(Response::Attr(self.resolve(i).await?))
    }

    /// A name's attributes (a hard link's at its home).
    pub(super) async fn client_stat(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
    ) -> Result<Response, WireError> {
        let i = self.named_entry(st, &caller, &path).await?;
        Ok(Response::Attr(self.resolve(i).await?))
    }

    /// The attributes of several names of one directory shard, each answered on its own.
    pub(super) async fn client_stat_many(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        dir: String,
        names: Vec<String>,
    ) -> Result<Response, WireError> {
        validate_path(&dir)?;
        if names.len() > limits::STAT_MANY_MAX {
            return Err(WireError::InvalidArgument(format!(
                "at most {} names per stat_many",
                limits::STAT_MANY_MAX
            )));
        }
        self.own_dir_part(st, &dir)?;
        self.access_dir(&caller, &dir, perm::EXEC).await?;
        let rec = self.store.dir(&dir).map_err(storage_err)?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let r = match myriad_proto::validate_name(&name) {
                Ok(()) => match &rec {
                    // Another shard's name: the sender asks that shard's node.
                    Some(rec) if rec.shard_for(myriad_placement::name_hash(&name)).is_none() => {
                        Err(crate::state::mutation::wrong_shard(&dir, rec))
                    }
                    _ => match self.lookup_in(&dir, &name).await {
                        Ok(i) => self.resolve(i).await,
                        Err(e) => Err(e),
                    },
                },
                Err(e) => Err(e.into()),
            };
            out.push(r);
        }
        Ok(Response::Attrs(out))
    }

    /// A file's attributes and its first chunk's bytes in one answer (small files on open).
    pub(super) async fn client_fetch(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
        max_bytes: u64,
    ) -> Result<Response, WireError> {
        let cs = st.map.chunk_size_bytes;
        for _ in 0..READ_TRIES {
            let inode = self.named_entry(st, &caller, &path).await?;
            if let (FileKind::HardLink, Some(home)) = (inode.kind, inode.link_home) {
                let req = PeerRequest::AtInode {
                    ino: inode.ino,
                    caller,
                    op: InodeOp::Fetch { max_bytes },
                };
                return self.call_node(home, Request::Peer(req)).await;
            }
            if inode.kind != FileKind::File {
                return Ok(Response::Fetched {
                    inode,
                    data: Vec::new(),
                });
            }
            perm::require(&inode, &caller, perm::READ)?;
            let n = max_bytes.min(cs).min(limits::IO_BYTES_MAX);
            let (data, whole) = self
                .read_range_whole(inode.ino, 0, n, inode.size.min(cs))
                .await?;
            if whole || self.still_holds(&path, &inode)? {
                return Ok(Response::Fetched { inode, data });
            }
        }
        Err(WireError::Busy)
    }

    /// Whether `path` still names `inode` here, or, its name gone, the orphan it left is
    /// still `inode`. A read takes the entry and then its bytes, two reads of the store: a
    /// change applied between them (an unlink, a truncate, the drop of a moved tree's old
    /// copy) pairs the size read first with the blocks left after, the right length of
    /// zeros (seen once in `zone_moves`: a reader got a whole file of zeros while its tree
    /// moved). Checked after the bytes are read, the pair is one the store held. Asked
    /// only when part of the range read as zeros (`read_range_whole`): bytes that all came
    /// from blocks are no invention, and a hole is rare (asked always, one more entry read
    /// per read looked slower in an A/B on a noisy machine: BENCHMARKS.md, stop 75).
    pub(crate) fn still_holds(&self, path: &str, inode: &Inode) -> Result<bool, WireError> {
        self.still_holds_at(myriad_placement::split_parent(path), inode)
    }

    /// `still_holds` of the entry `name` of `dir`.
    pub(crate) fn still_holds_at(
        &self,
        (dir, name): (&str, &str),
        inode: &Inode,
    ) -> Result<bool, WireError> {
        let named = self.store.entry(dir, name).map_err(storage_err)?;
        if named.and_then(|e| e.inode).as_ref() == Some(inode) {
            return Ok(true);
        }
        Ok(self.orphan(inode.ino)?.as_ref() == Some(inode))
    }

    /// A page of a directory shard's entries, hard links with their home's attributes.
    pub(super) async fn client_read_dir(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
        position: u64,
        after: Option<String>,
        limit: u32,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_dir_part(st, &path)?;
        self.access_dir(&caller, &path, perm::READ).await?;
        match self.readdir_shard(&path, position, after, limit)? {
            Response::DirPage {
                mut entries,
                next,
                shard_end,
                hidden,
                map,
            } => {
                for e in &mut entries {
                    if e.inode.kind == FileKind::HardLink {
                        e.inode = self.resolve(e.inode.clone()).await?;
                    }
                }
                Ok(Response::DirPage {
                    entries,
                    next,
                    shard_end,
                    hidden,
                    map,
                })
            }
            other => Ok(other),
        }
    }

    /// Directories read often and changed seldom: candidates for an index.
    pub(super) fn index_candidates(&self, min_reads: u64, quiet_ms: u64) -> Vec<HotDir> {
        // Without leases no gate sees the changes: no directory is known quiet.
        let Some(table) = self.leases() else {
            return Vec::new();
        };
        self.read_mostly.candidates(
            min_reads,
            std::time::Duration::from_millis(quiet_ms),
            |dir| table.last_change(dir),
        )
    }

    /// Bytes of the first chunk of an open file.
    pub(super) async fn client_read(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
        ino: InodeId,
        offset: u64,
        len: u64,
    ) -> Result<Response, WireError> {
        let cs = st.map.chunk_size_bytes;
        validate_path(&path)?;
        self.own_entry(st, &path)?;
        let len = len.min(limits::IO_BYTES_MAX);
        for _ in 0..READ_TRIES {
            let inode = self.open_file(&caller, &path, ino, true).await?;
            perm::require(&inode, &caller, perm::READ)?;
            let (data, whole) = self
                .read_range_whole(ino, offset, len, inode.size.min(cs))
                .await?;
            if whole || self.still_holds(&path, &inode)? {
                return Ok(Response::Data {
                    inode: Some(inode),
                    data,
                });
            }
        }
        Err(WireError::Busy)
    }

    /// Bytes of a later chunk, or its erasure-coding record if it was coded.
    pub(super) async fn client_read_chunk(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        ino: InodeId,
        chunk: u64,
        offset: u64,
        len: u64,
    ) -> Result<Response, WireError> {
        let cs = st.map.chunk_size_bytes;
        if chunk == 0 {
            return Err(WireError::InvalidArgument(
                "chunk 0 is read with Read".into(),
            ));
        }
        self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
        let coded = || self.store.coded(ino, chunk).map_err(storage_err);
        if let Some(c) = coded()? {
            return Ok(Response::Coded(Box::new(c)));
        }
        let len = len.min(limits::IO_BYTES_MAX).min(cs.saturating_sub(offset));
        let start = chunk.saturating_mul(cs).saturating_add(offset);
        let data = self
            .read_range_repairing(ino, start, len, start.saturating_add(len))
            .await?;
        // Coded while it was read (its blocks may be gone): the record instead.
        if let Some(c) = coded()? {
            return Ok(Response::Coded(Box::new(c)));
        }
        Ok(Response::Data { inode: None, data })
    }

    /// A symbolic link's target.
    pub(super) async fn client_readlink(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
    ) -> Result<Response, WireError> {
        let inode = self.named_entry(st, &caller, &path).await?;
        let inode = self.resolve(inode).await?;
        inode
            .symlink_target
            .ok_or_else(|| WireError::InvalidArgument("not a symbolic link".into()))
            .map(Response::Link)
    }

    /// A capability for the chunks past the first of file `path` (inode `ino`), for a
    /// caller who may read it (`write`: also write it).
    pub(super) async fn client_grant(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
        (ino, write, opened): (myriad_proto::InodeId, bool, bool),
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_entry(st, &path)?;
        self.grant(&caller, &path, ino, write, opened).await
    }

    /// Directory `dir`'s shard map (unsplit if it is not split), from its home.
    pub(super) fn client_get_shard_map(
        &self,
        st: &Arc<MapState>,
        dir: String,
    ) -> Result<Response, WireError> {
        validate_path(&dir)?;
        Ok(Response::ShardMap(Box::new(self.shard_map_of(st, &dir)?)))
    }
}
