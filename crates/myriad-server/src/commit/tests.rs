//! The single writer, group commit and the ship seam through a disk that fails on demand.

use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use myriad_proto::ReplOp;
use myriad_storage::Batch;

use super::*;
use crate::test_disk::FaultyDisk;

/// Copies that record what they were shipped, in order.
#[derive(Default)]
struct Recorder {
    shipped: Mutex<Vec<u64>>,
    closed: AtomicBool,
}

struct RecorderSlot<'a>(&'a Recorder);

impl Ship for Recorder {
    fn hold(&self) -> Box<dyn ShipSlot + '_> {
        Box::new(RecorderSlot(self))
    }
    fn wait(&self, _seq: u64) -> BoxFuture<'_, Result<(), WireError>> {
        let closed = self.closed.load(Ordering::SeqCst);
        Box::pin(async move {
            if closed {
                Err(WireError::Unavailable("closed".into()))
            } else {
                Ok(())
            }
        })
    }
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

impl ShipSlot for RecorderSlot<'_> {
    fn encode(&self, _batch: &Batch) -> Option<Vec<ReplOp>> {
        Some(Vec::new())
    }
    fn ship(&mut self, at: Numbered, ops: Option<Vec<ReplOp>>) {
        assert!(ops.is_some(), "a wanted batch is shipped encoded");
        if let Ok(mut s) = self.0.shipped.lock() {
            s.push(at.seq);
        }
    }
}

/// Held by every test here that starts the loops as threads, and by the one that
/// counts them.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Threads of this process running an applier or a syncer loop.
fn loop_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("myriad-"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Threads stay for the rest of the test that starts them: it holds `SERIAL` (the
/// returned guard) until it ends.
async fn start(
    kv: Arc<dyn Kv>,
    copies: Arc<dyn Ship>,
) -> (Applier, Syncer, Store, tokio::sync::MutexGuard<'static, ()>) {
    let serial = SERIAL.lock().await;
    let (a, s, st) = start_on(kv, copies, Runner::Threads);
    (a, s, st, serial)
}

fn start_on(kv: Arc<dyn Kv>, copies: Arc<dyn Ship>, runner: Runner) -> (Applier, Syncer, Store) {
    let staged = StagedStore::open(kv.clone(), myriad_proto::PartitionId(1))
        .unwrap_or_else(|e| panic!("{e}"));
    let store = staged.store.clone();
    let ids = IdAlloc::load(&store, myriad_proto::PartitionId(1)).unwrap_or_else(|e| panic!("{e}"));
    let syncer = Syncer::start(kv, runner).unwrap_or_else(|e| panic!("{e}"));
    let layout = Layout {
        chunk_size_bytes: 4 << 20,
        kept_stats: true,
    };
    let (changed, _) = watch::channel(0);
    let applier = Applier::start(
        staged,
        ids,
        layout,
        changed,
        &syncer,
        (0, 1),
        copies,
        runner,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (applier, syncer, store)
}

async fn init_root(applier: &Applier) {
    let root = Mutation::InitRoot {
        now: 1,
        uid: 0,
        gid: 0,
    };
    applier.run(root).await.unwrap_or_else(|e| panic!("{e}"));
}

/// The loops as tasks (the simulation's mode, with paused time in these tests), the root
/// made.
async fn rooted_tasks(kv: Arc<dyn Kv>, copies: Arc<dyn Ship>) -> (Applier, Syncer, Store) {
    let (applier, syncer, store) = start_on(
        kv,
        copies,
        Runner::Tasks {
            fsync: Duration::ZERO,
        },
    );
    init_root(&applier).await;
    (applier, syncer, store)
}

/// Creates `/name` through `applier`, answered once applied (not yet durable).
/// `name` created and answered once visible, as part of client batch `held`.
async fn applied(applier: &Applier, held: &rounds::Held, name: &str) {
    let ctx = Context {
        batch: Some(held.batch),
        ..Context::background()
    };
    applier
        .run_visible_in(&ctx, create(name))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn create(name: &str) -> Mutation {
    Mutation::CreateFile {
        dir: "/".into(),
        name: name.into(),
        mode: 0o644,
        uid: 0,
        gid: 0,
        exclusive: true,
        data: b"x".to_vec(),
        now: 1,
        ino: None,
        then: None,
    }
}

fn disk() -> Arc<FaultyDisk> {
    Arc::new(FaultyDisk::new())
}

#[tokio::test]
async fn batches_are_numbered_in_order_shipped_and_durable_before_the_reply() {
    let kv = disk();
    let copies = Arc::new(Recorder::default());
    let (applier, syncer, store, _serial) = start(kv.clone(), copies.clone()).await;
    init_root(&applier).await;
    for i in 0..20 {
        applier
            .run(create(&format!("d{i}")))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let shipped = copies.shipped.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        shipped,
        (1..=21).collect::<Vec<u64>>(),
        "every batch, in order"
    );
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(21));
    // Every durable reply waited for an fsync covering it.
    assert!(kv.syncs.load(Ordering::SeqCst) >= 1);
    assert_eq!(syncer.stats.synced_mutations.load(Ordering::SeqCst), 21);
    // A failed mutation ships nothing and takes no number.
    assert!(applier.run(create("d0")).await.is_err());
    assert_eq!(copies.shipped.lock().map(|s| s.len()).unwrap_or(0), 21);
}

#[tokio::test]
async fn after_a_failed_fsync_no_write_is_acknowledged_again() {
    let kv = disk();
    let (applier, syncer, _store, _serial) = start(kv.clone(), Arc::new(NoCopies)).await;
    init_root(&applier).await;
    let watch = syncer.clone();
    let told = tokio::spawn(async move { watch.failure().await });
    tokio::task::yield_now().await;
    assert!(
        !told.is_finished(),
        "a failure reported while the disk is well"
    );
    kv.failing.store(true, Ordering::SeqCst);
    let failed = applier.run(create("a")).await;
    assert!(matches!(failed, Err(WireError::Io(_))), "{failed:?}");
    // The process hears of it (and stops: lib.rs, embed.rs).
    let e = tokio::time::timeout(Duration::from_secs(5), told)
        .await
        .unwrap_or_else(|_| panic!("the failure was not reported"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(e.contains("injected fsync failure"), "{e}");
    // The disk recovers, but what the failed fsync covered may be gone: still refused.
    kv.failing.store(false, Ordering::SeqCst);
    let later = applier.run(create("b")).await;
    assert!(matches!(later, Err(WireError::Io(_))), "{later:?}");
}

#[tokio::test]
async fn a_retired_applier_commits_nothing_more() {
    let kv = disk();
    let copies = Arc::new(Recorder::default());
    let (applier, _syncer, store, _serial) = start(kv, copies.clone()).await;
    init_root(&applier).await;
    applier.retire().await;
    let after = applier.run(create("late")).await;
    assert!(matches!(after, Err(WireError::Unavailable(_))), "{after:?}");
    assert!(
        copies.closed.load(Ordering::SeqCst),
        "retiring closes the copies"
    );
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(1));
}

/// The simulation's mode: the same loops as tasks of a one-thread runtime, no thread
/// of their own; a failed fsync is still final.
#[tokio::test(flavor = "current_thread")]
async fn the_loops_run_as_tasks_of_a_one_thread_runtime() {
    let kv = disk();
    let copies = Arc::new(Recorder::default());
    // Only this module's tests start the loops' threads: counted while none of them runs.
    let _alone = SERIAL.lock().await;
    let threads_before = loop_threads();
    let (applier, syncer, store) = start_on(
        kv.clone(),
        copies.clone(),
        Runner::Tasks {
            fsync: std::time::Duration::ZERO,
        },
    );
    let threads_after = loop_threads();
    // Threads of a test that just ended may still be leaving, none may come.
    assert!(threads_after <= threads_before, "no thread started");
    init_root(&applier).await;
    for i in 0..5 {
        applier
            .run(create(&format!("f{i}")))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(6));
    assert_eq!(syncer.stats.synced_mutations.load(Ordering::SeqCst), 6);
    kv.failing.store(true, Ordering::SeqCst);
    assert!(matches!(
        applier.run(create("x")).await,
        Err(WireError::Io(_))
    ));
    kv.failing.store(false, Ordering::SeqCst);
    assert!(matches!(
        applier.run(create("y")).await,
        Err(WireError::Io(_))
    ));
}

/// Copies at one batch number over different histories carry different chains (the
/// stream's start check and a primary's catch-up tell them apart); the same history
/// gives the same chain.
#[tokio::test]
async fn the_batch_chain_tells_histories_of_equal_length_apart() {
    let chain_after = |names: &'static [&'static str]| async move {
        let (applier, _syncer, store, _serial) = start(disk(), Arc::new(NoCopies)).await;
        init_root(&applier).await;
        for n in names {
            applier
                .run(create(n))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        (
            store.meta_u64(SEQ_KEY).ok().flatten(),
            store.meta_u64(CHAIN_KEY).ok().flatten(),
        )
    };
    let a = chain_after(&["x", "y"]).await;
    let b = chain_after(&["x", "z"]).await;
    let again = chain_after(&["x", "y"]).await;
    assert_eq!(a.0, Some(3));
    assert_eq!(a.0, b.0, "equal batch numbers");
    assert_ne!(a.1, b.1, "different histories, different chains");
    assert_eq!(a, again, "the same history, the same chain");
}

/// A batch being served (`hold`) keeps its partition's round open: its changes, applied
/// one by one and each visible at once, reach the store and the copies as one batch.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_held_round_commits_a_batchs_changes_as_one_batch() {
    let kv = disk();
    let copies = Arc::new(Recorder::default());
    let (applier, syncer, store) = rooted_tasks(kv.clone(), copies.clone()).await;
    let shipped = || copies.shipped.lock().map(|s| s.len()).unwrap_or(0);
    assert_eq!(shipped(), 1);
    let held = applier.hold();
    for i in 0..20 {
        let name = format!("f{i}");
        applied(&applier, &held, &name).await;
        assert!(
            store.entry("/", &name).ok().flatten().is_some(),
            "a change answered as applied is read at once"
        );
    }
    assert_eq!(shipped(), 1, "nothing committed while the batch is served");
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(1));
    // Somebody waiting for durability ends the round at once, held or not.
    let before = tokio::time::Instant::now();
    let in_batch = Context {
        batch: Some(held.batch),
        ..Context::background()
    };
    applier
        .run_in(&in_batch, create("durable"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        before.elapsed() < Duration::from_millis(1),
        "a durable change waited for a held round: {:?}",
        before.elapsed()
    );
    drop(held);
    assert_eq!(
        shipped(),
        2,
        "the batch's 20 changes and the durable one: one batch"
    );
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(2));
    // Another batch: its round commits when its serving ends, without anyone waiting.
    let held = applier.hold();
    applied(&applier, &held, "g").await;
    drop(held);
    tokio::time::timeout(Duration::from_millis(100), async {
        while shipped() < 3 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a round stayed open after its hold ended"));
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(3));
    assert!(
        syncer.stats.syncs.load(Ordering::SeqCst) >= 3,
        "each round is fsynced"
    );
}

/// A job of an unrelated request that comes while a batch is being served shares no store
/// batch with it: what the batch staged is committed first, the job alone after.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_unrelated_job_gets_a_batch_of_its_own_during_a_held_round() {
    let kv = disk();
    let copies = Arc::new(Recorder::default());
    let (applier, _syncer, store) = rooted_tasks(kv, copies.clone()).await;
    let shipped = || copies.shipped.lock().map(|s| s.len()).unwrap_or(0);
    let other = applier.clone();
    let held = applier.hold();
    applied(&applier, &held, "a").await;
    // Another request's task: not part of this batch.
    tokio::spawn(async move {
        other
            .run_visible_in(&Context::background(), create("b"))
            .await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shipped(), 3, "the batch's change, then the other job alone");
    applied(&applier, &held, "c").await;
    drop(held);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(shipped(), 4);
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(4));
}

/// A round held by a batch that stalls commits after `ROUND_IDLE_MAX`: a hold never
/// keeps changes out of the store for long.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_stalled_batch_does_not_keep_its_round_open() {
    let kv = disk();
    let copies = Arc::new(Recorder::default());
    let (applier, _syncer, store) = rooted_tasks(kv, copies.clone()).await;
    let held = applier.hold();
    applied(&applier, &held, "a").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(2));
    assert_eq!(copies.shipped.lock().map(|s| s.len()).unwrap_or(0), 2);
    drop(held);
}

/// A round's batch the engine refuses after its changes were answered as applied: the
/// server fails as after a failed fsync (it would otherwise go on without them).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_round_the_engine_refuses_fails_the_server() {
    let kv = disk();
    let (applier, syncer, _store) = rooted_tasks(kv.clone(), Arc::new(NoCopies)).await;
    let held = applier.hold();
    applied(&applier, &held, "a").await;
    kv.crash_after(0);
    drop(held);
    let e = tokio::time::timeout(Duration::from_secs(5), syncer.failure())
        .await
        .unwrap_or_else(|_| panic!("the failure was not reported"));
    assert!(e.contains("commit lost"), "{e}");
    kv.restart();
    assert!(matches!(
        applier.run(create("b")).await,
        Err(WireError::Io(_))
    ));
}

/// A deposed partition commits nothing more, not even changes staged before the depose
/// (they are dropped as a crash would drop them; their clients' syncs report them).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_deposed_partition_drops_its_stage() {
    let kv = disk();
    let copies = Arc::new(Recorder::default());
    let (applier, _syncer, store) = rooted_tasks(kv, copies.clone()).await;
    let held = applier.hold();
    applied(&applier, &held, "staged").await;
    applier.refuse();
    drop(held);
    applier.retire().await;
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(1));
    assert_eq!(copies.shipped.lock().map(|s| s.len()).unwrap_or(0), 1);
    assert!(
        store.entry("/", "staged").ok().flatten().is_none(),
        "a staged change outlived the depose"
    );
}

/// The change a mutation completes is the one its context carries (issue 50: passed, not
/// a task-local): submitted with the change's `OnceSlot`, a completing mutation records
/// the change's answer in its own batch and settles it; the same kind of mutation
/// submitted as work of no request records nothing.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_mutation_completes_the_change_its_context_carries_and_no_other() {
    let (applier, _syncer, store) = rooted_tasks(disk(), Arc::new(NoCopies)).await;
    let id = myriad_proto::OnceId {
        client: 7,
        seq: 1,
        low: 1,
    };
    let slot = Arc::new(OnceSlot::new(
        (id, 1),
        |m| matches!(m, Mutation::CreateFile { .. }),
        |_| Some(myriad_proto::Response::Unit),
        false,
    ));
    let ctx = Context {
        once: Some(slot.clone()),
        ..Context::background()
    };
    applier
        .run(create("background"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !slot.settled.load(Ordering::Acquire),
        "work of no request settled a change"
    );
    assert!(
        crate::state::outcomes::recorded(&store, 7, 1)
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );
    applier
        .run_in(&ctx, create("mine"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        slot.settled.load(Ordering::Acquire),
        "the change is settled"
    );
    assert!(
        slot.recorded.load(Ordering::Acquire),
        "its answer is recorded"
    );
    assert!(slot.wrote.load(Ordering::Acquire));
    assert_eq!(
        crate::state::outcomes::recorded(&store, 7, 1).unwrap_or_else(|e| panic!("{e}")),
        Some(myriad_proto::Response::Unit),
        "the answer is in the store with the create"
    );
    // Settled: a later mutation in the same context completes nothing more.
    let job = ctx.job_for(&create("again"));
    assert!(job.is_none(), "a settled change was completed twice");
}

/// A map that leaves the trash out of a quota on `/` (protocol 40) has the partition count
/// that quota afresh in the sync's own batch, and every change after by the new rule.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_quota_on_the_root_is_counted_afresh_when_the_trash_leaves_it() {
    let (applier, _syncer, store) = rooted_tasks(disk(), Arc::new(Recorder::default())).await;
    let root = |trash_apart| myriad_storage::QuotaRoot {
        id: 7,
        path: "/".into(),
        max_files: 0,
        max_bytes: 0,
        trash_apart,
    };
    let sync = |epoch, apart| Mutation::SyncQuotas {
        epoch,
        roots: vec![root(apart)],
    };
    let usage = || store.quota_usage(7).map(|u| (u.files, u.bytes)).ok();
    applier
        .run(sync(5, false))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // `.trash` in `/` (a file here: only its name matters) and a file beside it.
    for name in [".trash", "a"] {
        applier
            .run(create(name))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(usage(), Some((2, 2)));
    applier
        .run(sync(6, true))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(usage(), Some((1, 1)), "the trash's own name left the quota");
    applier
        .run(create("b"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(usage(), Some((2, 2)));
    assert_eq!(store.quota_drift().ok(), Some(None));
    assert_eq!(store.quota_set().ok(), Some((6, vec![root(true)])));
}
