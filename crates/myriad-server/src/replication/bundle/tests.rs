//! Receiving a bundle: every item is answered as if it came alone, in the bundle's order,
//! and a copy's batches in one bundle are applied in order.

use std::time::Duration;

use myriad_proto::ReplOp;
use myriad_storage::{Kv, MemKv, Space};

use super::*;
use crate::commit::Runner;

fn replicate(seq: u64, value: u8) -> ReplicaRequest {
    replicate_acked(seq, 0, value)
}

fn replicate_acked(seq: u64, acked: u64, value: u8) -> ReplicaRequest {
    ReplicaRequest::Replicate {
        seq,
        prev_chain: seq - 1,
        chain: seq,
        acked,
        ops: std::sync::Arc::new(vec![ReplOp {
            space: Space::Entries.code(),
            key: b"k".to_vec(),
            value: Some(serde_bytes::ByteBuf::from(vec![value])),
        }]),
    }
}

fn item(partition: u32, request: ReplicaRequest) -> BundleItem {
    BundleItem {
        partition: PartitionId(partition),
        request,
    }
}

#[tokio::test]
async fn each_item_gets_its_own_answer_in_order() {
    let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
    let syncer = Syncer::start(
        kv.clone(),
        Runner::Tasks {
            fsync: Duration::ZERO,
        },
    )
    .unwrap_or_else(|e| panic!("syncer: {e}"));
    let copy = Arc::new(Backup::open(kv, PartitionId(3)).unwrap_or_else(|e| panic!("{e}")));
    let items = vec![
        item(3, replicate(1, 10)),
        item(3, replicate(2, 20)),
        // No copy of partition 9 here.
        item(9, replicate(1, 30)),
        // The primary counts batches up to 6 as held here: the copy reports its gap (a
        // batch merely ahead would wait parked, and so would the bundle's answer).
        item(3, replicate_acked(7, 6, 40)),
        item(3, ReplicaRequest::Bundle(Vec::new())),
    ];
    let answer = receive(items, &syncer, |pid| {
        if pid == PartitionId(3) {
            Ok(copy.clone())
        } else {
            Err(WireError::NotFound)
        }
    })
    .await;
    let Response::Bundle(answers) = answer else {
        panic!("not a bundle answer: {answer:?}");
    };
    assert_eq!(answers.len(), 5);
    assert_eq!(answers[0], Ok(Response::Unit));
    assert_eq!(answers[1], Ok(Response::Unit));
    assert_eq!(answers[2], Err(WireError::NotFound));
    assert_eq!(answers[3], Ok(Response::ReplicaGap { next: Some(3) }));
    assert!(
        matches!(answers[4], Err(WireError::Protocol(_))),
        "{:?}",
        answers[4]
    );
    assert_eq!(copy.seq(), Some(2), "batches 1 and 2 applied in order");
    let held = copy.store().kv().get(Space::Entries, b"k").ok().flatten();
    assert_eq!(held, Some(vec![20]));
}
