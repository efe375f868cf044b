//! A primary's side through its seams: a real applier shipping to a real `Replicator`, whose
//! streams reach a real `Backup` through a `Peers` that calls it in memory (or, to test a
//! backup that stops answering, one that keeps requests waiting).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use myriad_placement::ClusterMap;
use myriad_storage::{Kv, MemKv};
use tokio::sync::Notify;

use super::*;
use crate::cluster::MapState;
use crate::commit::{Applier, Runner, Syncer};
use crate::replication::copy_side::Backup;
use crate::replication::wire::digest;
use crate::state::mutation::{IdAlloc, Layout, Mutation};

const PID: PartitionId = PartitionId(1);

type CopyState = (Option<u64>, u64, u64);
const BACKUP: NodeId = NodeId(2);

/// Server 2 holding a backup of partition 1, reached in memory; while `stalled`, no
/// `Replicate` is answered (a backup that stopped taking batches).
struct InMemory {
    backup: Arc<Backup>,
    syncer: Syncer,
    map: Arc<MapState>,
    stalled: AtomicBool,
    /// While set, a whole copy's first request waits (a copy that takes long).
    copy_stalled: AtomicBool,
    never: Notify,
    seq_asked: AtomicU32,
    /// While set, `ReplicaSeq` is answered `Busy` (a server still opening its partitions).
    opening: AtomicBool,
    bundler: crate::replication::bundle::Bundler,
}

impl Peers for InMemory {
    fn map(&self) -> Arc<MapState> {
        self.map.clone()
    }
    fn send<'a>(
        &'a self,
        _to: NodeId,
        _epoch: u64,
        _ends: myriad_proto::Endpoints,
        req: &'a Request,
    ) -> futures::future::BoxFuture<'a, Result<Response, WireError>> {
        Box::pin(async move {
            if matches!(req, Request::Replica(ReplicaRequest::ReplicaSeq)) {
                self.seq_asked.fetch_add(1, Ordering::SeqCst);
                if self.opening.load(Ordering::SeqCst) {
                    return Err(WireError::Busy);
                }
            }
            if self.stalled.load(Ordering::SeqCst)
                && matches!(
                    req,
                    Request::Replica(ReplicaRequest::Replicate { .. } | ReplicaRequest::Bundle(_))
                )
            {
                self.never.notified().await;
            }
            if self.copy_stalled.load(Ordering::SeqCst)
                && matches!(req, Request::Replica(ReplicaRequest::ReplicaReset))
            {
                self.never.notified().await;
            }
            if let Request::Replica(ReplicaRequest::Bundle(items)) = req {
                let backup = self.backup.clone();
                return Ok(crate::replication::bundle::receive(
                    items.clone(),
                    &self.syncer,
                    |_| Ok(backup.clone()),
                )
                .await);
            }
            self.backup.handle(&self.syncer, req.clone()).await
        })
    }
    fn newer_map(&self, _map: ClusterMap) {}
    fn request_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn bundler(&self) -> &dyn crate::replication::peers::Bundles {
        &self.bundler
    }
}

struct Primary {
    applier: Applier,
    store: Store,
    replicator: Arc<Replicator>,
    peers: Arc<InMemory>,
}

/// A primary of partition 1 on its own disk with one backup (on another disk), whose store
/// first gets `seed` files written directly (so that the backup starts behind).
async fn primary(seed: usize) -> Primary {
    let runner = Runner::Tasks {
        fsync: Duration::ZERO,
    };
    let backup_kv: Arc<dyn Kv> = Arc::new(MemKv::new());
    let backup_syncer = Syncer::start(backup_kv.clone(), runner).unwrap_or_else(|e| panic!("{e}"));
    let backup = Arc::new(Backup::open(backup_kv, PID).unwrap_or_else(|e| panic!("{e}")));
    let map = ClusterMap::build(1, &["p:1".to_string(), "b:1".to_string()], 1, 2);
    let peers = Arc::new(InMemory {
        backup,
        syncer: backup_syncer,
        map: Arc::new(MapState::new(map)),
        stalled: AtomicBool::new(false),
        copy_stalled: AtomicBool::new(false),
        never: Notify::new(),
        seq_asked: AtomicU32::new(0),
        opening: AtomicBool::new(false),
        bundler: crate::replication::bundle::Bundler::default(),
    });
    let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
    let staged =
        crate::commit::StagedStore::open(kv.clone(), PID).unwrap_or_else(|e| panic!("{e}"));
    let store = staged.store.clone();
    let syncer = Syncer::start(kv, runner).unwrap_or_else(|e| panic!("{e}"));
    let dyn_peers: Arc<dyn Peers> = peers.clone();
    let replicator = Arc::new(Replicator::new(dyn_peers, PID, &store, 0));
    let applier = Applier::start(
        staged,
        IdAlloc::load(&store, PID).unwrap_or_else(|e| panic!("{e}")),
        Layout {
            chunk_size_bytes: 4 << 20,
            kept_stats: true,
        },
        watch::channel(0).0,
        &syncer,
        (0, 1),
        replicator.clone(),
        runner,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let p = Primary {
        applier,
        store,
        replicator,
        peers,
    };
    p.write(Mutation::InitRoot {
        now: 1,
        uid: 0,
        gid: 0,
    })
    .await;
    for i in 0..seed {
        p.write(create(&format!("seed{i}"))).await;
    }
    p
}

fn create(name: &str) -> Mutation {
    Mutation::CreateFile {
        dir: "/".into(),
        name: name.into(),
        mode: 0o644,
        uid: 0,
        gid: 0,
        exclusive: true,
        data: name.as_bytes().to_vec(),
        now: 1,
        ino: None,
        then: None,
    }
}

impl Primary {
    async fn write(&self, m: Mutation) {
        self.applier
            .run(m)
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
    }

    /// (the primary's copy, the backup's copy), each as (last batch, keys, digest).
    fn digests(&self) -> (CopyState, CopyState) {
        let mine = digest(&self.store).unwrap_or_else(|e| panic!("{e}"));
        let theirs = digest(self.peers.backup.store()).unwrap_or_else(|e| panic!("{e}"));
        (mine, theirs)
    }
}

#[tokio::test(start_paused = true)]
async fn a_write_is_acknowledged_once_the_backup_has_it() {
    let p = primary(0).await;
    p.replicator.set_backups(&[BACKUP], &[], true, 0);
    for i in 0..20 {
        p.write(create(&format!("f{i}"))).await;
        // Acknowledged: the backup holds every batch up to it, no later.
        let (mine, theirs) = p.digests();
        assert_eq!(mine, theirs, "after write {i}");
    }
}

impl Primary {
    /// Waits (virtual time) until every backup is a member again.
    async fn level(&self) {
        for _ in 0..10_000 {
            if self.replicator.all_members() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("a backup never became a member");
    }
}

#[tokio::test(start_paused = true)]
async fn a_backup_behind_is_brought_level_with_a_whole_copy() {
    // The primary wrote 30 files before it had a backup.
    let p = primary(30).await;
    p.replicator.set_backups(&[BACKUP], &[], true, 0);
    p.write(create("during")).await;
    p.level().await;
    // A member again: this write waits for it, and so it holds everything.
    p.write(create("after")).await;
    let (mine, theirs) = p.digests();
    assert_eq!(mine, theirs);
    assert_eq!(theirs.0, mine.0, "the copy is at the primary's batch");
}

/// docs/write-path.md, part 3, "Joining copies": writes do not wait while a backup that
/// lacks the partition is filled; once level, it is waited for again.
#[tokio::test(start_paused = true)]
async fn a_write_with_no_member_copy_waits_for_a_joining_one() {
    // The only backup is being filled (a whole copy): a write acknowledged on the
    // primary's disk alone would be lost with the primary if the joining copy were then
    // promoted (simulation seed 172), so it waits for that copy to hold it. (With a member
    // copy besides, writes wait for the members only: `--moves` seeds, docs/write-path.md.)
    let p = primary(30).await;
    p.peers.copy_stalled.store(true, Ordering::SeqCst);
    p.replicator.set_backups(&[BACKUP], &[], true, 0);
    let write = {
        let applier = p.applier.clone();
        tokio::spawn(async move { applier.run(create("j0")).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!write.is_finished(), "acknowledged on one disk alone");
    assert!(
        !p.replicator.all_members(),
        "a backup being filled counts as a member"
    );
    p.peers.copy_stalled.store(false, Ordering::SeqCst);
    p.peers.never.notify_waiters();
    tokio::time::timeout(Duration::from_secs(30), write)
        .await
        .unwrap_or_else(|_| panic!("the write still waits once the copy is filled"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    p.level().await;
    p.write(create("level")).await;
    let (mine, theirs) = p.digests();
    assert_eq!(mine, theirs, "the joined copy holds every write");
}

/// A copy the map lists as behind (back from a restart) starts joining: while it is still
/// opening (answering `Busy`), writes do not wait for it (a write once waited 10 s for one
/// in a rolling restart); once level it is a member, waited for again.
#[tokio::test(start_paused = true)]
async fn a_copy_listed_behind_starts_joining_and_is_waited_for_once_level() {
    let p = primary(0).await;
    p.peers.opening.store(true, Ordering::SeqCst);
    p.replicator.set_backups(&[BACKUP], &[BACKUP], true, 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(p.peers.seq_asked.load(Ordering::SeqCst) > 1, "asked again");
    assert!(
        !p.replicator.all_members(),
        "a copy listed behind counts as a member before it answered"
    );
    p.peers.opening.store(false, Ordering::SeqCst);
    p.level().await;
    p.write(create("level")).await;
    let (mine, theirs) = p.digests();
    assert_eq!(mine, theirs, "a member again: the write waited for it");
}

#[tokio::test(start_paused = true)]
async fn a_backup_that_stops_taking_batches_does_not_make_the_queue_grow() {
    let p = primary(0).await;
    p.replicator.set_backups(&[BACKUP], &[], true, 0);
    p.write(create("level")).await;
    let asked_before = p.peers.seq_asked.load(Ordering::SeqCst);
    p.peers.stalled.store(true, Ordering::SeqCst);
    // Batches shipped without waiting for them (as visible-only writes are): the stream
    // holds at most STREAM_PENDING_MAX + STREAM_QUEUE_MAX, then starts over.
    let n = STREAM_PENDING_MAX + STREAM_QUEUE_MAX + 10;
    let base = p
        .store
        .meta_u64(crate::commit::SEQ_KEY)
        .ok()
        .flatten()
        .unwrap_or(0);
    // From an OS thread, as the server's applier ships (starting a stream over from there
    // once panicked: no runtime on that thread), a chunk at a time so the stream runs.
    for chunk in (0..n as u64).collect::<Vec<_>>().chunks(512) {
        let (replicator, chunk) = (p.replicator.clone(), chunk.to_vec());
        let shipper = std::thread::spawn(move || {
            for i in chunk {
                let mut slot = replicator.hold();
                slot.ship(
                    Numbered {
                        seq: base + 1 + i,
                        prev_chain: i,
                        chain: i + 1,
                    },
                    Some(Vec::new()),
                );
            }
        });
        while !shipper.is_finished() {
            tokio::task::yield_now().await;
        }
        assert!(
            shipper.join().is_ok(),
            "shipping from the applier's thread panicked"
        );
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        p.peers.seq_asked.load(Ordering::SeqCst) > asked_before && p.replicator.restarts() > 0,
        "the stream of a backup that fell {n} batches behind was not started over"
    );
}

/// A backup away for more batches than a stream keeps unacknowledged (STREAM_PENDING_MAX)
/// catches up from the log in one stream while new batches keep coming. (Before, the tail
/// filled the stream's pending set, new batches filled its queue, and the stream started
/// over, again, from the applier's thread.)
#[tokio::test(start_paused = true)]
async fn a_long_log_tail_is_replayed_by_one_stream_while_batches_keep_coming() {
    let p = primary(0).await;
    p.replicator.set_backups(&[BACKUP], &[], true, 0);
    p.write(create("level")).await;
    let (mine, theirs) = p.digests();
    assert_eq!(mine, theirs);
    let base = theirs.0.unwrap_or(0);
    let mut chain = p
        .store
        .meta_u64(crate::commit::CHAIN_KEY)
        .ok()
        .flatten()
        .unwrap_or(0);
    let mut seq = base;
    let mut ship = |replicator: &Replicator| {
        let mut slot = replicator.hold();
        seq += 1;
        slot.ship(
            Numbered {
                seq,
                prev_chain: chain,
                chain: chain.wrapping_mul(31).wrapping_add(seq),
            },
            Some(Vec::new()),
        );
        chain = chain.wrapping_mul(31).wrapping_add(seq);
    };
    // Away (the map lists it, down): the log keeps what it misses.
    p.replicator.set_backups(&[], &[], true, 0);
    let away = STREAM_PENDING_MAX + 900;
    for _ in 0..away {
        ship(&p.replicator);
    }
    // Back, but slow to answer: more than a stream's queue holds is shipped while the
    // tail is still unacknowledged.
    p.peers.stalled.store(true, Ordering::SeqCst);
    p.replicator.set_backups(&[BACKUP], &[], true, 0);
    for i in 0..STREAM_QUEUE_MAX + 500 {
        ship(&p.replicator);
        if i % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    p.peers.stalled.store(false, Ordering::SeqCst);
    p.peers.never.notify_waiters();
    let last = seq;
    // (The batches carry no ops, so the backup's store does not number them: ask it.)
    let backup_at = || async {
        match p
            .peers
            .backup
            .handle(
                &p.peers.syncer,
                Request::Replica(ReplicaRequest::ReplicaSeq),
            )
            .await
        {
            Ok(Response::ReplicaState { seq, .. }) => seq,
            other => panic!("replica_seq: {other:?}"),
        }
    };
    for _ in 0..10_000 {
        if backup_at().await == Some(last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(backup_at().await, Some(last), "the backup caught up");
    assert_eq!(
        p.replicator.restarts(),
        0,
        "one stream did it: none started over"
    );
}

/// docs/zones.md "Nearest copy": while reads are lent to a copy, no write is acknowledged
/// without it, even once its stream is dropped (the copy may still answer reads until its
/// loan ends); after the loan, writes go on without it. No loan for a copy not a member.
#[tokio::test(start_paused = true)]
async fn a_write_waits_for_a_copy_with_reads_lent_until_its_loan_ends() {
    let p = primary(0).await;
    assert_eq!(
        p.replicator.lend(BACKUP, Duration::from_secs(2)),
        None,
        "reads lent to a copy the primary does not stream to"
    );
    p.replicator.set_backups(&[BACKUP], &[], true, 0);
    p.write(create("before")).await;
    p.level().await;
    let lent_at = tokio::time::Instant::now();
    let seq = p
        .replicator
        .lend(BACKUP, Duration::from_secs(2))
        .unwrap_or_else(|| panic!("no loan for a member copy"));
    assert_eq!(
        Some(seq),
        p.digests().1.0,
        "the loan names the last batch shipped"
    );
    // The copy stops taking batches and the map drops it: the write still waits for it.
    p.peers.stalled.store(true, Ordering::SeqCst);
    p.replicator.set_backups(&[], &[], true, 0);
    let write = {
        let applier = p.applier.clone();
        tokio::spawn(async move { applier.run(create("during")).await })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !write.is_finished(),
        "acknowledged while a copy without it could still answer reads"
    );
    tokio::time::timeout(Duration::from_secs(5), write)
        .await
        .unwrap_or_else(|_| panic!("the write still waits after the loan ended"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        lent_at.elapsed() >= Duration::from_secs(2) + LEND_MARGIN,
        "acknowledged {:?} after the loan, before it ended",
        lent_at.elapsed()
    );
    // No copy lent: writes go on at once.
    p.write(create("after")).await;
}
