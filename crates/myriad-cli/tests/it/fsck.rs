//! `myriad fsck`: clean on a healthy namespace (split directories, hard links, big files),
//! finds damage made behind the servers' backs, repairs what is safe; and crash safety of
//! splits: kill -9 of a node in the middle of splits under a burst of creates, then fsck
//! clean and every acknowledged entry present exactly once.

use myriad_client::{NodeId, PartitionId};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use myriad_client::proto::FsckRepair;
use myriad_client::{Caller, Client};

use crate::harness::{TestCluster, server_of};
use myriad_client::InodeId;
use myriad_proto::AdminRequest;

fn must<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn root_client(tc: &TestCluster) -> Client {
    tc.client_as(tc.map.clone(), Duration::from_secs(10), Caller::root())
}

/// Runs `myriad fsck ARGS` as root; (exit success, stdout).
fn fsck(tc: &TestCluster, args: &[&str]) -> (bool, String) {
    let mut all = vec!["fsck"];
    all.extend_from_slice(args);
    let out = tc.cli(&all);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_is_clean_finds_damage_and_repairs_it() {
    let tc = TestCluster::start_with(4, &["--dir-split-entries=128"]);
    let c = root_client(&tc);
    must(c.mkdir_p("/a/b/c", 0o755).await);
    must(c.mkdir_sharded("/pre", 0o755, 4).await);
    for i in 0..700 {
        must(c.create(&format!("/a/b/f{i}"), 0o644, true, b"data").await);
    }
    for i in 0..50 {
        must(c.create(&format!("/pre/p{i}"), 0o644, true, b"").await);
    }
    must(c.create("/a/one", 0o644, true, b"linked").await);
    must(c.link("/a/one", "/pre/two").await);
    let big = vec![7u8; 9 * 1024 * 1024];
    let h = must(c.create("/a/big", 0o644, true, b"").await);
    must(c.write(&h, 0, &big).await);
    let (ok, out) = fsck(&tc, &[]);
    assert!(ok, "{out}");
    assert!(out.contains("clean"), "{out}");
    assert!(out.contains("split"), "{out}");

    // Damage: a directory object removed under its entry, a wrong link count, a directory
    // object no entry names.
    let ring = tc.map.ring();
    let cino = must(c.stat("/a/b/c").await).ino;
    must(
        c.request(
            ring.owner_of_dir("/a/b/c"),
            myriad_proto::Request::Admin(AdminRequest::FsckRepair(
                FsckRepair::DropEmptyDirObject {
                    path: "/a/b/c".into(),
                    ino: cino,
                },
            )),
        )
        .await,
    );
    let linked = must(c.stat("/a/one").await);
    let home = (1..=4u32)
        .find(|&n| {
            futures::executor::block_on(c.request(
                PartitionId(n),
                myriad_proto::Request::Admin(AdminRequest::FsckRepair(FsckRepair::SetLinks {
                    ino: linked.ino,
                    nlink: 5,
                })),
            ))
            .is_ok()
        })
        .unwrap_or_else(|| panic!("no node holds the linked inode"));
    must(
        c.request(
            ring.owner_of_dir("/ghost"),
            myriad_proto::Request::Admin(AdminRequest::FsckRepair(FsckRepair::CreateDirObject {
                path: "/ghost".into(),
                ino: InodeId(0xdead),
            })),
        )
        .await,
    );
    let (ok, out) = fsck(&tc, &[]);
    assert!(!ok, "damage must fail fsck: {out}");
    for kind in ["dangling entry", "link count", "orphan directory object"] {
        assert!(out.contains(kind), "{kind} not reported: {out}");
    }
    assert!(out.contains(&format!("node {home}")), "{out}");
    // A subtree check sees the subtree's damage only.
    let (ok, out) = fsck(&tc, &["/pre"]);
    assert!(ok, "/pre is clean: {out}");

    let (ok, out) = fsck(&tc, &["--repair"]);
    assert!(ok, "repair fixes all three: {out}");
    assert!(out.contains("repaired"), "{out}");
    let (ok, out) = fsck(&tc, &[]);
    assert!(ok, "clean after repair: {out}");
    must(c.create("/a/b/c/usable", 0o644, true, b"").await);
    assert_eq!(must(c.stat("/a/one").await).nlink, 2);
    assert_eq!(must(c.read_all("/a/big").await), big);
}

#[test]
fn fsck_needs_root() {
    let tc = TestCluster::start(2);
    use std::os::unix::process::CommandExt;
    // A user's own copy of the client key (the cluster's files are root's).
    let key = tc.dir.path().join("user.key");
    must(std::fs::copy(tc.dir.path().join("client.key"), &key));
    must(std::os::unix::fs::chown(&key, Some(1000), Some(1000)));
    let out = std::process::Command::new(crate::harness::BIN)
        .args(["--cluster"])
        .arg(tc.map_file())
        .arg("--secret-file")
        .arg(&key)
        .arg("fsck")
        .uid(1000)
        .output();
    let out = must(out);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs root"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Creates in one directory split it again and again while a node is killed -9 and
/// restarted twice; afterwards fsck is clean and every acknowledged name is there once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_splits_loses_nothing_and_fsck_is_clean() {
    let tc = TestCluster::start_with(4, &["--dir-split-entries=200"]);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(3)));
    must(c.mkdir("/burst", 0o755).await);
    let home = tc.map.ring().owner_of_dir("/burst");
    for round in 0..2u32 {
        // 32 writers, each on its own: a name stuck behind a split waiting for a dead node
        // holds up only its own writer.
        let writer = {
            let c = c.clone();
            tokio::spawn(async move {
                let start = std::time::Instant::now();
                let workers = (0..32u32).map(|w| {
                    let c = c.clone();
                    async move {
                        let mut acked = Vec::new();
                        let mut k = 0u32;
                        while start.elapsed() < Duration::from_millis(1500) {
                            let n = format!("r{round}-{w}-{k}");
                            k += 1;
                            if c.create(&format!("/burst/{n}"), 0o644, true, n.as_bytes())
                                .await
                                .is_ok()
                            {
                                acked.push(n);
                            }
                        }
                        acked
                    }
                });
                futures::future::join_all(workers)
                    .await
                    .into_iter()
                    .flatten()
                    .collect::<Vec<String>>()
            })
        };
        tokio::time::sleep(Duration::from_millis(300 + 300 * u64::from(round))).await;
        // Round 0 kills the directory's home (it splits first), round 1 another node.
        let home = server_of(&tc.map, home);
        let victim = if round == 0 {
            home
        } else {
            NodeId(home.0 % 4 + 1)
        };
        tc.kill9(victim);
        let acked = must(writer.await);
        tc.restart(victim);
        tc.wait_up(&c, victim).await;
        assert!(
            acked.len() > 50,
            "the workload went on: {} acked",
            acked.len()
        );
        // Every acknowledged name is there, with its contents, exactly once.
        let mut names = Vec::new();
        for _ in 0..100 {
            match c.readdir("/burst").await {
                Ok(l) => {
                    names = l.into_iter().map(|e| e.name).collect();
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let unique: HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "a name listed twice");
        let missing: BTreeSet<&String> = acked.iter().filter(|n| !unique.contains(n)).collect();
        assert!(missing.is_empty(), "acknowledged but gone: {missing:?}");
        for n in acked.iter().step_by(41) {
            let (_, d) = must(c.fetch(&format!("/burst/{n}")).await);
            assert_eq!(d, n.as_bytes());
        }
    }
    // Recovery finishes or undoes interrupted splits within a few passes.
    tc.fsck_until_clean().await;
    assert!(c.shard_map("/burst").is_some(), "the directory split");
}

/// kill -9 of a node in the middle of renaming a split directory: afterwards the directory
/// is whole under exactly one of its names, and fsck is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_rename_of_a_split_directory() {
    let tc = TestCluster::start_with(4, &["--dir-split-entries=200"]);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(3)));
    must(c.mkdir("/s", 0o755).await);
    for i in 0..1500u32 {
        must(
            c.create(&format!("/s/f{i}"), 0o644, true, format!("{i}").as_bytes())
                .await,
        );
    }
    for _ in 0..100 {
        let _ = c.readdir("/s").await;
        if c.shard_map("/s").is_some_and(|m| m.leaves.len() == 4) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.shard_map("/s").map(|m| m.leaves.len()), Some(4));
    let ring = tc.map.ring();
    // The coordinator (the root's node holds the entry "s"), then a node of a shard.
    let coordinator = ring.owner_of_dir("/");
    let other = ring
        .dir_nodes("/s")
        .into_iter()
        .find(|n| *n != coordinator)
        .unwrap_or(coordinator);
    let victims = [coordinator, other].map(|p| server_of(&tc.map, p));
    let mut name = ("/s", "/s2");
    for (round, victim) in victims.into_iter().enumerate() {
        let mover = {
            let c = c.clone();
            let (from, to) = name;
            tokio::spawn(async move {
                c.rename(from, to, myriad_client::RenameFlags::default())
                    .await
            })
        };
        // Early (before the decision) in the first round, later in the second.
        tokio::time::sleep(Duration::from_millis(20 + 30 * round as u64)).await;
        tc.kill9(victim);
        let result = must(mover.await);
        tc.restart(victim);
        tc.wait_up(&c, victim).await;
        eprintln!("killed node {victim} while renaming {name:?}: {result:?}");
        // Recovery settles it one way or the other.
        let mut whole = None;
        for _ in 0..100 {
            let a = c.readdir(name.0).await.map(|v| v.len());
            let b = c.readdir(name.1).await.map(|v| v.len());
            match (a, b) {
                (Ok(1500), Err(myriad_client::FsError::NotFound)) => whole = Some(name.0),
                (Err(myriad_client::FsError::NotFound), Ok(1500)) => whole = Some(name.1),
                _ => {}
            }
            if whole.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let at = whole.unwrap_or_else(|| panic!("never whole under one name: {name:?}"));
        if result.is_ok() {
            assert_eq!(at, name.1, "an acknowledged rename was undone");
        }
        for i in (0..1500u32).step_by(53) {
            let (_, d) = must(c.fetch(&format!("{at}/f{i}")).await);
            assert_eq!(d, format!("{i}").as_bytes());
        }
        tc.fsck_until_clean().await;
        name = if at == "/s" {
            ("/s", "/s2")
        } else {
            ("/s2", "/s")
        };
    }
}
