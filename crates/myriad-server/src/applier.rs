//! The single writer and the group commit.
//!
//! ```text
//! request tasks ──Job──> applier thread: validate + commit batch (visible, not yet durable)
//!                              │ (reply, outcome) pairs
//!                              v
//!                        syncer thread: one fsync for everything queued, then reply to all
//! ```
//! One thread per partition applies every mutation of that partition in order, so
//! validations never race. The server's one syncer drains whatever has queued up while the previous fsync ran and covers it with one
//! fsync: concurrent requests share the cost (group commit), and the applier keeps applying
//! while the disk syncs (pipelining). No reply leaves before the fsync covering its batch.
//!
//! Known relaxation: a batch is visible to readers on this node between commit and fsync
//! (typically < 1 ms). A crash in that window loses a write that was never acknowledged but
//! may have been read. Acknowledged writes are never lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use myriad_proto::FsError;
use myriad_storage::{Kv, Store};
use tokio::sync::{mpsc, oneshot, watch};

use crate::mutation::{Ctx, IdAlloc, Layout, Mutation, Outcome, execute, storage_err};
use crate::replication::{Replicator, SEQ_KEY, to_wire};

/// What a mutation's caller gets back: its outcome, and the sequence number of the batch it
/// committed (or of the last batch before it, if it wrote nothing), which replication waits on.
pub struct Done {
    pub outcome: Outcome,
    pub seq: u64,
}

pub(crate) type Reply = oneshot::Sender<Result<Done, FsError>>;

struct Job {
    mutation: Mutation,
    reply: Reply,
    /// false: reply once applied; the fsync still follows at once.
    durable: bool,
    /// With `durable` false: also told (outcome `Unit`) once the fsync covering the batch
    /// is done (`run_staged`).
    synced: Option<Reply>,
}

/// The durability of a mutation applied by `Applier::run_staged`.
pub struct Durable {
    rx: oneshot::Receiver<Result<Done, FsError>>,
    replicator: Arc<Replicator>,
}

impl Durable {
    /// Returns once the mutation is fsynced here and acknowledged by every live backup.
    pub async fn wait(self) -> Result<(), FsError> {
        let done = self
            .rx
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))??;
        self.replicator.wait(done.seq).await
    }
}

/// Mutations applied per round before handing to the syncer, so replies are not held back by
/// an endless stream of new work.
const ROUND_MAX: usize = 512;

#[derive(Default)]
pub struct SyncStats {
    pub syncs: AtomicU64,
    pub synced_mutations: AtomicU64,
}

/// Replies waiting for the fsync that covers their batches, and the partition's change
/// signal to bump after it.
struct SyncGroup {
    replies: Vec<(Reply, Done)>,
    changed: watch::Sender<u64>,
}

/// The server's one fsync thread, shared by the appliers of all its partitions (they share
/// one engine, so one fsync covers them all).
#[derive(Clone)]
pub struct Syncer {
    tx: std::sync::mpsc::Sender<SyncGroup>,
    pub stats: Arc<SyncStats>,
}

impl Syncer {
    pub fn start(kv: Arc<dyn Kv>) -> std::io::Result<Syncer> {
        let (tx, srx) = std::sync::mpsc::channel::<SyncGroup>();
        let stats = Arc::new(SyncStats::default());
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
                        None => kv.sync(),
                    };
                    if let Err(e) = &result
                        && failed.is_none()
                    {
                        tracing::error!("fsync failed; this node acknowledges no more writes: {e}");
                        failed = Some(e.to_string());
                    }
                    let count: usize = groups.iter().map(|g| g.replies.len()).sum();
                    sync_stats.syncs.fetch_add(1, Ordering::Relaxed);
                    sync_stats
                        .synced_mutations
                        .fetch_add(count as u64, Ordering::Relaxed);
                    let mut signals: Vec<watch::Sender<u64>> = Vec::new();
                    for group in groups {
                        for (reply, outcome) in group.replies {
                            let _ = reply.send(match &result {
                                Ok(()) => Ok(outcome),
                                Err(e) => Err(FsError::Io(format!("fsync failed: {e}"))),
                            });
                        }
                        if !signals.iter().any(|s| s.same_channel(&group.changed)) {
                            signals.push(group.changed);
                        }
                    }
                    for changed in signals {
                        changed.send_modify(|v| *v = v.wrapping_add(1));
                    }
                }
            })?;
        Ok(Syncer { tx, stats })
    }

    /// Sends `replies` once everything committed so far is durable, then bumps `changed`.
    pub(crate) fn after_sync(&self, changed: watch::Sender<u64>, replies: Vec<(Reply, Done)>) {
        let _ = self.tx.send(SyncGroup { replies, changed });
    }
}

#[derive(Clone)]
pub struct Applier {
    tx: mpsc::UnboundedSender<Job>,
    /// Durable replies also wait for every backup's ack.
    replicator: Arc<Replicator>,
    /// Set when the partition is no longer served here: nothing more is committed.
    retired: Arc<AtomicBool>,
}

impl Applier {
    /// Starts the applier thread of one partition. `changed` is bumped after every group
    /// commit so readers waiting on a pending entry look again.
    pub fn start(
        store: Store,
        ids: IdAlloc,
        layout: Layout,
        changed: watch::Sender<u64>,
        syncer: &Syncer,
        start_seq: u64,
        replicator: Arc<Replicator>,
    ) -> std::io::Result<Applier> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let stx = syncer.tx.clone();
        let shipper = replicator.clone();
        let retired = Arc::new(AtomicBool::new(false));
        let stop = retired.clone();
        std::thread::Builder::new()
            .name("myriad-applier".into())
            .spawn(move || {
                let mut ids = ids;
                let mut seq = start_seq;
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
                        if stop.load(Ordering::Acquire) {
                            let _ = job.reply.send(Err(FsError::Unavailable(
                                "the partition is no longer served by this server".into(),
                            )));
                            continue;
                        }
                        let mut ctx = Ctx {
                            store: &store,
                            ids: &mut ids,
                            layout,
                        };
                        match execute(&mut ctx, job.mutation) {
                            Ok((mut batch, outcome)) => {
                                // Every non-empty batch gets the next sequence number,
                                // written with it; backups apply batches in that order.
                                // The replicator's lock is held from numbering to shipping
                                // so that a backup added meanwhile starts at a batch boundary.
                                let numbered = !batch.is_empty();
                                let mut ship = shipper.lock();
                                let ops = if numbered {
                                    store.put_meta_u64(&mut batch, SEQ_KEY, seq + 1);
                                    ship.wants_batches().then(|| to_wire(&batch))
                                } else {
                                    None
                                };
                                match store.commit(batch) {
                                    Ok(()) => {
                                        if numbered {
                                            seq += 1;
                                            ship.ship(seq, ops);
                                        }
                                        drop(ship);
                                        let done_now = Done { outcome, seq };
                                        if job.durable {
                                            done.push((job.reply, done_now));
                                        } else {
                                            must_sync = true;
                                            let _ = job.reply.send(Ok(done_now));
                                            if let Some(s) = job.synced {
                                                let unit = Done {
                                                    outcome: Outcome::Unit,
                                                    seq,
                                                };
                                                done.push((s, unit));
                                            }
                                        }
                                    }
                                    Err(e) => {
                                        drop(ship);
                                        let _ = job.reply.send(Err(storage_err(e)));
                                    }
                                }
                            }
                            Err(e) => {
                                let _ = job.reply.send(Err(e));
                            }
                        }
                    }
                    if (!done.is_empty() || must_sync)
                        && stx
                            .send(SyncGroup {
                                replies: done,
                                changed: changed.clone(),
                            })
                            .is_err()
                    {
                        break;
                    }
                }
            })?;
        Ok(Applier {
            tx,
            replicator,
            retired,
        })
    }

    pub(crate) fn replicator(&self) -> &Arc<Replicator> {
        &self.replicator
    }

    /// Stops committing: every mutation queued or submitted later fails with `Unavailable`,
    /// and once this returns nothing more reaches the store (a backup may open it next).
    /// Writes waiting for backup acks fail too.
    pub(crate) async fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        // The fence: the thread handles jobs in order, so once this one is answered every
        // earlier one is done.
        let (reply, rx) = oneshot::channel();
        if self
            .tx
            .send(Job {
                mutation: Mutation::Barrier,
                reply,
                durable: false,
                synced: None,
            })
            .is_ok()
        {
            let _ = rx.await;
        }
        self.replicator.close();
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

    /// Applies `mutation` and returns its outcome once it is visible, with what tells
    /// when it is durable: work that needs only the change visible overlaps the group
    /// commit and the backups' acknowledgements. A failed mutation fails here.
    pub async fn run_staged(&self, mutation: Mutation) -> Result<(Outcome, Durable), FsError> {
        let (reply, rx) = oneshot::channel();
        let (synced, synced_rx) = oneshot::channel();
        self.tx
            .send(Job {
                mutation,
                reply,
                durable: false,
                synced: Some(synced),
            })
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))?;
        let done = rx
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))??;
        let durable = Durable {
            rx: synced_rx,
            replicator: self.replicator.clone(),
        };
        Ok((done.outcome, durable))
    }

    async fn submit(&self, mutation: Mutation, durable: bool) -> Result<Outcome, FsError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job {
                mutation,
                reply,
                durable,
                synced: None,
            })
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))?;
        let done = rx
            .await
            .map_err(|_| FsError::Unavailable("server is shutting down".into()))??;
        if durable {
            self.replicator.wait(done.seq).await?;
        }
        Ok(done.outcome)
    }
}
