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

use myriad_placement::{PartitionId, join, split_parent};
use myriad_proto::{DirAction, FileKind, FsError, Inode, RenameFlags, Request, Response};

use crate::partition::core::Partition;
use crate::state::intent::{Decision, DirMove, Intent};
use crate::state::mutation::{Mutation, Outcome};
use myriad_placement::Shard;
use myriad_proto::InodeId;
use myriad_proto::{ClientRequest, PeerRequest};

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
fn begun_txid(out: &Outcome) -> Option<u64> {
    match out {
        Outcome::Begun { txid, .. }
        | Outcome::RenameBegun { txid, .. }
        | Outcome::SplitBegun { txid, .. }
        | Outcome::TreeMoveBegun { txid } => Some(*txid),
        _ => None,
    }
}

/// Where a copied subtree's new paths are placed: by `ring`; for a tree move (`tree`: its
/// root), directories under a nested policy root keep their placement and are not copied.
pub(super) struct Target<'a> {
    pub ring: &'a myriad_placement::Ring,
    pub tree: Option<&'a str>,
}

impl Target<'_> {
    /// Whether directory `dir` of the subtree is copied.
    pub(super) fn copies(&self, dir: &str) -> bool {
        self.tree
            .is_none_or(|root| self.ring.policy_root_of(dir) == self.ring.policy_root_of(root))
    }
}

impl Partition {
    /// Finishes (`commit`) or undoes the pending entry `dir/name` of a mkdir or rmdir
    /// `txid`, and deletes its intent.
    async fn resolve_entry(
        &self,
        dir: String,
        name: String,
        txid: u64,
        commit: bool,
    ) -> Result<(), FsError> {
        self.applier
            .run(Mutation::ResolveEntry {
                dir,
                name,
                txid,
                commit,
            })
            .await?;
        Ok(())
    }

    /// Applies the first step of a multi-node operation (a mutation that writes its intent)
    /// and holds its txid live from the moment the intent is visible, then waits until the
    /// step is durable. Holding only after the durable wait left a window (long when a copy
    /// is being caught up) in which recovery saw the intent, took the operation for
    /// abandoned and undid it while its owner went on: the simulation found a split undone
    /// under its owner, whose child shard was then revealed and later dropped with the names
    /// created in it (docs/simulation.md, seed 1016).
    pub(crate) async fn begin(
        self: &Arc<Self>,
        first: Mutation,
    ) -> Result<(Outcome, LiveGuard<'_>), FsError> {
        let (out, durable) = self.applier.run_staged(first).await?;
        let txid = begun_txid(&out).ok_or_else(|| FsError::Io("unexpected outcome".into()))?;
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
            return Err(FsError::Busy);
        };
        durable.wait().await?;
        Ok((out, live))
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

    pub(super) fn dir_owner(&self, path: &str) -> PartitionId {
        self.state().ring.owner_of_dir(path)
    }

    pub(crate) async fn mkdir(
        self: &Arc<Self>,
        path: &str,
        dir: String,
        name: String,
        mode: u32,
        depth: u8,
        owner: (u32, u32),
    ) -> Result<Inode, FsError> {
        let begin = Mutation::MkdirBegin {
            dir: dir.clone(),
            name: name.clone(),
            mode,
            depth,
            uid: owner.0,
            gid: owner.1,
            now: self.env.now_ns(),
        };
        let (Outcome::Begun { txid, inode }, _live) = self.begin(begin).await? else {
            return Err(FsError::Io("unexpected outcome".into()));
        };
        let owner = self.dir_owner(path);
        match self
            .call_node(
                owner,
                Request::Peer(PeerRequest::DirObjectCreate {
                    path: path.to_string(),
                    ino: inode.ino,
                    depth,
                }),
            )
            .await
        {
            Ok(_) => {
                self.resolve_entry(dir, name, txid, true).await?;
                Ok(inode)
            }
            Err(e) => {
                tracing::debug!(
                    partition = %self.me,
                    path,
                    "mkdir: the directory object was not made ({e}); undoing"
                );
                // Undo: the client will see an error, so the directory must not appear later.
                self.applier
                    .run(Mutation::Decide {
                        txid,
                        decision: Decision::Abort,
                    })
                    .await?;
                let undo = self
                    .call_node(
                        owner,
                        Request::Peer(PeerRequest::DirObjectRemove {
                            path: path.to_string(),
                            ino: inode.ino,
                            client: crate::commit::once::task_client(),
                        }),
                    )
                    .await;
                if undo.is_ok() {
                    self.resolve_entry(dir, name, txid, false).await?;
                }
                Err(e)
            }
        }
    }

    pub(crate) async fn rmdir(
        self: &Arc<Self>,
        path: &str,
        dir: String,
        name: String,
    ) -> Result<(), FsError> {
        let (Outcome::Begun { txid, inode }, _live) = self
            .begin(Mutation::RmdirBegin {
                dir: dir.clone(),
                name: name.clone(),
            })
            .await?
        else {
            return Err(FsError::Io("unexpected outcome".into()));
        };
        let owner = self.dir_owner(path);
        match self
            .call_node(
                owner,
                Request::Peer(PeerRequest::DirObjectRemove {
                    path: path.to_string(),
                    ino: inode.ino,
                    client: crate::commit::once::task_client(),
                }),
            )
            .await
        {
            Ok(_) => {
                self.resolve_entry(dir, name, txid, true).await?;
                // Replicas of the removed directory's permissions must go before we answer.
                self.notify_subscribers(path, None).await;
                Ok(())
            }
            // Refused (not empty, or the root of a frozen tree): the entry stays.
            Err(e @ (FsError::NotEmpty | FsError::ReadOnly)) => {
                self.resolve_entry(dir, name, txid, false).await?;
                Err(e)
            }
            // Unknown outcome: recovery asks the owner again and follows its answer.
            Err(e) => Err(e),
        }
    }

    /// Renames `from` to `to`. `Ok(true)`: `from`'s directory was touched already (its
    /// times sent while the destination committed); `Ok(false)`: the caller touches it.
    pub(crate) async fn rename(
        self: &Arc<Self>,
        from: String,
        to: String,
        flags: RenameFlags,
    ) -> Result<bool, FsError> {
        let src = self.lookup(&from).await?;
        if flags.exchange && src.kind == FileKind::Directory {
            return Err(FsError::InvalidArgument(
                "exchanging directories (RENAME_EXCHANGE) is not supported".into(),
            ));
        }
        if from == to {
            return Ok(false);
        }
        let dst_node = self.entry_node(&to);
        if dst_node == self.me && src.kind != FileKind::Directory {
            if let Outcome::Renamed(gc, dropped) = self
                .applier
                .run(Mutation::RenameLocal {
                    from,
                    to,
                    flags,
                    now: self.env.now_ns(),
                })
                .await?
            {
                if let Some(gc) = gc {
                    self.spawn_gc(gc);
                }
                if let Some(old) = dropped {
                    self.drop_link(&old).await;
                }
            }
            return Ok(false);
        }
        let begin = Mutation::RenameSourceBegin {
            from: from.clone(),
            to: to.clone(),
            dst_node,
            now: self.env.now_ns(),
        };
        let (
            Outcome::RenameBegun {
                txid,
                inode,
                blocks,
            },
            live,
        ) = self.begin(begin).await?
        else {
            return Err(FsError::Io("unexpected outcome".into()));
        };
        let mut moves = Vec::new();
        // The empty directory a directory moves over, if any.
        let replaces = if inode.kind == FileKind::Directory {
            // Check the destination before copying a whole subtree towards it.
            let copied = match self.check_dir_destination(&to, flags).await {
                Ok(replaces) => {
                    let st = self.state();
                    let target = Target {
                        ring: &st.ring,
                        tree: None,
                    };
                    self.copy_subtree(txid, &from, &to, inode.ino, replaces, &mut moves, &target)
                        .await
                        .map(|()| replaces)
                }
                Err(e) => Err(e),
            };
            match copied {
                Ok(replaces) => replaces,
                Err(e) => {
                    self.abort_rename(txid, dst_node, &moves).await;
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
            client: crate::commit::once::task_client(),
        };
        match self.call_node(dst_node, Request::Peer(prepare)).await {
            Ok(answer) => {
                // An exchange brings the destination's entry back to the source's name.
                let incoming = match answer {
                    // The entry coming here is one an unresolved exchange is taking away
                    // from here: not before that one is resolved (`leaving_here`).
                    Response::Exchanged { inode, .. }
                        if flags.exchange
                            && inode.kind == FileKind::File
                            && crate::state::mutation::leaving_here(&self.store, inode.ino)
                                .unwrap_or(true) =>
                    {
                        self.abort_rename(txid, dst_node, &moves).await;
                        return Err(FsError::Busy);
                    }
                    Response::Exchanged { mut inode, blocks } if flags.exchange => {
                        inode.ctime_ns = self.env.now_ns();
                        let blocks = blocks.into_iter().map(|(b, d)| (b, d.into_vec()));
                        Some((inode, blocks.collect()))
                    }
                    _ if flags.exchange => {
                        self.abort_rename(txid, dst_node, &moves).await;
                        return Err(FsError::Protocol(
                            "the destination did not answer the exchange with its entry".into(),
                        ));
                    }
                    _ => None,
                };
                // The decision point: once this batch is durable the rename has happened.
                let decide = Mutation::RenameSourceDecide {
                    txid,
                    commit: true,
                    moves: moves.clone(),
                    incoming,
                };
                self.applier.run(decide).await?;
                // A moved directory's old objects stay readable until they are dropped:
                // answering before would let a reader see the old tree after the rename
                // was acknowledged (simulation seed 1671 with --dir-moves, a lost
                // DirFinish). So a directory's finishing is tried twice (a message may have
                // been lost), else the outcome is reported unknown, as a timeout is;
                // recovery finishes it. (One call site: the future stays small.)
                let tries = if moves.is_empty() { 1 } else { 2 };
                // A file's rename is answered once the destination's commit is applied
                // (the decision is durable: recovery would commit it again): the commit
                // made durable and the intent deleted follow in a task of their own.
                let visible = moves.is_empty();
                let finish = async {
                    let mut finished = Ok(());
                    for _ in 0..tries {
                        finished =
                            Box::pin(self.finish_commit(txid, dst_node, &moves, visible)).await;
                        match &finished {
                            Ok(()) => break,
                            Err(e) => tracing::warn!(txid, "rename committed, not finished: {e}"),
                        }
                    }
                    finished
                };
                // The source directory's times go while the destination commits.
                let from_dir = split_parent(&from).0.to_string();
                let (finished, _) = tokio::join!(finish, Box::pin(self.touch_dir(&from_dir)));
                if visible && finished.is_ok() {
                    // The last steps keep the intent from recovery until they are done.
                    std::mem::forget(live);
                    let this = self.clone();
                    tokio::spawn(async move {
                        let _live = this.adopt(txid);
                        let r = this.finish_commit(txid, dst_node, &[], false).await;
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
                    return Err(FsError::TimedOut(format!(
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
                self.abort_rename(txid, dst_node, &moves).await;
                Err(e)
            }
        }
    }

    /// Checks where a directory is to move: `to`'s parent must be a directory and `to`
    /// free, or an existing directory that the move will replace if it is empty (returned:
    /// its inode; emptiness is checked when its object is taken over, in `copy_subtree`).
    pub(super) async fn check_dir_destination(
        self: &Arc<Self>,
        to: &str,
        flags: RenameFlags,
    ) -> Result<Option<InodeId>, FsError> {
        let parent = myriad_placement::parent_of(to).to_string();
        match self
            .call_entry(
                &parent.clone(),
                Request::Client(ClientRequest::Stat { path: parent }),
            )
            .await?
        {
            Response::Attr(i) if i.kind == FileKind::Directory => {}
            Response::Attr(_) => return Err(FsError::NotADirectory),
            _ => return Err(FsError::Protocol("unexpected reply to stat".into())),
        }
        match self
            .call_entry(
                to,
                Request::Client(ClientRequest::Stat {
                    path: to.to_string(),
                }),
            )
            .await
        {
            Err(FsError::NotFound) => Ok(None),
            Ok(Response::Attr(_)) if flags.no_replace => Err(FsError::AlreadyExists),
            Ok(Response::Attr(i)) if i.kind == FileKind::Directory => Ok(Some(i.ino)),
            Ok(_) => Err(FsError::NotADirectory),
            Err(e) => Err(e),
        }
    }

    /// Copies every directory object under `from` to its place under `to` (placed by
    /// `target`), hidden, freezing the originals. `moves` lists what was touched, for
    /// commit or undo.
    #[allow(clippy::too_many_arguments)] // one call per protocol; a struct would only rename them
    pub(super) async fn copy_subtree(
        self: &Arc<Self>,
        txid: u64,
        from: &str,
        to: &str,
        ino: InodeId,
        replaces: Option<InodeId>,
        moves: &mut Vec<DirMove>,
        target: &Target<'_>,
    ) -> Result<(), FsError> {
        let mut queue = std::collections::VecDeque::from([(from.to_string(), to.to_string(), ino)]);
        while let Some((old, new, dir_ino)) = queue.pop_front() {
            // The home is frozen before its map is read: no split can add a part after that.
            // A split directory keeps its shards: each goes to the node placement gives the
            // same shard under the new path.
            let home = self.dir_owner(&old);
            moves.push(DirMove {
                old: old.clone(),
                new: new.clone(),
                old_nodes: vec![home],
                map: None,
            });
            let freeze = PeerRequest::DirFreeze {
                path: old.clone(),
                txid,
            };
            self.call_node(home, Request::Peer(freeze.clone())).await?;
            let map = self.home_map(&old).await?;
            let m = DirMove {
                old: old.clone(),
                new: new.clone(),
                old_nodes: self.nodes_of_map(&old, &map),
                map: map.is_split().then(|| map.clone()),
            };
            if let Some(last) = moves.last_mut() {
                *last = m.clone();
            }
            for &node in m.old_nodes.iter().filter(|n| **n != home) {
                self.call_node(node, Request::Peer(freeze.clone())).await?;
            }
            // The first import to a part creates it (hidden, with its shards; the new home
            // also gets the map); parts that receive no entry get an empty one at the end.
            let parts = self.new_parts(&m, target.ring);
            let new_home = target.ring.owner_of_dir(&new);
            let mut made = std::collections::BTreeSet::new();
            for &node in &m.old_nodes {
                let mut after = None;
                loop {
                    let req = PeerRequest::DirExport {
                        path: old.clone(),
                        txid,
                        after: after.clone(),
                    };
                    let Response::Exported { entries, next } =
                        self.call_node(node, Request::Peer(req)).await?
                    else {
                        return Err(FsError::Protocol("unexpected reply to dir_export".into()));
                    };
                    let mut by_node: std::collections::BTreeMap<PartitionId, Vec<_>> =
                        Default::default();
                    for e in entries {
                        if e.inode.kind == FileKind::Directory
                            && target.copies(&join(&new, &e.name))
                        {
                            queue.push_back((
                                join(&old, &e.name),
                                join(&new, &e.name),
                                e.inode.ino,
                            ));
                        }
                        let leaf = map.leaf_for(myriad_placement::name_hash(&e.name));
                        by_node
                            .entry(target.ring.owner_of_shard(&new, leaf))
                            .or_default()
                            .push(e);
                    }
                    for (to_node, entries) in by_node {
                        let import = PeerRequest::DirImport {
                            path: new.clone(),
                            txid,
                            ino: dir_ino,
                            shards: parts.get(&to_node).cloned().unwrap_or_default(),
                            map: (to_node == new_home).then(|| m.map.clone()).flatten(),
                            entries,
                            replaces: replaces.filter(|_| new == to),
                        };
                        self.call_node(to_node, Request::Peer(import)).await?;
                        made.insert(to_node);
                    }
                    match next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
            }
            for (node, shards) in parts.iter().filter(|(n, _)| !made.contains(*n)) {
                let import = PeerRequest::DirImport {
                    path: new.clone(),
                    txid,
                    ino: dir_ino,
                    shards: shards.clone(),
                    map: (*node == new_home).then(|| m.map.clone()).flatten(),
                    entries: Vec::new(),
                    replaces: replaces.filter(|_| new == to),
                };
                self.call_node(*node, Request::Peer(import)).await?;
            }
        }
        Ok(())
    }

    /// The nodes of a moved directory's new path (placed by `ring`), each with the shards
    /// it holds there.
    pub(super) fn new_parts(
        &self,
        m: &DirMove,
        ring: &myriad_placement::Ring,
    ) -> std::collections::BTreeMap<PartitionId, Vec<Shard>> {
        let mut parts: std::collections::BTreeMap<PartitionId, Vec<Shard>> = Default::default();
        match &m.map {
            Some(map) => {
                for leaf in &map.leaves {
                    parts
                        .entry(ring.owner_of_shard(&m.new, *leaf))
                        .or_default()
                        .push(*leaf);
                }
            }
            None => {
                parts.insert(ring.owner_of_dir(&m.new), vec![Shard::ALL]);
            }
        }
        parts
    }

    /// The home of `dir` and the nodes of the shards of `map`.
    pub(super) fn nodes_of_map(
        &self,
        dir: &str,
        map: &myriad_placement::ShardMap,
    ) -> Vec<PartitionId> {
        let st = self.state();
        let mut nodes = vec![self.dir_owner(dir)];
        for s in &map.leaves {
            let n = st.ring.owner_of_shard(dir, *s);
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
        nodes
    }

    /// The shard map of `dir` as its home has it.
    pub(super) async fn home_map(
        self: &Arc<Self>,
        dir: &str,
    ) -> Result<myriad_placement::ShardMap, FsError> {
        let req = ClientRequest::GetShardMap {
            dir: dir.to_string(),
        };
        match self
            .call_node(self.dir_owner(dir), Request::Client(req))
            .await?
        {
            Response::ShardMap(map) => Ok(*map),
            _ => Err(FsError::Protocol(
                "unexpected reply to get_shard_map".into(),
            )),
        }
    }

    /// The subdirectory names of `dir`, from every shard (`None` if `dir` is not there).
    pub(super) async fn subdirectories(
        self: &Arc<Self>,
        dir: &str,
        map: &myriad_placement::ShardMap,
    ) -> Result<Option<Vec<String>>, FsError> {
        let st = self.state();
        let mut out = Vec::new();
        for leaf in &map.leaves {
            let node = st.ring.owner_of_shard(dir, *leaf);
            let (mut from, mut after) = (leaf.start(), None::<String>);
            loop {
                let req = ClientRequest::ReadDir {
                    path: dir.to_string(),
                    from,
                    after: after.clone(),
                    limit: myriad_proto::limits::READDIR_PAGE_MAX,
                };
                let (entries, next, end) = match self.call_node(node, Request::Client(req)).await {
                    Ok(Response::DirPage {
                        entries,
                        next,
                        shard_end,
                        ..
                    }) => (entries, next, shard_end),
                    Err(FsError::NotFound) => return Ok(None),
                    Ok(_) => return Err(FsError::Protocol("unexpected reply to readdir".into())),
                    Err(e) => return Err(e),
                };
                out.extend(
                    entries
                        .into_iter()
                        .filter(|e| e.inode.kind == FileKind::Directory)
                        .map(|e| e.name),
                );
                match (next, end) {
                    (Some(n), _) => after = Some(n),
                    // The tree is frozen, so shards do not split under this walk; a shard
                    // ending early would mean the map changed: follow it anyway.
                    (None, Some(e)) if leaf.end().is_none_or(|l| e < l) => {
                        from = e;
                        after = None;
                    }
                    _ => break,
                }
            }
        }
        Ok(Some(out))
    }

    /// After the commit decision: drop the old directory objects (old paths are gone), make
    /// the destination entry visible, then reveal the new objects (readers of new paths wait
    /// until then). Idempotent; recovery repeats it until it succeeds.
    /// With `visible` (a file's rename, no directory to move): only the destination's
    /// commit, answered once applied; the caller finishes later (durable commit, intent
    /// deleted).
    pub(super) async fn finish_commit(
        self: &Arc<Self>,
        txid: u64,
        dst_node: PartitionId,
        moves: &[DirMove],
        visible: bool,
    ) -> Result<(), FsError> {
        for m in moves {
            for node in m.nodes(self.dir_owner(&m.old)) {
                let req = PeerRequest::DirFinish {
                    path: m.old.clone(),
                    txid,
                    action: DirAction::Drop {
                        keep_blocks_of: Some(m.new.clone()),
                    },
                };
                self.call_node(node, Request::Peer(req)).await?;
            }
        }
        let commit = PeerRequest::RenameCommit {
            txid,
            client: crate::commit::once::task_client(),
            visible,
        };
        self.call_node(dst_node, Request::Peer(commit)).await?;
        if visible {
            return Ok(());
        }
        self.reveal_and_end(txid, moves).await
    }

    /// The last steps after a decision: the copies of `moves` are revealed where the map
    /// now places them (their readers waited until then), and the intent is deleted.
    pub(super) async fn reveal_and_end(
        self: &Arc<Self>,
        txid: u64,
        moves: &[DirMove],
    ) -> Result<(), FsError> {
        let st = self.state();
        for m in moves {
            for node in self.new_parts(m, &st.ring).into_keys() {
                let req = PeerRequest::DirFinish {
                    path: m.new.clone(),
                    txid,
                    action: DirAction::Reveal,
                };
                self.call_node(node, Request::Peer(req)).await?;
            }
        }
        self.applier.run(Mutation::DeleteIntent { txid }).await?;
        Ok(())
    }

    /// Undoes a rename that did not reach its decision; leaves the intent for recovery if a
    /// node cannot be reached.
    pub(super) async fn abort_rename(
        self: &Arc<Self>,
        txid: u64,
        dst_node: PartitionId,
        moves: &[DirMove],
    ) {
        let decide = Mutation::RenameSourceDecide {
            txid,
            commit: false,
            moves: Vec::new(),
            incoming: None,
        };
        if let Err(e) = self.applier.run(decide).await {
            tracing::warn!(txid, "rename abort deferred to recovery: {e}");
            return;
        }
        if let Err(e) = self.undo_moves(txid, dst_node, moves).await {
            tracing::warn!(txid, "rename abort deferred to recovery: {e}");
        }
    }

    pub(super) async fn undo_moves(
        self: &Arc<Self>,
        txid: u64,
        dst_node: PartitionId,
        moves: &[DirMove],
    ) -> Result<(), FsError> {
        let st = self.state();
        let target = Target {
            ring: &st.ring,
            tree: None,
        };
        self.undo_copies(txid, moves, &target).await?;
        self.call_node(dst_node, Request::Peer(PeerRequest::RenameAbort { txid }))
            .await?;
        self.applier.run(Mutation::DeleteIntent { txid }).await?;
        Ok(())
    }

    /// Drops the hidden copies of `moves` (placed by `target`) and thaws their originals.
    pub(super) async fn undo_copies(
        self: &Arc<Self>,
        txid: u64,
        moves: &[DirMove],
        target: &Target<'_>,
    ) -> Result<(), FsError> {
        for m in moves {
            for node in self.new_parts(m, target.ring).into_keys() {
                // A rename's copy on the node of its original shares the files' blocks; a
                // tree move's copies are in other partitions (their own blocks).
                let keep_blocks_of = target.tree.is_none().then(|| m.old.clone());
                let drop_new = PeerRequest::DirFinish {
                    path: m.new.clone(),
                    txid,
                    action: DirAction::Drop { keep_blocks_of },
                };
                self.call_node(node, Request::Peer(drop_new)).await?;
            }
            for node in m.nodes(self.dir_owner(&m.old)) {
                let thaw = PeerRequest::DirFinish {
                    path: m.old.clone(),
                    txid,
                    action: DirAction::Thaw,
                };
                self.call_node(node, Request::Peer(thaw)).await?;
            }
        }
        Ok(())
    }

    /// The directory objects under `from` (which is intact when a rename or tree move did
    /// not commit), paired with their places under `to`; for a tree move only those
    /// `target` copies.
    pub(super) async fn walk_moves(
        self: &Arc<Self>,
        from: &str,
        to: &str,
        target: &Target<'_>,
    ) -> Result<Vec<DirMove>, FsError> {
        let mut out = Vec::new();
        let mut queue = std::collections::VecDeque::from([(from.to_string(), to.to_string())]);
        while let Some((old, new)) = queue.pop_front() {
            // One read of the home's map serves the listing and the move record.
            let map = self.home_map(&old).await?;
            let Some(subdirs) = self.subdirectories(&old, &map).await? else {
                continue; // not a directory (or already gone)
            };
            for name in subdirs
                .into_iter()
                .filter(|n| target.copies(&join(&new, n)))
            {
                queue.push_back((join(&old, &name), join(&new, &name)));
            }
            out.push(DirMove {
                old: old.clone(),
                new: new.clone(),
                old_nodes: self.nodes_of_map(&old, &map),
                map: map.is_split().then_some(map),
            });
        }
        Ok(out)
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
    pub(crate) async fn run_gc(self: &Arc<Self>, txid: u64) -> Result<(), FsError> {
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

    /// Finishes every intent no live operation owns. `all` at start-up; later only intents
    /// seen in the previous pass too (so an operation between its first step and registering
    /// as live is never touched).
    pub(crate) async fn recover(
        self: &Arc<Self>,
        previous: &std::collections::BTreeSet<u64>,
        all: bool,
    ) -> std::collections::BTreeSet<u64> {
        let intents = match self.store.intents() {
            Ok(i) => i,
            Err(e) => {
                tracing::error!("cannot list intents: {e}");
                return previous.clone();
            }
        };
        let listed: Vec<u64> = intents.into_iter().map(|(txid, _)| txid).collect();
        self.recover_listed(&listed, previous, all).await
    }

    /// Recovers the intents `listed` (a listing that may be older than the operations that
    /// owned them): each is claimed first, so that no operation or other recovery acts on
    /// it meanwhile, then read again, so that one its operation finished (and deleted) since
    /// the listing is left alone. Simulation seed 20090: recovery rolled forward a mkdir
    /// that had completed, been answered and been undone by an rmdir since it was listed,
    /// recreating the directory object as an orphan that made the next mkdir of that name
    /// fail with `AlreadyExists`.
    pub(crate) async fn recover_listed(
        self: &Arc<Self>,
        listed: &[u64],
        previous: &std::collections::BTreeSet<u64>,
        all: bool,
    ) -> std::collections::BTreeSet<u64> {
        let mut seen = std::collections::BTreeSet::new();
        for &txid in listed {
            seen.insert(txid);
            if !(all || previous.contains(&txid)) {
                continue;
            }
            let Some(_claim) = self.try_hold(txid) else {
                continue;
            };
            let bytes = match self.store.intent(txid) {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(e) => {
                    tracing::error!(txid, "cannot read an intent: {e}");
                    continue;
                }
            };
            let Some(intent) = Intent::decode(&bytes) else {
                tracing::error!(txid, "undecodable intent left in place");
                continue;
            };
            if let Err(e) = self.recover_one(txid, intent).await {
                tracing::info!(txid, "recovery will retry: {e}");
            }
        }
        seen
    }

    /// Claims `txid` unless someone holds it already (its operation, or a recovery).
    pub(crate) fn try_hold(&self, txid: u64) -> Option<LiveGuard<'_>> {
        // The lock is released before a guard exists (a guard dropped under it would lock
        // it again).
        let claimed = self.live.lock().is_ok_and(|mut l| l.insert(txid));
        claimed.then(|| LiveGuard { node: self, txid })
    }

    /// Drives intent `txid` to its end. The caller holds the txid (`recover_listed`).
    pub(super) async fn recover_one(
        self: &Arc<Self>,
        txid: u64,
        intent: Intent,
    ) -> Result<(), FsError> {
        match intent {
            Intent::Mkdir {
                dir,
                name,
                ino,
                depth,
                decision,
            } => {
                let path = join(&dir, &name);
                let owner = self.dir_owner(&path);
                let commit = decision != Decision::Abort;
                let req = if commit {
                    PeerRequest::DirObjectCreate { path, ino, depth }
                } else {
                    PeerRequest::DirObjectRemove {
                        path,
                        ino,
                        client: None,
                    }
                };
                self.call_node(owner, Request::Peer(req)).await?;
                self.resolve_entry(dir, name, txid, commit).await?;
            }
            Intent::Rmdir { dir, name, ino, .. } => {
                let path = join(&dir, &name);
                let owner = self.dir_owner(&path);
                let commit = match self
                    .call_node(
                        owner,
                        Request::Peer(PeerRequest::DirObjectRemove {
                            path,
                            ino,
                            client: None,
                        }),
                    )
                    .await
                {
                    Ok(_) => true,
                    Err(FsError::NotEmpty | FsError::ReadOnly) => false,
                    Err(e) => return Err(e),
                };
                self.resolve_entry(dir, name, txid, commit).await?;
            }
            Intent::RenameOut {
                from_dir,
                from_name,
                to,
                dst_node: dst,
                decision,
                moves,
                ..
            } => {
                if decision == Decision::Commit {
                    self.finish_commit(txid, dst, &moves, false).await?;
                } else {
                    if decision == Decision::Undecided {
                        let decide = Mutation::RenameSourceDecide {
                            txid,
                            commit: false,
                            moves: Vec::new(),
                            incoming: None,
                        };
                        self.applier.run(decide).await?;
                    }
                    // Not committed: the source subtree is intact; find what was copied.
                    let st = self.state();
                    let target = Target {
                        ring: &st.ring,
                        tree: None,
                    };
                    let from = join(&from_dir, &from_name);
                    let walked = self.walk_moves(&from, &to, &target).await?;
                    self.undo_moves(txid, dst, &walked).await?;
                }
            }
            Intent::TreeMove {
                path,
                group,
                arriving,
                moves,
            } => {
                Box::pin(self.recover_tree_move(txid, &path, group, arriving, moves)).await?;
            }
            // The coordinator drives these.
            Intent::RenameIn { .. } | Intent::ExchangeIn { .. } | Intent::DirReplaced { .. } => {}
            Intent::RenameAborted { at_ns } => {
                let kept = self.env.now_ns().saturating_sub(at_ns);
                if kept > i64::try_from(ABORTED_KEPT.as_nanos()).unwrap_or(i64::MAX) {
                    self.applier.run(Mutation::DeleteIntent { txid }).await?;
                }
            }
            Intent::ChunkGc { .. } => self.run_gc(txid).await?,
            split @ Intent::SplitOut { .. } => self.recover_split(txid, split).await?,
        }
        Ok(())
    }
}

/// How long the destination of an aborted rename refuses a late prepare for it: far longer
/// than a request may take (its timeout), retries included.
pub(crate) const ABORTED_KEPT: std::time::Duration = std::time::Duration::from_secs(120);
