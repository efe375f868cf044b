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
