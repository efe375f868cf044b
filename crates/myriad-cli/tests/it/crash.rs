//! kill -9 of nodes under load: acknowledged files survive, dead nodes fail fast, and
//! interrupted two-node operations leave no dangling entry and no visible orphan.

use myriad_client::NodeId;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use myriad_client::{FileKind, FsError, RenameFlags};

use crate::harness::{TestCluster, dir_on_node, server_of};

fn content(i: u64) -> Vec<u8> {
    let len = 1000 + (i * 7919 % 60_000) as usize;
    (0..len)
        .map(|j| ((j as u64 * 31 + i) % 251) as u8)
        .collect()
}

/// Makes `root/d<d>/f<i>` for `dirs` directories of 60 files each (`content(i)`).
async fn make_tree(c: &myriad_client::Client, root: &str, dirs: u32) {
    for d in 0..dirs {
        let p = format!("{root}/d{d}");
        c.mkdir_p(&p, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
        for i in 0..60 {
            c.create(&format!("{p}/f{i}"), 0o644, true, &content(i))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Whether every file `make_tree` made reads whole under `root` now; false if one is not
/// readable yet (a transient error before `deadline`); panics on anything else.
async fn tree_complete(
    c: &myriad_client::Client,
    root: &str,
    dirs: u32,
    deadline: Instant,
) -> bool {
    let mut complete = true;
    for d in 0..dirs {
        for i in 0..60u64 {
            match c.fetch(&format!("{root}/d{d}/f{i}")).await {
                Ok((_, data)) => assert_eq!(data, content(i)),
                Err(e) if e.is_transient() && Instant::now() < deadline => complete = false,
                Err(e) => panic!("{root}/d{d}/f{i}: {e}"),
            }
        }
    }
    complete
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_writes_loses_no_acknowledged_file() {
    let tc = TestCluster::start(4);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(3)));
    for d in 0..16 {
        c.mkdir(&format!("/w{d}"), 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let victim = 2;
    let writer = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut acked: HashMap<String, u32> = HashMap::new();
            let start = Instant::now();
            let mut i = 0u64;
            while start.elapsed() < Duration::from_millis(1500) {
                let batch: Vec<u64> = (i..i + 16).collect();
                i += 16;
                let futs = batch.iter().map(|&k| {
                    let c = c.clone();
                    async move {
                        let path = format!("/w{}/f{k}", k % 16);
                        let data = content(k);
                        (
                            path.clone(),
                            crc32c::crc32c(&data),
                            c.create(&path, 0o644, true, &data).await,
                        )
                    }
                });
                for (path, crc, r) in futures::future::join_all(futs).await {
                    if r.is_ok() {
                        acked.insert(path, crc);
                    }
                }
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    tc.kill9(NodeId(victim));

    // A request to the dead node fails with a clear error, fast, and does not hang.
    let dead_dir = dir_on_node(&c, &tc.map, NodeId(victim), "w");
    let t = Instant::now();
    let r = c.stat(&format!("{dead_dir}/x")).await;
    assert!(
        matches!(r, Err(FsError::Unavailable(_)) | Err(FsError::TimedOut(_))),
        "{r:?}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "dead node answered only after {:?}",
        t.elapsed()
    );

    let acked = writer.await.unwrap_or_default();
    assert!(
        acked.len() > 100,
        "workload kept going on the live nodes: {} acked",
        acked.len()
    );
    tc.restart(NodeId(victim));
    tc.wait_up(&c, NodeId(victim)).await;
    let mut bad = Vec::new();
    for (path, crc) in &acked {
        match c.fetch(path).await {
            Ok((_, data)) if crc32c::crc32c(&data) == *crc => {}
            other => bad.push((path.clone(), other.map(|x| x.1.len()))),
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} acknowledged files lost or corrupt: {:?}",
        bad.len(),
        acked.len(),
        &bad[..bad.len().min(5)]
    );
}

/// Two-node mkdir and rename under kill -9 of either side: after restart and recovery every
/// directory entry has its directory object, no directory object exists without its entry,
/// and every file is under exactly one name with its contents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_mkdir_and_rename_leaves_no_dangling_entry_or_orphan() {
    let tc = TestCluster::start(4);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(3)));
    let src = dir_on_node(&c, &tc.map, NodeId(1), "src");
    let dst = dir_on_node(&c, &tc.map, NodeId(3), "dst");
    let parent = dir_on_node(&c, &tc.map, NodeId(1), "par");
    for d in [&src, &dst, &parent] {
        c.mkdir(d, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let files = 1200u64;
    for i in 0..files {
        c.create(&format!("{src}/f{i}"), 0o644, true, &content(i))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    for (round, victim) in [(0u64, 3u32), (1, 1)] {
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let work = {
            let c = c.clone();
            let done = done.clone();
            let (src, dst, parent) = (src.clone(), dst.clone(), parent.clone());
            tokio::spawn(async move {
                use futures::StreamExt;
                let half = files / 2;
                let range = if round == 0 { 0..half } else { half..files };
                // mkdirs and renames interleaved, 8 in flight, so the kill finds both in progress.
                let ops = range.flat_map(|i| [(i, true), (i, false)]);
                let results: Vec<(u64, bool, bool)> =
                    futures::stream::iter(ops.map(|(i, is_mkdir)| {
                        let c = c.clone();
                        let done = done.clone();
                        let (src, dst, parent) = (src.clone(), dst.clone(), parent.clone());
                        async move {
                            let ok = if is_mkdir {
                                c.mkdir(&format!("{parent}/d{i}"), 0o755).await.is_ok()
                            } else {
                                c.rename(
                                    &format!("{src}/f{i}"),
                                    &format!("{dst}/f{i}"),
                                    RenameFlags::default(),
                                )
                                .await
                                .is_ok()
                            };
                            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            (i, is_mkdir, ok)
                        }
                    }))
                    .buffered(8)
                    .collect()
                    .await;
                let mkdirs = results
                    .iter()
                    .filter(|r| r.1)
                    .map(|r| (format!("{parent}/d{}", r.0), r.2))
                    .collect::<Vec<_>>();
                let renames = results
                    .iter()
                    .filter(|r| !r.1)
                    .map(|r| (r.0, r.2))
                    .collect::<Vec<_>>();
                (mkdirs, renames)
            })
        };
        while done.load(std::sync::atomic::Ordering::Relaxed) < files / 4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tc.kill9(NodeId(victim));
        let (mkdirs, renames) = work.await.unwrap_or_default();
        let failed_mkdirs = mkdirs.iter().filter(|m| !m.1).count();
        let failed_renames = renames.iter().filter(|r| !r.1).count();
        eprintln!(
            "round {round}: killed node {victim}; {failed_mkdirs}/{} mkdirs and {failed_renames}/{} renames failed",
            mkdirs.len(),
            renames.len()
        );
        assert!(
            failed_mkdirs + failed_renames > 0,
            "the kill must interrupt operations, or this test proves nothing"
        );
        tc.restart(NodeId(victim));
        tc.wait_up(&c, NodeId(victim)).await;

        let deadline = Instant::now() + Duration::from_secs(30);
        for (d, acked) in &mkdirs {
            loop {
                match c.stat(d).await {
                    Ok(i) => {
                        assert_eq!(i.kind, FileKind::Directory);
                        // The directory object may live on the restarted node, still
                        // opening: only its absence is a dangling entry.
                        match c.readdir(d).await {
                            Ok(_) => break,
                            Err(e)
                                if (e.is_transient() || e == FsError::Busy)
                                    && Instant::now() < deadline =>
                            {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                            Err(e) => panic!("{d}: entry without directory object: {e}"),
                        }
                    }
                    Err(FsError::NotFound) => {
                        assert!(!acked, "{d}: acknowledged mkdir lost");
                        let probe = c.create(&format!("{d}/probe"), 0o644, true, b"").await;
                        assert_eq!(
                            probe.err(),
                            Some(FsError::NotFound),
                            "{d}: orphan directory object is usable"
                        );
                        break;
                    }
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("{d}: not recovered: {e}"),
                }
            }
        }
        for (i, acked) in &renames {
            let (a, b) = (format!("{src}/f{i}"), format!("{dst}/f{i}"));
            loop {
                let (ra, rb) = (c.fetch(&a).await, c.fetch(&b).await);
                let busy = |r: &Result<_, FsError>| matches!(r, Err(e) if e.is_transient() || *e == FsError::Busy);
                if (busy(&ra) || busy(&rb)) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                match (ra, rb) {
                    (Ok((_, data)), Err(FsError::NotFound)) => {
                        assert!(!acked, "{a}: acknowledged rename undone");
                        assert_eq!(data, content(*i));
                    }
                    (Err(FsError::NotFound), Ok((_, data))) => {
                        assert_eq!(data, content(*i), "{b}: wrong contents")
                    }
                    (x, y) => panic!(
                        "file {i} must be under exactly one name: {:?} / {:?}",
                        x.map(|v| v.1.len()),
                        y.map(|v| v.1.len())
                    ),
                }
                break;
            }
        }
    }
    tc.fsck_until_clean().await;
}

/// kill -9 of the coordinator or of a node holding part of the subtree during a directory
/// rename: after restart and recovery the tree is complete under exactly one of its names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_directory_rename_leaves_one_complete_tree() {
    let tc = TestCluster::start(4);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(3)));
    make_tree(&c, "/t", 12).await;
    let coordinator = server_of(&c.map(), c.owner_of_entry("/t"));
    for victim in [coordinator, NodeId(coordinator.0 % 4 + 1)] {
        let (from, to) = if c.stat("/t").await.is_ok() {
            ("/t", "/u")
        } else {
            ("/u", "/t")
        };
        let mover = {
            let c = c.clone();
            tokio::spawn(async move { c.rename(from, to, RenameFlags::default()).await })
        };
        tokio::time::sleep(Duration::from_millis(15)).await;
        tc.kill9(victim);
        let result = mover.await.unwrap_or_else(|e| panic!("{e}"));
        tc.restart(victim);
        tc.wait_up(&c, victim).await;
        eprintln!("killed node {victim} during rename {from} -> {to}: rename returned {result:?}");

        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (a, b) = (c.stat(from).await, c.stat(to).await);
            let settled = matches!(
                (&a, &b),
                (Ok(_), Err(FsError::NotFound)) | (Err(FsError::NotFound), Ok(_))
            );
            if settled {
                if result.is_ok() {
                    assert!(b.is_ok(), "acknowledged rename undone");
                }
                let root = if a.is_ok() { from } else { to };
                let complete = tree_complete(&c, root, 12, deadline).await;
                let other = if root == from { to } else { from };
                assert_eq!(
                    c.stat(&format!("{other}/d0")).await.err(),
                    Some(FsError::NotFound)
                );
                if complete {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "not recovered: {a:?} / {b:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tc.fsck_until_clean().await;
    }
}

/// kill -9 of the coordinator or of another node during a directory rename over an empty
/// directory: after restart and recovery either the rename happened (the tree under the
/// target's name, the source gone) or it did not (the tree under its name and the empty
/// target back, usable), never a tree in neither place or a target lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_a_rename_over_an_empty_directory_keeps_one_of_them() {
    let tc = TestCluster::start(4);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(3)));
    make_tree(&c, "/t", 8).await;
    let coordinator = server_of(&c.map(), c.owner_of_entry("/t"));
    // A target whose object (which holds the entries under it) another node serves.
    let e: &'static str = ["/e0", "/e1", "/e2", "/e3", "/e4", "/e5", "/e6", "/e7"]
        .into_iter()
        .find(|e| server_of(&c.map(), c.owner_of_entry(&format!("{e}/x"))) != coordinator)
        .unwrap_or("/e0");
    c.mkdir(e, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    let target_home = server_of(&c.map(), c.owner_of_entry(&format!("{e}/x")));
    let mut tree = "/t";
    // Kills at several points of the copy (undisturbed, it takes about 250 ms here), of the
    // coordinator and of the target's home.
    for (victim, after_ms) in [
        (coordinator, 10),
        (target_home, 80),
        (coordinator, 200),
        (target_home, 240),
    ] {
        let (from, to) = if tree == "/t" { ("/t", e) } else { (e, "/t") };
        let empty_ino = c.stat(to).await.unwrap_or_else(|e| panic!("{e}")).ino;
        let mover = {
            let c = c.clone();
            tokio::spawn(async move { c.rename(from, to, RenameFlags::default()).await })
        };
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        tc.kill9(victim);
        let result = mover.await.unwrap_or_else(|e| panic!("{e}"));
        tc.restart(victim);
        tc.wait_up(&c, victim).await;
        eprintln!(
            "killed node {victim} after {after_ms} ms of rename {from} over {to}: {result:?}"
        );

        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let settled = |r: &Result<Vec<_>, FsError>| !matches!(r, Err(e) if e.is_transient() || *e == FsError::Busy);
            let (a, b) = (c.readdir(from).await, c.readdir(to).await);
            if !(settled(&a) && settled(&b)) {
                assert!(Instant::now() < deadline, "not recovered: {a:?} / {b:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let at = match (a, b) {
                (Err(FsError::NotFound), Ok(listed)) => {
                    assert_eq!(listed.len(), 8, "{to}: the moved tree");
                    to
                }
                (Ok(listed), Ok(empty)) => {
                    assert!(result.is_err(), "acknowledged rename undone");
                    assert_eq!(listed.len(), 8, "{from}: the tree stayed");
                    assert!(empty.is_empty(), "{to}: the target came back empty");
                    let back = c.stat(to).await.unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(back.ino, empty_ino, "{to}: the same directory");
                    c.create(&format!("{to}/probe"), 0o644, true, b"p")
                        .await
                        .unwrap_or_else(|e| panic!("{to}: not usable: {e}"));
                    c.unlink(&format!("{to}/probe"))
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    from
                }
                (x, y) => panic!("{from} / {to}: {x:?} / {y:?}"),
            };
            if tree_complete(&c, at, 8, deadline).await {
                tree = at;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tc.fsck_until_clean().await;
        // The next round moves the tree over an empty directory again.
        let other = if tree == "/t" { e } else { "/t" };
        if c.stat(other).await.is_err() {
            c.mkdir(other, 0o755)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // Undisturbed, it happens (after every interrupted try).
    let (from, to) = if tree == "/t" { ("/t", e) } else { (e, "/t") };
    let t = Instant::now();
    c.rename(from, to, RenameFlags::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("rename {from} over {to} took {:?}", t.elapsed());
    assert_eq!(c.readdir(to).await.map(|l| l.len()).ok(), Some(8));
    assert_eq!(c.stat(from).await.err(), Some(FsError::NotFound));
}
