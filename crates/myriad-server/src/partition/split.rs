//! Online splitting of huge directories (docs/huge-dirs.md "Split protocol").
//!
//! A node counts the names it adds to each directory; every `check_every` additions it
//! counts its shards of that directory exactly (a bounded scan) and splits the ones over the
//! threshold, one split at a time per directory.

use std::sync::Arc;
use std::time::Duration;

use myriad_placement::Shard;
use myriad_proto::{ExportedEntry, FileKind, Request, WireError};

use crate::commit::Context;
use crate::partition::core::Partition;
use crate::state::intent::{Decision, Intent};
use crate::state::mutation::{Mutation, ShardMutation, storage_err};
use crate::state::outcome_kinds::SplitBegun;
use myriad_placement::join;
use myriad_proto::InodeId;
use myriad_proto::PeerRequest;

/// Directories whose additions are counted at once; beyond it the counts start over.
const COUNTED_DIRS_MAX: usize = 100_000;
/// Entries (and bytes of chunk-0 data) per page of a split's copy.
const PAGE_ENTRIES_MAX: usize = 1024;
const PAGE_BYTES_MAX: usize = 2 * 1024 * 1024;
/// How long a split waits for pending operations in its moving half before giving up.
const PENDING_PATIENCE: Duration = Duration::from_secs(2);

impl Partition {
    /// Called after a name was added to `dir` here: may start a split check.
    pub(crate) fn note_added(self: &Arc<Self>, dir: &str) {
        let threshold = self.env.config().dir_split_entries;
        if threshold == 0 || self.state().map.partitions.len() < 2 {
            return;
        }
        let check_every = (threshold / 8).max(1);
        let due = {
            let Ok(mut added) = self.splits.added.lock() else {
                return;
            };
            // No allocation on the hot path: the directory's name is copied only the first
            // time it is counted.
            let n = match added.get_mut(dir) {
                Some(n) => n,
                None => {
                    if added.len() >= COUNTED_DIRS_MAX {
                        added.clear();
                    }
                    added.entry(dir.to_string()).or_insert(0)
                }
            };
            *n += 1;
            if *n >= check_every {
                *n = 0;
                true
            } else {
                false
            }
        };
        if due {
            self.check_splits(dir);
        }
    }

    /// Looks for shards of `dir` here to split, in the background (one look at a time per
    /// directory): after every `check_every` additions, and when a split's child was
    /// revealed here (a huge directory's shards split on down to the spread depth).
    pub(crate) fn check_splits(self: &Arc<Self>, dir: &str) {
        if self.env.config().dir_split_entries == 0 {
            return;
        }
        let Ok(mut running) = self.splits.running.lock() else {
            return;
        };
        if !running.insert(dir.to_string()) {
            return;
        }
        let node = self.clone();
        let dir = dir.to_string();
        tokio::spawn(async move {
            if let Err(e) = node.split_oversized(&dir).await {
                tracing::debug!("split check of {dir}: {e}");
            }
            if let Ok(mut running) = node.splits.running.lock() {
                running.remove(&dir);
            }
        });
    }

    /// Splits every shard of `dir` on this node that is over its trigger
    /// (`Ring::split_trigger`: the threshold for an unsplit directory, less in a group of many
    /// partitions, then less and less the deeper the shard, so a huge directory spreads at
    /// once). The lower half stays here and is looked at again, so one call splits this
    /// node's part down to the spread depth.
    pub(super) async fn split_oversized(self: &Arc<Self>, dir: &str) -> Result<(), WireError> {
        let threshold = self.env.config().dir_split_entries;
        loop {
            let Some(rec) = self.store.dir(dir).map_err(storage_err)? else {
                return Ok(());
            };
            let st = self.state();
            let mut target = None;
            for s in &rec.shards {
                if s.splitting.is_some() || s.hidden.is_some() || !st.ring.can_split(dir, s.shard) {
                    continue;
                }
                let Some(trigger) = st.ring.split_trigger(dir, s.shard, threshold) else {
                    continue;
                };
                let trigger = usize::try_from(trigger).unwrap_or(usize::MAX);
                let n = self
                    .store
                    .count_entries_in(
                        dir,
                        s.shard.start(),
                        s.shard.end(),
                        trigger.saturating_add(1),
                    )
                    .map_err(storage_err)?;
                if n > trigger {
                    target = Some(s.shard);
                    break;
                }
            }
            match target {
                Some(shard) => self.split(dir, shard).await?,
                None => return Ok(()),
            }
        }
    }

    /// Splits `shard` of `dir` (held here): its upper half moves to the child's node.
    pub(crate) async fn split(self: &Arc<Self>, dir: &str, shard: Shard) -> Result<(), WireError> {
        let begin = Mutation::Shard(ShardMutation::SplitBegin {
            dir: dir.to_string(),
            shard,
        });
        let (SplitBegun { txid, ino }, _live) = self.begin(&Context::background(), begin).await?;
        tracing::debug!(
            partition = %self.me,
            txid,
            "split of {dir} shard {} begun",
            shard.label()
        );
        let started = tokio::time::Instant::now();
        let child = shard.halves().1;
        let moved_dirs = match self.copy_upper_half(dir, ino, txid, shard).await {
            Ok(d) => d,
            Err(e) => {
                tracing::info!("split of {dir} shard {} abandoned: {e}", shard.label());
                self.undo_split(dir, ino, txid, shard).await;
                return Err(e);
            }
        };
        if let Err(e) = self
            .applier
            .run(Mutation::Shard(ShardMutation::SplitCommit { txid }))
            .await
        {
            // Undone by recovery meanwhile (its intent gone or decided Abort): what
            // copy_upper_half did after that undo (the child's copy, the home's map) is undone
            // the same way. Otherwise (the disk failed, the decision may stand) recovery
            // decides from the intent.
            let abandoned = !matches!(
                self.store
                    .intent(txid)
                    .map_err(storage_err)?
                    .and_then(|b| Intent::decode(&b)),
                Some(Intent::SplitOut {
                    decision: Decision::Commit | Decision::Undecided,
                    ..
                })
            );
            if abandoned {
                tracing::info!(
                    "split of {dir} shard {} was undone meanwhile: {e}",
                    shard.label()
                );
                self.undo_split(dir, ino, txid, shard).await;
            }
            return Err(e);
        }
        // Replicas of moved directories' permissions were subscribed here; their changes
        // are now made at the child's node, which does not know those subscribers.
        for name in moved_dirs {
            self.notify_subscribers(&join(dir, &name), None).await;
        }
        self.finish_split(dir, txid, child).await?;
        self.env.count_split();
        tracing::info!(
            "split {dir} shard {} -> {} + {} (node {}) in {} ms",
            shard.label(),
            shard.halves().0.label(),
            child.label(),
            self.state().ring.owner_of_shard(dir, child),
            started.elapsed().as_millis()
        );
        Ok(())
    }

    /// Copies the upper half of a splitting shard to the child's node and records the
    /// split in the home's map. Everything here is undone by `undo_split`. Returns the names
    /// of the directories that moved.
    pub(super) async fn copy_upper_half(
        self: &Arc<Self>,
        dir: &str,
        ino: InodeId,
        txid: u64,
        shard: Shard,
    ) -> Result<Vec<String>, WireError> {
        let mut moved_dirs = Vec::new();
        let st = self.state();
        let child = shard.halves().1;
        let target = st.ring.owner_of_shard(dir, child);
        let deadline = tokio::time::Instant::now() + PENDING_PATIENCE;
        let mut after: Option<String> = None;
        loop {
            let (entries, next) = match self.export_page(dir, child, after.as_deref()) {
                Err(WireError::Busy) if tokio::time::Instant::now() < deadline => {
                    // An operation in flight on a moving name: let it finish first.
                    tokio::time::sleep(crate::backoff::BUSY_ENTRY_RETRY).await;
                    continue;
                }
                other => other?,
            };
            moved_dirs.extend(
                entries
                    .iter()
                    .filter(|e| e.inode.kind == FileKind::Directory)
                    .map(|e| e.name.clone()),
            );
            let req = PeerRequest::ShardImport {
                dir: dir.to_string(),
                ino,
                txid,
                child,
                entries,
            };
            match self.call_node(target, Request::Peer(req)).await {
                // A file of the page is one an exchange at the child's node is taking
                // away from there, not resolved yet (`refuse_entries_leaving_here`): the
                // page goes again once it is (an import of a page is idempotent).
                Err(WireError::Busy) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(crate::backoff::BUSY_ENTRY_RETRY).await;
                    continue;
                }
                other => other?,
            };
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let home = st.ring.owner_of_dir(dir);
        let req = PeerRequest::ShardMapChange {
            dir: dir.to_string(),
            ino,
            shard,
            split: true,
        };
        self.call_node(home, Request::Peer(req)).await?;
        Ok(moved_dirs)
    }

    /// A page of the entries of `dir` in `range` with the chunk-0 blocks of its files, for a
    /// split or a directory rename. `Busy` if an entry has a multi-node operation pending (it
    /// must finish before the entry moves). Pages stop after ~2 MiB of data so a reply stays
    /// within a frame.
    pub(crate) fn export_page(
        &self,
        dir: &str,
        range: Shard,
        after: Option<&str>,
    ) -> Result<(Vec<ExportedEntry>, Option<String>), WireError> {
        let cs = self.state().map.chunk_size_bytes;
        let c0 = cs / myriad_storage::BLOCK_BYTES;
        let page = self
            .store
            .entries_in(dir, range.start(), after, range.end(), PAGE_ENTRIES_MAX)
            .map_err(storage_err)?;
        let full = page.len() == PAGE_ENTRIES_MAX;
        let mut out = Vec::with_capacity(page.len());
        let mut bytes = 0usize;
        for (_, name, e) in page {
            let (Some(inode), None) = (e.inode, e.pending) else {
                return Err(WireError::Busy);
            };
            let blocks = if inode.kind == FileKind::File {
                self.store.blocks(inode.ino, 0, c0).map_err(storage_err)?
            } else {
                Vec::new()
            };
            bytes += blocks.iter().map(|b| b.1.len()).sum::<usize>();
            out.push(ExportedEntry {
                name: name.clone(),
                inode,
                blocks: blocks
                    .into_iter()
                    .map(|(b, d)| (b, serde_bytes::ByteBuf::from(d)))
                    .collect(),
            });
            if bytes >= PAGE_BYTES_MAX {
                return Ok((out, Some(name)));
            }
        }
        let next = if full {
            out.last().map(|e| e.name.clone())
        } else {
            None
        };
        Ok((out, next))
    }

    /// Rolls back a split that did not reach its decision: the home forgets the child, then
    /// the shard accepts writes again (the intent is kept, decided `Abort`), then the child's
    /// node drops its copy and the intent goes. Whatever a dead peer stops here, recovery
    /// repeats; writes wait only for the home, never for the child's node.
    pub(crate) async fn undo_split(
        self: &Arc<Self>,
        dir: &str,
        ino: InodeId,
        txid: u64,
        shard: Shard,
    ) {
        tracing::info!(
            partition = %self.me,
            txid,
            "undoing split of {dir} shard {}",
            shard.label()
        );
        let st = self.state();
        let child = shard.halves().1;
        let unmap = PeerRequest::ShardMapChange {
            dir: dir.to_string(),
            ino,
            shard,
            split: false,
        };
        let drop = PeerRequest::ShardFinish {
            dir: dir.to_string(),
            txid,
            child,
            reveal: false,
        };
        let undone = async {
            match self
                .call_node(st.ring.owner_of_dir(dir), Request::Peer(unmap))
                .await
            {
                // The directory is gone from its home (removed or renamed away): no map to fix.
                Ok(_) | Err(WireError::NotFound) => {}
                Err(e) => return Err(e),
            }
            self.applier
                .run(Mutation::Shard(ShardMutation::SplitAbort { txid }))
                .await?;
            self.call_node(st.ring.owner_of_shard(dir, child), Request::Peer(drop))
                .await?;
            self.applier.run(Mutation::DeleteIntent { txid }).await
        };
        if let Err(e) = undone.await {
            tracing::warn!("undoing split {txid} of {dir}: {e}; recovery will retry");
        }
    }

    /// After the decision: the child becomes visible at its node; the intent goes.
    pub(super) async fn finish_split(
        self: &Arc<Self>,
        dir: &str,
        txid: u64,
        child: Shard,
    ) -> Result<(), WireError> {
        let node = self.state().ring.owner_of_shard(dir, child);
        let reveal = PeerRequest::ShardFinish {
            dir: dir.to_string(),
            txid,
            child,
            reveal: true,
        };
        self.call_node(node, Request::Peer(reveal)).await?;
        self.applier.run(Mutation::DeleteIntent { txid }).await?;
        Ok(())
    }

    /// Recovery of a `SplitOut` intent no live operation owns.
    pub(crate) async fn recover_split(
        self: &Arc<Self>,
        txid: u64,
        intent: Intent,
    ) -> Result<(), WireError> {
        let Intent::SplitOut {
            dir,
            shard,
            ino,
            decision,
        } = intent
        else {
            return Ok(());
        };
        tracing::info!(
            partition = %self.me,
            txid,
            ?decision,
            "recovering split of {dir} shard {}",
            shard.label()
        );
        if decision == Decision::Commit {
            return self.finish_split(&dir, txid, shard.halves().1).await;
        }
        self.undo_split(&dir, ino, txid, shard).await;
        Ok(())
    }
}
