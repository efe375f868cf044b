//! A mount of a subdirectory (`myriad mount --subdir /proj/a`, mount.myriad's
//! `h1:7401:/proj/a`): the kernel's root is that directory (inode 1 to the kernel, its own
//! inode to the servers: `myriad-fuse/src/kernel_ids.rs`), nothing above it is reachable,
//! and another client's changes are seen at once in the mount's root as below it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

use crate::harness::{BIN, TestCluster};
use crate::mount::Mount;

fn io<T>(r: std::io::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = io(std::fs::read_dir(dir))
        .map(|e| io(e).file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_subdirectory_mount_shows_only_its_tree_and_sees_other_clients_at_once() {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let whole = Mount::new(&tc, &["--", "--leases"]);
    io(std::fs::create_dir_all(whole.path("proj/a/d")));
    io(std::fs::write(whole.path("proj/a/f"), b"in a"));
    io(std::fs::write(whole.path("proj/a/d/x"), b"deep"));
    io(std::fs::write(whole.path("proj/outside"), b"not shown"));

    let sub = Mount::new(&tc, &["--", "--leases", "--subdir", "/proj/a/"]);
    let root = sub.dir.path();
    assert_eq!(names(root), ["d", "f"], "the mount's root is /proj/a");
    assert_eq!(io(std::fs::read(sub.path("f"))), b"in a");
    assert_eq!(io(std::fs::read(sub.path("d/x"))), b"deep");
    assert!(!sub.path("proj").exists() && !sub.path("outside").exists());
    let top = io(std::fs::metadata(root));
    assert!(top.is_dir());
    assert_eq!(top.ino(), 1, "the kernel's root inode");
    let f = io(std::fs::metadata(sub.path("f")));
    assert_eq!(
        f.ino(),
        io(std::fs::metadata(whole.path("proj/a/f"))).ino(),
        "below the root, inode numbers are the cluster's, as in any mount"
    );

    // Another client's changes, in the mount's root and below it, are seen at once: the
    // lease recall's invalidations name the root by the kernel's number for it.
    assert!(
        !sub.path("new").exists(),
        "a missing name, cached under the lease"
    );
    io(std::fs::write(whole.path("proj/a/new"), b"new"));
    assert_eq!(
        std::fs::read(sub.path("new")).ok(),
        Some(b"new".to_vec()),
        "a create in the root seen at once"
    );
    io(std::fs::remove_file(whole.path("proj/a/f")));
    assert!(
        !sub.path("f").exists(),
        "an unlink in the root seen at once"
    );
    assert_eq!(names(root), ["d", "new"]);
    io(std::fs::set_permissions(
        whole.path("proj/a"),
        std::fs::Permissions::from_mode(0o750),
    ));
    assert_eq!(
        io(std::fs::metadata(root)).permissions().mode() & 0o777,
        0o750,
        "a chmod of the mounted directory seen at once"
    );
    io(std::fs::write(whole.path("proj/a/d/y"), b"y"));
    assert_eq!(names(&sub.path("d")), ["x", "y"]);

    // Changes through the subdirectory mount land under /proj/a.
    io(std::fs::write(sub.path("made"), b"made here"));
    io(std::fs::rename(sub.path("made"), sub.path("d/moved")));
    io(std::os::unix::fs::symlink("d/moved", sub.path("link")));
    io(std::fs::hard_link(sub.path("d/moved"), sub.path("twin")));
    io(std::fs::create_dir(sub.path("e")));
    io(std::fs::remove_dir(sub.path("e")));
    assert_eq!(
        io(std::fs::read(whole.path("proj/a/d/moved"))),
        b"made here"
    );
    assert_eq!(io(std::fs::read(whole.path("proj/a/link"))), b"made here");
    assert_eq!(io(std::fs::metadata(whole.path("proj/a/twin"))).nlink(), 2);
    assert!(!whole.path("proj/a/e").exists() && !whole.path("proj/a/made").exists());
    assert_eq!(names(root), ["d", "link", "new", "twin"]);
}

/// What `myriad mount --subdir` prints and exits with for a directory it cannot mount.
fn refused(tc: &TestCluster, subdir: &str) -> String {
    let mnt = io(tempfile::tempdir());
    let out = io(Command::new(BIN)
        .arg("--cluster")
        .arg(tc.map_file())
        .arg("mount")
        .arg(mnt.path())
        .args(["--subdir", subdir])
        .output());
    assert!(!out.status.success(), "mounting {subdir} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_missing_or_non_directory_subdirectory_is_refused_with_its_name() {
    let tc = TestCluster::start_with(1, &[]);
    let whole = Mount::new(&tc, &[]);
    io(std::fs::write(whole.path("file"), b"x"));
    let e = refused(&tc, "/nowhere");
    assert!(e.contains("/nowhere") && e.contains("o such file"), "{e}");
    let e = refused(&tc, "/file");
    assert!(e.contains("/file") && e.contains("not a directory"), "{e}");
    let e = refused(&tc, "relative");
    assert!(e.contains("absolute"), "{e}");
}
