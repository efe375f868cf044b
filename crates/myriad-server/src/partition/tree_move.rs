//! A tree moving between placements because its policy was set on it, or cleared from it,
//! while it exists (docs/zones.md section 3).
//!
//! The map says the policy is `Arriving` or `Leaving`; clients and servers still place the
//! tree where it is. The partition holding the tree root's entry (in its parent, which does
//! not move) coordinates, as it would a directory rename onto the same path:
//!
//! 1. intent `TreeMove` (durable);
//! 2. every directory object of the tree, top down, is frozen (writes get `Busy`, reads go
//!    on), exported and imported hidden where `Ring::target` places it (`copy_subtree`);
//!    directories under a nested policy keep their place;
//! 3. the moves are recorded in the intent; then the map settles the policy: **the
//!    decision** (clients place the tree where the copies are from that epoch on). The map
//!    changes only through epochs that follow each other, and the coordinator bases the
//!    change on a map in which its server is the partition's primary, so a deposed
//!    coordinator cannot decide once a new primary (whose recovery undoes) is in the map;
//! 4. the old objects are dropped (each old partition applies it only once its server
//!    follows the deciding map, as every request from a newer map waits for that; so does
//!    each of its copies, whose loans of reads end with that map), replicated attributes
//!    under the root are invalidated, the copies revealed (readers of them waited), the
//!    intent deleted.
//!
//! Before the decision any failure drops the copies and thaws the originals; the move is
//! tried again on a later tick, and after `TRIES` failures in a row abandoned (the map
//! forgets it). Recovery of the intent: decided, it repeats step 4 from the recorded moves;
//! not decided, it undoes (the original tree is intact) and the tick starts again.

use std::sync::Arc;

use myriad_placement::{ClusterMap, PolicyState};
use myriad_proto::{DirAction, FileKind, PeerRequest, Request, WireError};

use crate::commit::Context;
use crate::partition::core::Partition;
use crate::partition::dir_rename::Target;
use crate::state::intent::{DirMove, Intent};
use crate::state::mutation::Mutation;
use crate::state::outcome_kinds::TreeMoveBegun;

/// Tries of a move (each undone after a failure) before it is abandoned.
pub(crate) const TRIES: u32 = 5;

/// What became of the move of `group`'s tree, as `map` says: `None` still moving,
/// `Some(true)` settled (the tree is placed where it was copied to), `Some(false)`
/// abandoned. Read from every state a policy can reach after that move, not only the
/// next one: a settled arrival may be leaving again by the time recovery looks
/// (simulation seed 9 with --tree-moves: recovery took such a move for undecided and
/// "undid" it towards the new move's target, leaving the tree frozen). An arrival always
/// makes a new group; a group leaving again after an abandoned leave did so only once
/// that move's intent was gone (it is abandoned only after its undo).
fn outcome(map: &ClusterMap, group: u32, arriving: bool) -> Option<bool> {
    let state = map
        .policies
        .iter()
        .find(|p| p.group == group)
        .map(|p| p.state);
    match (arriving, state) {
        (true, Some(PolicyState::Arriving)) | (false, Some(PolicyState::Leaving)) => None,
        (true, Some(_)) | (false, Some(PolicyState::Retired)) => Some(true),
        (true, None) | (false, _) => Some(false),
    }
}

impl Partition {
    /// One tick of the tree-move task: if the map asks for a move this partition
    /// coordinates (it holds the root's entry) and none is under way here, runs it.
    /// `failures`: tries of this policy's move that failed in a row (the caller counts);
    /// from `TRIES` on, the move is abandoned instead. Returns whether a try failed.
    pub(crate) async fn tree_move_tick(self: &Arc<Self>, failures: u32) -> Option<u32> {
        let st = self.state();
        let pol = st.map.moving_policy()?.clone();
        if st.ring.owner_of_entry(&pol.path) != self.me || !self.env.serves(self.me) {
            return None;
        }
        // One at a time: a move's intent here is being driven, or recovered.
        let intents = self.store.intents().ok()?;
        if intents
            .iter()
            .any(|(_, b)| matches!(Intent::decode(b), Some(Intent::TreeMove { .. })))
        {
            return None;
        }
        let arriving = pol.state == PolicyState::Arriving;
        if failures >= TRIES {
            match self.decide_tree_move(pol.group, arriving, false).await {
                Ok(_) => {
                    tracing::warn!(path = %pol.path, "tree move abandoned after {TRIES} tries")
                }
                Err(e) => tracing::warn!(path = %pol.path, "abandoning a tree move: {e}"),
            }
            return Some(pol.group);
        }
        match self.move_tree(&pol.path, pol.group, arriving).await {
            Ok(()) => None,
            Err(e) => {
                tracing::info!(path = %pol.path, "tree move not done, tried again: {e}");
                Some(pol.group)
            }
        }
    }

    /// Moves the tree at `path` to the placement the map heads for (module comment).
    async fn move_tree(
        self: &Arc<Self>,
        path: &str,
        group: u32,
        arriving: bool,
    ) -> Result<(), WireError> {
        let begin = Mutation::TreeMoveBegin {
            path: path.to_string(),
            group,
            arriving,
        };
        let (TreeMoveBegun { txid }, _live) = self.begin(&Context::background(), begin).await?;
        let st = self.state();
        // The target is the moving policy's: with no move in the map it would be where
        // the tree already is (copies onto their originals).
        if outcome(&st.map, group, arriving).is_some() {
            self.applier.run(Mutation::DeleteIntent { txid }).await?;
            return Err(WireError::Busy);
        }
        let target = Target {
            ring: st.target_ring(),
            tree: Some(path),
        };
        let mut moves = Vec::new();
        let copied = match self.lookup(path).await {
            Ok(root) if root.kind == FileKind::Directory => {
                self.copy_subtree(txid, path, path, root.ino, None, &mut moves, &target)
                    .await
            }
            // Nothing under it to move: the policy only places what comes.
            Ok(_) | Err(WireError::NotFound) => Ok(()),
            Err(e) => Err(e),
        };
        let recorded = match copied {
            Ok(()) => {
                let record = Mutation::TreeMoveRecord {
                    txid,
                    moves: moves.clone(),
                };
                self.applier.run(record).await.map(|_| ())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = recorded {
            self.undo_tree_move(txid, &moves, &target).await;
            return Err(e);
        }
        match self.decide_tree_move(group, arriving, true).await {
            Ok(true) => {
                self.finish_tree_move(txid, path, &moves).await?;
                tracing::info!(path, directories = moves.len(), "tree moved");
                Ok(())
            }
            Ok(false) => {
                self.undo_tree_move(txid, &moves, &target).await;
                Err(WireError::Io("the move was abandoned meanwhile".into()))
            }
            // In doubt (the change may have landed): recovery looks at the map.
            Err(e) => Err(e),
        }
    }

    /// Undoes the copies of a move that did not reach its decision; leaves the intent to
    /// recovery if a partition cannot be reached.
    async fn undo_tree_move(self: &Arc<Self>, txid: u64, moves: &[DirMove], target: &Target<'_>) {
        let undone = match self.undo_copies(txid, moves, target).await {
            Ok(()) => self
                .applier
                .run(Mutation::DeleteIntent { txid })
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = undone {
            tracing::warn!(txid, "tree move undo deferred to recovery: {e}");
        }
    }

    /// Settles (`settle`) or abandons the move of `group`'s tree through the map: `Ok(true)`
    /// once it is settled, `Ok(false)` once abandoned (by whichever change landed).
    async fn decide_tree_move(
        self: &Arc<Self>,
        group: u32,
        arriving: bool,
        settle: bool,
    ) -> Result<bool, WireError> {
        let mut last = WireError::Unavailable("the cluster map kept changing".into());
        let mut pace = crate::backoff::NESTED_CALL;
        for _ in 0..10 {
            let map = self.state().map.clone();
            if let Some(done) = outcome(&map, group, arriving) {
                return Ok(done);
            }
            // Decided only by this partition's primary under the map it decides on.
            if map.primary_of(self.me) != Some(self.env.server_id()) || !self.env.serves(self.me) {
                return Err(WireError::Unavailable(
                    "this server no longer coordinates the move".into(),
                ));
            }
            let next = if settle {
                map.settle_move(group)
            } else {
                map.abandon_move(group)
            };
            let Some(next) = next else { continue };
            match self.env.commit_map(next).await {
                Ok(now) => {
                    if let Some(done) = outcome(&now, group, arriving) {
                        return Ok(done);
                    }
                }
                Err(e) => last = e,
            }
            pace.wait().await;
        }
        Err(last)
    }

    /// After the decision: the old objects go, replicated attributes under the root are
    /// invalidated (a holder asks the new owners again: the copies are hidden until the
    /// reveal, so it waits for them), the copies are revealed, the intent deleted.
    /// Idempotent; recovery repeats it.
    async fn finish_tree_move(
        self: &Arc<Self>,
        txid: u64,
        path: &str,
        moves: &[DirMove],
    ) -> Result<(), WireError> {
        for m in moves {
            // The old places as recorded: the map now places the path elsewhere.
            for &node in &m.old_nodes {
                let req = PeerRequest::DirFinish {
                    path: m.old.clone(),
                    txid,
                    action: DirAction::Drop {
                        keep_blocks_of: None,
                    },
                };
                self.call_node(node, Request::Peer(req)).await?;
            }
        }
        if !moves.is_empty() {
            self.broadcast_invalidate(path).await;
        }
        self.reveal_and_end(&Context::background(), txid, moves)
            .await
    }

    /// Recovery of a `TreeMove` intent no live move holds.
    pub(super) async fn recover_tree_move(
        self: &Arc<Self>,
        txid: u64,
        path: &str,
        group: u32,
        arriving: bool,
        moves: Vec<DirMove>,
    ) -> Result<(), WireError> {
        let st = self.state();
        match outcome(&st.map, group, arriving) {
            Some(true) => self.finish_tree_move(txid, path, &moves).await,
            // Abandoned only after its copies were undone: nothing is left but the intent.
            Some(false) => {
                self.applier.run(Mutation::DeleteIntent { txid }).await?;
                Ok(())
            }
            None => {
                let target = Target {
                    ring: st.target_ring(),
                    tree: Some(path),
                };
                // Not decided: the tree is intact where it was; find what was copied.
                let moves = if moves.is_empty() {
                    self.walk_moves(path, path, &target).await?
                } else {
                    moves
                };
                self.undo_copies(txid, &moves, &target).await?;
                self.applier.run(Mutation::DeleteIntent { txid }).await?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_is_decided_by_the_state_its_policy_reaches() {
        let addrs: Vec<String> = (1..=4).map(|i| format!("127.0.0.1:{i}")).collect();
        let zones = vec!["a".to_string(), "b".to_string()];
        let m = ClusterMap::build_in_zones(1, &addrs, &zones, 2, 2);
        let arriving = m
            .with_policy_arriving("/t", "a", 2, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        let g = arriving.moving_policy().map_or(0, |p| p.group);
        assert_eq!(outcome(&arriving, g, true), None);
        let settled = arriving.settle_move(g).unwrap_or_else(|| panic!("moving"));
        assert_eq!(outcome(&settled, g, true), Some(true));
        let abandoned = arriving.abandon_move(g).unwrap_or_else(|| panic!("moving"));
        assert_eq!(outcome(&abandoned, g, true), Some(false));
        let leaving = settled
            .with_policy_leaving("/t")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outcome(&leaving, g, false), None);
        // A settled arrival stays settled when its tree starts leaving again.
        assert_eq!(outcome(&leaving, g, true), Some(true));
        let out = leaving.settle_move(g).unwrap_or_else(|| panic!("moving"));
        assert_eq!(outcome(&out, g, false), Some(true));
        assert_eq!(outcome(&out, g, true), Some(true));
        let back = leaving.abandon_move(g).unwrap_or_else(|| panic!("moving"));
        assert_eq!(outcome(&back, g, false), Some(false));
    }
}
