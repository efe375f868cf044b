use super::*;

const INO: InodeId = InodeId(42);

fn owner(holder: u64) -> LockOwner {
    LockOwner { holder, owner: 1 }
}

fn set(holder: u64, kind: LockKind, reclaim: bool) -> SetLock {
    SetLock {
        ino: INO,
        owner: owner(holder),
        start: 0,
        end: u64::MAX,
        kind,
        pid: 10,
        reclaim,
    }
}

fn done(a: &LockAnswer) -> bool {
    matches!(a, LockAnswer::Done { .. })
}

#[test]
fn conflicting_owners_exclude_each_other_until_unlock() {
    let now = Instant::now();
    let t = LockTable::new(7, false, now);
    assert!(done(
        &t.set(&set(1, LockKind::Write, false), now)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    match t
        .set(&set(2, LockKind::Read, false), now)
        .unwrap_or_else(|e| panic!("{e}"))
    {
        LockAnswer::Blocked { table, by } => {
            assert_eq!(table, 7);
            assert_eq!(by.owner, owner(1));
            assert!(by.write);
        }
        other => panic!("expected Blocked, got {other:?}"),
    }
    match t
        .test(INO, owner(2), 5, 5, LockKind::Read, now)
        .unwrap_or_else(|e| panic!("{e}"))
    {
        LockAnswer::Tested { by: Some(by), .. } => assert_eq!(by.pid, 10),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(done(
        &t.set(&set(1, LockKind::Unlock, false), now)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    assert_eq!(t.count(), 0);
    assert!(done(
        &t.set(&set(2, LockKind::Read, false), now)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    assert!(done(
        &t.set(&set(3, LockKind::Read, false), now)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    assert_eq!(t.count(), 2);
}

#[test]
fn a_silent_holder_loses_its_locks_after_the_lease() {
    let now = Instant::now();
    let t = LockTable::new(7, false, now);
    assert!(done(
        &t.set(&set(1, LockKind::Write, false), now)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    // Renewed: still in the way just before the lease would end.
    let later = now + LOCK_LEASE - Duration::from_millis(10);
    assert_eq!(
        t.renew(1, later),
        LockAnswer::Done {
            table: 7,
            known: true
        }
    );
    let blocked = t.set(
        &set(2, LockKind::Write, false),
        later + Duration::from_secs(3),
    );
    assert!(matches!(blocked, Ok(LockAnswer::Blocked { .. })));
    // Silent for a whole lease since its renewal: gone.
    let after = later + LOCK_LEASE;
    assert!(done(
        &t.set(&set(2, LockKind::Write, false), after)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    assert_eq!(
        t.renew(1, after),
        LockAnswer::Done {
            table: 7,
            known: false
        }
    );
}

#[test]
fn during_the_grace_only_reclaims_and_unlocks_are_served() {
    let now = Instant::now();
    let t = LockTable::new(9, true, now);
    assert!(matches!(
        t.set(&set(2, LockKind::Write, false), now),
        Err(WireError::Busy)
    ));
    assert!(matches!(
        t.test(INO, owner(2), 0, 0, LockKind::Read, now),
        Err(WireError::Busy)
    ));
    assert!(done(
        &t.set(&set(1, LockKind::Write, true), now)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    assert!(done(
        &t.set(&set(2, LockKind::Unlock, false), now)
            .unwrap_or_else(|e| panic!("{e}"))
    ));
    // After the grace, the reclaimed lock is in the way of the newcomer.
    let after = now + LOCK_GRACE;
    assert!(!t.in_grace(after));
    assert_eq!(
        t.renew(1, after),
        LockAnswer::Done {
            table: 9,
            known: true
        }
    );
    assert!(matches!(
        t.set(&set(2, LockKind::Write, false), after),
        Ok(LockAnswer::Blocked { .. })
    ));
}

#[test]
fn release_all_drops_every_owner_of_the_holder_and_wakes_waiters() {
    let now = Instant::now();
    let t = LockTable::new(1, false, now);
    for owner_id in 1..4 {
        let mut s = set(5, LockKind::Write, false);
        s.owner.owner = owner_id;
        s.ino = InodeId(owner_id);
        assert!(done(&t.set(&s, now).unwrap_or_else(|e| panic!("{e}"))));
    }
    assert_eq!(t.count(), 3);
    let waiter = t.released();
    tokio::pin!(waiter);
    waiter.as_mut().enable();
    t.release_all(5);
    assert_eq!(t.count(), 0);
    // The waiter was woken.
    let woke = futures_poll(waiter.as_mut());
    assert!(woke, "a waiter was not woken by release_all");
}

fn futures_poll<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    f.poll(&mut cx).is_ready()
}

#[test]
fn an_inverted_range_is_refused() {
    let now = Instant::now();
    let t = LockTable::new(1, false, now);
    let mut s = set(1, LockKind::Write, false);
    s.start = 10;
    s.end = 5;
    assert!(matches!(t.set(&s, now), Err(WireError::InvalidArgument(_))));
}
