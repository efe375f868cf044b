//! The single writer and the group commit.
//!
//! ```text
//! request tasks ──Job──> applier thread: validate + commit batch (visible, not yet durable)
//!                              │ (reply, outcome) pairs
//!                              v
//!                        syncer thread: one fsync for everything queued, then reply to all
//! ```
//! One thread applies every mutation of this node in order, so validations never race. The
//! syncer drains whatever has queued up while the previous fsync ran and covers it with one
//! fsync: concurrent requests share the cost (group commit), and the applier keeps applying
//! while the disk syncs (pipelining). No reply leaves before the fsync covering its batch.
//!
//! Known relaxation: a batch is visible to readers on this node between commit and fsync
//! (typically < 1 ms). A crash in that window loses a write that was never acknowledged but
//! may have been read. Acknowledged writes are never lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use myriad_proto::FsError;
use myriad_storage::Store;
use tokio::sync::{mpsc, oneshot, watch};

use crate::mutation::{Ctx, IdAlloc, Layout, Mutation, Outcome, execute, storage_err};

type Reply = oneshot::Sender<Result<Outcome, FsError>>;

struct Job {
    mutation: Mutation,
    reply: Reply,
    /// false: reply once applied; the fsync still follows at once.
    durable: bool,
}

/// Mutations applied per round before handing to the syncer, so replies are not held back by
/// an endless stream of new work.
const ROUND_MAX: usize = 512;

#[derive(Default)]
pub struct SyncStats {
    pub syncs: AtomicU64,
    pub synced_mutations: AtomicU64,
}

#[derive(Clone)]
pub struct Applier {
    tx: mpsc::UnboundedSender<Job>,
    pub stats: Arc<SyncStats>,
}

impl Applier {
    /// Starts the applier and syncer threads. `changed` is bumped after every group commit so
    /// readers waiting on a pending entry look again.
    pub fn start(
        store: Store,
        ids: IdAlloc,
        layout: Layout,
        changed: watch::Sender<u64>,
    ) -> std::io::Result<Applier> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let (stx, srx) = std::sync::mpsc::channel::<Vec<(Reply, Outcome)>>();
        let stats = Arc::new(SyncStats::default());

        let apply_store = store.clone();
        std::thread::Builder::new()
            .name("myriad-applier".into())
            .spawn(move || {
                let mut ids = ids;
                while let Some(first) = rx.blocking_recv() {
                    let mut jobs = vec![first];
                    while jobs.len() < ROUND_MAX {
                        match rx.try_recv() {
                            Ok(j) => jobs.push(j),
                            Err(_) => break,
                        }
                    }
                    let mut done = Vec::with_capacity(jobs.len());
                    let mut must_sync = false;
                    for job in jobs {
                        let mut ctx = Ctx {
                            store: &apply_store,
                            ids: &mut ids,
                            layout,
                        };
                        match execute(&mut ctx, job.mutation) {
                            Ok((batch, outcome)) => match apply_store.commit(batch) {
                                Ok(()) if job.durable => done.push((job.reply, outcome)),
                                Ok(()) => {
                                    must_sync = true;
                                    let _ = job.reply.send(Ok(outcome));
                                }
                                Err(e) => {
                                    let _ = job.reply.send(Err(storage_err(e)));
                                }
                            },
                            Err(e) => {
                                let _ = job.reply.send(Err(e));
                            }
                        }
                    }
                    if (!done.is_empty() || must_sync) && stx.send(done).is_err() {
                        break;
                    }
                }
            })?;

        let sync_stats = stats.clone();
        std::thread::Builder::new()
            .name("myriad-syncer".into())
            .spawn(move || {
                // After a failed fsync nothing later can be trusted to be durable (the
                // failed pages may be gone from the page cache): every later sync fails too.
                let mut failed: Option<String> = None;
                while let Ok(first) = srx.recv() {
                    let mut groups = vec![first];
                    while let Ok(more) = srx.try_recv() {
                        groups.push(more);
                    }
                    let result = match &failed {
                        Some(e) => Err(myriad_storage::StorageError::Engine(e.clone())),
                        None => store.sync(),
                    };
                    if let Err(e) = &result
                        && failed.is_none()
                    {
                        tracing::error!("fsync failed; this node acknowledges no more writes: {e}");
                        failed = Some(e.to_string());
                    }
                    let count: usize = groups.iter().map(Vec::len).sum();
                    sync_stats.syncs.fetch_add(1, Ordering::Relaxed);
                    sync_stats
                        .synced_mutations
                        .fetch_add(count as u64, Ordering::Relaxed);
                    for (reply, outcome) in groups.into_iter().flatten() {
                        let _ = reply.send(match &result {
                            Ok(()) => Ok(outcome),
                            Err(e) => Err(FsError::Io(format!("fsync failed: {e}"))),
                        });
                    }
                    changed.send_modify(|v| *v = v.wrapping_add(1));
                }
            })?;

        Ok(Applier { tx, stats })
    }

    /// Applies `mutation` and returns once it is durable.
    pub async fn run(&self, mutation: Mutation) -> Result<Outcome, FsError> {
        self.submit(mutation, true).await
    }

    /// Applies `mutation` and returns once it is visible; the group commit covering it
    /// starts at once (`Barrier` waits for it).
    pub async fn run_visible(&self, mutation: Mutation) -> Result<Outcome, FsError> {
        self.submit(mutation, false).await
    }

    async fn submit(&self, mutation: Mutation, durable: bool) -> Result<Outcome, FsError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job {
                mutation,
                reply,
                durable,
            })
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))?;
        rx.await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))?
    }
}
