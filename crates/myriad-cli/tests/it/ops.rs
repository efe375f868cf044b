//! Every operation with its error cases, against 4 real nodes.

use myriad_client::NodeId;
use myriad_client::{FileKind, FsError, RenameFlags};

use crate::harness::{TestCluster, dir_on_node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_operations_and_errors() {
    let tc = TestCluster::start(4);
    let c = tc.client();

    // mkdir / EEXIST / ENOENT parent
    let d = c.mkdir("/a", 0o750).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((d.kind, d.mode, d.uid), (FileKind::Directory, 0o750, 1000));
    assert_eq!(
        c.mkdir("/a", 0o755).await.err(),
        Some(FsError::AlreadyExists)
    );
    assert_eq!(
        c.mkdir("/nope/x", 0o755).await.err(),
        Some(FsError::NotFound)
    );
    c.mkdir_p("/a/b/c", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.stat("/a/b/c").await.map(|i| i.kind).ok(),
        Some(FileKind::Directory)
    );

    // create / EEXIST / ENOTDIR / EISDIR
    let h = c
        .create("/a/f", 0o640, true, b"hello")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(h.inode.size, 5);
    assert_eq!(
        c.create("/a/f", 0o640, true, b"x").await.err(),
        Some(FsError::AlreadyExists)
    );
    assert_eq!(
        c.create("/a/f/g", 0o640, true, b"x").await.err(),
        Some(FsError::NotADirectory)
    );
    assert_eq!(c.stat("/a/f/g").await.err(), Some(FsError::NotADirectory));
    assert_eq!(c.readdir("/a/f").await.err(), Some(FsError::NotADirectory));
    assert_eq!(
        c.create("/a/b", 0o640, false, b"").await.err(),
        Some(FsError::IsADirectory)
    );
    assert_eq!(c.open("/a").await.err(), Some(FsError::IsADirectory));
    assert_eq!(c.fetch("/a").await.err(), Some(FsError::IsADirectory));
    assert_eq!(c.stat("/a/missing").await.err(), Some(FsError::NotFound));

    // rmdir / unlink errors
    assert_eq!(c.rmdir("/a/b").await.err(), Some(FsError::NotEmpty));
    assert_eq!(c.unlink("/a/b").await.err(), Some(FsError::IsADirectory));
    assert_eq!(c.rmdir("/a/f").await.err(), Some(FsError::NotADirectory));
    assert_eq!(c.unlink("/a/zzz").await.err(), Some(FsError::NotFound));
    c.rmdir("/a/b/c").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.stat("/a/b/c").await.err(), Some(FsError::NotFound));
    // The removed directory object is really gone: nothing can be created in it.
    assert_eq!(
        c.create("/a/b/c/x", 0o644, true, b"").await.err(),
        Some(FsError::NotFound)
    );
    c.rmdir("/a/b").await.unwrap_or_else(|e| panic!("{e}"));

    // bad paths
    for p in ["relative", "/a/", "/a//f", "/a/./f", "/a/../f"] {
        assert!(
            matches!(c.stat(p).await, Err(FsError::InvalidArgument(_))),
            "{p}"
        );
    }
    let long_name = format!("/a/{}", "n".repeat(256));
    assert_eq!(
        c.create(&long_name, 0o644, true, b"").await.err(),
        Some(FsError::NameTooLong)
    );
    let long_path = "/abcdefghij".repeat(1500);
    assert_eq!(c.stat(&long_path).await.err(), Some(FsError::NameTooLong));
    let max_name = format!("/a/{}", "m".repeat(255));
    c.create(&max_name, 0o644, true, b"ok")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // symlink / readlink
    c.symlink("../target", "/a/l")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.readlink("/a/l").await.ok().as_deref(), Some("../target"));
    assert!(matches!(
        c.readlink("/a/f").await,
        Err(FsError::InvalidArgument(_))
    ));
    assert_eq!(
        c.symlink("x", "/a/l").await.err(),
        Some(FsError::AlreadyExists)
    );

    // chmod / chown / utimens
    assert_eq!(
        c.chmod("/a/f", 0o600).await.map(|i| i.mode).ok(),
        Some(0o600)
    );
    assert_eq!(
        c.chown("/a/f", Some(42), None).await.err(),
        Some(FsError::NotPermitted),
        "only root gives files away (EPERM)"
    );
    let root = tc.client_as(
        tc.map.clone(),
        std::time::Duration::from_secs(10),
        myriad_client::Caller::root(),
    );
    let i = root
        .chown("/a/f", Some(42), Some(43))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((i.uid, i.gid), (42, 43));
    assert_eq!(
        c.utimens("/a/f", Some(1), Some(2)).await.err(),
        Some(FsError::NotPermitted),
        "not the owner any more"
    );
    let i = root
        .utimens("/a/f", Some(1_000_000_000), Some(2_000_000_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((i.atime_ns, i.mtime_ns), (1_000_000_000, 2_000_000_000));
    assert_eq!(c.chmod("/", 0o755).await.map(|i| i.mode).ok(), Some(0o755));
    assert_eq!(
        c.chmod("/a/none", 0o755).await.err(),
        Some(FsError::NotFound)
    );

    // statfs
    let s = c.statfs().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(s.total_bytes > 0 && s.free_bytes > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_data_inline_chunked_sparse_and_truncated() {
    let tc = TestCluster::start(4);
    let c = tc.client();
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));

    // write at offsets, read back
    let h = c
        .create("/d/f", 0o644, true, b"")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.write(&h, 10, b"world")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.write(&h, 0, b"hello")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (i, data) = c.fetch("/d/f").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(i.size, 15);
    assert_eq!(&data, b"hello\0\0\0\0\0world");
    c.fsync(&h).await.unwrap_or_else(|e| panic!("{e}"));

    // a 10 MiB file spans 3 chunks on (likely) several nodes
    let big: Vec<u8> = (0..10 * 1024 * 1024u32).map(|x| (x % 253) as u8).collect();
    let hb = c
        .create("/d/big", 0o644, true, &big)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hb.inode.size, big.len() as u64);
    assert_eq!(c.read_all("/d/big").await.ok().as_deref(), Some(&big[..]));
    let (_, fetched) = c.fetch("/d/big").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fetched.len(), big.len());
    // a read across the chunk 0 / chunk 1 boundary
    let hb = c.open("/d/big").await.unwrap_or_else(|e| panic!("{e}"));
    let mid = c
        .read(&hb, 4 * 1024 * 1024 - 3, 6)
        .await
        .unwrap_or_default();
    assert_eq!(mid, big[4 * 1024 * 1024 - 3..4 * 1024 * 1024 + 3]);

    // truncate down past chunk 0, then up: the extended range reads zeros
    c.truncate(&hb, 100).await.unwrap_or_else(|e| panic!("{e}"));
    let hb = c.open("/d/big").await.unwrap_or_else(|e| panic!("{e}"));
    c.truncate(&hb, 9 * 1024 * 1024)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let all = c.read_all("/d/big").await.unwrap_or_default();
    assert_eq!(all.len(), 9 * 1024 * 1024);
    assert_eq!(&all[..100], &big[..100]);
    assert!(
        all[100..].iter().all(|&b| b == 0),
        "bytes beyond a truncate must read as zeros"
    );

    // sparse: write far away, hole reads as zeros
    let hs = c
        .create("/d/sparse", 0o644, true, b"")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.write(&hs, 20 * 1024 * 1024, b"end")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let hs = c.open("/d/sparse").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hs.inode.size, 20 * 1024 * 1024 + 3);
    assert_eq!(
        c.read(&hs, 5 * 1024 * 1024, 4).await.unwrap_or_default(),
        vec![0; 4]
    );
    assert_eq!(
        c.read(&hs, 20 * 1024 * 1024, 10).await.unwrap_or_default(),
        b"end"
    );

    // A handle whose file was unlinked and its name reused writes the old file (kept as
    // an orphan while open, as POSIX keeps it for a descriptor), never the new one.
    c.unlink("/d/f").await.unwrap_or_else(|e| panic!("{e}"));
    c.create("/d/f", 0o644, true, b"new")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.write(&h, 0, b"old")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.read(&h, 0, 3).await.unwrap_or_else(|e| panic!("{e}")),
        b"old"
    );
    assert_eq!(
        c.fetch("/d/f").await.map(|x| x.1).ok().as_deref(),
        Some(&b"new"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_within_and_across_nodes() {
    let tc = TestCluster::start(4);
    let c = tc.client();
    let d1 = dir_on_node(&c, &tc.map, NodeId(1), "r");
    let d2 = dir_on_node(&c, &tc.map, NodeId(2), "s");
    c.mkdir(&d1, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    c.mkdir(&d2, 0o755).await.unwrap_or_else(|e| panic!("{e}"));

    // same directory
    c.create(&format!("{d1}/a"), 0o644, true, b"AAA")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.rename(
        &format!("{d1}/a"),
        &format!("{d1}/b"),
        RenameFlags::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.stat(&format!("{d1}/a")).await.err(),
        Some(FsError::NotFound)
    );
    assert_eq!(
        c.fetch(&format!("{d1}/b"))
            .await
            .map(|x| x.1)
            .ok()
            .as_deref(),
        Some(&b"AAA"[..])
    );

    // across nodes, with data of chunk 0 and of a second chunk
    let mut data = vec![7u8; 5 * 1024 * 1024];
    data[0] = 1;
    data[5 * 1024 * 1024 - 1] = 9;
    c.create(&format!("{d1}/big"), 0o644, true, &data)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.rename(
        &format!("{d1}/big"),
        &format!("{d2}/big"),
        RenameFlags::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.stat(&format!("{d1}/big")).await.err(),
        Some(FsError::NotFound)
    );
    assert_eq!(
        c.read_all(&format!("{d2}/big")).await.ok(),
        Some(data.clone())
    );

    // replace an existing file across nodes; no_replace refuses
    c.create(&format!("{d1}/x"), 0o644, true, b"new")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.create(&format!("{d2}/x"), 0o644, true, b"old")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let no_replace = RenameFlags {
        no_replace: true,
        ..RenameFlags::default()
    };
    assert_eq!(
        c.rename(&format!("{d1}/x"), &format!("{d2}/x"), no_replace)
            .await
            .err(),
        Some(FsError::AlreadyExists)
    );
    c.rename(
        &format!("{d1}/x"),
        &format!("{d2}/x"),
        RenameFlags::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.fetch(&format!("{d2}/x"))
            .await
            .map(|x| x.1)
            .ok()
            .as_deref(),
        Some(&b"new"[..])
    );
    let names: Vec<String> = c
        .readdir(&d2)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["big", "x"]);

    // errors: missing source, file onto directory, into a missing directory
    assert_eq!(
        c.rename(
            &format!("{d1}/none"),
            &format!("{d2}/y"),
            RenameFlags::default()
        )
        .await
        .err(),
        Some(FsError::NotFound)
    );
    c.mkdir(&format!("{d2}/sub"), 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.rename(
            &format!("{d1}/b"),
            &format!("{d2}/sub"),
            RenameFlags::default()
        )
        .await
        .err(),
        Some(FsError::IsADirectory)
    );
    assert_eq!(
        c.rename(&format!("{d1}/b"), "/missing/b", RenameFlags::default())
            .await
            .err(),
        Some(FsError::NotFound)
    );
    assert_eq!(
        c.stat(&format!("{d1}/b")).await.map(|i| i.size).ok(),
        Some(3),
        "a failed rename leaves the source"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_pages_and_batched_stat() {
    let tc = TestCluster::start(4);
    let c = tc.client();
    c.mkdir("/many", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = (0..2500).map(|i| format!("n{i:05}")).collect();
    let paths: Vec<String> = names.iter().map(|n| format!("/many/{n}")).collect();
    let futs = paths.iter().map(|p| c.create(p, 0o644, true, b"z"));
    for r in futures::future::join_all(futs).await {
        r.unwrap_or_else(|e| panic!("{e}"));
    }
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    let listed = c.readdir("/many").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.len(), 2500);
    let position = |n: &str| (myriad_placement::name_hash(n), n.to_string());
    assert!(
        listed
            .windows(2)
            .all(|w| position(&w[0].name) < position(&w[1].name)),
        "in hash order (docs/huge-dirs.md), no duplicates"
    );
    assert!(
        listed.iter().all(|e| e.inode.size == 1),
        "attributes come with the listing"
    );
    let total: u64 = c
        .all_counters()
        .await
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .map(|s| s.client_total())
        .sum();
    assert_eq!(
        total, 3,
        "2500 entries in pages of 1024 = 3 requests, not 2500 stats"
    );

    let mut ask = names[..100].to_vec();
    ask.push("absent".into());
    let res = c
        .stat_many("/many", &ask)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(res.len(), 101);
    assert!(res[..100].iter().all(Result::is_ok));
    assert_eq!(res[100].as_ref().err(), Some(&FsError::NotFound));
}

#[test]
fn cli_verbs_and_exit_codes() {
    let tc = TestCluster::start(2);
    let local = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let src = local.path().join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(src.join("one.txt"), b"first file\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(src.join("sub/two.bin"), vec![3u8; 200_000]).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(src.join("sub/deeper/three"), b"3").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("one.txt", src.join("link")).unwrap_or_else(|e| panic!("{e}"));

    let ok = |args: &[&str]| {
        let out = tc.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ok(&["mkdir", "-p", "/x/y"]);
    ok(&["put", src.to_str().unwrap_or_default(), "/x"]);
    let ls = ok(&["ls", "-l", "/x/src"]);
    assert!(
        ls.contains("one.txt") && ls.contains("link -> one.txt") && ls.contains("sub"),
        "{ls}"
    );
    assert_eq!(ok(&["cat", "/x/src/one.txt"]), "first file\n");
    // cat follows a link (issue 47: it printed nothing), in the path too; a loop is ELOOP.
    assert_eq!(ok(&["cat", "/x/src/link"]), "first file\n");
    ok(&["ln", "-s", "src", "/x/srclink"]);
    assert_eq!(ok(&["cat", "/x/srclink/link"]), "first file\n");
    ok(&["ln", "-s", "loop2", "/x/loop1"]);
    ok(&["ln", "-s", "loop1", "/x/loop2"]);
    let looped = tc.cli(&["cat", "/x/loop1"]);
    assert_eq!(looped.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&looped.stderr).contains("symbolic links"),
        "{}",
        String::from_utf8_lossy(&looped.stderr)
    );
    ok(&["mv", "/x/src/one.txt", "/x/y"]);
    assert_eq!(ok(&["cat", "/x/y/one.txt"]), "first file\n");
    ok(&["chmod", "600", "/x/y/one.txt"]);
    assert!(ok(&["stat", "/x/y/one.txt"]).contains("mode: 0600"));
    let back = local.path().join("back");
    ok(&["get", "/x/src", back.to_str().unwrap_or_default()]);
    assert_eq!(
        std::fs::read(back.join("sub/two.bin")).ok(),
        Some(vec![3u8; 200_000])
    );
    assert_eq!(
        std::fs::read(back.join("sub/deeper/three")).ok(),
        Some(b"3".to_vec())
    );
    let status = ok(&["cluster", "status"]);
    assert!(
        status.contains("node 1") && status.contains("create="),
        "{status}"
    );
    ok(&["rm", "-r", "/x"]);

    // user errors exit 1 with a one-line message; usage errors exit 2
    let out = tc.cli(&["cat", "/nothing"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nothing: no such file or directory") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(tc.cli(&["ls", "relative/path"]).status.code(), Some(1));
    assert_eq!(tc.cli(&["frobnicate"]).status.code(), Some(2));
    let no_cluster = std::process::Command::new(crate::harness::BIN)
        .args(["ls", "/"])
        .env_remove("MYRIAD_CLUSTER")
        .output();
    assert_eq!(no_cluster.ok().and_then(|o| o.status.code()), Some(1));
}

/// Directory rename moves the whole subtree (placement follows the path): every file, its
/// data, nested directories and symlinks appear under the new name and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_rename_moves_the_subtree() {
    let tc = TestCluster::start(4);
    let c = tc.client();
    c.mkdir_p("/proj/src/deep/deeper", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.mkdir("/archive", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut expected = Vec::new();
    for (dir, n) in [
        ("/proj", 30),
        ("/proj/src", 1500),
        ("/proj/src/deep", 20),
        ("/proj/src/deep/deeper", 5),
    ] {
        for i in 0..n {
            let rel = format!("{}/f{i}", dir.trim_start_matches("/proj"));
            let data = format!("contents of {rel}").into_bytes();
            c.create(&format!("{dir}/f{i}"), 0o644, true, &data)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            expected.push((rel, data));
        }
    }
    let big: Vec<u8> = (0..6 * 1024 * 1024u32).map(|x| (x % 249) as u8).collect();
    c.create("/proj/src/big", 0o644, true, &big)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.symlink("src/f1", "/proj/link")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Errors first: into itself, onto a directory that is not empty, missing source.
    assert!(matches!(
        c.rename("/proj", "/proj/src/x", RenameFlags::default())
            .await,
        Err(FsError::InvalidArgument(_))
    ));
    c.create("/archive/keep", 0o644, true, b"")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.rename("/proj", "/archive", RenameFlags::default())
            .await
            .err(),
        Some(FsError::NotEmpty)
    );
    c.unlink("/archive/keep")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.rename("/nothing", "/x", RenameFlags::default())
            .await
            .err(),
        Some(FsError::NotFound)
    );
    assert_eq!(
        c.stat("/proj/src/f3").await.map(|i| i.size).ok(),
        Some(b"contents of /src/f3".len() as u64),
        "failed renames leave the tree"
    );

    c.rename("/proj", "/archive/proj-2026", RenameFlags::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.stat("/proj").await.err(), Some(FsError::NotFound));
    assert_eq!(c.stat("/proj/src/f1").await.err(), Some(FsError::NotFound));
    assert_eq!(
        c.create("/proj/src/new", 0o644, true, b"").await.err(),
        Some(FsError::NotFound),
        "old directory objects are gone"
    );
    for (rel, data) in &expected {
        let path = format!("/archive/proj-2026{rel}");
        assert_eq!(
            c.fetch(&path).await.map(|x| x.1).ok().as_ref(),
            Some(data),
            "{path}"
        );
    }
    assert_eq!(
        c.read_all("/archive/proj-2026/src/big").await.ok(),
        Some(big)
    );
    assert_eq!(
        c.readlink("/archive/proj-2026/link").await.ok().as_deref(),
        Some("src/f1")
    );
    assert_eq!(
        c.readdir("/archive/proj-2026/src")
            .await
            .map(|v| v.len())
            .ok(),
        Some(1502)
    );
    assert_eq!(c.readdir("/archive").await.map(|v| v.len()).ok(), Some(1));
    // The moved tree is fully usable: create, mkdir, rmdir, and rename it back.
    c.create("/archive/proj-2026/src/deep/deeper/new", 0o644, true, b"n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.rename("/archive/proj-2026", "/proj", RenameFlags::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.fetch("/proj/src/deep/deeper/new")
            .await
            .map(|x| x.1)
            .ok()
            .as_deref(),
        Some(&b"n"[..])
    );
    assert_eq!(c.readdir("/archive").await.map(|v| v.len()).ok(), Some(0));
}

/// A directory renamed over an empty one replaces it in one step: a reader of the target
/// always finds a directory there (the empty one, then the moved one, never nothing), the
/// moved subtree arrives whole, and every refusal leaves both directories as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_replaces_an_empty_one_in_one_step() {
    let tc = TestCluster::start(4);
    let c = std::sync::Arc::new(tc.client());
    for d in ["/p1/src/sub", "/p2/dst", "/p2/full", "/p2/other"] {
        c.mkdir_p(d, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    }
    for i in 0..60 {
        let path = format!("/p1/src/{}f{i}", if i % 2 == 0 { "sub/" } else { "" });
        c.create(&path, 0o644, true, path.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    c.create("/p2/full/keep", 0o644, true, b"k")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.create("/p2/file", 0o644, true, b"f")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stat = |p: &'static str| {
        let c = c.clone();
        async move { c.stat(p).await.unwrap_or_else(|e| panic!("{p}: {e}")) }
    };
    let src = stat("/p1/src").await;
    let (p1, p2) = (stat("/p1").await, stat("/p2").await);

    // Refusals: a directory that is not empty, NOREPLACE, a file either way, an ancestor.
    let rename = |from: &'static str, to: &'static str, no_replace: bool| {
        let c = c.clone();
        async move {
            let flags = RenameFlags {
                no_replace,
                ..RenameFlags::default()
            };
            c.rename(from, to, flags).await.err()
        }
    };
    for (from, to, no_replace, refused) in [
        ("/p1/src", "/p2/full", false, FsError::NotEmpty),
        ("/p1/src", "/p2/dst", true, FsError::AlreadyExists),
        ("/p1/src", "/p2/file", false, FsError::NotADirectory),
        ("/p2/file", "/p2/dst", false, FsError::IsADirectory),
        ("/p1/src/sub", "/p1", false, FsError::NotEmpty),
    ] {
        assert_eq!(
            rename(from, to, no_replace).await,
            Some(refused),
            "{from} -> {to}"
        );
    }
    assert_eq!(
        stat("/p1/src").await.ino,
        src.ino,
        "refusals leave the source"
    );
    assert_eq!(c.readdir("/p2/full").await.map(|v| v.len()).ok(), Some(1));
    assert_eq!(c.readdir("/p2/dst").await.map(|v| v.len()).ok(), Some(0));

    // A reader of the target meanwhile: always a directory, empty or holding the moved tree.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seen = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match c.stat("/p2/dst").await {
                    Ok(i) if i.kind == FileKind::Directory && i.ino == src.ino => seen.1 += 1,
                    Ok(i) if i.kind == FileKind::Directory => seen.0 += 1,
                    other => panic!("/p2/dst during the rename: {other:?}"),
                }
            }
            seen
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    rename("/p1/src", "/p2/dst", false)
        .await
        .map_or(Ok(()), Err)
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (before, after) = reader.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        before > 0 && after > 0,
        "the reader saw both: {before} / {after}"
    );

    assert_eq!(c.stat("/p1/src").await.err(), Some(FsError::NotFound));
    let dst = stat("/p2/dst").await;
    assert_eq!(
        (dst.ino, dst.nlink),
        (src.ino, 3),
        "the moved directory, with sub"
    );
    for i in 0..60 {
        let rel = format!("{}f{i}", if i % 2 == 0 { "sub/" } else { "" });
        let data = c.fetch(&format!("/p2/dst/{rel}")).await.map(|x| x.1).ok();
        assert_eq!(data.as_deref(), Some(format!("/p1/src/{rel}").as_bytes()));
    }
    // The parents' link counts: /p1 lost a subdirectory, /p2 swapped one for another.
    assert_eq!(stat("/p1").await.nlink, p1.nlink - 1);
    assert_eq!(stat("/p2").await.nlink, p2.nlink);
    // The moved directory works as any other, and is replaced as any other.
    c.create("/p2/dst/new", 0o644, true, b"n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.mkdir("/p1/empty", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rename("/p2/dst", "/p1/empty", false).await, None);
    assert_eq!(
        c.fetch("/p1/empty/new").await.map(|x| x.1).ok().as_deref(),
        Some(&b"n"[..])
    );
    assert_eq!(c.readdir("/p2").await.map(|v| v.len()).ok(), Some(3));
}

/// Readers running while a directory is renamed always find each file under exactly one of
/// the two names, never both and never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_rename_is_atomic_for_concurrent_readers() {
    let tc = TestCluster::start(4);
    let c = std::sync::Arc::new(tc.client());
    c.mkdir_p("/a/tree/sub", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..400 {
        c.create(&format!("/a/tree/sub/f{i}"), 0o644, true, b"x")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let reader = {
        let (c, stop, done) = (c.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let mut checks = 0u32;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let name = format!("sub/f{}", i % 400);
                i += 7;
                // Read the old name, then the new one: after a miss on the old name the new one
                // must exist; a hit on the old name followed by a hit on the new one is only
                // allowed across the commit (old read before it, new read after).
                let old = c.stat(&format!("/a/tree/{name}")).await;
                let new = c.stat(&format!("/b/{name}")).await;
                if old.is_err() {
                    assert!(
                        new.is_ok(),
                        "{name}: under neither name ({old:?} / {new:?})"
                    );
                }
                checks += 1;
                done.store(checks, std::sync::atomic::Ordering::Relaxed);
            }
            checks
        })
    };
    // Wait on the reader's progress rather than on the clock: on a loaded machine 50 ms may
    // not be enough for a single check.
    let wait_for = |n: u32| {
        let done = done.clone();
        async move {
            // Bounded: a reader that panicked stops counting; its panic is reported below.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(60), async {
                while done.load(std::sync::atomic::Ordering::Relaxed) < n {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            })
            .await;
        }
    };
    wait_for(10).await;
    c.rename("/a/tree", "/b", RenameFlags::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let after_rename = done.load(std::sync::atomic::Ordering::Relaxed);
    wait_for(after_rename + 10).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let checks = reader.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        checks >= after_rename + 10,
        "the reader ran ({checks} checks)"
    );
    assert_eq!(c.readdir("/b/sub").await.map(|v| v.len()).ok(), Some(400));
}

/// README's main command works: a small `myriad demo` brings up its own cluster, writes,
/// fetches and verifies every file, and stops the cluster.
#[test]
fn demo_runs_and_verifies_every_file() {
    let dir = tempfile::Builder::new()
        .prefix("myriad-demo-it-")
        .tempdir()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(crate::harness::BIN)
        .args(["demo", "--files", "300", "--dirs", "5", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("verified: all 300 files read back byte for byte"),
        "{stdout}"
    );
    for phase in ["mkdir", "write", "fetch", "ls -l"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(phase)),
            "phase {phase} missing: {stdout}"
        );
    }
}

/// The benchmark commands run and write their results (numbers are not asserted here:
/// speed is checked by running the benchmarks, not by tests).
#[test]
fn benchmarks_run_and_write_results() {
    let out_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = |args: &[&str]| {
        let out = std::process::Command::new(crate::harness::BIN)
            .args(args)
            .arg("--out-dir")
            .arg(out_dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["bench", "all", "--ops", "300", "--dirs", "4"]);
    run(&[
        "bench",
        "smallread",
        "--dataset-mib",
        "1",
        "--sizes",
        "262144,4096",
        "--nodes",
        "2",
    ]);
    run(&["bench", "rename-dir", "--sizes", "50", "--nodes", "2"]);
    run(&[
        "bench",
        "shared-dir",
        "--files",
        "3000",
        "--dir-split-entries",
        "256",
        "--clients",
        "2",
    ]);
    run(&["bench", "ls", "--entries", "3000", "--runs", "1"]);
    let all: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("bench-all.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    let phases: Vec<&str> = all["results"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(phases, ["rpc", "create", "stat", "fetch", "rpc-again"]);
    assert!(
        all["results"][3]["client_rpcs_per_op"].as_f64() == Some(1.0),
        "fetch is one request: {all}"
    );
    let png = std::fs::read(out_dir.path().join("bench-smallread.png")).unwrap_or_default();
    assert!(png.starts_with(b"\x89PNG"), "a PNG plot is written");
    assert!(out_dir.path().join("bench-rename-dir.json").exists());
    let shared: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("bench-shared-dir.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    let rows = shared.as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 3, "create, stat, unlink: {shared}");
    // After the split every node serves stats: four nodes with requests.
    let stat_nodes = rows[1]["per_node_requests"]
        .as_array()
        .map(|a| a.iter().filter(|n| n[1].as_u64() > Some(0)).count());
    assert_eq!(stat_nodes, Some(4), "{shared}");
    let ls: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("bench-ls.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(ls["entries"].as_u64(), Some(3000), "{ls}");
    assert!(
        ls["requests_per_entry"].as_f64().is_some_and(|r| r <= 0.01),
        "ls -l costs pages, not stats: {ls}"
    );
}

/// `bench` with `--cluster` measures that cluster (its files land there, its size is
/// reported) instead of starting one of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_against_an_existing_cluster() {
    let tc = TestCluster::start(3);
    let out_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tc.cli(&[
        "bench",
        "create",
        "--ops",
        "120",
        "--dirs",
        "2",
        "--out-dir",
        out_dir.path().to_str().unwrap_or_default(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("bench-create.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(report["nodes"].as_u64(), Some(3), "{report}");
    let c = tc.client();
    let roots: Vec<String> = c
        .readdir("/")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.starts_with("bench-"))
        .collect();
    assert_eq!(roots.len(), 1, "one run directory: {roots:?}");
    let mut files = 0;
    for d in ["d000", "d001"] {
        files += c
            .readdir(&format!("/{}/{d}", roots[0]))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .len();
    }
    assert_eq!(files, 120, "every create landed in the given cluster");
}
