//! Servers lost for good (issue 49, docs/replication.md "Servers lost for good"): a
//! partition whose every in-sync copy died is not served from a behind copy on its own;
//! `myriad node lost ID --accept-loss` makes it serve again, losing what only the lost
//! disk held and nothing else.

use std::time::Duration;

use myriad_client::{Client, FsError};

use crate::harness::TestCluster;

/// Polls the newest map until `done` holds (20 s).
async fn until(c: &Client, what: &str, done: impl Fn(&myriad_client::ClusterMap) -> bool) {
    for _ in 0..200 {
        if done(&c.newest_map().await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never: {what}");
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Five servers, 3 copies, `--min-copies 1`: the root partition's two backups die and its
/// primary takes a change on its disk alone; then the primary dies for good and the two
/// come back, behind. The root stays unavailable (no behind copy is promoted) until the
/// administrator accepts the loss: the dry run changes nothing, `--accept-loss` serves it
/// again from a behind copy with every file made before the backups died, without the
/// change only the lost disk held, and taking new changes; fsck is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_in_sync_copies_died_serves_again_only_when_the_loss_is_accepted() {
    let tc = TestCluster::start_with(5, &["--replicas", "3", "--min-copies", "1"]);
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    c.create("/kept", 0o644, true, b"on every copy")
        .await
        .unwrap_or_else(|e| panic!("create with every copy up: {e}"));
    let root = tc.map.ring().owner_of_dir("/");
    let copies = tc
        .map
        .partition(root)
        .map(|p| p.replicas.clone())
        .unwrap_or_default();
    assert_eq!(copies.len(), 3, "{copies:?}");
    let (lost, others) = (copies[0], copies[1..].to_vec());
    for &o in &others {
        tc.kill9(o);
    }
    until(&c, "the backups marked down", |m| {
        others.iter().all(|&o| !m.is_up(o))
    })
    .await;
    c.create("/lone", 0o644, true, b"on one disk")
        .await
        .unwrap_or_else(|e| panic!("create on one disk with --min-copies 1: {e}"));
    // The primary's disk dies for good (the group loses its majority until the two return).
    tc.kill9(lost);
    for &o in &others {
        tc.restart(o);
    }
    for &o in &others {
        tc.wait_up(&c, o).await;
    }
    until(&c, "the lost primary marked down", |m| !m.is_up(lost)).await;
    let map = c.newest_map().await;
    assert_eq!(map.primary_of(root), None, "a behind copy was promoted");
    let short = tc.client_with(map.clone(), Duration::from_secs(3));
    assert!(
        short.stat("/kept").await.is_err(),
        "the root served with its in-sync copy lost"
    );

    // The dry run says what would happen and changes nothing.
    let id = lost.0.to_string();
    let dry = tc.cli(&["node", "lost", &id]);
    let said = text(&dry);
    assert!(dry.status.success(), "{said}");
    assert!(
        said.contains(&format!("partition {root}:")) && said.contains("LOST"),
        "{said}"
    );
    assert!(said.contains("--accept-loss"), "{said}");
    assert_eq!(c.newest_map().await.primary_of(root), None, "{said}");
    // Removing it would wait for ever (nothing can copy that partition): refused, naming
    // the way out.
    let remove = tc.cli(&["node", "remove", &id]);
    assert!(!remove.status.success(), "{}", text(&remove));
    assert!(
        text(&remove).contains(&format!("partition {root}"))
            && text(&remove).contains("myriad node lost"),
        "{}",
        text(&remove)
    );
    // A server up is not lost.
    let refused = tc.cli(&["node", "lost", &others[0].0.to_string()]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("not marked down"),
        "{}",
        text(&refused)
    );

    let done = tc.cli(&["node", "lost", &id, "--accept-loss"]);
    assert!(done.status.success(), "{}", text(&done));
    eprintln!("{}", text(&done));
    let map = c.newest_map().await;
    let new_primary = map.primary_of(root);
    assert!(
        new_primary.is_some_and(|p| others.contains(&p)),
        "root served by {new_primary:?}"
    );
    let h = c
        .open("/kept")
        .await
        .unwrap_or_else(|e| panic!("open /kept after the loss was accepted: {e}"));
    let back = c
        .read(&h, 0, 64)
        .await
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(back, b"on every copy");
    assert_eq!(
        c.stat("/lone").await.err(),
        Some(FsError::NotFound),
        "/lone was on the lost disk alone: this test tests nothing"
    );
    c.create("/after", 0o644, true, b"new")
        .await
        .unwrap_or_else(|e| panic!("create after the loss was accepted: {e}"));
    // The namespace is whole; the only problems fsck finds are the lost server's copies,
    // unreachable until they are made again elsewhere (past the grace period, or by
    // `node remove`).
    let fsck = text(&tc.cli(&["fsck"]));
    let problems: Vec<&str> = fsck.lines().filter(|l| l.starts_with("  ")).collect();
    assert!(!problems.is_empty(), "{fsck}");
    let on_lost = format!(" on server {lost}: ");
    assert!(
        problems
            .iter()
            .all(|l| l.contains("unreachable copy: partition") && l.contains(&on_lost)),
        "{fsck}"
    );
    let again = tc.cli(&["node", "lost", &id]);
    assert!(
        text(&again).contains("nothing to accept"),
        "{}",
        text(&again)
    );
}
