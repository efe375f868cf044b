//! The steps of a directory rename between partitions (`twophase.rs` runs the protocol):
//! checking the destination, copying the subtree to the partitions its new paths hash to,
//! then revealing the copies and dropping the old parts, or undoing either. A tree moving
//! between zones (`tree_move.rs`) copies with the same steps.

use std::sync::Arc;

use myriad_placement::{PartitionId, join};
use myriad_proto::ask;
use myriad_proto::reply::{DirPage, Exported};
use myriad_proto::{DirAction, FileKind, RenameFlags, Request, WireError};

use crate::commit::Context;
use crate::partition::core::Partition;
use crate::state::intent::DirMove;
use crate::state::mutation::Mutation;
use myriad_placement::Shard;
use myriad_proto::InodeId;
use myriad_proto::PeerRequest;

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
    /// Checks where a directory is to move: `to`'s parent must be a directory and `to`
    /// free, or an existing directory that the move will replace if it is empty (returned:
    /// its inode; emptiness is checked when its object is taken over, in `copy_subtree`).
    pub(super) async fn check_dir_destination(
        self: &Arc<Self>,
        to: &str,
        flags: RenameFlags,
    ) -> Result<Option<InodeId>, WireError> {
        let parent = myriad_placement::parent_of(to).to_string();
        if self.ask_entry(&parent, ask::stat(&parent)).await?.kind != FileKind::Directory {
            return Err(WireError::NotADirectory);
        }
        match self.ask_entry(to, ask::stat(to)).await {
            Err(WireError::NotFound) => Ok(None),
            Ok(_) if flags.no_replace => Err(WireError::AlreadyExists),
            Ok(i) if i.kind == FileKind::Directory => Ok(Some(i.ino)),
            Ok(_) => Err(WireError::NotADirectory),
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
    ) -> Result<(), WireError> {
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
                    let export = ask::dir_export(&old, txid, after.clone());
                    let Exported { entries, next } = self.ask_node(node, export).await?;
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
                        let import = PeerRequest::DirImport(myriad_proto::requests::DirImport {
                            path: new.clone(),
                            txid,
                            ino: dir_ino,
                            shards: parts.get(&to_node).cloned().unwrap_or_default(),
                            map: (to_node == new_home).then(|| m.map.clone()).flatten(),
                            entries,
                            replaces: replaces.filter(|_| new == to),
                        });
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
                let import = PeerRequest::DirImport(myriad_proto::requests::DirImport {
                    path: new.clone(),
                    txid,
                    ino: dir_ino,
                    shards: shards.clone(),
                    map: (*node == new_home).then(|| m.map.clone()).flatten(),
                    entries: Vec::new(),
                    replaces: replaces.filter(|_| new == to),
                });
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
    ) -> Result<myriad_placement::ShardMap, WireError> {
        let get = ask::get_shard_map(dir);
        Ok(*self.ask_node(self.dir_owner(dir), get).await?)
    }

    /// The subdirectory names of `dir`, from every shard (`None` if `dir` is not there).
    pub(super) async fn subdirectories(
        self: &Arc<Self>,
        dir: &str,
        map: &myriad_placement::ShardMap,
    ) -> Result<Option<Vec<String>>, WireError> {
        let st = self.state();
        let mut out = Vec::new();
        for leaf in &map.leaves {
            let node = st.ring.owner_of_shard(dir, *leaf);
            let (mut from, mut after) = (leaf.start(), None::<String>);
            loop {
                let page = ask::read_dir(
                    dir,
                    (from, after.clone()),
                    myriad_proto::limits::READDIR_PAGE_MAX,
                );
                let (entries, next, end) = match self.ask_node(node, page).await {
                    Ok(DirPage {
                        entries,
                        next,
                        shard_end,
                        ..
                    }) => (entries, next, shard_end),
                    Err(WireError::NotFound) => return Ok(None),
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
        ctx: &Context,
        txid: u64,
        dst_node: PartitionId,
        moves: &[DirMove],
        visible: bool,
    ) -> Result<(), WireError> {
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
            client: ctx.client(),
            visible,
        };
        self.call_node(dst_node, Request::Peer(commit)).await?;
        if visible {
            return Ok(());
        }
        self.reveal_and_end(ctx, txid, moves).await
    }

    /// The last steps after a decision: the copies of `moves` are revealed where the map
    /// now places them (their readers waited until then), and the intent is deleted.
    pub(super) async fn reveal_and_end(
        self: &Arc<Self>,
        ctx: &Context,
        txid: u64,
        moves: &[DirMove],
    ) -> Result<(), WireError> {
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
        self.applier
            .run_in(ctx, Mutation::DeleteIntent { txid })
            .await?;
        Ok(())
    }

    /// Undoes a rename that did not reach its decision; leaves the intent for recovery if a
    /// node cannot be reached.
    pub(super) async fn abort_rename(
        self: &Arc<Self>,
        ctx: &Context,
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
        if let Err(e) = self.applier.run_in(ctx, decide).await {
            tracing::warn!(txid, "rename abort deferred to recovery: {e}");
            return;
        }
        if let Err(e) = self.undo_moves(ctx, txid, dst_node, moves).await {
            tracing::warn!(txid, "rename abort deferred to recovery: {e}");
        }
    }

    pub(super) async fn undo_moves(
        self: &Arc<Self>,
        ctx: &Context,
        txid: u64,
        dst_node: PartitionId,
        moves: &[DirMove],
    ) -> Result<(), WireError> {
        let st = self.state();
        let target = Target {
            ring: &st.ring,
            tree: None,
        };
        self.undo_copies(txid, moves, &target).await?;
        self.call_node(dst_node, Request::Peer(PeerRequest::RenameAbort { txid }))
            .await?;
        self.applier
            .run_in(ctx, Mutation::DeleteIntent { txid })
            .await?;
        Ok(())
    }

    /// Drops the hidden copies of `moves` (placed by `target`) and thaws their originals,
    /// deepest first: an undo that stops half-way leaves every directory whose child is
    /// still copied frozen, so no entry of its can go and the next undo's walk of the
    /// originals finds every copy again.
    pub(super) async fn undo_copies(
        self: &Arc<Self>,
        txid: u64,
        moves: &[DirMove],
        target: &Target<'_>,
    ) -> Result<(), WireError> {
        for m in moves.iter().rev() {
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
    ) -> Result<Vec<DirMove>, WireError> {
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
}
