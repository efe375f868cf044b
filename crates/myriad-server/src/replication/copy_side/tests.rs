//! A copy through its seam (`Backup::handle`): it applies batches only on top of the chain
//! they were built on, so batches of another history never mix in (simulation seed 9005:
//! a backup had parked a deposed primary's batches 194-256, the new primary's batch 193
//! let them all in, and the new primary's own 194-256 were acknowledged as resends).

use std::sync::Arc;
use std::time::Duration;

use myriad_proto::ReplOp;
use myriad_storage::MemKv;

use super::*;
use crate::commit::Runner;

fn backup() -> (Backup, Syncer) {
    let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
    let syncer = Syncer::start(
        kv.clone(),
        Runner::Tasks {
            fsync: Duration::ZERO,
        },
    )
    .unwrap_or_else(|e| panic!("syncer: {e}"));
    let b = Backup::open(kv, myriad_proto::PartitionId(3)).unwrap_or_else(|e| panic!("open: {e}"));
    (b, syncer)
}

/// Batch `seq` of a history named `history` (its chain values are made up but distinct
/// per history and number): it writes `history` under the key `k`.
fn batch(history: u64, seq: u64) -> Request {
    let chain = |n: u64| if n == 0 { 0 } else { history * 1000 + n };
    Request::Replica(ReplicaRequest::Replicate {
        seq,
        prev_chain: chain(seq - 1),
        chain: chain(seq),
        acked: 0,
        ops: std::sync::Arc::new(vec![ReplOp {
            space: Space::Entries.code(),
            key: b"k".to_vec(),
            value: Some(serde_bytes::ByteBuf::from(history.to_be_bytes().to_vec())),
        }]),
    })
}

fn held(b: &Backup) -> Option<u64> {
    b.store()
        .kv()
        .get(Space::Entries, b"k")
        .ok()
        .flatten()
        .and_then(|v| v.try_into().ok())
        .map(u64::from_be_bytes)
}

#[tokio::test]
async fn batches_parked_by_another_history_are_not_applied() {
    let (b, syncer) = backup();
    let b = Arc::new(b);
    // History 1's batch 2 arrives first (its batch 1 was lost): parked.
    let stale = {
        let (b, syncer) = (b.clone(), syncer.clone());
        tokio::spawn(async move { b.handle(&syncer, batch(1, 2)).await })
    };
    tokio::task::yield_now().await;
    // History 2's batch 1: applied; the parked batch does not continue it.
    b.handle(&syncer, batch(2, 1))
        .await
        .unwrap_or_else(|e| panic!("batch 1: {e}"));
    assert_eq!(b.seq(), Some(1), "history 1's batch 2 was let in");
    let refused = stale.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(refused.is_err(), "the parked batch was acknowledged");
    // History 2's own batch 2 is applied, not taken for a resend.
    b.handle(&syncer, batch(2, 2))
        .await
        .unwrap_or_else(|e| panic!("batch 2: {e}"));
    assert_eq!(b.seq(), Some(2));
    assert_eq!(held(&b), Some(2));
}

#[tokio::test]
async fn a_resend_is_acknowledged_only_if_it_is_the_batch_applied() {
    let (b, syncer) = backup();
    for seq in 1..=3 {
        b.handle(&syncer, batch(1, seq))
            .await
            .unwrap_or_else(|e| panic!("batch {seq}: {e}"));
    }
    assert!(
        b.handle(&syncer, batch(1, 2)).await.is_ok(),
        "a true resend"
    );
    match b.handle(&syncer, batch(2, 2)).await {
        Ok(Response::ReplicaGap { next: Some(4) }) => {}
        other => panic!("another history's batch 2 answered {other:?}"),
    }
    assert_eq!(held(&b), Some(1));
}

#[tokio::test]
async fn a_next_batch_on_another_chain_asks_for_a_whole_copy() {
    let (b, syncer) = backup();
    b.handle(&syncer, batch(1, 1))
        .await
        .unwrap_or_else(|e| panic!("batch 1: {e}"));
    match b.handle(&syncer, batch(2, 2)).await {
        Ok(Response::ReplicaGap { next: Some(2) }) => {}
        other => panic!("a batch on another chain answered {other:?}"),
    }
    assert_eq!(b.seq(), Some(1));
    // After a whole copy at batch 1 of history 2, history 2 goes on.
    for req in [
        ReplicaRequest::ReplicaReset,
        ReplicaRequest::ReplicaCopyDone {
            seq: 1,
            chain: 2001,
        },
    ] {
        b.handle(&syncer, Request::Replica(req))
            .await
            .unwrap_or_else(|e| panic!("copy: {e}"));
    }
    b.handle(&syncer, batch(2, 2))
        .await
        .unwrap_or_else(|e| panic!("batch 2 after the copy: {e}"));
    assert_eq!(held(&b), Some(2));
}

/// Dropping a moved-away copy cut short anywhere leaves a copy that is whole (its seq and
/// every key), empty, or marked incomplete: never its seq over part of its keys (sim seed
/// 110007: such a copy was given the partition back and its primary found it up to date).
#[test]
fn a_drop_cut_short_leaves_no_seq_over_missing_keys() {
    let pid = myriad_proto::PartitionId(3);
    // A store just opened holds its format keys only.
    let fresh = partition_store(Arc::new(MemKv::new()), pid)
        .map(|s| crate::replication::wire::digest(&s).map_or(u64::MAX, |d| d.1))
        .unwrap_or_else(|e| panic!("fresh: {e}"));
    for crash_at in 0..8 {
        let disk = Arc::new(crate::test_disk::FaultyDisk::new());
        let kv: Arc<dyn Kv> = disk.clone();
        let store = partition_store(kv.clone(), pid).unwrap_or_else(|e| panic!("store: {e}"));
        let mut b = Batch::new();
        store.put_meta_u64(&mut b, SEQ_KEY, 40);
        for space in [Space::Entries, Space::Dirs, Space::Blocks] {
            for i in 0..3u8 {
                b.put(space, vec![b'k', i], vec![i]);
            }
        }
        store.commit(b).unwrap_or_else(|e| panic!("fill: {e}"));
        let keys = || {
            crate::replication::wire::digest(&store)
                .map(|d| d.1)
                .unwrap_or(u64::MAX)
        };
        let full = keys();
        disk.crash_after(crash_at);
        let outcome = crate::replication::wire::drop_copy(kv.clone(), pid);
        disk.restart();
        let reopened = Backup::open(kv, pid).unwrap_or_else(|e| panic!("reopen: {e}"));
        match reopened.seq() {
            None => {}
            Some(40) => assert_eq!(keys(), full, "crash after {crash_at} commits"),
            Some(0) => assert_eq!(keys(), fresh, "crash after {crash_at} commits"),
            Some(s) => panic!("crash after {crash_at} commits: seq {s}"),
        }
        if crash_at == 7 {
            assert!(matches!(outcome, Ok(true)), "the whole drop: {outcome:?}");
            assert_eq!((reopened.seq(), keys()), (Some(0), fresh));
        }
    }
}

/// Anti-entropy compares a copy only at the primary's batch of the primary's history: a
/// copy at the same batch number of another history (the stream is about to replace it
/// whole) answers `Busy`, not sums to "repair" it by (simulation seeds 2491 and 5694).
#[tokio::test]
async fn anti_entropy_compares_only_one_batch_of_one_history() {
    let (b, syncer) = backup();
    for seq in 1..=2 {
        b.handle(&syncer, batch(1, seq))
            .await
            .unwrap_or_else(|e| panic!("batch {seq}: {e}"));
    }
    let sums = |at: u64, chain: u64| Request::Replica(ReplicaRequest::ReplicaSums { at, chain });
    assert!(
        matches!(
            b.handle(&syncer, sums(2, 1002)).await,
            Ok(Response::Sums(_))
        ),
        "this history's batch 2"
    );
    assert_eq!(
        b.handle(&syncer, sums(2, 2002)).await.err(),
        Some(WireError::Busy),
        "another history's batch 2"
    );
    assert_eq!(
        b.handle(&syncer, sums(1, 1001)).await.err(),
        Some(WireError::Busy)
    );
    let bucket = Request::Replica(ReplicaRequest::ReplicaBucket {
        at: 2,
        chain: 2002,
        space: Space::Entries.code(),
        bucket: 0,
    });
    assert_eq!(b.handle(&syncer, bucket).await.err(), Some(WireError::Busy));
}
