//! A partition's answers to client requests that make or remove names: create, symlink,
//! mknod, mkdir, unlink, rmdir, rename. Routed here by `client_ops::serve_client`.

use std::sync::Arc;

use myriad_placement::split_parent;
use myriad_proto::requests;
use myriad_proto::{
    Caller, FileKind, Inode, InodeId, PeerRequest, RenameFlags, Request, Response, WireError,
    limits, validate_path,
};

use crate::cluster::MapState;
use crate::partition::core::{Partition, changed_response, shard_depth};
use crate::partition::made::Made;
use crate::state::mutation::{Mutation, Outcome};
use crate::state::outcome_kinds::{self, NameMade};
use crate::state::perm;

/// A reserved inode number a change names, with the client it is reserved for: the
/// sending client's own, which only a change sent once says.
fn own_number(
    made: &Made,
    ino: Option<myriad_proto::InodeId>,
) -> Result<Option<(u64, myriad_proto::InodeId)>, WireError> {
    let Some(ino) = ino else {
        return Ok(None);
    };
    let client = made.sent_once_by().ok_or_else(|| {
        WireError::InvalidArgument("a change with a reserved inode number is sent once".into())
    })?;
    Ok(Some((client, ino)))
}

impl Partition {
    /// A regular file (a non-exclusive create of an existing name opens it).
    pub(super) async fn client_create(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        create: requests::Create,
    ) -> Result<Response, WireError> {
        let requests::Create {
            path,
            mode,
            exclusive,
            data,
            durable,
            ino,
            data_at,
            then,
        } = create;
        let (dir, name) = self.entry_target(st, &path)?;
        let number = own_number(made, ino)?;
        let parent = self.may_create(&caller, &path).await?;
        let (gid, mode) = perm::new_owner_group(parent.as_ref(), &caller, FileKind::File, mode);
        // Writes folded into it: the file's times are theirs, its directory's (the
        // touch, `made`) the create's; and they took off the set-id bits a write by the
        // caller takes off, as the client showed.
        let now = self.client_time(data_at.or(made.at));
        let mut new = Inode::new(InodeId(0), FileKind::File, mode, (caller.uid, gid), now);
        if data_at.is_some() {
            new.mode &= !perm::setid_bits_killed(&new, &caller);
        }
        let mode = new.mode;
        // A folded setattr the servers refuse (the client checked it by the same rules,
        // but a server squashing root judges another caller) leaves the create as it is
        // and is reported alone, as it was when sent alone: the file keeps its bytes.
        let (then, refused) =
            match then.map(|t| self.setattr_of_new(&caller, (&new, ino, exclusive), t)) {
                Some(Ok(t)) => (Some(t), None),
                Some(Err(e)) => (None, Some(e)),
                None => (None, None),
            };
        if let Some((client, i)) = number {
            self.claim_if_foreign(client, i).await?;
        }
        self.note_added(&dir);
        let m = Mutation::CreateFile {
            dir: dir.clone(),
            name,
            mode,
            uid: caller.uid,
            gid,
            exclusive,
            data,
            now,
            ino: number,
            then,
        };
        let created = |o: &Outcome| matches!(o, Outcome::Created(_));
        let (out, parent) = self.run_touching((m, made), &dir, durable, created).await?;
        if let Some(e) = refused {
            return Err(e);
        }
        match outcome_kinds::expect(out)? {
            NameMade::New(i) => Ok(Response::Changed {
                inode: Some(i),
                parent,
            }),
            // A non-exclusive create of an existing name opens it: a hard-link name
            // answers with its inode.
            NameMade::Existing(i) => Ok(Response::Attr(self.resolve(i).await?)),
        }
    }

    /// A setattr folded into the create of `new` (`requests::Create::then`), checked as
    /// the same caller's setattr of the new file would be: with its time, to apply.
    /// Only an exclusive create with its number (a client's answered behind) carries one:
    /// a create of an existing name is refused, so it never lands on another file. A
    /// retry of a create applied once answers its first outcome, the create's: a refused
    /// setattr whose answer was lost is then not reported (docs/fuse.md "Write-behind").
    fn setattr_of_new(
        &self,
        caller: &Caller,
        (new, ino, exclusive): (&Inode, Option<InodeId>, bool),
        then: requests::SetAfter,
    ) -> Result<(myriad_proto::SetAttr, i64), WireError> {
        if !exclusive || ino.is_none() {
            return Err(WireError::InvalidArgument(
                "a setattr folded into a create needs an exclusive create of a reserved number"
                    .into(),
            ));
        }
        if then.set.of.is_some_and(|of| Some(of) != ino) {
            return Err(WireError::Stale);
        }
        let set = perm::check_setattr(new, caller, &then.set)?;
        Ok((set, self.client_time(Some(then.at_ns))))
    }

    /// A symbolic link.
    pub(super) async fn client_symlink(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        path: String,
        target: String,
    ) -> Result<Response, WireError> {
        let (dir, name) = self.entry_target(st, &path)?;
        let parent = self.may_create(&caller, &path).await?;
        let (gid, _) = perm::new_owner_group(parent.as_ref(), &caller, FileKind::Symlink, 0o777);
        self.note_added(&dir);
        if target.is_empty()
            || target.len() > limits::SYMLINK_TARGET_BYTES_MAX
            || target.contains('\0')
        {
            return Err(WireError::InvalidArgument(
                "symlink target must be 1..=4096 bytes without NUL".into(),
            ));
        }
        let m = Mutation::Symlink {
            dir: dir.clone(),
            name,
            target,
            uid: caller.uid,
            gid,
            now: self.time_of(made),
        };
        changed_response(self.run_touching((m, made), &dir, true, |_| true).await?)
    }

    /// A device node, FIFO or socket (device nodes by root only, as Linux).
    pub(super) async fn client_mknod(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        path: String,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Response, WireError> {
        let (dir, name) = self.entry_target(st, &path)?;
        let parent = self.may_create(&caller, &path).await?;
        // As Linux: only root (CAP_MKNOD) makes device nodes.
        if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) && caller.uid != 0 {
            return Err(WireError::NotPermitted);
        }
        let (gid, mode) = perm::new_owner_group(parent.as_ref(), &caller, kind, mode);
        self.note_added(&dir);
        let m = Mutation::Mknod {
            dir: dir.clone(),
            name,
            kind,
            mode,
            rdev,
            uid: caller.uid,
            gid,
            now: self.time_of(made),
        };
        changed_response(self.run_touching((m, made), &dir, true, |_| true).await?)
    }

    /// Removes a name that is not a directory.
    pub(super) async fn client_unlink(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        path: String,
    ) -> Result<Response, WireError> {
        let (dir, name) = self.entry_target(st, &path)?;
        self.may_remove(&caller, &path).await?;
        // Kept in the trash when it is on (`trash.rs`), else freed.
        if Self::trash_on(st, &path)
            && let Ok(inode) = self.lookup(&path).await
            && let Some(inode) = self.kept_by_trash(inode).await?
        {
            let parent = self.move_to_trash(made, &path, &inode).await?;
            return Ok(Response::Changed {
                inode: None,
                parent,
            });
        }
        let parent = self.unlink_entry(dir, name, made).await?;
        Ok(Response::Changed {
            inode: None,
            parent,
        })
    }

    /// A directory, sharded from the start if asked.
    pub(super) async fn client_mkdir(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        path: String,
        (mode, shards): (u32, u32),
        numbered: Option<myriad_proto::InodeId>,
    ) -> Result<Response, WireError> {
        let (dir, name) = self.entry_target(st, &path)?;
        // Answered behind (`MkdirNumbered`), with a number of its client's.
        let numbered = own_number(made, numbered)?;
        let parent = self.may_create(&caller, &path).await?;
        let (gid, mode) =
            perm::new_owner_group(parent.as_ref(), &caller, FileKind::Directory, mode);
        let depth = shard_depth(shards)?;
        if let Some((client, i)) = numbered {
            self.claim_if_foreign(client, i).await?;
        }
        let new = crate::partition::twophase::NewDir {
            mode,
            depth,
            owner: (caller.uid, gid),
            // Answered behind: the time its client answered (as a create's).
            now: match numbered {
                Some(_) => self.time_of(made),
                None => self.env.now_ns(),
            },
            numbered,
        };
        let (inode, durable) = self
            .mkdir(&made.context(), &path, (dir.clone(), name), new)
            .await?;
        self.note_added(&dir);
        // The parent's touch overlaps the last step's group commit (`finish_entry`).
        let (parent, synced) = tokio::join!(self.touch_after(&dir, made), durable.wait());
        synced?;
        Ok(Response::Changed {
            inode: Some(inode),
            parent,
        })
    }

    /// Removes an empty directory.
    pub(super) async fn client_rmdir(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        path: String,
    ) -> Result<Response, WireError> {
        if path == "/" {
            return Err(WireError::Busy);
        }
        let (dir, name) = self.entry_target(st, &path)?;
        self.may_remove(&caller, &path).await?;
        let durable = self
            .rmdir(&made.context(), &path, dir.clone(), name)
            .await?;
        // The parent's touch overlaps the last step's group commit (`finish_entry`).
        let (parent, synced) = tokio::join!(self.touch_after(&dir, made), durable.wait());
        synced?;
        Ok(Response::Changed {
            inode: None,
            parent,
        })
    }

    /// Moves a name (within or between partitions), then touches the directories.
    pub(super) async fn client_rename(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        from: String,
        to: String,
        flags: RenameFlags,
    ) -> Result<Response, WireError> {
        validate_path(&from)?;
        validate_path(&to)?;
        if from == "/" || to == "/" {
            return Err(WireError::Busy);
        }
        if to.starts_with(&format!("{from}/")) {
            return Err(WireError::InvalidArgument(
                "cannot move a directory into itself".into(),
            ));
        }
        self.own_entry(st, &from)?;
        self.may_remove(&caller, &from).await?;
        self.may_rename_to(&caller, &from, &to).await?;
        let local_target = self.entry_node(&to) == self.me;
        let (from_dir, to_dir) = (
            split_parent(&from).0.to_string(),
            split_parent(&to).0.to_string(),
        );
        let moved = self.lookup(&from).await.ok();
        crate::partition::quota_grants::rename_allowed(st, &from, &to, flags, moved.as_ref())?;
        let exchanged_at = flags.exchange.then(|| from.clone());
        match self.rename(&made.context(), from, to, flags).await {
            Ok(touched) => {
                // An exchange also moved the destination's file to `from` (nsx seed 6:
                // a hard-linked destination kept its ctime under its other names).
                let incoming = match (&moved, exchanged_at) {
                    (Some(m), Some(at)) => self.lookup(&at).await.ok().filter(|i| i.ino != m.ino),
                    _ => None,
                };
                for i in [moved, incoming].into_iter().flatten() {
                    if i.kind == FileKind::HardLink {
                        // The name moved, the inode lives at its home: its ctime
                        // changes there (seen under every name).
                        self.touch_link_home(&i).await;
                    }
                }
                if !touched {
                    self.touch_dir(&from_dir, made).await;
                }
                if local_target && to_dir != from_dir {
                    self.touch_dir(&to_dir, made).await;
                }
                Ok(Response::Unit)
            }
            // A destination in a shard that moved: learn where it is now; the
            // client's retry goes there.
            Err(WireError::WrongShard { dir, map }) => {
                self.learn_shard_map(&dir, map.map(|m| *m)).await;
                Err(WireError::Busy)
            }
            Err(e) => Err(e),
        }
    }

    /// A create with inode number `ino` reserved by another partition (the client took
    /// it before the directory split moved the name here): that partition marks it used
    /// for this one first (`PeerRequest::ClaimReserved`; asked again on a retry, it answers
    /// the same).
    async fn claim_if_foreign(
        self: &Arc<Self>,
        client: u64,
        ino: myriad_proto::InodeId,
    ) -> Result<(), WireError> {
        let owner = myriad_proto::PartitionId(u32::try_from(ino.0 >> 40).unwrap_or(u32::MAX));
        if owner == self.me {
            return Ok(());
        }
        if self.state().map.partition(owner).is_none() {
            return Err(WireError::InvalidArgument(format!(
                "inode number {ino} is not one any partition reserved"
            )));
        }
        self.call_node(
            owner,
            Request::Peer(PeerRequest::ClaimReserved {
                client,
                ino,
                by: self.me,
            }),
        )
        .await?;
        Ok(())
    }

    /// Removes the name `dir/name` (not a directory) and what only it kept; returns the
    /// parent's attributes after.
    pub(crate) async fn unlink_entry(
        self: &Arc<Self>,
        dir: String,
        name: String,
        made: &Made,
    ) -> Result<Option<Inode>, WireError> {
        let m = Mutation::Unlink {
            dir: dir.clone(),
            name,
            now: self.time_of(made),
        };
        let (outcome, parent) = self.run_touching((m, made), &dir, true, |_| true).await?;
        if let Outcome::InodeGc(removed, gc) = outcome {
            if let Some(txid) = gc {
                self.spawn_gc(txid);
            }
            if removed.kind == FileKind::HardLink {
                self.drop_link(&removed).await;
            }
        }
        Ok(parent)
    }

    /// Gives the regular file `from` the additional name `to` (a hard link).
    pub(super) async fn client_link(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (caller, made): (Caller, &Made),
        from: String,
        to: String,
    ) -> Result<Response, WireError> {
        validate_path(&from)?;
        self.own_entry(st, &from)?;
        self.link((&caller, &made.context()), &from, &to).await
    }
}
