use std::sync::Arc;

use myriad_storage::MemKv;

use super::*;

/// A partition's store with the applier's index of its outcomes.
struct S {
    store: Store,
    outcomes: Outcomes,
}

fn store() -> S {
    S {
        store: Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}")),
        outcomes: Outcomes::default(),
    }
}

fn put(s: &mut S, client: u64, seq: u64, low: u64, at_ns: i64) {
    let mut b = Batch::new();
    let id = OnceId { client, seq, low };
    let answer = Response::Link(format!("{client}/{seq}"));
    record(&s.store, &mut s.outcomes, &mut b, id, at_ns, answer).unwrap_or_else(|e| panic!("{e}"));
    s.store.commit(b).unwrap_or_else(|e| panic!("{e}"));
}

fn answer(s: &S, client: u64, seq: u64) -> Option<Response> {
    recorded(&s.store, client, seq).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_recorded_answer_is_found_by_client_and_number() {
    let mut s = store();
    put(&mut s, 5, 1, 1, 10);
    put(&mut s, 6, 1, 1, 10);
    assert_eq!(answer(&s, 5, 1), Some(Response::Link("5/1".into())));
    assert_eq!(answer(&s, 6, 1), Some(Response::Link("6/1".into())));
    assert_eq!(answer(&s, 5, 2), None);
}

#[test]
fn recording_forgets_what_the_client_no_longer_waits_for() {
    let mut s = store();
    put(&mut s, 5, 1, 1, 10);
    put(&mut s, 5, 2, 1, 10);
    put(&mut s, 5, 3, 1, 10);
    // Change 4 while 2 is still unanswered: 1 goes, 2 and 3 stay.
    put(&mut s, 5, 4, 2, 10);
    assert_eq!(answer(&s, 5, 1), None);
    assert!(answer(&s, 5, 2).is_some());
    assert!(answer(&s, 5, 3).is_some());
    // Another client's outcomes are not touched.
    put(&mut s, 6, 9, 9, 10);
    put(&mut s, 5, 5, 5, 10);
    assert_eq!(answer(&s, 5, 2), None);
    assert_eq!(answer(&s, 5, 4), None);
    assert!(answer(&s, 5, 5).is_some());
    assert!(answer(&s, 6, 9).is_some());
}

#[test]
fn forgetting_drops_the_old_then_the_oldest_beyond_the_count() {
    let mut s = store();
    for client in 1..=5u64 {
        put(
            &mut s,
            client,
            1,
            1,
            i64::try_from(client).unwrap_or(0) * 100,
        );
    }
    let mut b = Batch::new();
    forget(&s.store, &mut s.outcomes, &mut b, 250, 2).unwrap_or_else(|e| panic!("{e}"));
    s.store.commit(b).unwrap_or_else(|e| panic!("{e}"));
    // 100 and 200 are too old; of 300, 400, 500 the two newest stay.
    let left: Vec<u64> = (1..=5).filter(|&c| answer(&s, c, 1).is_some()).collect();
    assert_eq!(left, vec![4, 5]);
}

/// The index is loaded from the store on first use (a new primary after a failover holds
/// the outcomes its copy received), so forgetting after a restart still finds them.
#[test]
fn outcomes_recorded_before_a_restart_are_forgotten_after_it() {
    let mut s = store();
    put(&mut s, 5, 1, 1, 10);
    put(&mut s, 5, 2, 1, 10);
    s.outcomes = Outcomes::default();
    put(&mut s, 5, 3, 3, 10);
    assert_eq!(answer(&s, 5, 1), None);
    assert_eq!(answer(&s, 5, 2), None);
    assert!(answer(&s, 5, 3).is_some());
}
