//! Fast and capacity tiers (issue 21, docs/redundancy.md "Tiers"): each server's fast tier
//! is a small tmpfs of its own. Filled past its high-water mark, new files' first chunks
//! overflow to the capacity tier; everything reads back, through a server killed and
//! started again; once space returns, the overflowed chunks move back. Needs root (mount).

use std::time::Duration;

use myriad_client::{Caller, Client, NodeId, TierStat};

use crate::full_disk::{Disks, fill, statvfs};
use crate::harness::TestCluster;

const NODES: u32 = 3;
const FAST_MIB: u64 = 256;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

async fn fast_tier(c: &Client) -> TierStat {
    let s = crate::index::ok(c.statfs().await, "statfs");
    let fast = s.tiers.iter().find(|t| t.name == "fast").cloned();
    fast.unwrap_or_else(|| panic!("no fast tier in statfs: {s:?}"))
}

/// Waits until the summed fast tier satisfies `ok`.
async fn wait_fast(c: &Client, what: &str, ok: impl Fn(&TierStat) -> bool) -> TierStat {
    let mut last = TierStat::default();
    for _ in 0..300 {
        last = fast_tier(c).await;
        if ok(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fast tier never {what}: {last:?}");
}

async fn every_fast_tier_overflows(c: &Client, tc: &TestCluster) {
    for _ in 0..300 {
        let mut all = true;
        for n in &tc.map.nodes {
            let s = crate::index::ok(c.server_statfs(n.id).await, "server statfs");
            all &= s.tiers.iter().any(|t| t.name == "fast" && t.overflowing);
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not every fast tier overflows");
}

async fn check_all(c: &Client, files: &[(String, Vec<u8>)], when: &str) {
    for (path, data) in files {
        let back = crate::index::ok(c.read_all(path).await, path);
        assert!(back == *data, "{path} read back different {when}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_fast_tier_overflows_to_capacity_reads_back_and_moves_back() {
    let mut disks = Disks(Vec::new());
    let tc = TestCluster::start_prepared(
        NODES as usize,
        &[
            "--replicas",
            "3",
            "--disk-reserve-mib",
            "8",
            "--fast-high-water-pct",
            "80",
            "--fast-low-water-pct",
            "60",
            "--fast-dir",
            "{dir}/fast",
        ],
        |dir| {
            for n in 1..=NODES {
                disks.mount(&dir.join("fast").join(format!("node-{n}")), FAST_MIB);
            }
        },
    );
    let c = crate::index::plain(&tc, Caller::root());
    crate::index::ok(c.mkdir("/d", 0o755).await, "mkdir");
    let mut files = Vec::new();
    // Before: small files and first chunks in the fast tier, a later chunk in capacity.
    for i in 0..8u8 {
        let f = (format!("/d/before{i}"), pattern(100 << 10, i));
        crate::index::ok(c.create(&f.0, 0o644, true, &f.1).await, "create");
        files.push(f);
    }
    let big = (String::from("/d/big"), pattern(6 << 20, 99));
    crate::index::ok(c.create(&big.0, 0o644, true, &big.1).await, "create big");
    files.push(big);
    let s = crate::index::ok(c.statfs().await, "statfs");
    let cap = s.tiers.iter().find(|t| t.name == "capacity");
    assert!(
        cap.is_some_and(|t| t.used_bytes > 0),
        "no capacity tier, or nothing in it: {s:?}"
    );
    assert_eq!(fast_tier(&c).await.overflowed_blocks, 0);

    // Past the high-water mark (80%), above the reserve: new files overflow.
    for d in &disks.0 {
        let (total, _) = statvfs(d);
        fill(d, "filler", total * 15 / 100);
    }
    // Every server's, not the sum's (which overflows once any one does): a file whose
    // copies met a server not past its mark yet keeps its blocks in that fast tier.
    every_fast_tier_overflows(&c, &tc).await;
    for i in 0..16u8 {
        let f = (format!("/d/after{i}"), pattern(200 << 10, 100 + i));
        crate::index::ok(c.create(&f.0, 0o644, true, &f.1).await, "create while full");
        files.push(f);
    }
    let over = fast_tier(&c).await;
    // 16 files of 4 blocks, three copies each.
    assert!(
        over.overflowed_blocks >= 16 * 4 * 3,
        "too few blocks overflowed: {over:?}"
    );
    check_all(&c, &files, "while the fast tier overflows").await;

    // A server killed with overflowed data comes back with all of it (the capacity tier
    // replays what its fast tier's redo records hold).
    tc.kill9(NodeId(2));
    tc.restart(NodeId(2));
    tc.wait_up(&c, NodeId(2)).await;
    check_all(&c, &files, "after a server restarted").await;

    // Space returns: below the low-water mark (60%) the first chunks move back.
    for d in &disks.0 {
        std::fs::remove_file(d.join("filler")).unwrap_or_else(|e| panic!("{e}"));
    }
    let back = wait_fast(&c, "moving back", |t| {
        !t.overflowing && t.moved_back_blocks >= 16 * 4 * 2
    })
    .await;
    eprintln!("fast tier after space returned: {back:?}");
    check_all(&c, &files, "after moving back").await;
    let out = tc.cli(&["df"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fast") && text.contains("capacity"),
        "df shows no tiers: {text}"
    );
    tc.fsck_until_clean().await;
    drop(tc);
    drop(disks);
}
