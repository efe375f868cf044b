//! `myriad bench failover`: writers create small files on a 5-server cluster with 3 copies;
//! one server is killed with SIGKILL. Reported: the time from the kill to the first write
//! acknowledged in a partition the dead server led (failover), to every partition having 3
//! copies on live servers again (re-replication), and the write throughput while that
//! happens and after, relative to before the kill (measured in the same run).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use myriad_client::{Client, ClientConfig, ClusterMap, NodeId, PartitionId};
use serde::Serialize;

use crate::cluster::LocalCluster;

#[derive(Args, Clone)]
pub struct FailoverArgs {
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Writers, each creating files one after another with its own client.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Bytes per file.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Seconds of writing before the kill (the baseline).
    #[arg(long, default_value_t = 10)]
    before_secs: u64,
    /// Seconds a dead server stays down before its copies are remade (`--down-grace-secs`
    /// of the servers; short here so the run stays short).
    #[arg(long, default_value_t = 5)]
    grace_secs: u64,
    /// Seconds of writing after re-replication finished.
    #[arg(long, default_value_t = 5)]
    after_secs: u64,
    /// Give up if re-replication takes longer than this.
    #[arg(long, default_value_t = 300)]
    limit_secs: u64,
    /// Which server to kill.
    #[arg(long, value_enum, default_value_t = Victim::Root)]
    kill: Victim,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

/// The server `bench failover` kills.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Victim {
    /// The primary of the root directory's partition (every path lookup needs it).
    Root,
    /// The leader of the cluster-map Raft group, which grants every server its serving
    /// lease: the others must elect a new one before their leases run out.
    Leader,
}

#[derive(Serialize)]
struct FailoverResult {
    victim: Victim,
    nodes: usize,
    writers: usize,
    file_bytes: usize,
    killed: NodeId,
    partitions_led_by_killed: usize,
    writes_per_sec_before: f64,
    first_write_anywhere_after_kill_secs: Option<f64>,
    first_write_to_failed_over_partition_secs: Option<f64>,
    rereplicated_after_secs: f64,
    /// From the kill to every copy remade: the failover's stall included.
    writes_per_sec_during_recovery: f64,
    during_vs_before: f64,
    /// From the first copy move to every copy remade (re-replication proper).
    writes_per_sec_while_copies_move: Option<f64>,
    moving_vs_before: Option<f64>,
    writes_per_sec_after: f64,
    after_vs_before: f64,
    failed_writes: usize,
}

/// Every acknowledged write: when it was sent, when acknowledged, and whether its partition
/// was led by the killed server.
#[derive(Default)]
struct Log {
    acks: Vec<(Instant, Instant, bool)>,
    failed: usize,
}

impl Log {
    fn rate(&self, from: Instant, to: Instant) -> f64 {
        let n = self
            .acks
            .iter()
            .filter(|(_, t, _)| *t >= from && *t < to)
            .count();
        n as f64 / (to - from).as_secs_f64().max(1e-9)
    }
}

pub async fn run(args: FailoverArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("myriad-bench-").tempdir()?;
    eprintln!(
        "bench failover: {}-node local cluster, 3 copies, {} writers of {} B files; kill -9 after {} s, grace {} s",
        args.nodes, args.writers, args.size, args.before_secs, args.grace_secs
    );
    let cluster = LocalCluster::up(
        tmp.path(),
        args.nodes,
        &crate::cluster::NodeOptions::for_bench(vec![format!(
            "--down-grace-secs={}",
            args.grace_secs
        )]),
    )
    .await?;
    let result = body(&cluster, &args).await;
    cluster.down()?;
    result
}

fn client(cluster: &LocalCluster, map: &ClusterMap) -> anyhow::Result<Client> {
    let mut cfg = ClientConfig::new(
        map.clone(),
        crate::cluster::bench_identity(),
        cluster.keys.clone(),
    );
    cfg.request_timeout = Duration::from_secs(60);
    Ok(Client::new(cfg)?)
}

/// True once every partition has 3 copies (or as many as servers are up), all up, and no
/// copy lives on `dead`.
fn whole(map: &ClusterMap, dead: NodeId) -> bool {
    let up = map.nodes.iter().filter(|n| map.is_up(n.id)).count();
    let want = (map.replication as usize).min(up);
    !map.is_up(dead)
        && map.moves().is_empty()
        && map.partitions.iter().all(|p| {
            p.replicas.len() == want
                && !p.replicas.contains(&dead)
                && p.replicas.iter().all(|r| map.is_up(*r))
        })
}

/// What keeps `map` from being `whole`, for the error when it never gets there.
fn not_whole(map: &ClusterMap, dead: NodeId) -> String {
    let up = map.nodes.iter().filter(|n| map.is_up(n.id)).count();
    let want = (map.replication as usize).min(up);
    let mut why = Vec::new();
    if map.is_up(dead) {
        why.push(format!("server {dead} still up"));
    }
    for (pid, m) in map.moves() {
        why.push(format!("partition {pid} moving {} -> {}", m.from, m.to));
    }
    for p in &map.partitions {
        let down: Vec<_> = p.replicas.iter().filter(|r| !map.is_up(**r)).collect();
        if p.replicas.len() != want || !down.is_empty() {
            why.push(format!(
                "partition {} copies {:?} (want {want}, down {down:?})",
                p.id, p.replicas
            ));
        }
    }
    why.join("; ")
}

/// What one run measured, as the table a person reads.
fn print_result(r: &FailoverResult, grace_secs: u64) {
    let secs = |v: Option<f64>| v.map_or("never".to_string(), |s| format!("{s:.2} s"));
    println!(
        "bench failover ({} servers, 3 copies, {} writers, {} B files)",
        r.nodes, r.writers, r.file_bytes
    );
    println!(
        "  killed server {} ({:?}; led {} partitions)",
        r.killed, r.victim, r.partitions_led_by_killed
    );
    println!(
        "  writes/s before the kill            {:>10.0}",
        r.writes_per_sec_before
    );
    println!(
        "  first write after the kill          {:>10}",
        secs(r.first_write_anywhere_after_kill_secs)
    );
    println!(
        "  first write to a failed-over part.  {:>10}",
        secs(r.first_write_to_failed_over_partition_secs)
    );
    println!(
        "  all copies remade after             {:>8.2} s  (grace {} s)",
        r.rereplicated_after_secs, grace_secs
    );
    println!(
        "  writes/s kill to copies remade      {:>10.0}  ({:.2}x before)",
        r.writes_per_sec_during_recovery, r.during_vs_before
    );
    match (r.writes_per_sec_while_copies_move, r.moving_vs_before) {
        (Some(w), Some(x)) => {
            println!("  writes/s while copies move          {w:>10.0}  ({x:.2}x before)")
        }
        _ => println!("  writes/s while copies move                no move seen"),
    }
    println!(
        "  writes/s after                      {:>10.0}  ({:.2}x before)",
        r.writes_per_sec_after, r.after_vs_before
    );
    println!(
        "  failed writes                       {:>10}",
        r.failed_writes
    );
}

async fn body(cluster: &LocalCluster, args: &FailoverArgs) -> anyhow::Result<()> {
    let map = cluster.map.clone();
    let admin = client(cluster, &map)?;
    let ring = map.ring();
    let victim = match args.kill {
        Victim::Root => map.primary_of(ring.owner_of_dir("/")).unwrap_or(NodeId(1)),
        Victim::Leader => admin
            .all_counters()
            .await
            .into_iter()
            .find_map(|(_, c)| c.ok().map(|c| c.raft_leader))
            .ok_or_else(|| anyhow::anyhow!("no server answered with its Raft leader"))?,
    };
    let led: Vec<PartitionId> = map.primaries_of(victim);
    for w in 0..args.writers {
        admin.mkdir(&format!("/fo{w}"), 0o755).await?;
    }
    let log = Arc::new(Mutex::new(Log::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut jobs = Vec::new();
    for w in 0..args.writers {
        let c = client(cluster, &map)?;
        let (log, stop, led, size) = (log.clone(), stop.clone(), led.clone(), args.size);
        let ring = ring.clone();
        jobs.push(tokio::spawn(async move {
            let data = vec![b'x'; size];
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = format!("/fo{w}/f{i}");
                let on_victim = led.contains(&ring.owner_of_entry(&path));
                let sent = Instant::now();
                let ok = c.create(&path, 0o644, true, &data).await.is_ok();
                let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                if ok {
                    l.acks.push((sent, Instant::now(), on_victim));
                } else {
                    l.failed += 1;
                }
                i += 1;
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.before_secs)).await;
    let kill = Instant::now();
    cluster.kill9(victim)?;
    eprintln!("killed server {victim} (it led {} partitions)", led.len());
    let limit = kill + Duration::from_secs(args.limit_secs);
    // When the first copy move began (the dead server's grace over): re-replication proper,
    // after the failover's stall.
    let mut moving_since: Option<Instant> = None;
    loop {
        let newest = admin.newest_map().await;
        if moving_since.is_none() && !newest.moves().is_empty() {
            moving_since = Some(Instant::now());
        }
        if whole(&newest, victim) {
            break;
        }
        if Instant::now() > limit {
            stop.store(true, Ordering::Relaxed);
            anyhow::bail!(
                "copies not remade within {} s; map epoch {}: {}",
                args.limit_secs,
                newest.epoch,
                not_whole(&newest, victim)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let healed = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.after_secs)).await;
    let end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    for j in jobs {
        let _ = j.await;
    }
    let l = log.lock().unwrap_or_else(|p| p.into_inner());
    let before = l.rate(start + Duration::from_secs(1), kill);
    let during = l.rate(kill, healed);
    let moving = moving_since.map(|m| l.rate(m, healed));
    let after = l.rate(healed, end);
    // Writes sent after the kill: one the dead server acknowledged just before it died may
    // be noted after the kill instant.
    let first = |only_victim: bool| {
        l.acks
            .iter()
            .filter(|(sent, _, v)| *sent > kill && (!only_victim || *v))
            .map(|(_, t, _)| (*t - kill).as_secs_f64())
            .reduce(f64::min)
    };
    let r = FailoverResult {
        victim: args.kill,
        nodes: args.nodes,
        writers: args.writers,
        file_bytes: args.size,
        killed: victim,
        partitions_led_by_killed: led.len(),
        writes_per_sec_before: before,
        first_write_anywhere_after_kill_secs: first(false),
        first_write_to_failed_over_partition_secs: first(true),
        rereplicated_after_secs: (healed - kill).as_secs_f64(),
        writes_per_sec_during_recovery: during,
        during_vs_before: during / before.max(1e-9),
        writes_per_sec_while_copies_move: moving,
        moving_vs_before: moving.map(|m| m / before.max(1e-9)),
        writes_per_sec_after: after,
        after_vs_before: after / before.max(1e-9),
        failed_writes: l.failed,
    };
    print_result(&r, args.grace_secs);
    std::fs::create_dir_all(&args.out_dir)?;
    let json = args.out_dir.join("bench-failover.json");
    std::fs::write(&json, serde_json::to_string_pretty(&r)?)?;
    println!("  results: {}", json.display());
    Ok(())
}
