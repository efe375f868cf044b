//! A policy set on, and cleared from, a tree that exists moves it between zones online
//! (docs/zones.md section 3), on real server processes: readers never miss a file or see
//! wrong bytes, writers' creates land (they wait while the tree is frozen), and once
//! pinned, the tree's file traffic stays in its zone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use myriad_client::{Caller, Client, ClientConfig, PolicyState, TrafficKind};

use crate::harness::TestCluster;

const DIRS: usize = 4;
const FILES: usize = 60;
/// A file with a second chunk (chunks past the first are placed by inode number).
const BIG: &str = "/proj/d0/big";
const BIG_LEN: usize = 5 * 1024 * 1024;

fn client_in(tc: &TestCluster, zone: &str) -> Client {
    let caller = Caller {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let mut cfg = ClientConfig::new(tc.map.clone(), caller, tc.keys());
    cfg.request_timeout = Duration::from_secs(30);
    cfg.zone = zone.to_string();
    Client::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// Six servers in zones a and b (two copies of each partition), a client in zone a, and
/// the directory `/proj`.
async fn zoned_cluster_with_proj() -> (TestCluster, Client) {
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
    let c = client_in(&tc, "a");
    c.newest_map().await;
    c.mkdir("/proj", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (tc, c)
}

fn file_path(i: usize) -> String {
    let sub = if i.is_multiple_of(3) { "/deep" } else { "" };
    format!("/proj/d{}{sub}/f{i}", i % DIRS)
}

fn content(name: &str) -> Vec<u8> {
    format!("{name} holds this line\n").repeat(150).into_bytes()
}

fn big_content() -> Vec<u8> {
    (0..BIG_LEN).map(|i| (i % 251) as u8).collect()
}

/// Reads every file of the tree until `stop`; panics at the first missing file or wrong
/// byte. Returns how many reads it made.
async fn reader(c: Client, stop: Arc<AtomicBool>) -> usize {
    let mut reads = 0;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..FILES {
            let path = file_path(i);
            let (_, got) = c
                .fetch(&path)
                .await
                .unwrap_or_else(|e| panic!("read {path} during a move: {e}"));
            assert_eq!(got, content(&path), "{path} read wrong during a move");
            reads += 1;
        }
        let names = c
            .readdir("/proj/d1")
            .await
            .unwrap_or_else(|e| panic!("readdir during a move: {e}"));
        let expected = (0..FILES)
            .filter(|i| i % DIRS == 1 && !i.is_multiple_of(3))
            .count();
        let got = names.iter().filter(|e| e.name.starts_with('f')).count();
        assert_eq!(got, expected, "a listing during a move misses names");
    }
    reads
}

/// Creates files `w{n}` until `stop`; every create must succeed. Returns their paths.
async fn writer(c: Client, stop: Arc<AtomicBool>, tag: &str) -> Vec<String> {
    let mut made = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let path = format!("/proj/d{}/w{tag}{n}", n % DIRS);
        c.create(&path, 0o644, true, &content(&path))
            .await
            .unwrap_or_else(|e| panic!("create {path} during a move: {e}"));
        made.push(path);
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    made
}

/// Runs `args` through the CLI while a reader and a writer work on the tree; returns the
/// writer's files.
async fn move_under_load(tc: &TestCluster, args: &[&str], tag: &str) -> Vec<String> {
    let stop = Arc::new(AtomicBool::new(false));
    let reading = tokio::spawn(reader(client_in(tc, "b"), stop.clone()));
    let tag = tag.to_string();
    let writing = tokio::spawn({
        let (c, stop) = (client_in(tc, "a"), stop.clone());
        async move { writer(c, stop, &tag).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = tokio::task::block_in_place(|| tc.cli(args));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let reads = reading.await.unwrap_or_else(|e| panic!("reader: {e}"));
    let made = writing.await.unwrap_or_else(|e| panic!("writer: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(reads >= FILES, "the reader read {reads} files");
    assert!(!made.is_empty(), "the writer wrote nothing");
    made
}

/// Every directory of the tree is placed on partitions of `group`, by the client's map.
fn placed_in_group(c: &Client, group: u32) -> bool {
    let map = c.map();
    let ring = map.ring();
    (0..DIRS).all(|d| {
        [
            format!("/proj/d{d}"),
            format!("/proj/d{d}/deep"),
            "/proj".into(),
        ]
        .iter()
        .all(|dir| map.partition(ring.owner_of_dir(dir)).map(|p| p.group) == Some(group))
    })
}

async fn file_bytes_across_zones(c: &Client) -> u64 {
    let mut cross = 0;
    for (id, r) in c.all_counters().await {
        let s = r.unwrap_or_else(|e| panic!("counters of server {id}: {e}"));
        cross += s.cross_zone_bytes(TrafficKind::File);
    }
    cross
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_moves_between_zones_online_while_it_is_read_and_written() {
    let (tc, c) = zoned_cluster_with_proj().await;
    for d in 0..DIRS {
        for dir in [format!("/proj/d{d}"), format!("/proj/d{d}/deep")] {
            c.mkdir(&dir, 0o755)
                .await
                .unwrap_or_else(|e| panic!("{dir}: {e}"));
        }
    }
    for i in 0..FILES {
        let path = file_path(i);
        c.create(&path, 0o644, true, &content(&path))
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    c.create(BIG, 0o644, true, &big_content())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(placed_in_group(&c, 0));

    // Pinned while read and written: it lands on zone a's partitions.
    let mut written = move_under_load(&tc, &["policy", "set", "/proj", "--zone", "a"], "in").await;
    let map = c.newest_map().await;
    let pol = map
        .live_policy("/proj")
        .cloned()
        .unwrap_or_else(|| panic!("no policy on /proj"));
    assert_eq!(pol.state, PolicyState::Active);
    assert!(
        placed_in_group(&c, pol.group),
        "the tree is not placed on its group"
    );
    tc.fsck_until_clean().await;

    // Its small files' traffic now stays in zone a: reads, listings and new files.
    c.reset_counters().await.unwrap_or_else(|e| panic!("{e}"));
    for i in 0..FILES {
        let path = file_path(i);
        let (_, got) = c.fetch(&path).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, content(&path));
    }
    for d in 0..DIRS {
        c.readdir(&format!("/proj/d{d}"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let path = format!("/proj/d{d}/after");
        c.create(&path, 0o644, true, b"pinned")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(
        file_bytes_across_zones(&c).await,
        0,
        "a moved tree's file traffic crossed zones"
    );

    // Cleared while read and written: back over both zones, on the default group.
    written.extend(move_under_load(&tc, &["policy", "clear", "/proj"], "out").await);
    let map = c.newest_map().await;
    assert!(map.live_policy("/proj").is_none());
    assert!(map.moving_policy().is_none());
    assert!(placed_in_group(&c, 0), "the tree did not move back");

    // Nothing was lost on the way: the first files, the big one, every acknowledged create.
    for i in 0..FILES {
        let path = file_path(i);
        let (_, got) = c
            .fetch(&path)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(got, content(&path), "{path}");
    }
    let (_, big) = c.fetch(BIG).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(big == big_content(), "the big file changed");
    for path in &written {
        let (_, got) = c
            .fetch(path)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(&got, &content(path), "{path}");
    }
    tc.fsck_until_clean().await;
}

/// The server coordinating a move (primary of the partition holding the root's entry) is
/// killed while it moves: the next primary's recovery finishes or undoes what was begun,
/// the move is tried again, `policy set` comes back done, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_move_survives_its_coordinator_being_killed() {
    let (tc, c) = zoned_cluster_with_proj().await;
    let mut files = Vec::new();
    for d in 0..24 {
        let dir = format!("/proj/d{d}");
        c.mkdir(&dir, 0o755)
            .await
            .unwrap_or_else(|e| panic!("{dir}: {e}"));
        for f in 0..8 {
            let path = format!("{dir}/f{f}");
            c.create(&path, 0o644, true, &content(&path))
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            files.push(path);
        }
    }
    let map = c.newest_map().await;
    let coordinator = crate::harness::server_of(&map, map.ring().owner_of_entry("/proj"));

    let setting = std::thread::spawn({
        let args = ["--cluster".to_string(), tc.map_file().display().to_string()];
        move || {
            std::process::Command::new(crate::harness::BIN)
                .args(&args)
                .args(["policy", "set", "/proj", "--zone", "a", "--wait-s", "300"])
                .output()
                .unwrap_or_else(|e| panic!("{e}"))
        }
    });
    // Killed once the move may have begun (the coordinator looks every 2 s).
    for _ in 0..100 {
        if c.newest_map().await.moving_policy().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    tc.kill9(coordinator);
    tokio::time::sleep(Duration::from_secs(3)).await;
    tc.restart(coordinator);
    tc.wait_up(&c, coordinator).await;
    let out = tokio::task::block_in_place(|| setting.join()).unwrap_or_else(|_| panic!("cli"));
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let map = c.newest_map().await;
    let group = map.live_policy("/proj").map(|p| (p.group, p.state));
    assert!(matches!(group, Some((_, PolicyState::Active))), "{group:?}");
    let ring = map.ring();
    for d in 0..24 {
        let home = map.partition(ring.owner_of_dir(&format!("/proj/d{d}")));
        assert_eq!(home.map(|p| p.group), group.map(|g| g.0));
    }
    for path in &files {
        let (_, got) = c
            .fetch(path)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(got, content(path), "{path}");
    }
    tc.fsck_until_clean().await;
}
