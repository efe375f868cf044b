use std::sync::Arc;

use myriad_storage::MemKv;

use super::*;

fn store() -> Store {
    Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"))
}

fn put(store: &Store, client: u64, seq: u64, low: u64, at_ns: i64) {
    let mut b = Batch::new();
    let id = OnceId { client, seq, low };
    record(
        store,
        &mut b,
        id,
        at_ns,
        Response::Link(format!("{client}/{seq}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    store.commit(b).unwrap_or_else(|e| panic!("{e}"));
}

fn answer(store: &Store, client: u64, seq: u64) -> Option<Response> {
    recorded(store, client, seq).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_recorded_answer_is_found_by_client_and_number() {
    let s = store();
    put(&s, 5, 1, 1, 10);
    put(&s, 6, 1, 1, 10);
    assert_eq!(answer(&s, 5, 1), Some(Response::Link("5/1".into())));
    assert_eq!(answer(&s, 6, 1), Some(Response::Link("6/1".into())));
    assert_eq!(answer(&s, 5, 2), None);
}

#[test]
fn recording_forgets_what_the_client_no_longer_waits_for() {
    let s = store();
    put(&s, 5, 1, 1, 10);
    put(&s, 5, 2, 1, 10);
    put(&s, 5, 3, 1, 10);
    // Change 4 while 2 is still unanswered: 1 goes, 2 and 3 stay.
    put(&s, 5, 4, 2, 10);
    assert_eq!(answer(&s, 5, 1), None);
    assert!(answer(&s, 5, 2).is_some());
    assert!(answer(&s, 5, 3).is_some());
    // Another client's outcomes are not touched.
    put(&s, 6, 9, 9, 10);
    put(&s, 5, 5, 5, 10);
    assert_eq!(answer(&s, 5, 2), None);
    assert_eq!(answer(&s, 5, 4), None);
    assert!(answer(&s, 5, 5).is_some());
    assert!(answer(&s, 6, 9).is_some());
}

#[test]
fn forgetting_drops_the_old_then_the_oldest_beyond_the_count() {
    let s = store();
    for client in 1..=5u64 {
        put(&s, client, 1, 1, i64::try_from(client).unwrap_or(0) * 100);
    }
    let mut b = Batch::new();
    forget(&s, &mut b, 250, 2).unwrap_or_else(|e| panic!("{e}"));
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
    // 100 and 200 are too old; of 300, 400, 500 the two newest stay.
    let left: Vec<u64> = (1..=5).filter(|&c| answer(&s, c, 1).is_some()).collect();
    assert_eq!(left, vec![4, 5]);
}
