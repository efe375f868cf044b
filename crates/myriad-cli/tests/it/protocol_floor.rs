//! The cluster's protocol floor through a rolling upgrade of real server processes
//! (docs/upgrades.md "The cluster's protocol floor"): servers capped at an older protocol
//! (`MYRIAD_PROTOCOL_NEWEST`, standing in for the release before) make a floor of that
//! version; it rises only once every server speaks the newer one, never goes down, and a
//! server restarted onto the older release afterwards is refused at its hellos, told why,
//! and kept out (down) until it speaks the floor again.

use std::time::{Duration, Instant};

use myriad_client::NodeId;
use myriad_proto::PROTOCOL_VERSION;

use crate::harness::TestCluster;

fn node_list(tc: &TestCluster) -> String {
    let out = tc.cli(&["node", "list"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn floor_line(floor: u16) -> String {
    format!("protocol floor: {floor} ")
}

/// Waits (at most 30 s) until `node list` shows what `ok` wants; the last listing.
fn wait_list(tc: &TestCluster, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = node_list(tc);
        if ok(&list) {
            return list;
        }
        assert!(Instant::now() < deadline, "{what}: never seen in\n{list}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The protocol `node list` shows for server `id` (the last column).
fn protocol_of(list: &str, id: u32) -> String {
    list.lines()
        .find(|l| l.split_whitespace().next() == Some(id.to_string().as_str()))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_default()
        .to_string()
}

fn restart(tc: &TestCluster, node: u32, env: &[(&str, &str)]) {
    tc.kill9(NodeId(node));
    tc.restart_with_env(NodeId(node), env);
}

#[test]
fn the_floor_rises_once_every_server_speaks_the_new_protocol_and_then_keeps_old_ones_out() {
    let old = (PROTOCOL_VERSION - 1).to_string();
    let capped = [("MYRIAD_PROTOCOL_NEWEST", old.as_str())];
    let tc = TestCluster::start_with_env(3, &["--replicas", "3"], &capped);
    let old_floor = floor_line(PROTOCOL_VERSION - 1);
    let new_floor = floor_line(PROTOCOL_VERSION);
    let list = wait_list(&tc, "the old release's floor", |l| l.contains(&old_floor));
    for id in 1..=3 {
        assert_eq!(protocol_of(&list, id), old, "server {id}:\n{list}");
    }

    // Upgraded one by one: the floor stays while any server speaks only the old one.
    restart(&tc, 1, &[]);
    restart(&tc, 2, &[]);
    std::thread::sleep(Duration::from_secs(2));
    let list = node_list(&tc);
    assert!(
        list.contains(&old_floor),
        "server 3 still speaks {old}:\n{list}"
    );
    restart(&tc, 3, &[]);
    let list = wait_list(&tc, "the new floor", |l| l.contains(&new_floor));
    for id in 1..=3 {
        assert_eq!(
            protocol_of(&list, id),
            PROTOCOL_VERSION.to_string(),
            "{list}"
        );
    }

    // Server 3 back on the old release: refused at its hellos, so it gets no lease and
    // is marked down; the floor does not go down.
    restart(&tc, 3, &capped);
    let log = tc.dir.path().join("node-3.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    let told = format!("runs protocol {PROTOCOL_VERSION} or later");
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains(&told)
    {
        assert!(
            Instant::now() < deadline,
            "server 3 was never told the floor"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let list = wait_list(&tc, "server 3 down", |l| {
        l.lines()
            .any(|line| line.trim_start().starts_with("3 ") && line.contains(" down "))
    });
    assert!(
        list.contains(&new_floor),
        "the floor never goes down:\n{list}"
    );
    assert_eq!(protocol_of(&list, 3), old, "what holds it back:\n{list}");

    // Upgraded again, it is let back in.
    restart(&tc, 3, &[]);
    wait_list(&tc, "server 3 up again", |l| {
        l.lines()
            .any(|line| line.trim_start().starts_with("3 ") && line.contains(" up "))
    });
}

/// Servers of a release older than the map's extension (34) make no floor at all: one
/// below 35 cannot be kept in the Raft log, and raising it would be proposed again every
/// round (the map's epoch climbing during a rolling upgrade from such a release).
#[test]
fn servers_older_than_the_map_s_extension_make_no_floor_and_no_map_changes() {
    let capped = [("MYRIAD_PROTOCOL_NEWEST", "34")];
    let tc = TestCluster::start_with_env(3, &["--replicas", "3"], &capped);
    let epoch = |list: &str| {
        list.lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(3))
            .map(|e| e.trim_end_matches(',').to_string())
            .unwrap_or_default()
    };
    let list = wait_list(&tc, "every server speaking 34", |l| {
        (1..=3).all(|id| protocol_of(l, id) == "34")
    });
    std::thread::sleep(Duration::from_secs(2));
    let first = node_list(&tc);
    assert!(first.contains("protocol floor: not set yet"), "{first}");
    std::thread::sleep(Duration::from_secs(1));
    let second = node_list(&tc);
    assert_eq!(
        epoch(&first),
        epoch(&second),
        "the map keeps changing:\n{first}\n{second}"
    );
    assert!(!epoch(&list).is_empty(), "{list}");
}

/// Waits (at most 10 s) until the newest map's protocol floor is `floor`.
pub async fn floor_at(client: &myriad_client::Client, floor: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while client.newest_map().await.ext.protocol_floor != floor {
        assert!(
            std::time::Instant::now() < deadline,
            "the floor never reached {floor}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
