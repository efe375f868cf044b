//! A partition's answers to client requests that change a file's contents or attributes,
//! or make answers durable. Routed here by `client_ops::serve_client`.

use std::sync::Arc;

use myriad_proto::requests;
use myriad_proto::{
    Caller, FileKind, InodeId, Response, SetAttr, WireError, XattrMode, limits, validate_path,
};

use crate::cluster::MapState;
use crate::partition::core::{Partition, attrs_key, check_xattr_name};
use crate::partition::made::Made;
use crate::state::mutation::{InodeChange, Mutation, Outcome, storage_err};
use crate::state::outcome_kinds::{Ids, Trimmed};
use crate::state::perm;

impl Partition {
    /// Sets or removes an extended attribute (user.* on files and directories only).
    pub(super) async fn client_set_xattr(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        path: String,
        name: String,
        value: Option<serde_bytes::ByteBuf>,
        mode: XattrMode,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_entry(st, &path)?;
        self.search(&caller, &path).await?;
        check_xattr_name(&name)?;
        if value
            .as_ref()
            .is_some_and(|v| v.len() > limits::XATTR_TOTAL_BYTES_MAX)
        {
            return Err(WireError::TooLarge);
        }
        let inode = self.lookup(&path).await?;
        // As Linux: user.* only on regular files and directories; the caller needs
        // write permission (the sticky-directory owner rule does not apply here).
        if !matches!(inode.kind, FileKind::File | FileKind::Directory) {
            return Err(WireError::NotPermitted);
        }
        perm::require(&inode, &caller, perm::WRITE)?;
        let (dir, name_) = attrs_key(&path);
        self.mutate_inode(
            made,
            Mutation::SetAttr {
                dir,
                name: name_,
                change: InodeChange::Xattr {
                    name,
                    value: value.map(serde_bytes::ByteBuf::into_vec),
                    mode,
                },
                now: self.time_of(made),
            },
        )
        .await
    }

    /// Changes a name's attributes; a directory's new permissions reach every replica first.
    pub(super) async fn client_set_attr(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        path: String,
        set: SetAttr,
    ) -> Result<Response, WireError> {
        let before = self.named_entry(st, &caller, &path).await?;
        if set.of.is_some_and(|of| of != before.ino) {
            // Checked again where it is applied (`apply_change`).
            return Err(WireError::Stale);
        }
        let mut set = perm::check_setattr(&before, &caller, &set)?;
        if before.kind == FileKind::Directory {
            // What it already has is not set again: a change that leaves everyone's
            // access as it is takes no steps at the home or the replicas below, whatever
            // changes meanwhile (it changes none of the three).
            set = perm::without_unchanged_access(&before, set);
        }
        let (dir, name) = attrs_key(&path);
        let changes_access = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        if changes_access && before.kind == FileKind::Directory {
            // Changes other clients answered behind in it by its old attributes
            // are applied first (they were answered before this change).
            // Boxed: every client request's future holds this handler's, kept small.
            Box::pin(self.hold_dir_home(&path, made.sent_once_by())).await;
        }
        let reply = self
            .mutate_inode(
                made,
                Mutation::SetAttr {
                    dir,
                    name,
                    change: InodeChange::Attr(set),
                    now: self.time_of(made),
                },
            )
            .await?;
        if let Response::Attr(i) = &reply
            && i.kind == FileKind::Directory
            && changes_access
        {
            // Acknowledged only once every replica has the new permissions, and
            // no client writes behind in the directory by its old ones.
            // Boxed: every client request's future holds this handler's, kept small.
            Box::pin(futures::future::join(
                self.notify_subscribers(&path, Some(i.clone())),
                self.tell_dir_home(&path, i, made.sent_once_by()),
            ))
            .await;
        }
        Ok(reply)
    }

    /// The entry of an open file a change of its contents or size names (`path`, inode
    /// `ino`, `opened`: through a handle opened for writing, whose open checked
    /// permission): checked as `file_to_change` does, and its setuid and setgid bits
    /// cleared as a write by `caller` clears them. Returns the entry's (directory, name).
    async fn opened_to_change(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (&Caller, &Made),
        (path, ino, opened): (&str, InodeId, bool),
    ) -> Result<(String, String), WireError> {
        let (dir, name, target) = self.file_to_change(st, caller, path, ino, opened).await?;
        let now = self.time_of(made);
        self.kill_setid(&dir, &name, target.as_ref(), (caller, now, &made.context()))
            .await?;
        Ok((dir, name))
    }

    /// Writes bytes into the first chunk of an open file.
    pub(super) async fn client_write(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        w: requests::Write,
    ) -> Result<Response, WireError> {
        if w.data.len() as u64 > limits::IO_BYTES_MAX {
            return Err(WireError::InvalidArgument(
                "write larger than the I/O limit".into(),
            ));
        }
        let file = (w.path.as_str(), w.ino, w.opened);
        let (dir, name) = self.opened_to_change(st, (&caller, made), file).await?;
        self.mutate_inode(
            made,
            Mutation::Write {
                dir,
                name,
                ino: w.ino,
                offset: w.offset,
                data: w.data,
                now: self.time_of(made),
            },
        )
        .await
    }

    /// Grows an open file (bytes written in later chunks).
    pub(super) async fn client_extend_size(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        e: requests::ExtendSize,
    ) -> Result<Response, WireError> {
        let file = (e.path.as_str(), e.ino, e.opened);
        let (dir, name) = self.opened_to_change(st, (&caller, made), file).await?;
        self.mutate_inode(
            made,
            Mutation::ExtendSize {
                dir,
                name,
                ino: e.ino,
                size: e.size,
                now: self.time_of(made),
            },
        )
        .await
    }

    /// Sets the size of an open file; trims the chunks past it before answering.
    pub(super) async fn client_truncate(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        t: requests::Truncate,
    ) -> Result<Response, WireError> {
        let file = (t.path.as_str(), t.ino, t.opened);
        let (dir, name) = self.opened_to_change(st, (&caller, made), file).await?;
        let Trimmed { inode, trim } = self
            .applier
            .run_for_in(
                &made.context(),
                Mutation::Truncate {
                    dir,
                    name,
                    ino: t.ino,
                    size: t.size,
                    now: self.time_of(made),
                },
            )
            .await?;
        if let Some(txid) = trim {
            // Trim before replying: a later extend must read zeros, not old bytes.
            if let Err(e) = self.run_gc(txid).await {
                tracing::warn!(
                    "truncate of ino {}: chunk trim deferred to recovery: {e}",
                    inode.ino
                );
            }
        }
        Ok(Response::Attr(inode))
    }

    /// Writes bytes into a later chunk (uncoding it first if it was coded).
    pub(super) async fn client_write_chunk(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        made: &Made,
        (ino, chunk): (InodeId, u64),
        (offset, data): (u64, Vec<u8>),
    ) -> Result<Response, WireError> {
        if chunk == 0 {
            return Err(WireError::InvalidArgument(
                "chunk 0 is written with Write".into(),
            ));
        }
        self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
        if let Some(c) = self.store.coded(ino, chunk).map_err(storage_err)? {
            self.uncode(&made.context(), ino, chunk, &c).await?;
        }
        // Noted before (no coding round starts on it meanwhile) and after the write
        // is applied: a round that began before the write reached the store found
        // nothing or less to code and let the chunk go, so only the note after it
        // makes sure the chunk is coded once settled (under load a write spent
        // longer than the settle time queued: a chunk was never coded).
        self.note_chunk_written(ino, chunk);
        let out = self
            .applier
            .run_in(
                &made.context(),
                Mutation::WriteChunk {
                    ino,
                    chunk,
                    offset,
                    data,
                },
            )
            .await;
        self.note_chunk_written(ino, chunk);
        let out = out?;
        if matches!(out, Outcome::Coded(_)) {
            // Coded between the look above and the write: the write is asked
            // again, and uncodes it then.
            return Err(WireError::Busy);
        }
        Ok(Response::Unit)
    }

    /// Makes what was answered for a file durable, and checks it still holds the file.
    pub(super) async fn client_sync(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        path: String,
        ino: InodeId,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_entry(st, &path)?;
        self.applier.run(Mutation::Barrier).await?;
        // What is durable now must still hold the file: a crash before the fsync
        // loses a non-durable create, and then the close must not report success.
        let i = self.lookup(&path).await?;
        if i.ino != ino {
            return Err(WireError::Stale);
        }
        Ok(Response::Unit)
    }

    /// Makes everything answered here durable, if this primary answered it.
    pub(super) async fn client_sync_partition(
        self: &Arc<Self>,
        incarnation: u64,
    ) -> Result<Response, WireError> {
        if incarnation != self.incarnation {
            return Err(WireError::Io(format!(
                "partition {}: its primary changed (a failover or restart) since it answered changes now being synced: they may be lost",
                self.me
            )));
        }
        self.applier.run(Mutation::Barrier).await?;
        Ok(Response::Unit)
    }

    /// Reserves inode numbers for the sending client (sent once).
    pub(super) async fn client_reserve_ids(
        self: &Arc<Self>,
        made: &Made,
        count: u32,
    ) -> Result<Response, WireError> {
        let client = made.sent_once_by().ok_or_else(|| {
            WireError::InvalidArgument("inode numbers are reserved by a change sent once".into())
        })?;
        let Ids { first, count } = self
            .applier
            .run_for_in(&made.context(), Mutation::ReserveIds { client, count })
            .await?;
        Ok(Response::Ids {
            first: myriad_proto::InodeId(first),
            count,
        })
    }

    /// Freezes or thaws a tree (root only, as fsck).
    pub(super) async fn client_mark_read_only(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        caller: Caller,
        path: String,
        mark: Option<myriad_proto::ReadOnlyMark>,
        auto: bool,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_dir(st, &path)?;
        // Freezing a tree is an administrator's act, as fsck is.
        if caller.uid != 0 {
            return Err(WireError::PermissionDenied);
        }
        self.mark_read_only(&path, mark, auto).await?;
        Ok(Response::Unit)
    }

    /// copy_file_range: bytes of one file into another, server to server (copy_range.rs).
    pub(super) async fn client_copy_range(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        copy: myriad_proto::CopyRange,
    ) -> Result<Response, WireError> {
        self.file_target(st, &copy.dst)?;
        self.copy_range((&caller, &made.context()), copy).await
    }
}
