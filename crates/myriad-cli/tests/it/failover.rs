//! Failover (docs/replication.md "Failures"): 5 servers, 3 copies of every partition,
//! several writers creating files while servers are killed with SIGKILL. Every file whose
//! create was acknowledged must be there afterwards with its exact contents, writes must go
//! on within seconds of each kill, and servers that come back rejoin as backups and catch
//! up until fsck finds every copy equal.

use myriad_client::NodeId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use myriad_client::{Client, FsError};

use crate::harness::TestCluster;

/// What the writers did: acknowledged files (path -> contents) and when each was acked.
#[derive(Default)]
struct Record {
    acked: BTreeMap<String, Vec<u8>>,
    times: Vec<Instant>,
    failed: Vec<String>,
    /// Retries that did not answer their first outcome (docs/write-path.md, "Exactly
    /// once"): a create of a fresh name answered `AlreadyExists`, or an unlink of a file
    /// made and not removed since answered `NotFound`.
    not_once: Vec<String>,
}

fn content(w: usize, i: usize) -> Vec<u8> {
    let len = [200, 3_000, 40_000, 90_000][i % 4];
    let seed = (w * 7919 + i * 104_729) as u64;
    (0..len)
        .map(|k| (seed.wrapping_mul(k as u64 + 1) >> 3) as u8)
        .collect()
}

/// Creates files in `/w{w}` until `stop`, and removes every fourth one again; a failed
/// create or removal (the client gave up) is recorded as such, and the writer goes on with
/// the next name. A retry across a failover answers its first outcome, so a create of a
/// fresh name never finds it taken, nor a removal its file gone.
async fn writer(c: Arc<Client>, w: usize, stop: Arc<AtomicBool>, rec: Arc<Mutex<Record>>) {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let path = format!("/w{w}/f{i}");
        let data = content(w, i);
        let result = c.create(&path, 0o644, true, &data).await;
        let made = result.is_ok();
        {
            let mut r = rec.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(_) => {
                    r.acked.insert(path.clone(), data);
                    r.times.push(Instant::now());
                }
                Err(FsError::AlreadyExists) => {
                    r.not_once.push(format!("create {path}: AlreadyExists"));
                }
                Err(e) => r.failed.push(format!("{path}: {e}")),
            }
        }
        if made && i % 4 == 3 {
            let result = c.unlink(&path).await;
            let mut r = rec.lock().unwrap_or_else(|p| p.into_inner());
            // Removed, or in doubt: not checked afterwards either way.
            r.acked.remove(&path);
            match result {
                Ok(()) => {}
                Err(FsError::NotFound) => r.not_once.push(format!("unlink {path}: NotFound")),
                Err(e) => r.failed.push(format!("unlink {path}: {e}")),
            }
        }
        i += 1;
    }
}

async fn verify(c: &Client, files: &BTreeMap<String, Vec<u8>>) {
    for (path, want) in files {
        let got = c
            .read_all(path)
            .await
            .unwrap_or_else(|e| panic!("acknowledged file {path} lost: {e}"));
        assert!(got == *want, "acknowledged file {path}: contents differ");
    }
}

/// Kills `server`, waits `wait`, and checks that writes were acknowledged in the last 3 s
/// of it (after the failover, not just before the kill took effect).
async fn kill_and_see_writes_go_on(
    tc: &TestCluster,
    rec: &Mutex<Record>,
    server: NodeId,
    wait: Duration,
) {
    let t = Instant::now();
    tc.kill9(server);
    tokio::time::sleep(wait).await;
    assert!(
        acked_after(rec, t + wait - Duration::from_secs(3)) > 0,
        "writes did not go on after server {server} was killed"
    );
}

/// Acks recorded after `t`.
fn acked_after(rec: &Mutex<Record>, t: Instant) -> usize {
    let r = rec.lock().unwrap_or_else(|p| p.into_inner());
    r.times.iter().filter(|&&x| x > t).count()
}

/// The first ack after `t`, as a delay from `t`.
fn first_ack_after(rec: &Mutex<Record>, t: Instant) -> Option<Duration> {
    let r = rec.lock().unwrap_or_else(|p| p.into_inner());
    r.times.iter().filter(|&&x| x > t).min().map(|&x| x - t)
}

/// Two of five servers killed one after the other: with `--min-copies 1`, partitions that
/// had copies on both go on with their third one (the trade that setting makes; by default
/// they wait for a copy: `two_copies_down_refuse_changes_until_one_returns`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_two_servers_during_writes_loses_no_acknowledged_file() {
    let tc = TestCluster::start_with(
        5,
        &[
            "--partitions-per-node",
            "4",
            "--replicas",
            "3",
            "--min-copies",
            "1",
        ],
    );
    let Writers {
        rec, stop, jobs, ..
    } = start_writers(&tc, 4).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = acked_after(&rec, Instant::now() - Duration::from_secs(2));
    assert!(before > 0, "no writes before the kill");

    // 1. kill -9 the primary of the root's partition: every path lookup needs a failover.
    let root = tc.map.ring().owner_of_dir("/");
    let first = tc.map.primary_of(root).unwrap_or(NodeId(1));
    let t1 = Instant::now();
    tc.kill9(first);
    tokio::time::sleep(Duration::from_secs(12)).await;
    let resumed = first_ack_after(&rec, t1);
    assert!(
        acked_after(&rec, t1 + Duration::from_secs(9)) > 0,
        "writes did not go on after server {first} was killed (first ack after the kill: {resumed:?})"
    );

    // 2. A second server, while the first is still down: partitions that had copies on
    // both keep their third one.
    let second = (1..=5u32)
        .map(NodeId)
        .find(|&s| s != first)
        .unwrap_or(NodeId(2));
    kill_and_see_writes_go_on(&tc, &rec, second, Duration::from_secs(12)).await;
    stop_writers(stop, jobs).await;
    let (acked, failed, not_once) = {
        let r = rec.lock().unwrap_or_else(|p| p.into_inner());
        (r.acked.clone(), r.failed.clone(), r.not_once.clone())
    };
    eprintln!(
        "failover: {} files acknowledged, {} failed, first write {:?} after the first kill",
        acked.len(),
        failed.len(),
        resumed
    );
    assert!(
        failed.len() * 10 <= acked.len(),
        "too many failed writes: {failed:?}"
    );
    assert!(
        not_once.is_empty(),
        "retries that did not answer their first outcome: {not_once:?}"
    );
    let check = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    verify(&check, &acked).await;

    // 3. Both come back: they rejoin as backups, catch up, and every copy is equal again.
    tc.restart(first);
    tc.restart(second);
    tc.wait_up(&check, first).await;
    tc.wait_up(&check, second).await;
    tc.fsck_until_clean().await;
    verify(&check, &acked).await;
    let map = check.get_map(first).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        map.is_up(first) && map.is_up(second),
        "both rejoined: {map:?}"
    );
    assert!(map.epoch >= 5, "two downs and two ups: epoch {}", map.epoch);
}

/// A server alone (its peers gone) cannot serve: it holds no lease, so it cannot go on
/// writing what a majority may already have failed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_majority_refuses_requests() {
    let tc = TestCluster::start_with(3, &["--partitions-per-node", "2", "--replicas", "3"]);
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(3));
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    tc.kill9(NodeId(2));
    tc.kill9(NodeId(3));
    // Within the lease period, server 1 stops serving.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let Err(err) = c.create("/d/x", 0o644, true, b"x").await else {
        panic!("a server cut off from the majority must refuse writes");
    };
    assert!(
        matches!(
            err,
            FsError::Unavailable(_) | FsError::TimedOut(_) | FsError::Busy
        ),
        "{err}"
    );
    assert!(c.stat("/d").await.is_err(), "nor serve reads");
    // The majority returns: service resumes, nothing lost.
    tc.restart(NodeId(2));
    tc.restart(NodeId(3));
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    c.create("/d/y", 0o644, true, b"y")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.stat("/d").await.is_ok());
    tc.fsck_until_clean().await;
}

/// Writers at work: what they did, and how to stop them.
struct Writers {
    admin: Client,
    rec: Arc<Mutex<Record>>,
    stop: Arc<AtomicBool>,
    jobs: Vec<tokio::task::JoinHandle<()>>,
}

/// Makes `/w0..n` and starts `n` writers (each with its own client: own connections, own
/// view of the map) creating files in them until stopped.
async fn start_writers(tc: &TestCluster, n: usize) -> Writers {
    let admin = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    for w in 0..n {
        admin
            .mkdir(&format!("/w{w}"), 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let rec = Arc::new(Mutex::new(Record::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let jobs = (0..n)
        .map(|w| {
            let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(30)));
            tokio::spawn(writer(c, w, stop.clone(), rec.clone()))
        })
        .collect();
    Writers {
        admin,
        rec,
        stop,
        jobs,
    }
}

async fn stop_writers(stop: Arc<AtomicBool>, jobs: Vec<tokio::task::JoinHandle<()>>) {
    stop.store(true, Ordering::Relaxed);
    for j in jobs {
        j.await.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Polls the newest map until `done` holds (panics after `within`).
async fn wait_map(
    c: &Client,
    within: Duration,
    what: &str,
    done: impl Fn(&myriad_client::ClusterMap) -> bool,
) -> myriad_client::ClusterMap {
    let start = Instant::now();
    loop {
        let m = c.newest_map().await;
        if done(&m) {
            return m;
        }
        assert!(
            start.elapsed() < within,
            "{what}: not after {within:?}: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Copies per server in `map` (servers holding none are absent).
fn copies_per_server(map: &myriad_client::ClusterMap) -> BTreeMap<NodeId, usize> {
    let mut out = BTreeMap::new();
    for p in &map.partitions {
        for r in &p.replicas {
            *out.entry(*r).or_default() += 1;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_a_dead_server_are_remade_and_a_second_death_is_survived() {
    let tc = TestCluster::start_with(
        5,
        &[
            "--partitions-per-node",
            "4",
            "--replicas",
            "3",
            "--down-grace-secs",
            "2",
        ],
    );
    let Writers {
        admin,
        rec,
        stop,
        jobs,
    } = start_writers(&tc, 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first = NodeId(3);
    tc.kill9(first);
    // Marked down after 5 s, replaced after 2 s more; every partition back at 3 copies on
    // servers that are up.
    let map = wait_map(&admin, Duration::from_secs(60), "re-replication", |m| {
        !m.is_up(first)
            && m.moves().is_empty()
            && m.partitions
                .iter()
                .all(|p| p.replicas.len() == 3 && p.replicas.iter().all(|r| m.is_up(*r)))
    })
    .await;
    assert!(!copies_per_server(&map).contains_key(&first));
    tc.fsck_until_clean().await;

    // A second server dies after re-replication: still every partition has copies left.
    kill_and_see_writes_go_on(&tc, &rec, NodeId(1), Duration::from_secs(10)).await;
    stop_writers(stop, jobs).await;
    let (acked, not_once) = {
        let r = rec.lock().unwrap_or_else(|p| p.into_inner());
        (r.acked.clone(), r.not_once.clone())
    };
    eprintln!("re-replication: {} files acknowledged", acked.len());
    assert!(
        not_once.is_empty(),
        "retries without their first outcome: {not_once:?}"
    );
    verify(&admin, &acked).await;
    // And its copies are remade too.
    wait_map(
        &admin,
        Duration::from_secs(60),
        "second re-replication",
        |m| {
            m.moves().is_empty()
                && m.partitions
                    .iter()
                    .all(|p| p.replicas.len() == 3 && p.replicas.iter().all(|r| m.is_up(*r)))
        },
    )
    .await;
    tc.fsck_until_clean().await;
    verify(&admin, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_node_and_remove_node_under_load_end_balanced_with_three_copies() {
    let tc = TestCluster::start_with(4, &["--partitions-per-node", "4", "--replicas", "3"]);
    let Writers {
        admin,
        rec,
        stop,
        jobs,
    } = start_writers(&tc, 3).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let data_dir = tc.dir.path().to_string_lossy().into_owned();
    let out = tc.cli(&["cluster", "add-node", "--data-dir", &data_dir, "--wait"]);
    assert!(
        out.status.success(),
        "add-node: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let map = admin.newest_map().await;
    let spread = copies_per_server(&map);
    // 16 partitions x 3 copies over 5 servers: 9 or 10 each.
    assert_eq!(spread.len(), 5, "{spread:?}");
    assert!(
        spread.values().all(|&n| (9..=10).contains(&n)),
        "{spread:?}"
    );
    let t = Instant::now();
    let out = tc.cli(&[
        "cluster",
        "remove-node",
        "--data-dir",
        &data_dir,
        "--node",
        "2",
    ]);
    assert!(
        out.status.success(),
        "remove-node: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(acked_after(&rec, t) > 0, "writes went on during the moves");
    stop_writers(stop, jobs).await;
    let (acked, failed, not_once) = {
        let r = rec.lock().unwrap_or_else(|p| p.into_inner());
        (r.acked.clone(), r.failed.clone(), r.not_once.clone())
    };
    eprintln!(
        "add/remove: {} files acknowledged, {} failed",
        acked.len(),
        failed.len()
    );
    // A write whose answer was lost when its partition changed hands mid-write is retried
    // on the new primary, which has its outcome (copied with the partition): it answers
    // that, and nothing fails.
    assert!(
        failed.is_empty() && not_once.is_empty(),
        "writes failed while copies moved: {failed:?} {not_once:?}"
    );
    let map = admin.newest_map().await;
    assert!(map.node(NodeId(2)).is_none(), "server 2 left the map");
    let spread = copies_per_server(&map);
    // 48 copies over 4 servers.
    assert!(spread.values().all(|&n| n == 12), "{spread:?}");
    verify(&admin, &acked).await;
    tc.fsck_until_clean().await;
    let out = tc.cli(&["fsck"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("16 partitions (48 copies checked)"), "{text}");
}

/// Docs/write-path.md part 3: a backup that was away while 10,000 files were written gets
/// them from its primaries' logs of recent batches, not by whole copies of its partitions,
/// and every copy ends equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_backup_catches_up_from_the_log_without_a_whole_copy() {
    use futures::StreamExt;

    let tc = TestCluster::start_with(5, &["--partitions-per-node", "4", "--replicas", "3"]);
    let c = Arc::new(tc.client_with(tc.map.clone(), Duration::from_secs(30)));
    let ring = tc.map.ring();
    // A server that is not the primary of the root's partition, and a directory whose
    // partition it backs without leading it.
    let root = tc.map.primary_of(ring.owner_of_dir("/"));
    let away = (1..=5u32)
        .rev()
        .map(NodeId)
        .find(|&s| Some(s) != root)
        .unwrap_or(NodeId(5));
    let dir = (0..10_000)
        .map(|i| format!("/logged{i}"))
        .find(|d| {
            tc.map
                .partition(ring.owner_of_dir(d))
                .is_some_and(|p| p.replicas[0] != away && p.replicas.contains(&away))
        })
        .unwrap_or_else(|| panic!("no directory backed by {away}"));
    c.mkdir(&dir, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    tc.kill9(away);
    wait_map(&c, Duration::from_secs(20), "the server marked down", |m| {
        !m.is_up(away)
    })
    .await;
    const FILES: usize = 10_000;
    let written = futures::stream::iter(0..FILES)
        .map(|i| {
            let c = c.clone();
            let path = format!("{dir}/f{i}");
            async move { c.create(&path, 0o644, true, path.as_bytes()).await }
        })
        .buffer_unordered(32)
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(
        written, FILES,
        "every create succeeded while the server was away"
    );
    tc.restart(away);
    tc.wait_up(&c, away).await;
    wait_map(&c, Duration::from_secs(20), "the server marked up", |m| {
        m.is_up(away)
    })
    .await;
    tc.fsck_until_clean().await;
    let counters = c
        .counters(away)
        .await
        .unwrap_or_else(|e| panic!("counters of {away}: {e}"));
    let resets = counters
        .server_requests
        .iter()
        .filter(|o| o.op == "replica_reset")
        .map(|o| o.count)
        .sum::<u64>();
    assert_eq!(
        resets, 0,
        "a partition was copied whole to the returning server"
    );
    // The creates came as batches of the partition's log (a round's batch holds every
    // create the applier found queued, so fewer batches than creates: 32 in flight);
    // fsck above found every copy equal, and no copy was made whole: the log carried
    // them all.
    assert!(
        counters.batches_received >= (FILES / 512) as u64,
        "the returning server received {} batches",
        counters.batches_received
    );
    let primary = tc
        .map
        .primary_of(ring.owner_of_dir(&dir))
        .unwrap_or(NodeId(1));
    let log = std::fs::read_to_string(tc.dir.path().join(format!("node-{primary}.log")))
        .unwrap_or_default();
    assert!(
        log.contains("catching it up from the log"),
        "server {primary} did not catch server {away} up from its log"
    );
    for i in [0, FILES / 2, FILES - 1] {
        let path = format!("{dir}/f{i}");
        let got = c.read_all(&path).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, path.as_bytes());
    }
}

/// Issue 49 (docs/fuse.md "Keeping answered changes until they are durable"): changes
/// answered once applied are kept by the client until a barrier vouches for them. After a
/// kill -9 of the primary that answered them and a failover, the client sends again what
/// the new primary lacks, before anything else of that partition: every one reads back,
/// the sync succeeds, and nothing is held after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_answered_before_a_kill9_of_their_primary_survive_it() {
    let tc = TestCluster::start_with(4, &["--replicas", "3"]);
    let mut cfg =
        myriad_client::ClientConfig::new(tc.map.clone(), myriad_client::Caller::root(), tc.keys());
    cfg.request_timeout = Duration::from_secs(20);
    cfg.durable_changes = false;
    let c = Client::new(cfg).unwrap_or_else(|e| panic!("{e}"));
    c.mkdir("/s", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    for i in 0..20 {
        c.create_with(&format!("/s/a{i}"), 0o644, true, b"synced", false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(c.has_unsynced_changes(), "creates answered once applied");
    c.sync_changes()
        .await
        .unwrap_or_else(|e| panic!("sync: {e}"));
    assert!(!c.has_unsynced_changes());
    for i in 0..200 {
        c.create_with(&format!("/s/b{i}"), 0o644, true, b"later", false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let victim = crate::harness::server_of(&c.map(), c.owner_of_entry("/s/b0"));
    tc.kill9(victim);
    for i in [0, 199] {
        let (_, data) = c
            .fetch(&format!("/s/b{i}"))
            .await
            .unwrap_or_else(|e| panic!("/s/b{i} after the failover: {e}"));
        assert_eq!(data, b"later", "/s/b{i}");
    }
    c.sync_changes()
        .await
        .unwrap_or_else(|e| panic!("a sync after the primary that answered died: {e}"));
    assert!(!c.has_unsynced_changes());
    for (name, n, want) in [("a", 20, &b"synced"[..]), ("b", 200, &b"later"[..])] {
        for i in 0..n {
            let (_, data) = c
                .fetch(&format!("/s/{name}{i}"))
                .await
                .unwrap_or_else(|e| panic!("/s/{name}{i}: {e}"));
            assert_eq!(data, want, "/s/{name}{i}");
        }
    }
}

/// The longest time between two acknowledged writes after `t` (and from `t` to the first).
fn longest_gap_after(rec: &Mutex<Record>, t: Instant, until: Instant) -> Duration {
    let r = rec.lock().unwrap_or_else(|p| p.into_inner());
    let mut times: Vec<Instant> = r.times.iter().copied().filter(|&x| x > t).collect();
    times.sort();
    let mut last = t;
    let mut longest = Duration::ZERO;
    for x in times.into_iter().chain(std::iter::once(until)) {
        longest = longest.max(x.saturating_duration_since(last));
        last = x;
    }
    longest
}

/// Issue 48: a rolling restart under load. Each server in turn gets SIGTERM (a planned
/// stop: it stops serving, then marks itself down through the group, so its partitions'
/// copies take over without the failure detector's wait), is started again, and rejoins
/// as a backup before the next goes. Not one write fails, none is lost, and no write
/// waits as long as a crash's failover does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_fails_and_loses_no_write() {
    let tc = TestCluster::start_with(3, &["--partitions-per-node", "2", "--replicas", "3"]);
    let Writers {
        admin,
        rec,
        stop,
        jobs,
    } = start_writers(&tc, 3).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut gaps = Vec::new();
    for id in [1u32, 2, 3].map(NodeId) {
        let pid = tc.pid(id);
        let t = Instant::now();
        // SAFETY: signalling a server process this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        assert!(
            crate::harness::wait_gone(pid, Duration::from_secs(10)),
            "server {id} still runs 10 s after SIGTERM"
        );
        let stopped = t.elapsed();
        let log = std::fs::read_to_string(tc.dir.path().join(format!("node-{id}.log")))
            .unwrap_or_default();
        assert!(
            log.contains("handed this server's partitions to their copies"),
            "server {id} did not hand over: {}",
            log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
        );
        // Started again at once, as `systemctl restart` does.
        tokio::time::sleep(Duration::from_millis(10)).await;
        tc.restart(id);
        tc.wait_up(&admin, id).await;
        wait_map(&admin, Duration::from_secs(60), "caught up", |m| {
            m.is_up(id) && m.partitions.iter().all(|p| !p.is_behind(id))
        })
        .await;
        let gap = longest_gap_after(&rec, t, Instant::now());
        eprintln!("server {id}: stopped in {stopped:?}, longest wait for a write {gap:?}");
        gaps.push(gap);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_writers(stop, jobs).await;
    let (acked, failed, not_once) = {
        let r = rec.lock().unwrap_or_else(|p| p.into_inner());
        (r.acked.clone(), r.failed.clone(), r.not_once.clone())
    };
    eprintln!(
        "rolling restart: {} files acknowledged, {} failed, longest waits {gaps:?}",
        acked.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "failed writes: {failed:?}");
    assert!(not_once.is_empty(), "not exactly once: {not_once:?}");
    // A crash costs DOWN_AFTER (2.3 s) of silence before the copies take over.
    for (i, g) in gaps.iter().enumerate() {
        assert!(
            *g < Duration::from_millis(2300),
            "server {}: a write waited {g:?}, as long as a crash's failover",
            i + 1
        );
    }
    verify(&admin, &acked).await;
    tc.fsck_until_clean().await;
}

/// Issue 49, `--min-copies` (default: 2 of 3 copies): with two of a partition's three
/// copies killed, a change to it is not acknowledged on the last disk alone. It is refused
/// with an error that says why (nothing applied), reads go on, and once one copy is back
/// the change is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_copies_down_refuse_changes_until_one_returns() {
    // Five servers: with two killed the Raft group keeps its majority and marks them down.
    let tc = TestCluster::start_with(5, &["--replicas", "3", "--metrics"]);
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(30));
    c.create("/kept", 0o644, true, b"before")
        .await
        .unwrap_or_else(|e| panic!("create with every copy up: {e}"));
    // The root's partition loses both copies other than its primary's.
    let root = tc.map.ring().owner_of_dir("/");
    let copies = tc
        .map
        .partition(root)
        .map(|p| p.replicas.clone())
        .unwrap_or_default();
    assert_eq!(copies.len(), 3, "{copies:?}");
    let others = copies[1..].to_vec();
    for &o in &others {
        tc.kill9(o);
    }
    // Marked down within seconds (a change sent before that is applied and waits for the
    // copies' acks: not acknowledged, its outcome unknown to its sender).
    let mut marked = false;
    for _ in 0..200 {
        let map = c.newest_map().await;
        if others.iter().all(|&o| !map.is_up(o)) {
            marked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(marked, "servers {others:?} were never marked down");
    let short = tc.client_with(tc.map.clone(), Duration::from_secs(8));
    let lone = short.create("/lone", 0o644, true, b"x").await;
    assert!(
        matches!(&lone, Err(FsError::Unavailable(m)) if m.contains("--min-copies")),
        "a change with one copy of three up: {lone:?}"
    );
    let h = c
        .open("/kept")
        .await
        .unwrap_or_else(|e| panic!("open with one copy up: {e}"));
    let back = c
        .read(&h, 0, 64)
        .await
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(back, b"before", "reads go on with one copy up");
    assert!(
        matches!(c.stat("/lone").await, Err(FsError::NotFound)),
        "a refused change was applied"
    );
    // What an operator sees: the primary counts a partition refusing changes, and the
    // cluster-map leader the two servers it marked down.
    let scrape = |id: NodeId| {
        let addr = std::fs::read_to_string(tc.dir.path().join(format!("node-{id}/metrics.addr")))
            .unwrap_or_else(|e| panic!("server {id}'s metrics address: {e}"));
        crate::mount_metrics::scrape(addr.trim())
    };
    let value = crate::mount_metrics::value;
    let primary = copies[0];
    let refusing = value(&scrape(primary), "myriad_partitions_refusing_changes ");
    assert!(
        refusing >= 1,
        "server {primary}: {refusing} partitions refusing changes"
    );
    let marked: u64 = (1..=5u32)
        .map(NodeId)
        .filter(|id| !others.contains(id))
        .map(|id| value(&scrape(id), "myriad_servers_marked_down_total "))
        .sum();
    assert!(marked >= 2, "{marked} servers counted marked down");
    tc.restart(others[0]);
    tc.wait_up(&c, others[0]).await;
    c.create("/lone", 0o644, true, b"x")
        .await
        .unwrap_or_else(|e| panic!("create with a copy back: {e}"));
}
