//! Frozen trees (issue 20, docs/metadata-index.md): once a tree is frozen every change
//! inside it, and every move or removal of it, is refused with `ReadOnly` (EROFS) by the
//! servers, reads go on, and a thaw makes it writable again.

use std::time::Duration;

use myriad_client::proto::{ReadOnlyMark, XattrMode};
use myriad_client::{Caller, Client, FsError, RenameFlags};

use crate::harness::TestCluster;

fn root(tc: &TestCluster) -> Client {
    let caller = Caller {
        uid: 0,
        gid: 0,
        groups: vec![],
    };
    tc.client_as(tc.map.clone(), Duration::from_secs(10), caller)
}

fn ok<T>(r: Result<T, FsError>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_tree_refuses_every_change_until_it_is_thawed() {
    let tc = TestCluster::start(4);
    let c = root(&tc);
    ok(c.mkdir_p("/sw/lib/py/empty", 0o755).await, "mkdir");
    ok(c.mkdir("/sw/bin", 0o755).await, "mkdir");
    for f in ["/sw/lib/py/os.py", "/sw/bin/tool", "/sw/README"] {
        ok(c.create(f, 0o644, true, f.as_bytes()).await, f);
    }
    ok(c.symlink("py/os.py", "/sw/lib/os").await, "symlink");
    ok(c.create("/outside", 0o644, true, b"o").await, "create");
    // A file with a second chunk: its chunks are written by inode, with a capability.
    let big = vec![7u8; 5 << 20];
    ok(
        c.create("/sw/lib/big.dat", 0o644, true, b"").await,
        "create",
    );
    let hb = ok(c.open("/sw/lib/big.dat").await, "open");
    ok(c.write(&hb, 0, &big).await, "write");
    ok(c.mkdir("/lone", 0o755).await, "mkdir");
    let sw = ok(c.stat("/sw").await, "stat");
    let mark = ReadOnlyMark {
        root: sw.ino,
        version: 1,
    };

    // Only root freezes.
    let user = tc.client();
    assert_eq!(
        user.mark_read_only("/sw", Some(mark)).await.err(),
        Some(FsError::PermissionDenied)
    );
    let dirs = ok(c.freeze_tree("/sw", mark).await, "freeze");
    let lone = ReadOnlyMark {
        root: ok(c.stat("/lone").await, "stat").ino,
        version: 1,
    };
    assert_eq!(ok(c.freeze_tree("/lone", lone).await, "freeze"), ["/lone"]);
    let mut sorted = dirs.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "/sw",
            "/sw/bin",
            "/sw/lib",
            "/sw/lib/py",
            "/sw/lib/py/empty"
        ]
    );

    // Every kind of change inside, by root too, and every move or removal of the tree.
    let refused = FsError::ReadOnly;
    let flags = RenameFlags::default();
    let h = ok(c.open("/sw/lib/py/os.py").await, "open");
    // A client that holds no capability from before the freeze (one granted earlier stays
    // good for its rest, docs/metadata-index.md).
    let fresh = root(&tc);
    let hb = ok(fresh.open("/sw/lib/big.dat").await, "open");
    let attempts: Vec<(&str, Result<(), FsError>)> = vec![
        (
            "create",
            c.create("/sw/new", 0o644, true, b"x").await.map(drop),
        ),
        (
            "create deep",
            c.create("/sw/lib/py/new.py", 0o644, true, b"")
                .await
                .map(drop),
        ),
        ("mkdir", c.mkdir("/sw/lib/new", 0o755).await.map(drop)),
        ("symlink", c.symlink("x", "/sw/bin/x").await.map(drop)),
        (
            "link in",
            c.link("/sw/README", "/sw/bin/README").await.map(drop),
        ),
        ("unlink", c.unlink("/sw/bin/tool").await),
        ("rmdir inside", c.rmdir("/sw/lib/py/empty").await),
        ("rmdir of a frozen tree", c.rmdir("/lone").await),
        (
            "rename inside",
            c.rename("/sw/README", "/sw/bin/README", flags).await,
        ),
        ("rename out", c.rename("/sw/README", "/README", flags).await),
        ("rename in", c.rename("/outside", "/sw/x", flags).await),
        ("rename the tree", c.rename("/sw", "/sw2", flags).await),
        ("rename a subtree", c.rename("/sw/lib", "/lib", flags).await),
        ("write", c.write(&h, 0, b"changed").await.map(drop)),
        ("truncate", c.truncate(&h, 0).await.map(drop)),
        (
            "open to write",
            c.stat_to_write("/sw/README").await.map(drop),
        ),
        (
            "write past the first chunk",
            fresh.write(&hb, (4 << 20) + 10, b"changed").await.map(drop),
        ),
        ("chmod", c.chmod("/sw/lib/py/os.py", 0o600).await.map(drop)),
        (
            "chmod of a directory inside",
            c.chmod("/sw/lib/py", 0o700).await.map(drop),
        ),
        (
            "set an attribute",
            c.set_xattr("/sw/README", "user.k", Some(b"v"), XattrMode::Either)
                .await
                .map(drop),
        ),
    ];
    for (what, r) in attempts {
        assert_eq!(r.err(), Some(refused.clone()), "{what}");
    }
    assert_eq!(refused.errno(), libc::EROFS);

    // Reads go on, and nothing changed.
    assert_eq!(
        ok(c.fetch("/sw/lib/py/os.py").await, "fetch").1,
        b"/sw/lib/py/os.py"
    );
    ok(
        c.stat("/lone").await,
        "a refused rmdir leaves the directory",
    );
    ok(
        c.stat("/outside").await,
        "a refused rename leaves its source",
    );
    ok(c.stat_to_write("/outside").await, "open to write outside");
    let data = ok(fresh.read(&hb, (4 << 20) + 10, 7).await, "read");
    assert_eq!(data, [7u8; 7], "a refused write leaves the bytes");
    assert_eq!(ok(c.readlink("/sw/lib/os").await, "readlink"), "py/os.py");
    assert_eq!(ok(c.readdir("/sw/bin").await, "readdir").len(), 1);
    assert_eq!(ok(c.stat("/sw/lib/py").await, "stat").mode & 0o777, 0o755);

    // Thawed, deepest first: everything is writable again.
    assert_eq!(ok(c.thaw_tree("/sw").await, "thaw"), 5);
    ok(
        c.create("/sw/lib/py/new.py", 0o644, true, b"").await,
        "create",
    );
    ok(c.rmdir("/sw/lib/py/empty").await, "rmdir");
    ok(c.rename("/sw", "/sw2", flags).await, "rename");
    ok(c.stat("/sw2/README").await, "stat after the move");
    assert_eq!(ok(c.thaw_tree("/lone").await, "thaw"), 1);
    ok(c.rmdir("/lone").await, "rmdir");
}

/// Through a mount that had been writing behind in the tree: the freeze recalls its
/// lease (its journal is sent first, so nothing it answered is lost), and afterwards
/// every change fails at once with "Read-only file system" instead of being answered
/// behind; reads go on; after the thaw the mount writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_gets_erofs_in_a_frozen_tree_at_once() {
    let tc = TestCluster::start(4);
    let m = crate::mount::Mount::new(&tc, &[]);
    let dir = m.path("");
    crate::mount::sh(
        &dir,
        "mkdir -p sw/sub && for i in 1 2 3; do echo v$i > sw/f$i; done && chmod 600 sw/f3",
    );
    let c = root(&tc);
    let sw = ok(c.stat("/sw").await, "stat");
    let mark = ReadOnlyMark {
        root: sw.ino,
        version: 1,
    };
    ok(c.freeze_tree("/sw", mark).await, "freeze");
    // Everything the mount answered behind reached the servers before the mark.
    assert_eq!(ok(c.fetch("/sw/f3").await, "fetch").1, b"v3\n");
    assert_eq!(ok(c.stat("/sw/f3").await, "stat").mode & 0o777, 0o600);
    for script in [
        "touch sw/new",
        "echo x > sw/f1",
        "echo x >> sw/f2",
        "rm sw/f1",
        "mkdir sw/d",
        "rmdir sw/sub",
        "mv sw/f1 sw/g",
        "chmod 644 sw/f3",
        "ln -s f1 sw/l",
        "touch -d 2001-01-01 sw/f1",
    ] {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("Read-only file system"),
            "`{script}`: {err}"
        );
    }
    // An open for writing that does not truncate fails at open too (not at the close
    // that would send its write: a shell's `>>` does not look at close).
    let append = "import os\n\
        try:\n    os.open('sw/f2', os.O_WRONLY | os.O_APPEND)\n    print('opened')\n\
        except OSError as e:\n    print(e.strerror)\n";
    assert_eq!(
        crate::mount::sh(&dir, &format!("python3 -c \"{append}\"")),
        "Read-only file system\n"
    );
    assert_eq!(
        crate::mount::sh(&dir, "cat sw/f1 sw/f2; ls sw | wc -l"),
        "v1\nv2\n4\n"
    );
    // Past the recall's quiet time the mount asks to hold the directory alone again (to
    // answer creates behind): a frozen directory is never given so.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let late = std::process::Command::new("bash")
        .args(["-c", "touch sw/late"])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("Read-only file system"),
        "a create after the claim: {late:?}"
    );
    ok(c.thaw_tree("/sw").await, "thaw");
    crate::mount::sh(&dir, "touch sw/new && rm sw/f1 && mkdir sw/d && sync");
    assert!(c.stat("/sw/f1").await.is_err());
    ok(c.stat("/sw/new").await, "stat");
}
