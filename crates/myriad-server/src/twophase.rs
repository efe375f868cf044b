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

use myriad_placement::NodeId;
use myriad_proto::{Caller, FsError, Inode, RenameFlags, Request};

use crate::intent::{Decision, Intent};
use crate::mutation::{Mutation, Outcome};
use crate::node::{MapState, Node, now_ns};

/// Removes a txid from the live set when the operation driving it ends, however it ends.
struct LiveGuard<'a> {
    node: &'a Node,
    txid: u64,
}

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut l) = self.node.live.lock() {
            l.remove(&self.txid);
        }
    }
}

impl Node {
    fn hold(&self, txid: u64) -> LiveGuard<'_> {
        if let Ok(mut l) = self.live.lock() {
            l.insert(txid);
        }
        LiveGuard { node: self, txid }
    }

    fn dir_owner(&self, path: &str) -> NodeId {
        self.state().ring.owner_of_dir(path)
    }

    pub(crate) async fn mkdir(
        self: &Arc<Self>,
        path: &str,
        dir: String,
        name: String,
        mode: u32,
        caller: &Caller,
    ) -> Result<Inode, FsError> {
        let begin = Mutation::MkdirBegin {
            dir: dir.clone(),
            name: name.clone(),
            mode,
            uid: caller.uid,
            gid: caller.gid,
            now: now_ns(),
        };
        let Outcome::Begun { txid, inode } = self.applier.run(begin).await? else {
            return Err(FsError::Io("unexpected outcome".into()));
        };
        let _live = self.hold(txid);
        let owner = self.dir_owner(path);
        match self
            .call_node(
                owner,
                Request::DirObjectCreate {
                    path: path.to_string(),
                    ino: inode.ino,
                },
            )
            .await
        {
            Ok(_) => {
                self.applier
                    .run(Mutation::ResolveEntry {
                        dir,
                        name,
                        txid,
                        commit: true,
                    })
                    .await?;
                Ok(inode)
            }
            Err(e) => {
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
                        Request::DirObjectRemove {
                            path: path.to_string(),
                            ino: inode.ino,
                        },
                    )
                    .await;
                if undo.is_ok() {
                    self.applier
                        .run(Mutation::ResolveEntry {
                            dir,
                            name,
                            txid,
                            commit: false,
                        })
                        .await?;
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
        let Outcome::Begun { txid, inode } = self
            .applier
            .run(Mutation::RmdirBegin {
                dir: dir.clone(),
                name: name.clone(),
            })
            .await?
        else {
            return Err(FsError::Io("unexpected outcome".into()));
        };
        let _live = self.hold(txid);
        let owner = self.dir_owner(path);
        match self
            .call_node(
                owner,
                Request::DirObjectRemove {
                    path: path.to_string(),
                    ino: inode.ino,
                },
            )
            .await
        {
            Ok(_) => {
                self.applier
                    .run(Mutation::ResolveEntry {
                        dir,
                        name,
                        txid,
                        commit: true,
                    })
                    .await?;
                Ok(())
            }
            Err(FsError::NotEmpty) => {
                self.applier
                    .run(Mutation::ResolveEntry {
                        dir,
                        name,
                        txid,
                        commit: false,
                    })
                    .await?;
                Err(FsError::NotEmpty)
            }
            // Unknown outcome: recovery asks the owner again and follows its answer.
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn rename(
        self: &Arc<Self>,
        st: &MapState,
        from: String,
        to: String,
        flags: RenameFlags,
    ) -> Result<(), FsError> {
        if from == to {
            self.lookup(&from).await?;
            return Ok(());
        }
        let dst_node = st.ring.owner_of_entry(&to);
        if dst_node == self.me {
            if let Outcome::Renamed(Some(gc)) = self
                .applier
                .run(Mutation::RenameLocal {
                    from,
                    to,
                    flags,
                    now: now_ns(),
                })
                .await?
            {
                self.spawn_gc(gc);
            }
            return Ok(());
        }
        let begin = Mutation::RenameSourceBegin {
            from,
            to: to.clone(),
            now: now_ns(),
        };
        let Outcome::RenameBegun {
            txid,
            inode,
            blocks,
        } = self.applier.run(begin).await?
        else {
            return Err(FsError::Io("unexpected outcome".into()));
        };
        let _live = self.hold(txid);
        let blocks = blocks
            .into_iter()
            .map(|(b, d)| (b, serde_bytes::ByteBuf::from(d)))
            .collect();
        let prepare = Request::RenamePrepare {
            txid,
            coordinator: self.me,
            to,
            inode,
            flags,
            blocks,
        };
        match self.call_node(dst_node, prepare).await {
            Ok(_) => {
                // The decision point: once this batch is durable the rename has happened.
                self.applier
                    .run(Mutation::RenameSourceDecide { txid, commit: true })
                    .await?;
                if self
                    .call_node(dst_node, Request::RenameCommit { txid })
                    .await
                    .is_ok()
                {
                    self.applier.run(Mutation::DeleteIntent { txid }).await?;
                }
                Ok(())
            }
            Err(e) => {
                self.applier
                    .run(Mutation::RenameSourceDecide {
                        txid,
                        commit: false,
                    })
                    .await?;
                if self
                    .call_node(dst_node, Request::RenameAbort { txid })
                    .await
                    .is_ok()
                {
                    self.applier.run(Mutation::DeleteIntent { txid }).await?;
                }
                Err(e)
            }
        }
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
            .map_err(crate::mutation::storage_err)?
            .and_then(|b| Intent::decode(&b))
        else {
            return Ok(());
        };
        let cs = self.state().map.chunk_size_bytes;
        if old_size > 0 {
            let first = (keep_bytes / cs).max(1);
            let last = (old_size - 1) / cs;
            for chunk in first..=last {
                let keep = keep_bytes.saturating_sub(chunk * cs).min(cs);
                let owner = self.state().ring.owner_of_chunk(ino, chunk);
                self.call_node(
                    owner,
                    Request::ChunkTrim {
                        ino,
                        chunk,
                        keep_bytes: keep,
                    },
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
        previous: &std::collections::HashSet<u64>,
        all: bool,
    ) -> std::collections::HashSet<u64> {
        let intents = match self.store.intents() {
            Ok(i) => i,
            Err(e) => {
                tracing::error!("cannot list intents: {e}");
                return previous.clone();
            }
        };
        let mut seen = std::collections::HashSet::new();
        for (txid, bytes) in intents {
            seen.insert(txid);
            let live = self.live.lock().map(|l| l.contains(&txid)).unwrap_or(true);
            if live || !(all || previous.contains(&txid)) {
                continue;
            }
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

    async fn recover_one(self: &Arc<Self>, txid: u64, intent: Intent) -> Result<(), FsError> {
        let _live = self.hold(txid);
        match intent {
            Intent::Mkdir {
                dir,
                name,
                ino,
                decision,
            } => {
                let path = join(&dir, &name);
                let owner = self.dir_owner(&path);
                let commit = decision != Decision::Abort;
                let req = if commit {
                    Request::DirObjectCreate { path, ino }
                } else {
                    Request::DirObjectRemove { path, ino }
                };
                self.call_node(owner, req).await?;
                self.applier
                    .run(Mutation::ResolveEntry {
                        dir,
                        name,
                        txid,
                        commit,
                    })
                    .await?;
            }
            Intent::Rmdir { dir, name, ino, .. } => {
                let path = join(&dir, &name);
                let owner = self.dir_owner(&path);
                let commit = match self
                    .call_node(owner, Request::DirObjectRemove { path, ino })
                    .await
                {
                    Ok(_) => true,
                    Err(FsError::NotEmpty) => false,
                    Err(e) => return Err(e),
                };
                self.applier
                    .run(Mutation::ResolveEntry {
                        dir,
                        name,
                        txid,
                        commit,
                    })
                    .await?;
            }
            Intent::RenameOut { to, decision, .. } => {
                let dst = self.state().ring.owner_of_entry(&to);
                let commit = decision == Decision::Commit;
                if decision == Decision::Undecided {
                    self.applier
                        .run(Mutation::RenameSourceDecide {
                            txid,
                            commit: false,
                        })
                        .await?;
                }
                let req = if commit {
                    Request::RenameCommit { txid }
                } else {
                    Request::RenameAbort { txid }
                };
                self.call_node(dst, req).await?;
                self.applier.run(Mutation::DeleteIntent { txid }).await?;
            }
            Intent::RenameIn { .. } => {} // The coordinator drives it.
            Intent::ChunkGc { .. } => {
                drop(_live);
                self.run_gc(txid).await?;
            }
        }
        Ok(())
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}
