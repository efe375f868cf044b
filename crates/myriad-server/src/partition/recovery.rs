//! Recovery of two-partition operations a crash or an error interrupted
//! (`twophase.rs`, "If it fails or crashes between 1 and 3"): every intent no live
//! operation owns is finished, each as its kind says.

use std::sync::Arc;

use myriad_placement::join;
use myriad_proto::{Request, WireError};

use crate::commit::Context;
use crate::partition::core::Partition;
use crate::partition::dir_rename::Target;
use crate::partition::made::Made;
use crate::partition::twophase::ABORTED_KEPT;
use crate::state::intent::{Decision, Intent};
use crate::state::mutation::Mutation;
use myriad_proto::PeerRequest;

impl Partition {
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

    /// Drives intent `txid` to its end. The caller holds the txid (`recover_listed`).
    pub(super) async fn recover_one(
        self: &Arc<Self>,
        txid: u64,
        intent: Intent,
    ) -> Result<(), WireError> {
        match intent {
            Intent::Mkdir {
                dir,
                name,
                ino,
                depth,
                decision,
            } => {
                let _change = self.hold_awaited(txid).await?;
                let path = join(&dir, &name);
                let owner = self.dir_owner(&path);
                let commit = decision != Decision::Abort;
                let req = if commit {
                    PeerRequest::DirObjectCreate {
                        path: path.clone(),
                        ino,
                        depth,
                    }
                } else {
                    PeerRequest::DirObjectRemove {
                        path: path.clone(),
                        ino,
                        client: None,
                    }
                };
                self.call_node(owner, Request::Peer(req)).await?;
                self.resolve_entry(&Context::background(), dir.clone(), name, txid, commit)
                    .await?;
                if commit {
                    self.confirm_dir_object(owner, &path, ino);
                    // As `client_mkdir` does: the parent's times and link count follow
                    // (chaos_long met a parent still counting a directory recovery had
                    // removed).
                    self.touch_dir(&dir, &Made::now()).await;
                }
            }
            Intent::Rmdir { dir, name, ino, .. } => {
                let _change = self.hold_awaited(txid).await?;
                let path = join(&dir, &name);
                let owner = self.dir_owner(&path);
                let commit = match self
                    .call_node(
                        owner,
                        Request::Peer(PeerRequest::DirObjectRemove {
                            path: path.clone(),
                            ino,
                            client: None,
                        }),
                    )
                    .await
                {
                    Ok(_) => true,
                    Err(WireError::NotEmpty | WireError::ReadOnly | WireError::Busy) => false,
                    Err(e) => return Err(e),
                };
                if commit {
                    // As `rmdir` does: replicas of the removed directory's permissions go
                    // before the name is free (chaos_long: a directory made again at the
                    // path was judged by the old one's setgid and group for a lease).
                    self.notify_subscribers(&path, None).await;
                }
                self.resolve_entry(&Context::background(), dir.clone(), name, txid, commit)
                    .await?;
                if commit {
                    self.touch_dir(&dir, &Made::now()).await;
                }
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
                    self.finish_commit(&Context::background(), txid, dst, &moves, false)
                        .await?;
                    if !moves.is_empty() {
                        // As `rename` does: replicated permissions of the moved directory's
                        // old paths go, and those of one it replaced.
                        self.broadcast_invalidate(&join(&from_dir, &from_name))
                            .await;
                        self.broadcast_invalidate(&to).await;
                    }
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
                    self.undo_moves(&Context::background(), txid, dst, &walked)
                        .await?;
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
            Intent::RenameIn { .. }
            | Intent::RenameInKeeping { .. }
            | Intent::ExchangeIn { .. }
            | Intent::DirReplaced { .. } => {}
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
