//! `myriad bench soak` (issue 49, "slow is not dead"): every server, a mount and more
//! stress workers than cores share this host at full load for `--minutes`, with no kill.
//! A server on a starved host answers late but is alive: none may be marked down. The
//! bench counts the mark-downs (`myriad_servers_marked_down_total`, summed over the
//! servers: only the cluster-map group's leader counts them), the map's epoch changes, the
//! workers' answers that differ from their models (as `bench stress` checks them), and
//! ends with `myriad fsck` of the whole tree. It fails if any answer differed or fsck is
//! not clean; mark-downs are the measured number, printed against the target of none.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use serde::Serialize;

use crate::bench_fuse::MountProc;
use crate::bench_stress::{collect, owned_dir, spawn_mix};
use crate::cluster::{LocalCluster, NodeOptions};

#[derive(Args, Clone)]
pub struct SoakArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Stress worker processes running at once (more than the host's cores: full load).
    #[arg(long, default_value_t = 8)]
    procs: usize,
    /// How long the load lasts; rounds of workers start until it is over.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Operations per worker and round (each round's tree is removed after it).
    #[arg(long, default_value_t = 3000)]
    ops: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value = "bench-results")]
    out_dir: std::path::PathBuf,
    /// Extra `myriad mount` flag (repeatable).
    #[arg(long = "mount-arg", allow_hyphen_values = true)]
    mount_args: Vec<String>,
}

#[derive(Serialize)]
struct Report {
    nodes: usize,
    procs: usize,
    minutes: f64,
    rounds: u64,
    operations: u64,
    servers_marked_down: u64,
    servers_metrics_read: usize,
    map_epoch_first: u64,
    map_epoch_last: u64,
    mismatches: usize,
    fsck_clean: bool,
    load_average_1m_max: f64,
}

/// The cluster's mark-downs so far, summed over its servers' metrics, and how many
/// servers answered the scrape (only the cluster-map group's leader counts mark-downs, so
/// a sum over fewer than all may miss some: the count is printed with it).
fn marked_down(cluster_dir: &Path, nodes: usize) -> (u64, usize) {
    let counts: Vec<u64> = (1..=nodes)
        .filter_map(|id| {
            let addr = fs::read_to_string(cluster_dir.join(format!("node-{id}/metrics.addr")));
            let text = scrape(addr.ok()?.trim())?;
            text.lines().find_map(|l| {
                l.strip_prefix("myriad_servers_marked_down_total ")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        })
        .collect();
    (counts.iter().sum(), counts.len())
}

fn scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn load_average() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// One round: `procs` workers in `root/p*`, every answer checked; the tree is removed
/// after. Returns (operations, mismatch lines).
fn round(root: &Path, a: &SoakArgs, seed: u64) -> anyhow::Result<(u64, Vec<String>)> {
    owned_dir(root)?;
    let mut ops = 0;
    let mut mismatches = Vec::new();
    for k in spawn_mix(root, a.procs, a.ops, seed)? {
        let r = collect(k)?;
        ops += r.ops;
        mismatches.extend(r.mismatches);
    }
    fs::remove_dir_all(root)?;
    Ok((ops, mismatches))
}

pub async fn run(a: SoakArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new()
        .prefix("myriad-bench-soak-")
        .tempdir()?;
    let cluster = LocalCluster::up(
        &tmp.path().join("cluster"),
        a.nodes,
        &NodeOptions::for_bench(vec!["--metrics=127.0.0.1:0".into()]),
    )
    .await?;
    // The servers go down however the run ends (a failed round, a mount that did not come
    // up), before their temporary directory is removed.
    let soaked = soak(&cluster, tmp.path(), &a).await;
    let _ = cluster.down();
    soaked
}

/// The run on `cluster` (up), with the mount and its log under `dir`.
async fn soak(cluster: &LocalCluster, dir: &Path, a: &SoakArgs) -> anyhow::Result<()> {
    let map = crate::cluster::map_path(&cluster.dir);
    let mnt = dir.join("mnt");
    fs::create_dir(&mnt)?;
    let client = cluster.client(Duration::from_secs(20))?;
    let first_epoch = client.newest_map().await.epoch;
    eprintln!(
        "bench soak: {} servers, a mount and {} stress workers on {} cores for {} min, no kill",
        a.nodes,
        a.procs,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        a.minutes
    );
    let log = dir.join("mount.log");
    let m = MountProc::start_logged(&map, &mnt, &a.mount_args, &log)?;
    let started = Instant::now();
    let until = Duration::from_secs_f64(a.minutes * 60.0);
    let (mut rounds, mut operations, mut load_max) = (0u64, 0u64, 0f64);
    let mut mismatches = Vec::new();
    let mut failure = None;
    while started.elapsed() < until {
        let seed = a.seed + rounds * a.procs as u64;
        match round(&mnt.join(format!("round{rounds}")), a, seed) {
            Ok((ops, mis)) => {
                operations += ops;
                mismatches.extend(mis);
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        rounds += 1;
        load_max = load_max.max(load_average());
        let epoch = client.newest_map().await.epoch;
        let (down, answered) = marked_down(&cluster.dir, a.nodes);
        eprintln!(
            "  {:5.0} s: round {rounds}, {operations} operations, map epoch {epoch}, \
             servers marked down {down} ({answered} of {} servers' metrics read), load {:.1}",
            started.elapsed().as_secs_f64(),
            a.nodes,
            load_average()
        );
    }
    let stopped = m.stop();
    let (down, answered) = marked_down(&cluster.dir, a.nodes);
    let last_epoch = client.newest_map().await.epoch;
    let fsck = std::process::Command::new(std::env::current_exe()?)
        .arg("--cluster")
        .arg(&map)
        .arg("fsck")
        .output()?;
    let fsck_clean = fsck.status.success();
    let report = Report {
        nodes: a.nodes,
        procs: a.procs,
        minutes: started.elapsed().as_secs_f64() / 60.0,
        rounds,
        operations,
        servers_marked_down: down,
        servers_metrics_read: answered,
        map_epoch_first: first_epoch,
        map_epoch_last: last_epoch,
        mismatches: mismatches.len(),
        fsck_clean,
        load_average_1m_max: load_max,
    };
    println!(
        "\n{:.1} min at full load (1-minute load average up to {load_max:.1}): {rounds} \
         rounds, {operations} operations checked, {} differing",
        report.minutes,
        mismatches.len()
    );
    println!(
        "servers marked down: {down} ({answered} of {} servers' metrics read; target 0: {}); \
         map epoch {first_epoch} -> {last_epoch}",
        a.nodes,
        if down == 0 && answered == a.nodes {
            "met"
        } else {
            "NOT met"
        }
    );
    println!(
        "fsck: {}",
        if fsck_clean {
            "clean".to_string()
        } else {
            format!(
                "NOT clean\n{}{}",
                String::from_utf8_lossy(&fsck.stdout),
                String::from_utf8_lossy(&fsck.stderr)
            )
        }
    );
    fs::create_dir_all(&a.out_dir)?;
    let out = a.out_dir.join("bench-soak.json");
    fs::write(&out, serde_json::to_string_pretty(&report)?)?;
    println!("results: {}", out.display());
    if let Some(e) = failure {
        return Err(e.context("a round of stress workers failed"));
    }
    stopped?;
    for l in mismatches.iter().take(20) {
        eprintln!("mismatch: {l}");
    }
    if !mismatches.is_empty() || !fsck_clean {
        bail!(
            "{} answers differed from the workers' models; fsck {}",
            mismatches.len(),
            if fsck_clean { "clean" } else { "NOT clean" }
        );
    }
    Ok(())
}
