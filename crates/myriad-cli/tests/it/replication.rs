//! Partition replication with a fixed map (docs/replication.md): every copy gets every
//! acknowledged write, a backup that restarts catches up from its primary's queue, a server
//! that lost its disk is refilled by whole copies (as a backup from its primaries, as a
//! primary from its most advanced backup), and fsck compares every copy with its primary.

use myriad_client::NodeId;
use std::collections::BTreeMap;
use std::time::Duration;

use myriad_client::{Client, ClusterMap};

use crate::harness::TestCluster;

/// 5 servers, 4 partitions each, 3 copies of everything.
fn replicated_cluster() -> TestCluster {
    TestCluster::start_with(5, &["--partitions-per-node", "4", "--replicas", "3"])
}

fn content(tag: &str, i: usize) -> Vec<u8> {
    let len = match i % 4 {
        0 => 100,
        1 => 5_000,
        2 => 70_000,
        _ => 300_000,
    };
    (0..len)
        .map(|k| (k as u8) ^ (i as u8) ^ tag.as_bytes()[0])
        .collect()
}

/// A server that is not the primary of the root directory's partition: with a fixed map a
/// dead primary makes its partitions unavailable, and every path check reads the root.
fn victim(map: &ClusterMap) -> NodeId {
    let root = map.primary_of(map.ring().owner_of_dir("/"));
    (1..=5)
        .rev()
        .map(NodeId)
        .find(|&s| Some(s) != root)
        .unwrap_or(NodeId(5))
}

/// A directory whose partition has `server` as a backup but not as primary.
fn dir_backed_by(map: &ClusterMap, server: NodeId, prefix: &str) -> String {
    let ring = map.ring();
    (0..10_000)
        .map(|i| format!("/{prefix}{i}"))
        .find(|d| {
            let p = map
                .partition(ring.owner_of_dir(d))
                .unwrap_or_else(|| panic!("no partition"));
            p.replicas[0] != server && p.replicas.contains(&server)
        })
        .unwrap_or_else(|| panic!("no directory backed by {server}"))
}

/// A directory whose partition's primary is `server`.
fn dir_served_by(map: &ClusterMap, server: NodeId, prefix: &str) -> String {
    let ring = map.ring();
    (0..10_000)
        .map(|i| format!("/{prefix}{i}"))
        .find(|d| map.primary_of(ring.owner_of_dir(d)) == Some(server))
        .unwrap_or_else(|| panic!("no directory served by {server}"))
}

async fn write_files(c: &Client, dir: &str, tag: &str, n: usize) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for i in 0..n {
        let path = format!("{dir}/{tag}{i}");
        let data = content(tag, i);
        c.create(&path, 0o644, true, &data)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        out.insert(path, data);
    }
    out
}

async fn verify(c: &Client, files: &BTreeMap<String, Vec<u8>>) {
    for (path, want) in files {
        let got = c
            .read_all(path)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(got == *want, "{path}: contents differ");
    }
}

/// Replicated batches the copies received (alone or in bundles).
async fn replicate_count(c: &Client) -> u64 {
    c.all_counters()
        .await
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .map(|s| s.batches_received)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_copy_gets_every_write_and_fsck_compares_them() {
    let tc = replicated_cluster();
    assert_eq!(tc.map.partitions.len(), 20);
    assert!(tc.map.partitions.iter().all(|p| p.replicas.len() == 3));
    let c = std::sync::Arc::new(tc.client());
    let mut files = BTreeMap::new();
    let mut jobs = Vec::new();
    for w in 0..4 {
        let c = c.clone();
        jobs.push(tokio::spawn(async move {
            let dir = format!("/w{w}");
            c.mkdir(&dir, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
            write_files(&c, &dir, "f", 30).await
        }));
    }
    for j in jobs {
        files.extend(j.await.unwrap_or_else(|e| panic!("{e}")));
    }
    // A file of several chunks: chunk k >= 1 lives on its own partition, replicated too.
    let big: Vec<u8> = (0..9 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    c.create("/w0/big", 0o644, true, &big)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    files.insert("/w0/big".into(), big);
    verify(&c, &files).await;
    // Every batch went to two backups.
    let shipped = replicate_count(&c).await;
    assert!(
        shipped >= 2 * files.len() as u64,
        "{shipped} replicate requests for {} files",
        files.len()
    );
    tc.fsck_until_clean().await;
    let out = tc.cli(&["fsck"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("20 partitions (60 copies checked)"), "{text}");

    // fsck notices a copy that differs: stop a backup's server, write through the others
    // (writes to its partitions then wait), and look while the copy is behind.
    let v = victim(&tc.map);
    let dir = dir_backed_by(&tc.map, v, "behind");
    c.mkdir(&dir, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    tc.kill9(v);
    let slow = tc.client_with(tc.map.clone(), Duration::from_secs(60));
    let d2 = dir.clone();
    let writer = tokio::spawn(async move { write_files(&slow, &d2, "b", 3).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!writer.is_finished(), "a write must wait for every copy");
    let out = tc.cli(&["fsck"]);
    assert!(
        !out.status.success(),
        "fsck must fail with a copy down: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    tc.restart(v);
    let more = writer.await.unwrap_or_else(|e| panic!("{e}"));
    verify(&c, &more).await;
    tc.fsck_until_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_restart_or_lose_their_disk_catch_up() {
    let tc = replicated_cluster();
    let c = std::sync::Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(60)));
    let v = victim(&tc.map);
    let backed = dir_backed_by(&tc.map, v, "backed");
    let served = dir_served_by(&tc.map, v, "served");
    for d in [&backed, &served] {
        c.mkdir(d, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let mut files = write_files(&c, &backed, "a", 20).await;
    files.extend(write_files(&c, &served, "a", 20).await);

    // 1. kill -9 a backup during writes; they wait, and finish once it is back.
    let c2 = c.clone();
    let b2 = backed.clone();
    let writer = tokio::spawn(async move { write_files(&c2, &b2, "k", 20).await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    tc.kill9(v);
    tokio::time::sleep(Duration::from_millis(500)).await;
    tc.restart(v);
    files.extend(writer.await.unwrap_or_else(|e| panic!("{e}")));
    verify(&c, &files).await;
    tc.fsck_until_clean().await;

    // 2. The server loses its disk. As a backup it is refilled by its primaries (a whole copy
    // on the next write); as a primary it first copies back from its backups, so nothing
    // it served is lost.
    tc.kill9(v);
    std::fs::remove_dir_all(tc.dir.path().join(format!("node-{v}")))
        .unwrap_or_else(|e| panic!("{e}"));
    tc.restart(v);
    tc.wait_up(&c, v).await;
    verify(&c, &files).await;
    files.extend(write_files(&c, &backed, "n", 5).await);
    files.extend(write_files(&c, &served, "n", 5).await);
    verify(&c, &files).await;
    tc.fsck_until_clean().await;
    let log =
        std::fs::read_to_string(tc.dir.path().join(format!("node-{v}.log"))).unwrap_or_default();
    assert!(
        log.contains("a backup holds a newer history than this primary"),
        "server {v} should have copied its partitions back"
    );
}
