//! The mount over FUSE over io_uring (`myriad mount --fuse-ring`, docs/fuse.md): files
//! written, read, listed, renamed and removed by several threads come back byte for byte,
//! the kernel's requests came over the ring (the mount's metrics count them), and the mount
//! unmounts cleanly. The ring is the mounts' default where the kernel has it; the FUSE
//! suite runs over /dev/fuse instead when `MYRIAD_TEST_DEV_FUSE=1` (`mount.rs`).

use std::os::unix::fs::MetadataExt;

use crate::harness::TestCluster;
use crate::mount::Mount;
use crate::mount_metrics::{mount_with_metrics, scrape, value};

/// Says why this machine cannot run the ring, if it cannot (the test then has nothing to
/// check).
fn no_ring_here() -> bool {
    let why = myriad_fuse_ring::ring::unavailable();
    if let Some(why) = &why {
        eprintln!("{why}: nothing to test");
    }
    why.is_some()
}

fn bytes_of(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8)
        .collect()
}

#[test]
fn a_mount_over_the_ring_serves_files_byte_for_byte() {
    if no_ring_here() {
        return;
    }
    let tc = TestCluster::start(3);
    let (mut m, addr) = mount_with_metrics(&tc, &["--fuse-ring"]);
    let root = m.dir.path().to_path_buf();
    // Four writers and readers at once, small files and one big one each (3 MiB: READs
    // and WRITEs of the mount's largest size go through the ring's payload buffers).
    let workers: Vec<_> = (0..4u32)
        .map(|w| {
            let root = root.clone();
            std::thread::spawn(move || {
                let dir = root.join(format!("w{w}"));
                std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
                for i in 0..40u32 {
                    let data = bytes_of(w * 1000 + i, 1 + (i as usize * 997) % 20_000);
                    std::fs::write(dir.join(format!("f{i}")), &data)
                        .unwrap_or_else(|e| panic!("{e}"));
                }
                let big = bytes_of(w, 3 << 20);
                std::fs::write(dir.join("big"), &big).unwrap_or_else(|e| panic!("{e}"));
                for i in 0..40u32 {
                    let want = bytes_of(w * 1000 + i, 1 + (i as usize * 997) % 20_000);
                    let p = dir.join(format!("f{i}"));
                    assert_eq!(std::fs::read(&p).ok(), Some(want.clone()), "{p:?}");
                    assert_eq!(
                        std::fs::metadata(&p).map(|m| m.size()).ok(),
                        Some(want.len() as u64)
                    );
                }
                assert!(
                    std::fs::read(dir.join("big")).ok() == Some(big),
                    "big file of {w}"
                );
                std::fs::rename(dir.join("f0"), dir.join("renamed"))
                    .unwrap_or_else(|e| panic!("{e}"));
                std::fs::remove_file(dir.join("f1")).unwrap_or_else(|e| panic!("{e}"));
                std::os::unix::fs::symlink("renamed", dir.join("link"))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(
                    std::fs::read(dir.join("link")).ok(),
                    Some(bytes_of(w * 1000, 1))
                );
                let names = std::fs::read_dir(&dir).map(Iterator::count).ok();
                assert_eq!(names, Some(41), "39 files, big, renamed and link, less f1");
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap_or_else(|_| panic!("a worker failed"));
    }
    // A missing name is an errno through the ring too.
    let missing = std::fs::metadata(root.join("w0/f1")).map(|_| ());
    assert_eq!(
        missing.map_err(|e| e.raw_os_error()),
        Err(Some(libc::ENOENT))
    );
    let text = scrape(&addr);
    let ring = value(&text, "myriad_mount_ring_requests_total");
    let kernel: u64 = text
        .lines()
        .filter(|l| l.starts_with("myriad_mount_kernel_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(
        ring > 500 && ring * 10 >= kernel * 9,
        "the kernel's requests came over the ring: {ring} of {kernel}\n{}",
        m.log_text()
    );
    m.unmount();
}

/// Runs `f` on a thread and fails the test if it has not finished within `secs`.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not finish within {secs} s"))
}

#[test]
fn lock_waiters_beyond_a_queues_entries_do_not_hold_back_other_requests() {
    lock_waiters_over_the_ring(false);
}

/// The same with a change of the cluster map while the waiters are blocked: found at
/// stop 80 (the cluster's own map change that raises its protocol floor, a second after
/// start, met the test's waiters once in a suite run), when it failed about one run in
/// three, the waiters not done after 30 s, over the ring only. Not seen since the code
/// of that stop's end: 54 runs of 54 passed at stop 81 (three at once, with the CPUs
/// busy, with and without waiting for the floor's map change), with no change to the
/// ring; kept in the suite so that it shows if it comes back.
#[test]
fn lock_waiters_over_the_ring_survive_a_map_change() {
    lock_waiters_over_the_ring(true);
}

/// Twelve flock waiters blocked behind a held lock over the ring (two entries per CPU),
/// other requests served beside them, then each waiter gets the lock in turn; with
/// `map_change`, a newer map (same placement) is installed while they wait.
fn lock_waiters_over_the_ring(map_change: bool) {
    if no_ring_here() {
        return;
    }
    let tc = TestCluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    // The cluster's own map change (its protocol floor, within a second of start) first.
    let map = rt.block_on(crate::redirect::floor_raised(&tc));
    // Two entries per CPU to start: twelve blocked flock waiters hold every one of them.
    let m = Mount::new(&tc, &["--", "--fuse-ring", "--fuse-ring-depth", "2"]);
    let file = m.path("locked");
    std::fs::write(&file, b"x").unwrap_or_else(|e| panic!("{e}"));
    let held = std::fs::File::open(&file).unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: flock on a descriptor this test holds.
    let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let waiters: Vec<std::process::Child> = (0..12)
        .map(|_| {
            std::process::Command::new("flock")
                .arg(&file)
                .arg("true")
                .spawn()
                .unwrap_or_else(|e| panic!("flock(1): {e}"))
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(500));
    if map_change {
        let mut newer = map;
        newer.epoch += 1;
        let admin = tc.client_as(
            newer.clone(),
            std::time::Duration::from_secs(10),
            myriad_client::Caller::root(),
        );
        let installed = rt.block_on(admin.install_map(newer));
        assert!(installed.is_ok(), "{installed:?}");
    }
    // Every other request still gets an entry (the queues registered more).
    let root = m.dir.path().to_path_buf();
    within(
        20,
        "files written and read beside the lock waiters",
        move || {
            for i in 0..50 {
                let p = root.join(format!("beside{i}"));
                std::fs::write(&p, format!("file {i}")).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(std::fs::read_to_string(&p).ok(), Some(format!("file {i}")));
            }
        },
    );
    drop(held);
    within(30, "the lock waiters", move || {
        for mut w in waiters {
            let st = w.wait().unwrap_or_else(|e| panic!("{e}"));
            assert!(st.success(), "a waiter got the lock and ran: {st}");
        }
    });
}

/// The ring is the mounts' default where the kernel has it (the test runs as root, so the
/// mount may turn `fuse.enable_uring` on), and `--no-fuse-ring` keeps /dev/fuse.
#[test]
fn a_mount_takes_the_ring_by_default_and_dev_fuse_when_told() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if no_ring_here() || !root || std::env::var_os("MYRIAD_TEST_DEV_FUSE").is_some() {
        return;
    }
    let tc = TestCluster::start(3);
    for (flags, over_ring) in [(&[][..], true), (&["--no-fuse-ring"][..], false)] {
        let (mut m, addr) = mount_with_metrics(&tc, flags);
        let dir = m.dir.path().join(format!("d{over_ring}"));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..20 {
            std::fs::write(dir.join(format!("f{i}")), b"x").unwrap_or_else(|e| panic!("{e}"));
        }
        let text = scrape(&addr);
        let ring = value(&text, "myriad_mount_ring_requests_total");
        assert_eq!(
            ring > 20,
            over_ring,
            "{flags:?}: {ring} requests over the ring\n{}",
            m.log_text()
        );
        m.unmount();
    }
}
