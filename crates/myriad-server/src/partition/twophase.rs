//! Operations that touch two nodes, and recovery of the ones a crash interrupted.
//!
//! All follow one pattern (ARCHITECTURE.md, "Two-node operations"):
//! 1. The coordinator (owner of the entry) marks the entry pending and writes an intent, in one
//!    durable batch. Readers of a pending entry wait; writers get `Busy`.
//! 2. It asks the other node to do its part (idempotent requests keyed by path+ino or txid).
//! 3. It resolves the entry and deletes the intent in one durable batch, then replies.
//!
//! If it fails or crashes between 1 and 3, the intent survives, and the recovery task finishes
//! the operation: mkdir rolls forward (unless it was decided aborted), rmdir follows what the
//! directory's owner says, a rename rolls back unless its commit was recorded.

use std::sync::Arc;

use myriad_placement::{PartitionId, split_parent};
use myriad_proto::{FileKind, Inode, InodeId, RenameFlags, Request, Response, WireError};

use crate::commit::{Context, Durable};
use crate::partition::core::Partition;
use crate::partition::dir_rename::Target;
use crate::partition::made::Made;
use crate::state::intent::{Decision, Intent};
use crate::state::mutation::{Mutation, Outcome};
use crate::state::outcome_kinds::{self, Began, Begun, RenameBegun};
use myriad_proto::PeerRequest;

/// Removes a txid from the live set when the operation driving it ends, however it ends.
pub(crate) struct LiveGuard<'a> {
    node: &'a Partition,
    txid: u64,
}

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut l) = self.node.live.lock() {
            l.remove(&self.txid);
        }
    }
}

/// The txid of an outcome that began a multi-node operation.
/// A new directory as its mkdir makes it.
pub(crate) struct NewDir {
    pub(crate) mode: u32,
    /// Split into 2^`depth` shards from the start.
    pub(crate) depth: u8,
    /// Its owner and group.
    pub(crate) owner: (u32, u32),
    pub(crate) now: i64,
    /// A mkdir answered behind: its client and the inode number it reserved; the object
    /// is made with that client's birth lease (`PeerRequest::DirObjectBorn`).
    pub(crate) numbered: Option<(u64, InodeId)>,
}

impl Partition {
    /// Finishes (`commit`) or undoes the pending entry `dir/name` of a mkdir or rmdir
    /// `txid`, and deletes its intent.
    pub(super) async fn resolve_entry(
        &self,
        ctx: &Context,
        dir: String,
        name: String,
        txid: u64,
        commit: bool,
    ) -> Result<(), WireError> {
        self.applier
            .run_in(
                ctx,
                Mutation::ResolveEntry {
                    dir,
                    name,
                    txid,
                    commit,
                },
            )
            .await?;
        Ok(())
    }

    /// Finishes the pending entry `dir/name` of a mkdir or rmdir `txid` whose directory
    /// object was made or removed at its owner, and deletes its intent. Returns once the
    /// step is applied, with what tells when it is durable: the caller touches the parent
    /// meanwhile (its times and link count at the partition of its entry), and answers
    /// only once both are done, so the change is as durable as before when answered.
    /// A touch that lands before this step's batch is lost with its primary counts the
    /// directory all the same: recovery finishes the step (the intent and the owner's
    /// change are durable) and touches the parent again.
    pub(super) async fn finish_entry(
        &self,
        ctx: &Context,
        dir: String,
        name: String,
        txid: u64,
    ) -> Result<Durable, WireError> {
        let resolve = Mutation::ResolveEntry {
            dir,
            name,
            txid,
            commit: true,
        };
        let (_, durable) = self.applier.run_staged_in(ctx, resolve).await?;
        Ok(durable)
    }

    /// Applies the first step of a multi-node operation (a mutation that writes its intent)
    /// and holds its txid live from the moment the intent is visible, then waits until the
    /// step is durable. Holding only after the durable wait left a window (long when a copy
    /// is being caught up) in which recovery saw the intent, took the operation for
    /// abandoned and undid it while its owner went on: the simulation found a split undone
    /// under its owner, whose child shard was then revealed and later dropped with the names
    /// created in it (docs/simulation.md, seed 1016).
    pub(crate) async fn begin<B: Began>(
        self: &Arc<Self>,
        ctx: &Context,
        first: Mutation,
    ) -> Result<(B, LiveGuard<'_>), WireError> {
        let (out, durable) = self.applier.run_staged_in(ctx, first).await?;
        let began = outcome_kinds::expect::<B>(out)?;
        let txid = began.txid();
        // Recovery's pass at start-up takes every intent it lists, and it may list this one
        // between its apply and this claim: then recovery drives it (to its undo) and this
        // operation must not go on with it, or both act on one intent (simulation seed
        // 2355 with --leases at 4ee1112: recovery aborted a rename's target while its
        // coordinator committed it; the client was told "done", the source was gone and
        // the target still held the old file). The client retries `Busy`.
        let Some(live) = self.try_hold(txid) else {
            tracing::info!(
                txid,
                "an intent just begun was taken by recovery: the operation steps back"
            );
            return Err(WireError::Busy);
        };
        durable.wait().await?;
        Ok((began, live))
    }

    /// The guard of a hold of `txid` whose first guard was forgotten (`mem::forget`):
    /// a rename's last steps go on in a task of their own after its answer, and
    /// recovery must still leave the intent to them.
    fn adopt(&self, txid: u64) -> LiveGuard<'_> {
        LiveGuard { node: self, txid }
    }

    pub(crate) fn hold(&self, txid: u64) -> LiveGuard<'_> {
        if let Ok(mut l) = self.live.lock() {
            l.insert(txid);
        }
        LiveGuard { node: self, txid }
    }

    /// Claims `txid` unless someone holds it already (its operation, or a recovery).
    pub(crate) fn try_hold(&self, txid: u64) -> Option<LiveGuard<'_>> {
        // The lock is released before a guard exists (a guard dropped under it would lock
        // it again).
        let claimed = self.live.lock().is_ok_and(|mut l| l.insert(txid));
        claimed.then(|| LiveGuard { node: self, txid })
    }

    pub(super) fn dir_owner(&self, path: &str) -> PartitionId {
        self.state().ring.owner_of_dir(path)
    }

    /// A directory `path` (its entry `dir/name` here, its object at its owner), made
    /// through its three steps; the last is applied and on its way to durability when
    /// this returns (`finish_entry`: wait for the `Durable` before answering).
    pub(crate) async fn mkdir(
        self: &Arc<Self>,
        ctx: &Context,
        path: &str,
        (dir, name): (String, String),
        new: NewDir,
    ) -> Result<(Inode, Durable), WireError> {
        let begin = Mutation::MkdirBegin {
            dir: dir.clone(),
            name: name.clone(),
            mode: new.mode,
            depth: new.depth,
            uid: new.owner.0,
            gid: new.owner.1,
            now: new.now,
            once: ctx.awaited(),
            ino: new.numbered,
        };
        let (Begun { txid, inode }, _live) = self.begin(ctx, begin).await?;
        let owner = self.dir_owner(path);
        let make = match new.numbered {
            // Answered behind: the maker holds the new directory exclusively from its
            // birth (docs/fuse.md "mkdir behind").
            Some((holder, _)) => PeerRequest::DirObjectBorn {
                path: path.to_string(),
                ino: inode.ino,
                holder,
                attrs: inode.clone(),
            },
            None => PeerRequest::DirObjectCreate {
                path: path.to_string(),
                ino: inode.ino,
                depth: new.depth,
            },
        };
        let made = self.call_node(owner, Request::Peer(make)).await;
        match made.and_then(|_| self.placed_for_good(path, owner)) {
            Ok(()) => {
                let durable = self.finish_entry(ctx, dir, name, txid).await?;
                // Applied: from here only its commit can follow (recovery rolls an
                // undecided mkdir forward), so the object may take entries.
                self.confirm_dir_object(owner, path, inode.ino);
                Ok((inode, durable))
            }
            Err(e) => {
                tracing::debug!(
                    partition = %self.me,
                    path,
                    "mkdir: the directory object was not made ({e}); undoing"
                );
                // Undo: the client will see an error, so the directory must not appear later.
                self.applier
                    .run_in(
                        ctx,
                        Mutation::Decide {
                            txid,
                            decision: Decision::Abort,
                        },
                    )
                    .await?;
                let undo = self
                    .call_node(
                        owner,
                        Request::Peer(PeerRequest::DirObjectRemove {
                            path: path.to_string(),
                            ino: inode.ino,
                            client: ctx.client(),
                        }),
                    )
                    .await;
                if undo.is_ok() {
                    self.resolve_entry(ctx, dir, name, txid, false).await?;
                }
                Err(e)
            }
        }
    }

    /// Whether directory `path`, whose object was made at `owner` and whose entry is
    /// pending here, may be committed: `Busy` (undone, and retried by its client) if a
    /// tree rooted at `path` is moving between placements, or the map now places the
    /// object elsewhere. The move holds the root's entry here, and found no directory
    /// there if it looked before this entry was pending: committed, the directory would
    /// stay where the move is leaving, and what is made in it would be invisible to
    /// readers that place the tree where it went (simulation seed 220 with
    /// `--zones --tree-moves`: a mkdir of the root, retried `Busy` through the move,
    /// went through between its look and its decision). Checked after the entry is
    /// pending, a move that looks later waits for its resolution.
    fn placed_for_good(&self, path: &str, owner: PartitionId) -> Result<(), WireError> {
        let st = self.state();
        let moving = st.map.moving_policy().is_some_and(|p| p.path == path);
        if moving || st.ring.owner_of_dir(path) != owner {
            return Err(WireError::Busy);
        }
        Ok(())
    }

    /// Removes directory `path` (its object at its owner, then its entry `dir/name` here);
    /// the last step is applied and on its way to durability when this returns (wait for
    /// the `Durable` before answering).
    pub(crate) async fn rmdir(
        self: &Arc<Self>,
        ctx: &Context,
        path: &str,
        dir: String,
        name: String,
    ) -> Result<Durable, WireError> {
        let (Begun { txid, inode }, _live) = self
            .begin(
                ctx,
                Mutation::RmdirBegin {
                    dir: dir.clone(),
                    name: name.clone(),
                    once: ctx.awaited(),
                },
            )
            .await?;
        let owner = self.dir_owner(path);
        match self
            .call_node(
                owner,
                Request::Peer(PeerRequest::DirObjectRemove {
                    path: path.to_string(),
                    ino: inode.ino,
                    client: ctx.client(),
                }),
            )
            .await
        {
            Ok(_) => {
                // Replicas of the removed directory's permissions go before its entry does:
                // once the name is free, a new directory made there must not be judged by
                // the old one's mode and group (readers of the pending entry wait meanwhile).
                self.notify_subscribers(path, None).await;
                self.finish_entry(ctx, dir, name, txid).await
            }
            // Refused (not empty, the root of a frozen tree, or a directory being moved):
            // the entry stays.
            Err(e @ (WireError::NotEmpty | WireError::ReadOnly | WireError::Busy)) => {
                self.resolve_entry(ctx, dir, name, txid, false).await?;
                Err(e)
            }
            // Unknown outcome: recovery asks the owner again and follows its answer.
            Err(e) => Err(e),
        }
    }

    /// A rename within this partition (not of a directory), in one batch; what it frees
    /// (the replaced file's chunks, a hard link's name) goes after. With the trash on, the
    /// file it replaces is kept (`trash.rs`), in the same batch.
    async fn rename_here(
        self: &Arc<Self>,
        ctx: &Context,
        from: String,
        to: String,
        flags: RenameFlags,
    ) -> Result<(), WireError> {
        let rename = |keep| Mutation::RenameLocal {
            from: from.clone(),
            to: to.clone(),
            flags,
            now: self.env.now_ns(),
            keep,
        };
        let renamed = match self.spot_for_replaced(&to, flags).await? {
            Some(spot) => {
                self.at_spot(spot, |keep| self.applier.run_in(ctx, rename(Some(keep))))
                    .await?
            }
            None => self.applier.run_in(ctx, rename(None)).await?,
        };
        if let Outcome::Renamed(gc, dropped) = renamed {
            if let Some(gc) = gc {
                self.spawn_gc(gc);
            }
            if let Some(old) = dropped {
                self.drop_link(&old).await;
            }
        }
        Ok(())
    }

    /// A directory's rename before its prepare: the destination checked, then the subtree
    /// copied towards it (`moves` records what was copied, to undo it). Returns the empty
    /// directory it moves over, if any.
    async fn copy_towards(
        self: &Arc<Self>,
        txid: u64,
        (from, to): (&str, &str),
        ino: myriad_proto::InodeId,
        flags: RenameFlags,
        moves: &mut Vec<crate::state::intent::DirMove>,
    ) -> Result<Option<myriad_proto::InodeId>, WireError> {
        // Check the destination before copying a whole subtree towards it.
        let replaces = self.check_dir_destination(to, flags).await?;
        let st = self.state();
        let target = Target {
            ring: &st.ring,
            tree: None,
        };
        self.copy_subtree(txid, from, to, ino, replaces, moves, &target)
            .await?;
        Ok(replaces)
    }

    /// What an exchange brings back to the source's name: the destination's entry and its
    /// chunk-0 blocks (`None` for a plain rename). An error aborts the rename.
    fn incoming(
        &self,
        answer: Response,
        flags: RenameFlags,
    ) -> Result<Option<(Inode, crate::state::mutation::Blocks)>, WireError> {
        match answer {
            // The entry coming here is one an unresolved exchange is taking away from
            // here: not before that one is resolved (`leaving_here`).
            Response::Exchanged { inode, .. }
                if flags.exchange
                    && inode.kind == FileKind::File
                    && crate::state::mutation::leaving_here(&self.store, inode.ino)
                        .unwrap_or(true) =>
            {
                Err(WireError::Busy)
            }
            Response::Exchanged { mut inode, blocks } if flags.exchange => {
                inode.ctime_ns = self.env.now_ns();
                let blocks = blocks.into_iter().map(|(b, d)| (b, d.into_vec()));
                Ok(Some((inode, blocks.collect())))
            }
            _ if flags.exchange => Err(WireError::Protocol(
                "the destination did not answer the exchange with its entry".into(),
            )),
            _ => Ok(None),
        }
    }

    /// Renames `from` to `to`. `Ok(true)`: `from`'s directory was touched already (its
    /// times sent while the destination committed); `Ok(false)`: the caller touches it.
    pub(crate) async fn rename(
        self: &Arc<Self>,
        ctx: &Context,
        from: String,
        to: String,
        flags: RenameFlags,
    ) -> Result<bool, WireError> {
        let src = self.lookup(&from).await?;
        if flags.exchange && src.kind == FileKind::Directory {
            return Err(WireError::InvalidArgument(
                "exchanging directories (RENAME_EXCHANGE) is not supported".into(),
            ));
        }
        if from == to {
            return Ok(false);
        }
        let dst_node = self.entry_node(&to);
        if dst_node == self.me && src.kind != FileKind::Directory {
            self.rename_here(ctx, from, to, flags).await?;
            return Ok(false);
        }
        let begin = Mutation::RenameSourceBegin {
            from: from.clone(),
            to: to.clone(),
            dst_node,
            now: self.env.now_ns(),
        };
        let (
            RenameBegun {
                txid,
                inode,
                blocks,
            },
            live,
        ) = self.begin(ctx, begin).await?;
        let mut moves = Vec::new();
        // The empty directory a directory moves over, if any.
        let replaces = if inode.kind == FileKind::Directory {
            let copied = self
                .copy_towards(txid, (&from, &to), inode.ino, flags, &mut moves)
                .await;
            match copied {
                Ok(replaces) => replaces,
                Err(e) => {
                    self.abort_rename(ctx, txid, dst_node, &moves).await;
                    return Err(e);
                }
            }
        } else {
            None
        };
        let blocks = blocks
            .into_iter()
            .map(|(b, d)| (b, serde_bytes::ByteBuf::from(d)))
            .collect();
        let prepare = PeerRequest::RenamePrepare {
            txid,
            coordinator: self.me,
            to: to.clone(),
            inode,
            flags,
            blocks,
            replaces,
            client: ctx.client(),
        };
        match self.call_node(dst_node, Request::Peer(prepare)).await {
            Ok(answer) => {
                // An exchange brings the destination's entry back to the source's name.
                let incoming = match self.incoming(answer, flags) {
                    Ok(incoming) => incoming,
                    Err(e) => {
                        self.abort_rename(ctx, txid, dst_node, &moves).await;
                        return Err(e);
                    }
                };
                // The decision point: once this batch is durable the rename has happened.
                let decide = Mutation::RenameSourceDecide {
                    txid,
                    commit: true,
                    moves: moves.clone(),
                    incoming,
                };
                self.applier.run_in(ctx, decide).await?;
                // A file's rename is answered once the destination's commit is applied
                // (the decision is durable: recovery would commit it again): the commit
                // made durable and the intent deleted follow in a task of their own.
                let visible = moves.is_empty();
                let finished =
                    Box::pin(self.finish_decided(ctx, (txid, dst_node), &moves, &from)).await;
                if visible && finished.is_ok() {
                    // The last steps keep the intent from recovery until they are done.
                    std::mem::forget(live);
                    let this = self.clone();
                    tokio::spawn(async move {
                        let _live = this.adopt(txid);
                        let background = Context::background();
                        let r = this
                            .finish_commit(&background, txid, dst_node, &[], false)
                            .await;
                        if let Err(e) = r {
                            tracing::warn!(txid, "rename answered, its end left to recovery: {e}");
                        }
                    });
                }
                // Unfinished, a directory's rename is reported unknown; a file's is done
                // (readers of its staged destination wait until recovery finishes it).
                if let Err(e) = finished
                    && !moves.is_empty()
                {
                    return Err(WireError::TimedOut(format!(
                        "the directory rename is decided but its old directories are not \
                         all removed yet ({e}); recovery finishes it"
                    )));
                }
                if !moves.is_empty() {
                    // Replicated permissions of the old paths must go before we answer.
                    self.broadcast_invalidate(&from).await;
                }
                if replaces.is_some() {
                    // And those of the directory the moved one replaced.
                    self.broadcast_invalidate(&to).await;
                }
                Ok(true)
            }
            Err(e) => {
                self.abort_rename(ctx, txid, dst_node, &moves).await;
                Err(e)
            }
        }
    }

    /// The steps of rename `txid` after its decision (committed), until it may be
    /// answered: the destination's commit (`finish_commit`), while the source directory's
    /// times are sent.
    async fn finish_decided(
        self: &Arc<Self>,
        ctx: &Context,
        (txid, dst_node): (u64, PartitionId),
        moves: &[crate::state::intent::DirMove],
        from: &str,
    ) -> Result<(), WireError> {
        // A moved directory's old objects stay readable until they are dropped:
        // answering before would let a reader see the old tree after the rename
        // was acknowledged (simulation seed 1671 with --dir-moves, a lost
        // DirFinish). So a directory's finishing is tried twice (a message may have
        // been lost), else the outcome is reported unknown, as a timeout is;
        // recovery finishes it.
        let tries = if moves.is_empty() { 1 } else { 2 };
        // A file's rename is answered once the destination's commit is applied.
        let visible = moves.is_empty();
        let finish = async {
            let mut finished = Ok(());
            for _ in 0..tries {
                finished = Box::pin(self.finish_commit(ctx, txid, dst_node, moves, visible)).await;
                match &finished {
                    Ok(()) => break,
                    Err(e) => tracing::warn!(txid, "rename committed, not finished: {e}"),
                }
            }
            finished
        };
        // The source directory's times go while the destination commits.
        let from_dir = split_parent(from).0.to_string();
        // (By this server's clock, for the change `ctx` carries.)
        let now = Made {
            once: ctx.once.clone(),
            ..Made::now()
        };
        let (finished, _) = tokio::join!(finish, Box::pin(self.touch_dir(&from_dir, &now)));
        finished
    }

    /// Runs a chunk GC intent in the background.
    pub(crate) fn spawn_gc(self: &Arc<Self>, txid: u64) {
        let node = self.clone();
        tokio::spawn(async move {
            if let Err(e) = node.run_gc(txid).await {
                tracing::warn!(txid, "chunk GC deferred to recovery: {e}");
            }
        });
    }

    /// Drops the bytes of a ChunkGc intent on every chunk owner, then deletes the intent.
    pub(crate) async fn run_gc(self: &Arc<Self>, txid: u64) -> Result<(), WireError> {
        let _live = self.hold(txid);
        let Some(Intent::ChunkGc {
            ino,
            keep_bytes,
            old_size,
        }) = self
            .store
            .intent(txid)
            .map_err(crate::state::mutation::storage_err)?
            .and_then(|b| Intent::decode(&b))
        else {
            return Ok(());
        };
        let st = self.state();
        let cs = st.map.chunk_size_bytes;
        let partitions: Vec<PartitionId> = st.map.partitions.iter().map(|p| p.id).collect();
        drop(st);
        let first = (keep_bytes / cs).max(1);
        let last = old_size.saturating_sub(1) / cs;
        if old_size > 0 && last >= first && last - first >= partitions.len() as u64 {
            // More chunks than partitions (a big or huge sparse file): one request per
            // partition, each dropping whatever it holds of the file past the cut, so the
            // work follows the data there is, not the size the file claims.
            for p in partitions {
                self.call_node(
                    p,
                    Request::Peer(PeerRequest::ChunkTrimFrom {
                        ino,
                        from_bytes: keep_bytes,
                    }),
                )
                .await?;
            }
        } else if old_size > 0 {
            for chunk in first..=last {
                let keep = keep_bytes.saturating_sub(chunk * cs).min(cs);
                let owner = self.state().ring.owner_of_chunk(ino, chunk);
                self.call_node(
                    owner,
                    Request::Peer(PeerRequest::ChunkTrim {
                        ino,
                        chunk,
                        keep_bytes: keep,
                    }),
                )
                .await?;
            }
        }
        self.applier.run(Mutation::DeleteIntent { txid }).await?;
        Ok(())
    }
}

/// How long the destination of an aborted rename refuses a late prepare for it: far longer
/// than a request may take (its timeout), retries included.
pub(crate) const ABORTED_KEPT: std::time::Duration = std::time::Duration::from_secs(120);
