//! File locks between mounts (docs/fuse.md "File locks between mounts"): `fcntl` and
//! `flock` locks taken through one mount exclude those of another; a close releases them;
//! a blocking lock waits for the holder; a crashed holder stops blocking within the lock
//! lease; a failover of the partition keeping the locks loses none of them.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use myriad_client::proto::locks::{LOCK_LEASE, LockAnswer, LockKind};
use myriad_client::{FsError, InodeId};

use crate::harness::{TestCluster, server_of};
use crate::mount::Mount;

pub(crate) fn open_rw(p: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
}

fn flock_of(typ: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: all-zero is a valid flock.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

/// fcntl(F_SETLK or F_SETLKW) on `f`: Ok, or the errno.
pub(crate) fn setlk(f: &File, cmd: i32, typ: i32, start: i64, len: i64) -> Result<(), i32> {
    let fl = flock_of(typ, start, len);
    // SAFETY: a valid descriptor and a valid flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), cmd, &fl) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// fcntl(F_GETLK): the type of the lock in the way (F_UNLCK: none), and its range.
fn getlk(f: &File, typ: i32, start: i64, len: i64) -> (i32, i64, i64) {
    let mut fl = flock_of(typ, start, len);
    // SAFETY: a valid descriptor and a valid flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut fl) };
    assert_eq!(r, 0, "F_GETLK: {}", std::io::Error::last_os_error());
    (i32::from(fl.l_type), fl.l_start, fl.l_len)
}

fn flock(f: &File, op: i32) -> Result<(), i32> {
    // SAFETY: a valid descriptor.
    let r = unsafe { libc::flock(f.as_raw_fd(), op) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Tries `f` every 50 ms until it is Ok or `limit` passes; how long that took.
fn until_ok(limit: Duration, mut f: impl FnMut() -> Result<(), i32>) -> Duration {
    let t = Instant::now();
    loop {
        match f() {
            Ok(()) => return t.elapsed(),
            Err(e) => assert!(
                t.elapsed() < limit,
                "still refused after {:?} (errno {e})",
                t.elapsed()
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn fcntl_and_flock_locks_exclude_across_mounts_and_go_at_close() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let a = Mount::new(&tc, &[]);
    let b = Mount::new(&tc, &[]);
    std::fs::write(a.path("f"), b"0123456789").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(a.path("g"), b"g").unwrap_or_else(|e| panic!("{e}"));

    // A write lock through A keeps B out, and B sees it with F_GETLK.
    let fa = open_rw(&a.path("f"));
    let fb = open_rw(&b.path("f"));
    assert_eq!(setlk(&fa, libc::F_SETLK, libc::F_WRLCK, 0, 0), Ok(()));
    assert_eq!(
        setlk(&fb, libc::F_SETLK, libc::F_RDLCK, 5, 1),
        Err(libc::EAGAIN)
    );
    let (typ, start, _) = getlk(&fb, libc::F_WRLCK, 0, 0);
    assert_eq!((typ, start), (libc::F_WRLCK, 0), "B sees A's write lock");

    // A gives back bytes 0..4: B may take them, not byte 5.
    assert_eq!(setlk(&fa, libc::F_SETLK, libc::F_UNLCK, 0, 5), Ok(()));
    assert_eq!(setlk(&fb, libc::F_SETLK, libc::F_WRLCK, 0, 5), Ok(()));
    assert_eq!(
        setlk(&fb, libc::F_SETLK, libc::F_WRLCK, 5, 1),
        Err(libc::EAGAIN)
    );
    let (typ, ..) = getlk(&fb, libc::F_WRLCK, 0, 5);
    assert_eq!(typ, libc::F_UNLCK, "B's own lock is not in its way");

    // A blocking lock through B waits until A's close releases A's locks.
    let waiter = {
        let fb = fb.try_clone().unwrap_or_else(|e| panic!("{e}"));
        std::thread::spawn(move || {
            let t = Instant::now();
            let r = setlk(&fb, libc::F_SETLKW, libc::F_WRLCK, 5, 0);
            (r, t.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(700));
    assert!(!waiter.is_finished(), "F_SETLKW did not wait for A's lock");
    drop(fa);
    let (r, waited) = waiter.join().unwrap_or_else(|_| panic!("waiter panicked"));
    assert_eq!(r, Ok(()), "F_SETLKW got the lock once A closed");
    assert!(waited >= Duration::from_millis(600), "waited {waited:?}");

    // flock: exclusive through A keeps B out until A's last close.
    let ga = open_rw(&a.path("g"));
    let gb = open_rw(&b.path("g"));
    assert_eq!(flock(&ga, libc::LOCK_EX | libc::LOCK_NB), Ok(()));
    assert_eq!(
        flock(&gb, libc::LOCK_SH | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK)
    );
    drop(ga);
    until_ok(Duration::from_secs(5), || {
        flock(&gb, libc::LOCK_EX | libc::LOCK_NB)
    });
    // Shared flocks share.
    let ga = open_rw(&a.path("g"));
    assert_eq!(flock(&gb, libc::LOCK_SH), Ok(()));
    assert_eq!(flock(&ga, libc::LOCK_SH | libc::LOCK_NB), Ok(()));
    assert_eq!(flock(&gb, libc::LOCK_UN), Ok(()));
    drop((ga, gb, fb));
}

#[test]
fn a_crashed_mount_stops_blocking_others_within_the_lock_lease() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let mut a = Mount::new(&tc, &[]);
    let b = Mount::new(&tc, &[]);
    std::fs::write(a.path("f"), b"x").unwrap_or_else(|e| panic!("{e}"));
    let fa = open_rw(&a.path("f"));
    assert_eq!(setlk(&fa, libc::F_SETLK, libc::F_WRLCK, 0, 0), Ok(()));
    let fb = open_rw(&b.path("f"));
    assert_eq!(
        setlk(&fb, libc::F_SETLK, libc::F_WRLCK, 0, 0),
        Err(libc::EAGAIN)
    );
    // A's machine dies with the lock held: nobody releases it.
    std::mem::forget(fa);
    a.kill9();
    let took = until_ok(LOCK_LEASE + Duration::from_secs(4), || {
        setlk(&fb, libc::F_SETLK, libc::F_WRLCK, 0, 0)
    });
    assert!(
        took <= LOCK_LEASE + Duration::from_secs(3),
        "the dead holder blocked B for {took:?}"
    );
}

/// The primary keeping a file's locks is killed while a client holds one: the new primary
/// gives the holder its grace to reclaim, so another client never gets the lock meanwhile;
/// once the holder unlocks, the other gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_keeps_every_lock_with_its_holder() {
    let tc = TestCluster::start_with(4, &["--replicas", "3"]);
    let a = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(20)));
    let b = tc.client_with(tc.map.clone(), Duration::from_secs(20));
    let ino = InodeId(0x7700_0000_0042);
    let set = |kind| (ino, 1, 0, u64::MAX, kind, 1, Duration::ZERO);
    let (i, o, s, e, k, p, w) = set(LockKind::Write);
    assert!(matches!(
        a.set_lock(i, o, s, e, k, p, w).await,
        Ok(LockAnswer::Done { .. })
    ));
    assert!(matches!(
        b.set_lock(i, o, s, e, k, p, w).await,
        Ok(LockAnswer::Blocked { .. })
    ));

    // A renews as a mount does.
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (a, stop) = (a.clone(), stop.clone());
        tokio::spawn(async move {
            let mut lost = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                lost.extend(a.renew_locks().await);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            lost
        })
    };
    let map = tc.map.clone();
    let primary = server_of(&map, map.ring().owner_of_locks(ino));
    tc.kill9(primary);

    // Through the failover and the grace after it, B never gets A's lock.
    let until = Instant::now() + LOCK_LEASE + Duration::from_secs(10);
    let mut answered = 0;
    while Instant::now() < until {
        match b.set_lock(i, o, s, e, k, p, w).await {
            Ok(LockAnswer::Blocked { .. }) => answered += 1,
            Ok(LockAnswer::Done { .. }) => panic!("B got A's lock during the failover"),
            Ok(other) => panic!("unexpected {other:?}"),
            Err(FsError::Busy | FsError::Unavailable(_) | FsError::TimedOut(_)) => {}
            Err(other) => panic!("unexpected error {other}"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(answered > 0, "the new primary never answered B");
    stop.store(true, Ordering::Relaxed);
    let lost = renewer.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(lost.is_empty(), "A lost locks: {lost:?}");
    assert!(a.holds_locks(ino, 1));

    // A unlocks: B gets it.
    let (i, o, s, e, k, p, w) = set(LockKind::Unlock);
    assert!(matches!(
        a.set_lock(i, o, s, e, k, p, w).await,
        Ok(LockAnswer::Done { .. })
    ));
    let (i, o, s, e, k, p, w) = set(LockKind::Write);
    assert!(matches!(
        b.set_lock(i, o, s, e, k, p, w).await,
        Ok(LockAnswer::Done { .. })
    ));
}
