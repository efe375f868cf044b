//! Data integrity (issue 7): a flipped bit in a stored block, below the engine (as a failing
//! disk or a bug would leave it), is detected on read, reported, and repaired from an intact
//! copy; one on a backup is found and repaired by fsck.

use std::sync::Arc;
use std::time::Duration;

use myriad_client::{Client, NodeId, PartitionId};
use myriad_storage::{FjallKv, Kv, PartitionKv, Store};

use crate::harness::TestCluster;
use myriad_client::InodeId;

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// Stops every server, runs `damage` on partition `pid`'s store on server `server` (through
/// the storage engine, behind the checksums), and starts them all again.
async fn offline(
    tc: &TestCluster,
    c: &Client,
    (server, pid): (NodeId, PartitionId),
    damage: impl FnOnce(&Store),
) {
    let down = tc.cli(&[
        "cluster",
        "down",
        "--data-dir",
        &tc.dir.path().display().to_string(),
    ]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    {
        let kv: Arc<dyn Kv> = Arc::new(
            FjallKv::open(&tc.dir.path().join(format!("node-{server}/store")))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let store = Store::open(Arc::new(PartitionKv::new(kv, pid.0)), pid.0)
            .unwrap_or_else(|e| panic!("{e}"));
        damage(&store);
    }
    for n in &tc.map.nodes {
        tc.restart(n.id);
    }
    for n in &tc.map.nodes {
        tc.wait_up(c, n.id).await;
    }
}

/// Flips a bit of block `block` of `ino` in partition `pid`'s copy on server `server`.
async fn corrupt_offline(
    tc: &TestCluster,
    c: &Client,
    server: NodeId,
    pid: PartitionId,
    ino: u64,
    block: u64,
) {
    offline(tc, c, (server, pid), |store| {
        assert!(
            store
                .corrupt_block_for_test(InodeId(ino), block)
                .unwrap_or_else(|e| panic!("{e}")),
            "no block {block} of inode {ino} in partition {pid} on server {server}"
        );
        assert!(
            matches!(
                store.block(InodeId(ino), block),
                Err(myriad_storage::StorageError::Checksum { .. })
            ),
            "the flipped bit must fail the checksum"
        );
    })
    .await;
}

/// The servers holding the entries of `dir`: (partition, primary, a backup).
async fn holders(c: &Client, dir: &str) -> (PartitionId, NodeId, NodeId) {
    c.newest_map().await;
    let map = c.map();
    let pid = map.ring().owner_of_dir(dir);
    let replicas = map
        .partition(pid)
        .map(|p| p.replicas.clone())
        .unwrap_or_default();
    assert!(replicas.len() >= 2, "partition {pid}: {replicas:?}");
    (pid, replicas[0], replicas[1])
}

/// `myriad fsck`, which must fail on `damage`: its report (stdout).
fn fsck_fails(tc: &TestCluster, damage: &str) -> String {
    let out = tc.cli(&["fsck"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !out.status.success(),
        "fsck must fail on {damage}:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `myriad fsck --repair`, which must succeed.
fn fsck_repairs(tc: &TestCluster) {
    let fix = tc.cli(&["fsck", "--repair"]);
    assert!(
        fix.status.success(),
        "{}{}",
        String::from_utf8_lossy(&fix.stdout),
        String::from_utf8_lossy(&fix.stderr)
    );
}

fn log_of(tc: &TestCluster, node: NodeId) -> String {
    std::fs::read_to_string(tc.dir.path().join(format!("node-{node}.log"))).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_bit_is_detected_on_read_and_repaired_from_a_replica() {
    let tc = TestCluster::start_with(3, &["--replicas", "3"]);
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    let body = data(200_000); // blocks 0-3 of chunk 0, with its inode
    c.create("/d/f", 0o644, true, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ino = c.stat("/d/f").await.unwrap_or_else(|e| panic!("{e}")).ino;
    let (pid, primary, backup) = holders(&c, "/d").await;

    // 1. The primary's copy of block 1 goes bad: the read still returns the right bytes,
    //    and the server says what it found and fixed.
    corrupt_offline(&tc, &c, primary, pid, ino.0, 1).await;
    let (pid2, primary2, _) = holders(&c, "/d").await;
    assert_eq!(
        (pid2, primary2),
        (pid, primary),
        "same primary after the restart"
    );
    let (_, got) = c.fetch("/d/f").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(got == body, "the read returned damaged data");
    let log = log_of(&tc, primary);
    assert!(
        log.contains("block failed its checksum here"),
        "not reported:\n{log}"
    );
    assert!(
        log.contains("block repaired on every copy"),
        "not repaired:\n{log}"
    );
    // Repaired on disk: the next read needs no repair, and every copy agrees.
    let before = log_of(&tc, primary).matches("block repaired").count();
    assert_eq!(c.fetch("/d/f").await.map(|x| x.1).ok(), Some(body.clone()));
    assert_eq!(
        log_of(&tc, primary).matches("block repaired").count(),
        before
    );
    tc.fsck_until_clean().await;

    // 2. A backup's copy goes bad (reads never touch it): fsck finds it, --repair fixes it.
    corrupt_offline(&tc, &c, backup, pid, ino.0, 2).await;
    let text = fsck_fails(&tc, "a corrupt copy");
    assert!(
        text.contains("corrupt block") && text.contains(&format!("block 2 of inode {ino}")),
        "{text}"
    );
    fsck_repairs(&tc);
    tc.fsck_until_clean().await;
    assert_eq!(c.fetch("/d/f").await.map(|x| x.1).ok(), Some(body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_copy_a_corrupt_block_is_an_error_not_wrong_data() {
    let tc = TestCluster::start(1);
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(10));
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    c.create("/d/f", 0o644, true, &data(100_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ino = c.stat("/d/f").await.unwrap_or_else(|e| panic!("{e}")).ino;
    let pid = c.map().ring().owner_of_dir("/d");
    corrupt_offline(&tc, &c, NodeId(1), pid, ino.0, 0).await;
    let r = c.fetch("/d/f").await;
    assert_eq!(
        r.err(),
        Some(myriad_client::FsError::Corrupt { ino, block: 0 }),
        "a corrupt block with no other copy must be an error"
    );
    // The file can still be removed (its blocks are dropped unread).
    c.unlink("/d/f").await.unwrap_or_else(|e| panic!("{e}"));
    tc.fsck_until_clean().await;
}

/// Flips a bit in the entry record of `dir/name` in partition `pid`'s copy on `server`
/// (behind the record's checksum).
async fn corrupt_entry_offline(
    tc: &TestCluster,
    c: &Client,
    server: NodeId,
    pid: PartitionId,
    (dir, name): (&str, &str),
) {
    offline(tc, c, (server, pid), |store| {
        let key = myriad_storage::entry_key(dir, name);
        assert!(
            store
                .corrupt_record_for_test(myriad_storage::Space::Entries, &key)
                .unwrap_or(false)
        );
        assert!(
            store.entry(dir, name).is_err(),
            "the flipped bit must fail the record's checksum"
        );
    })
    .await;
}

/// Docs/write-path.md part 3: a flipped bit in a metadata record (an entry) is found, not
/// read as another entry. On a backup, fsck reports the damaged record and `fsck --repair`
/// makes every copy intact from one that is; on the primary, the read that meets it repairs
/// it from a backup first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_bit_in_a_metadata_record_is_found_and_repaired_from_a_copy() {
    let tc = TestCluster::start_with(3, &["--replicas", "3"]);
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    let body = data(3000);
    c.create("/d/f", 0o644, true, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (pid, primary, backup) = holders(&c, "/d").await;
    for (server, on_primary) in [(backup, false), (primary, true)] {
        corrupt_entry_offline(&tc, &c, server, pid, ("/d", "f")).await;
        assert_eq!(
            holders(&c, "/d").await.1,
            primary,
            "same primary after the restart"
        );
        if on_primary {
            // The primary reads it: repaired from a backup on the spot, as blocks are.
            let read = c.fetch("/d/f").await;
            assert_eq!(read.map(|x| x.1).ok(), Some(body.clone()));
            assert!(
                log_of(&tc, primary).contains("record failed its checksum here"),
                "not reported"
            );
            assert!(log_of(&tc, primary).contains("record repaired on every copy"));
            tc.fsck_until_clean().await;
            continue;
        }
        // A backup's damaged copy is never read: fsck finds it.
        assert_eq!(c.fetch("/d/f").await.map(|x| x.1).ok(), Some(body.clone()));
        let text = fsck_fails(&tc, "a damaged record");
        assert!(
            text.contains("corrupt record") && text.contains(&format!("on server {server}")),
            "{text}"
        );
        fsck_repairs(&tc);
        tc.fsck_until_clean().await;
        assert_eq!(c.fetch("/d/f").await.map(|x| x.1).ok(), Some(body.clone()));
        assert!(log_of(&tc, primary).contains("record repaired on every copy"));
    }
}

/// Anti-entropy (docs/write-path.md, part 3): a backup damaged (a flipped bit in a block)
/// and diverged (an entry lost) outside the write path is made equal to its primary in the
/// background: no read meets the damage and nobody runs `fsck --repair`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_entropy_repairs_a_damaged_and_diverged_backup_by_itself() {
    let tc = TestCluster::start_with(3, &["--replicas", "3", "--anti-entropy-secs", "1"]);
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    let body = data(200_000);
    c.create("/d/f", 0o644, true, &body)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.create("/d/g", 0o644, true, b"small")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ino = c.stat("/d/f").await.unwrap_or_else(|e| panic!("{e}")).ino;
    let (pid, primary, backup) = holders(&c, "/d").await;
    offline(&tc, &c, (backup, pid), |store| {
        assert!(
            store
                .corrupt_block_for_test(ino, 2)
                .unwrap_or_else(|e| panic!("{e}")),
            "no block 2 of /d/f on the backup"
        );
        let mut b = myriad_storage::Batch::new();
        b.delete(
            myriad_storage::Space::Entries,
            myriad_storage::entry_key("/d", "g"),
        );
        store.commit(b).unwrap_or_else(|e| panic!("{e}"));
    })
    .await;
    // fsck (read-only) sees the backup differ at first, then clean once a round ran.
    let mut repaired = 0;
    for _ in 0..60 {
        let out = tc.cli(&["fsck"]);
        repaired = c
            .all_counters()
            .await
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .map(|s| {
                s.server_requests
                    .iter()
                    .chain(&s.client_requests)
                    .filter(|o| o.op == "anti_entropy_keys_repaired")
                    .map(|o| o.count)
                    .sum::<u64>()
            })
            .sum();
        if out.status.success() && repaired >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        repaired >= 2,
        "anti-entropy repaired {repaired} keys (the block and the entry)"
    );
    tc.fsck_until_clean().await;
    let log = log_of(&tc, primary);
    assert!(
        log.contains("anti-entropy repaired copies"),
        "the primary did not say it repaired copies:\n{log}"
    );
    // The backup's copy is whole again: it serves correctly once it leads.
    assert_eq!(c.fetch("/d/f").await.map(|x| x.1).ok(), Some(body));
    assert_eq!(
        c.fetch("/d/g").await.map(|x| x.1).ok(),
        Some(b"small".to_vec())
    );
}
