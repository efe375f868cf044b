use super::*;
use myriad_proto::locks::{LOCK_LEASE, LockOwner};

fn lock(owner: u64, start: u64, end: u64) -> HeldLock {
    HeldLock {
        owner: LockOwner { holder: 1, owner },
        start,
        end,
        write: true,
        pid: 3,
    }
}

#[test]
fn the_record_follows_grants_and_forgets_emptied_partitions() {
    let held = HeldLocks::default();
    let now = Instant::now();
    let pid = PartitionId(4);
    held.record(pid, 77, InodeId(9), &lock(1, 0, 9), LockKind::Write, now);
    held.record(pid, 78, InodeId(9), &lock(2, 20, 29), LockKind::Read, now);
    held.with(|parts| {
        let p = &parts[&pid];
        // The first table that granted stays recorded: a different one later means a
        // new primary, which the next renewal notices.
        assert_eq!(p.table, 77);
        assert_eq!(p.inodes[&InodeId(9)].len(), 2);
        // Valid a lease from the grant table 77 answered, not from 78's.
        assert_eq!(p.valid_until, Some(now + LOCK_LEASE));
    });
    held.record(
        pid,
        77,
        InodeId(9),
        &lock(1, 0, u64::MAX),
        LockKind::Unlock,
        now,
    );
    held.with(|parts| assert_eq!(parts[&pid].inodes[&InodeId(9)].len(), 1));
    held.record(
        pid,
        77,
        InodeId(9),
        &lock(2, 0, u64::MAX),
        LockKind::Unlock,
        now,
    );
    held.with(|parts| assert!(parts.is_empty(), "an emptied partition is forgotten"));
}

#[tokio::test(start_paused = true)]
async fn locks_whose_lease_lapsed_are_taken_out_and_others_stay() {
    let held = HeldLocks::default();
    let now = Instant::now();
    let (pid, other) = (PartitionId(4), PartitionId(5));
    held.record(pid, 77, InodeId(9), &lock(1, 0, 9), LockKind::Write, now);
    held.record(other, 78, InodeId(8), &lock(1, 0, 9), LockKind::Write, now);
    // Still valid: nothing taken.
    assert!(held.take_lapsed(pid, now + LOCK_LEASE / 2).is_empty());
    held.renewed(other, 78, now + LOCK_LEASE / 2);
    // Lapsed: taken out, and forgotten.
    let taken = held.take_lapsed(pid, now + LOCK_LEASE);
    assert_eq!(taken, vec![(InodeId(9), lock(1, 0, 9))]);
    held.with(|parts| assert!(!parts.contains_key(&pid)));
    // The renewed partition keeps its locks.
    assert!(held.take_lapsed(other, now + LOCK_LEASE).is_empty());
    held.with(|parts| assert!(parts.contains_key(&other)));
}
