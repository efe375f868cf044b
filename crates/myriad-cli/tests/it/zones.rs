//! Zones (docs/zones.md) on real server processes: a tree pinned to a zone sends no file
//! traffic across zones (counted by the servers), and a tree placed over every zone
//! survives the loss of a whole zone.

use std::time::Duration;

use myriad_client::{Caller, Client, ClientConfig, ClusterMap, NodeId, TrafficKind};

use crate::harness::TestCluster;

fn user() -> Caller {
    Caller {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    }
}

/// A client in `zone` with the newest map.
async fn client_in(tc: &TestCluster, zone: &str, timeout: Duration) -> Client {
    let mut cfg = ClientConfig::new(tc.map.clone(), user(), tc.keys());
    cfg.request_timeout = timeout;
    cfg.connect_timeout = Duration::from_secs(1);
    cfg.zone = zone.to_string();
    let c = Client::new(cfg).unwrap_or_else(|e| panic!("{e}"));
    c.newest_map().await;
    c
}

/// Creates, stats, reads and deletes `n` small files in ten directories under `dir`.
async fn small_file_job(c: &Client, dir: &str, n: usize) {
    let path_of = |i: usize| format!("{dir}/d{}/f{i}", i % 10);
    for d in 0..10 {
        c.mkdir(&format!("{dir}/d{d}"), 0o755)
            .await
            .unwrap_or_else(|e| panic!("mkdir {dir}/d{d}: {e}"));
    }
    for i in 0..n {
        let data = format!("file {i} of {dir}\n").repeat(50);
        c.create(&path_of(i), 0o644, true, data.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", path_of(i)));
    }
    for i in 0..n {
        let path = path_of(i);
        c.stat(&path)
            .await
            .unwrap_or_else(|e| panic!("stat {path}: {e}"));
        let (_, got) = c
            .fetch(&path)
            .await
            .unwrap_or_else(|e| panic!("fetch {path}: {e}"));
        assert_eq!(got, format!("file {i} of {dir}\n").repeat(50).into_bytes());
    }
    for i in 0..n {
        c.unlink(&path_of(i))
            .await
            .unwrap_or_else(|e| panic!("unlink {}: {e}", path_of(i)));
    }
    for d in 0..10 {
        c.rmdir(&format!("{dir}/d{d}"))
            .await
            .unwrap_or_else(|e| panic!("rmdir {dir}/d{d}: {e}"));
    }
}

/// File-traffic bytes every server exchanged with peers in other zones, and in its own.
async fn file_bytes(c: &Client) -> (u64, u64) {
    let (mut cross, mut local) = (0, 0);
    for (id, r) in c.all_counters().await {
        let s = r.unwrap_or_else(|e| panic!("counters of server {id}: {e}"));
        cross += s.cross_zone_bytes(TrafficKind::File);
        local += s
            .zone_traffic
            .iter()
            .filter(|t| t.kind == TrafficKind::File && t.zone == s.zone)
            .map(|t| t.bytes())
            .sum::<u64>();
    }
    (cross, local)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_tree_sends_no_file_traffic_across_zones() {
    let tc = TestCluster::start_with(
        6,
        &[
            "--zones",
            "a,b",
            "--replicas",
            "2",
            "--partitions-per-node",
            "2",
        ],
    );
    let out = tc.cli(&["policy", "set", "/lab", "--zone", "a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A second policy on the same root, a zone with no servers, and the root are refused.
    for args in [
        &["policy", "set", "/lab", "--zone", "b"][..],
        &["policy", "set", "/x", "--zone", "c"][..],
        &["policy", "set", "/", "--zone", "a"][..],
    ] {
        let out = tc.cli(args);
        assert!(!out.status.success(), "{args:?} was accepted");
    }
    let listed = String::from_utf8_lossy(&tc.cli(&["policy", "list"]).stdout).to_string();
    assert!(listed.starts_with("/lab: zone a, 2 copies"), "{listed}");

    let c = client_in(&tc, "a", Duration::from_secs(20)).await;
    // The tree's set-up (its root's own entry lives in its parent, outside the tree).
    c.mkdir("/lab", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.mkdir("/lab/job", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let map: ClusterMap = c.map();
    let ring = map.ring();
    for i in 0..50 {
        let p = map
            .partition(ring.owner_of_entry(&format!("/lab/job/d{}/f{i}", i % 10)))
            .unwrap_or_else(|| panic!("partition"));
        assert!(
            p.replicas.iter().all(|r| map.zone_of(*r) == "a"),
            "{p:?} has a copy outside zone a"
        );
    }

    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    small_file_job(&c, "/lab/job", 150).await;
    let (cross, local) = file_bytes(&c).await;
    if cross != 0 {
        for (id, r) in c.all_counters().await {
            eprintln!("server {id}: {r:?}");
        }
    }
    assert_eq!(cross, 0, "pinned tree: file bytes crossed zones");
    assert!(local > 150 * 800, "the job's bytes were counted: {local}");

    // The same job on a tree placed over both zones crosses (the counters can see it).
    c.mkdir("/free", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    small_file_job(&c, "/free", 150).await;
    let (cross, local) = file_bytes(&c).await;
    assert!(
        cross > local / 4,
        "unpinned tree: only {cross} bytes crossed ({local} stayed)"
    );

    // Cleared once the tree is gone (zone_moves.rs clears one that exists); the path is
    // then placed over every zone again, and the group stays for what it numbered.
    c.rmdir("/lab/job").await.unwrap_or_else(|e| panic!("{e}"));
    c.rmdir("/lab").await.unwrap_or_else(|e| panic!("{e}"));
    let out = tc.cli(&["policy", "clear", "/lab"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map = c.newest_map().await;
    assert!(map.live_policy("/lab").is_none());
    assert!(
        map.policies
            .iter()
            .all(|p| p.state == myriad_client::PolicyState::Retired)
    );
    assert_eq!(map.ring().policy_root_of("/lab/x"), None);
    c.mkdir("/lab", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.create("/lab/again", 0o644, true, b"back")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.fetch("/lab/again").await.map(|x| x.1).ok().as_deref(),
        Some(&b"back"[..])
    );
    tc.fsck_until_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpinned_tree_survives_the_loss_of_a_whole_zone() {
    // Three zones: the cluster-map group keeps its majority (4 of 6) without one.
    let tc = TestCluster::start_with(
        6,
        &[
            "--zones",
            "a,b,c",
            "--replicas",
            "3",
            "--partitions-per-node",
            "2",
        ],
    );
    for p in &tc.map.partitions {
        assert_eq!(tc.map.zone_count(&p.replicas), 3, "{p:?}");
    }
    let c = client_in(&tc, "a", Duration::from_secs(30)).await;
    c.mkdir("/data", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..100 {
        c.create(
            &format!("/data/f{i}"),
            0o644,
            true,
            format!("{i}").as_bytes(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let zone_c: Vec<NodeId> = tc
        .map
        .nodes
        .iter()
        .filter(|n| n.zone == "c")
        .map(|n| n.id)
        .collect();
    assert_eq!(zone_c.len(), 2);
    for id in &zone_c {
        tc.kill9(*id);
    }
    for i in 0..100 {
        let (_, got) = c
            .fetch(&format!("/data/f{i}"))
            .await
            .unwrap_or_else(|e| panic!("/data/f{i} after zone c was lost: {e}"));
        assert_eq!(got, format!("{i}").into_bytes());
    }
    // And it still takes writes.
    c.create("/data/after", 0o644, true, b"written without zone c")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.fetch("/data/after").await.map(|x| x.1).ok().as_deref(),
        Some(&b"written without zone c"[..])
    );
}

/// File requests from clients in `zone` that servers of `zone` answered, and all of them.
async fn requests_from(c: &Client, zone: &str) -> (u64, u64) {
    let (mut inside, mut all) = (0, 0);
    for (id, r) in c.all_counters().await {
        let s = r.unwrap_or_else(|e| panic!("counters of server {id}: {e}"));
        let n: u64 = s
            .zone_traffic
            .iter()
            .filter(|t| t.kind == TrafficKind::File && t.zone == zone)
            .map(|t| t.requests)
            .sum();
        all += n;
        if s.zone == zone {
            inside += n;
        }
    }
    (inside, all)
}

/// Listing pages (`readdir` requests) answered by the servers of zone a and of zone b.
async fn listings_by_zone(c: &Client) -> (u64, u64) {
    let (mut a, mut b) = (0, 0);
    for (id, r) in c.all_counters().await {
        let s = r.unwrap_or_else(|e| panic!("counters of server {id}: {e}"));
        let n: u64 = s
            .client_requests
            .iter()
            .filter(|o| o.op == "readdir")
            .map(|o| o.count)
            .sum();
        if s.zone == "a" {
            a += n;
        } else {
            b += n;
        }
    }
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_answered_in_the_readers_zone_and_never_older_than_an_acknowledged_write() {
    // One copy of every partition in each zone: half the primaries are in the other zone.
    let tc = TestCluster::start_with(
        4,
        &[
            "--zones",
            "a,b",
            "--replicas",
            "2",
            "--partitions-per-node",
            "2",
        ],
    );
    let writer = client_in(&tc, "a", Duration::from_secs(30)).await;
    let reader = client_in(&tc, "b", Duration::from_secs(30)).await;
    // First, before any server keeps a replica of `/`'s attributes: files right under
    // `/`, read in the zone without `/`'s primary, where the copy of `/`'s own partition
    // answers the search permission on `/` from the root's attributes it holds.
    let map = writer.newest_map().await;
    let root_home = map.ring().owner_of_dir("/");
    let root_zone = map.zone_of(map.primary_of(root_home).unwrap_or(NodeId(0)));
    let far = client_in(
        &tc,
        if root_zone == "a" { "b" } else { "a" },
        Duration::from_secs(30),
    )
    .await;
    for i in 0..4 {
        writer
            .create(
                &format!("/top{i}"),
                0o644,
                true,
                format!("top {i}").as_bytes(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for i in 0..4 {
        let (_, got) = far
            .fetch(&format!("/top{i}"))
            .await
            .unwrap_or_else(|e| panic!("/top{i} read outside the root's zone: {e}"));
        assert_eq!(got, format!("top {i}").into_bytes());
    }
    // A name under a file is ENOTDIR from a copy too, as from the primary (root, whom no
    // search permission check stops first).
    let under = map.ring().owner_of_dir("/top0");
    let under_zone = map.zone_of(map.primary_of(under).unwrap_or(NodeId(0)));
    let mut root_cfg = ClientConfig::new(tc.map.clone(), Caller::root(), tc.keys());
    root_cfg.zone = (if under_zone == "a" { "b" } else { "a" }).to_string();
    let root = Client::new(root_cfg).unwrap_or_else(|e| panic!("{e}"));
    root.newest_map().await;
    assert_eq!(
        root.stat("/top0/x").await.err(),
        Some(myriad_client::FsError::NotADirectory)
    );
    let path_of = |i: usize| format!("/near/d{}/f{i}", i % 4);
    writer
        .mkdir("/near", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for d in 0..4 {
        writer
            .mkdir(&format!("/near/d{d}"), 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for i in 0..40 {
        writer
            .create(&path_of(i), 0o644, true, format!("first {i}").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // Reads from zone b, of files whose primaries are in either zone.
    let before = requests_from(&reader, "b").await;
    for round in 0..3 {
        for i in 0..40 {
            let (_, got) = reader
                .fetch(&path_of(i))
                .await
                .unwrap_or_else(|e| panic!("round {round}: {}: {e}", path_of(i)));
            assert_eq!(got, format!("first {i}").into_bytes());
        }
    }
    let after = requests_from(&reader, "b").await;
    let (inside, all) = (after.0 - before.0, after.1 - before.1);
    eprintln!("nearest-copy reads: {inside} of {all} file requests from zone b answered there");
    assert!(all >= 120, "{all} requests counted for 120 reads");
    assert!(
        inside * 10 >= all * 9,
        "only {inside} of {all} reads from zone b were answered in zone b"
    );

    // Every read after an acknowledged write sees it, from whichever copy answers: the
    // writer in zone a changes a file, then the reader in zone b reads it at once.
    for i in 0..120 {
        let path = path_of(i % 40);
        let data = format!("version {i}");
        let h = match writer.open(&path).await {
            Ok(h) => h,
            Err(myriad_client::FsError::NotFound) => writer
                .create(&path, 0o644, true, b"")
                .await
                .unwrap_or_else(|e| panic!("{e}")),
            Err(e) => panic!("{path}: {e}"),
        };
        writer
            .write(&h, 0, data.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        writer
            .truncate(&h, data.len() as u64)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (_, got) = reader
            .fetch(&path)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&got),
            data,
            "{path}: a read after an acknowledged write returned older data"
        );
        if i % 10 == 9 {
            writer.unlink(&path).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                reader.stat(&path).await.err(),
                Some(myriad_client::FsError::NotFound),
                "{path}: unlinked, yet read"
            );
        }
    }
    // Listings too: answered in zone b, never missing a create acknowledged before.
    let before = listings_by_zone(&reader).await;
    for d in 0..4 {
        let dir = format!("/near/d{d}");
        writer
            .create(&format!("{dir}/new"), 0o644, true, b"new")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = reader
            .readdir(&dir)
            .await
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(
            names.iter().any(|n| n == "new"),
            "{dir}: a listing missed an acknowledged create: {names:?}"
        );
    }
    let after = listings_by_zone(&reader).await;
    let (in_a, in_b) = (after.0 - before.0, after.1 - before.1);
    eprintln!("nearest-copy listings: {in_b} listing pages answered in zone b, {in_a} in zone a");
    assert!(
        in_a == 0 && in_b >= 4,
        "listings from zone b: {in_b} pages answered there, {in_a} in zone a"
    );
    // Permission: a directory closed to others stays closed when a copy answers.
    writer
        .chmod("/near/d1", 0o700)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut other_cfg = ClientConfig::new(
        tc.map.clone(),
        Caller {
            uid: 1001,
            gid: 1001,
            groups: vec![],
        },
        tc.keys(),
    );
    other_cfg.zone = "b".to_string();
    let other = Client::new(other_cfg).unwrap_or_else(|e| panic!("{e}"));
    other.newest_map().await;
    for i in (1..40).step_by(4) {
        assert_eq!(
            other.fetch(&path_of(i)).await.err(),
            Some(myriad_client::FsError::PermissionDenied),
            "{}: read through a directory closed to its reader",
            path_of(i)
        );
    }
}
