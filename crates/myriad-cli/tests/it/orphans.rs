//! A file open through one mount and unlinked (or renamed over) through another stays
//! readable by the first until it closes it (docs/fuse.md "Open files unlinked
//! elsewhere"); once closed, its data goes.

use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, Instant};

use myriad_client::proto::limits::{KEEP_OPEN_EVERY, ORPHAN_HOLD};
use myriad_client::proto::{AdminRequest, Request, Response};

use crate::harness::TestCluster;
use crate::mount::Mount;

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Orphans the cluster keeps (entries of the reserved `//o` on every partition).
async fn orphans(c: &myriad_client::Client) -> usize {
    let mut n = 0;
    for p in &c.map().partitions {
        let req = Request::Admin(AdminRequest::FsckEntries {
            dir: "//o".into(),
            after: None,
            limit: 1024,
        });
        match c.request(p.id, req).await {
            Ok(Response::FsckEntries { entries, .. }) => n += entries.len(),
            other => panic!("fsck_entries of //o on {}: {other:?}", p.id),
        }
    }
    n
}

#[test]
fn a_file_unlinked_elsewhere_stays_readable_where_it_is_open() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let a = Mount::new(&tc, &[]);
    let b = Mount::new(&tc, &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let admin = tc.client_as(
        tc.map.clone(),
        Duration::from_secs(10),
        myriad_client::Caller::root(),
    );
    // One file in chunk 0, one over two chunks (4 MiB each by default).
    let small = bytes(1, 200_000);
    let big = bytes(2, 5 * 1024 * 1024);
    std::fs::write(a.path("small"), &small).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(a.path("big"), &big).unwrap_or_else(|e| panic!("{e}"));

    let mut fs = std::fs::File::open(b.path("small")).unwrap_or_else(|e| panic!("{e}"));
    let mut fb = std::fs::File::open(b.path("big")).unwrap_or_else(|e| panic!("{e}"));
    let mut head = [0u8; 10];
    fs.read_exact(&mut head).unwrap_or_else(|e| panic!("{e}"));
    fb.read_exact(&mut head).unwrap_or_else(|e| panic!("{e}"));

    // A removes one and replaces the other (an editor's save).
    std::fs::remove_file(a.path("small")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(a.path("new"), b"replacement").unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(a.path("new"), a.path("big")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rt.block_on(orphans(&admin)), 2, "both kept as orphans");

    let read_all = |f: &mut std::fs::File| {
        let mut v = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap_or_else(|e| panic!("{e}"));
        f.read_to_end(&mut v).unwrap_or_else(|e| panic!("{e}"));
        v
    };
    // B drops its page cache of them, so reads reach the servers.
    for f in [&fs, &fb] {
        // SAFETY: a valid descriptor; advice only.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(f),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }
    assert!(read_all(&mut fs) == small, "the unlinked file reads whole");
    assert!(read_all(&mut fb) == big, "the replaced file reads whole");
    assert_eq!(
        std::fs::read(b.path("big")).unwrap_or_else(|e| panic!("{e}")),
        b"replacement",
        "the name is the new file's"
    );

    // Longer than an orphan is held without keeps: B's mount keeps them.
    std::thread::sleep(ORPHAN_HOLD + KEEP_OPEN_EVERY + Duration::from_secs(2));
    for f in [&fs, &fb] {
        // SAFETY: as above.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(f),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }
    assert!(read_all(&mut fs) == small, "still readable while open");
    assert!(read_all(&mut fb) == big, "still readable while open");

    // Closed: the data goes once the hold passes.
    drop((fs, fb));
    let t = Instant::now();
    while rt.block_on(orphans(&admin)) > 0 {
        assert!(
            t.elapsed() < ORPHAN_HOLD + Duration::from_secs(30),
            "orphans not dropped after their files were closed"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    rt.block_on(tc.fsck_until_clean());
}
