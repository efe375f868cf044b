//! renameat2(RENAME_EXCHANGE) through the mount (docs/fuse.md): two names swap in one
//! atomic step, in one directory (one partition) and across directories on two servers
//! (the two-partition rename protocol carrying the destination's entry back); a missing
//! name is ENOENT, a directory EINVAL; an open descriptor follows its file.

use std::io::Write;
use std::os::unix::ffi::OsStrExt;

use myriad_client::NodeId;

use crate::harness::{TestCluster, dir_on_node};
use crate::mount::Mount;

fn exchange(a: &std::path::Path, b: &std::path::Path) -> Result<(), i32> {
    let c = |p: &std::path::Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    };
    let (ca, cb) = (c(a), c(b));
    // SAFETY: two valid NUL-terminated paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

fn read(p: &std::path::Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

#[test]
fn rename_exchange_swaps_two_names_in_one_step() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let client = tc.client();
    let p = dir_on_node(&client, &tc.map, NodeId(1), "p");
    let q = dir_on_node(&client, &tc.map, NodeId(2), "q");
    let m = Mount::new(&tc, &[]);
    for d in [&p, &q] {
        std::fs::create_dir(m.path(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    let (px, pz, qy) = (
        m.path(&format!("{p}/x")),
        m.path(&format!("{p}/z")),
        m.path(&format!("{q}/y")),
    );
    std::fs::write(&px, b"x-data").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&pz, b"z").unwrap_or_else(|e| panic!("{e}"));
    // y is a symlink: any kind but a directory swaps.
    std::os::unix::fs::symlink("target-of-y", &qy).unwrap_or_else(|e| panic!("{e}"));
    let ino = |p: &std::path::Path| {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap_or_else(|e| panic!("{e}")))
    };
    let x_ino = ino(&px);

    // Across two servers.
    let mut open_x = std::fs::OpenOptions::new()
        .append(true)
        .open(&px)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(exchange(&px, &qy), Ok(()));
    assert_eq!(read(&qy), b"x-data");
    assert_eq!(
        std::fs::read_link(&px).unwrap_or_else(|e| panic!("{e}")),
        std::path::PathBuf::from("target-of-y")
    );
    assert_eq!(
        ino(&qy),
        x_ino,
        "the file kept its inode under its new name"
    );
    // The descriptor follows its file to the other server.
    open_x.write_all(b"+more").unwrap_or_else(|e| panic!("{e}"));
    drop(open_x);
    assert_eq!(read(&qy), b"x-data+more");
    // And the servers agree (a fresh client, no cache of the mount's).
    let fresh = tc.client();
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        rt.block_on(fresh.read_all(&format!("{q}/y")))
            .unwrap_or_else(|e| panic!("{e}")),
        b"x-data+more"
    );
    assert_eq!(
        rt.block_on(fresh.readlink(&format!("{p}/x")))
            .unwrap_or_else(|e| panic!("{e}")),
        "target-of-y"
    );

    // Within one directory, and back again.
    assert_eq!(exchange(&pz, &qy), Ok(()));
    assert_eq!(read(&pz), b"x-data+more");
    assert_eq!(read(&qy), b"z");
    assert_eq!(exchange(&pz, &qy), Ok(()));
    assert_eq!(read(&pz), b"z");

    // Both names must exist; directories are not exchanged.
    assert_eq!(
        exchange(&pz, &m.path(&format!("{p}/missing"))),
        Err(libc::ENOENT)
    );
    assert_eq!(exchange(&pz, &m.path(&q)), Err(libc::EINVAL));
    assert_eq!(read(&pz), b"z", "a refused exchange changed nothing");
}

/// An exchange changes both files' ctimes under every name, a hard-linked file's too,
/// whether it is the source or the destination, in one directory or across two servers
/// (nsx seed 6: a hard-linked destination kept its old ctime, its inode lives at its link
/// home, which only a moved source's was touched at).
#[test]
fn an_exchange_changes_a_hard_linked_file_s_ctime_under_every_name() {
    use std::os::unix::fs::MetadataExt;
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let client = tc.client();
    let p = dir_on_node(&client, &tc.map, NodeId(1), "p");
    let q = dir_on_node(&client, &tc.map, NodeId(2), "q");
    let m = Mount::new(&tc, &[]);
    for d in [&p, &q] {
        std::fs::create_dir(m.path(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let ctime = |path: &str| {
        let md = std::fs::symlink_metadata(m.path(path)).unwrap_or_else(|e| panic!("{e}"));
        md.ctime() as i128 * 1_000_000_000 + md.ctime_nsec() as i128
    };
    // (the other name, whether the linked name is the exchange's source, the plain file)
    let cases = [
        (format!("{p}/a"), false, format!("{p}/x")),
        (format!("{p}/b"), false, format!("{q}/y")),
        (format!("{p}/c"), true, format!("{p}/z")),
        (format!("{p}/d"), true, format!("{q}/w")),
    ];
    for (other, linked_is_source, plain) in &cases {
        let linked = format!("{other}-link");
        std::fs::write(m.path(other), b"linked").unwrap_or_else(|e| panic!("{e}"));
        std::fs::hard_link(m.path(other), m.path(&linked)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(m.path(plain), b"plain").unwrap_or_else(|e| panic!("{e}"));
        let before = ctime(other);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (from, to) = if *linked_is_source {
            (&linked, plain)
        } else {
            (plain, &linked)
        };
        assert_eq!(exchange(&m.path(from), &m.path(to)), Ok(()));
        let case = format!("{from} <-> {to}, seen as {other}");
        assert!(
            ctime(other) > before,
            "{case}: ctime unchanged through the mount"
        );
        let fresh = tc.client();
        let i = rt
            .block_on(fresh.stat(other))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            i.ctime_ns as i128 > before,
            "{case}: ctime unchanged on the servers"
        );
        assert_eq!(
            std::fs::read(m.path(plain)).unwrap_or_default(),
            b"linked",
            "{case}"
        );
    }
}
