//! `myriad bench zones` (issue 22; the network seed's question): two zones of servers with a
//! delay between them, a small-file job (create, stat, read, then delete 4 KiB files) run
//! by clients in zone a
//! * on a tree pinned to zone a (`policy set`): no request should leave the zone;
//! * on a tree placed over both zones: the job pays the delay;
//! * and the seed's two-sites case: half the clients in each zone, each on a tree pinned
//!   to its own zone, at once, against the same halves run at once on two independent
//!   clusters, one per zone ("two independent halves"). Each of the three runs on fresh
//!   clusters (the first two share one).
//!
//! Each job runs in a worker process inside its zone's network namespace (netns.rs); the
//! servers count the bytes that cross zones, and each worker the share of its reads that
//! servers in its own zone answered.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use futures::future::join_all;
use myriad_client::{Caller, Client, ClientConfig, ClusterMap, TrafficKind};
use serde::{Deserialize, Serialize};

use crate::cluster::{LocalCluster, NodeOptions, Placement, bench_identity};
use crate::netns::{TwoZones, ZONES};

#[derive(Args, Clone)]
pub struct ZonesArgs {
    /// Small files in each job (the two-sites job: half in each zone).
    #[arg(long, default_value_t = 10_000)]
    files: usize,
    #[arg(long, default_value_t = 4096)]
    file_size: usize,
    /// Delay each way between the zones (a userspace delay line between the zones'
    /// namespaces: these kernels have no sch_netem).
    #[arg(long, default_value_t = 10)]
    delay_ms: u64,
    #[arg(long, default_value_t = 3)]
    servers_per_zone: usize,
    /// Clients running a job, each one request at a time (the two-sites job puts half of
    /// them in each zone).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

/// One job in a worker process (internal to `bench zones`).
#[derive(Args, Clone)]
pub struct ZoneJobArgs {
    /// The directory the job works in (it makes and removes `d<k>` below it).
    #[arg(long)]
    dir: String,
    #[arg(long)]
    files: usize,
    #[arg(long)]
    file_size: usize,
    #[arg(long)]
    clients: usize,
}

/// What a worker prints: its wall time and the share of its reads answered in its zone.
#[derive(Serialize, Deserialize, Clone, Copy, Default)]
struct JobResult {
    wall_s: f64,
    reads_in_zone_fraction: f64,
    /// Seconds per phase: mkdir, create, stat, read, unlink, rmdir.
    phases_s: [f64; 6],
}

#[derive(Serialize, Default)]
struct Case {
    wall_s: f64,
    cross_zone_file_bytes: u64,
    /// Ancestor-permission upkeep across zones (leased replicas of the directories above
    /// a pinned root, which live outside it): reported beside, not in, file bytes.
    cross_zone_ancestor_bytes: u64,
    reads_in_zone_fraction: f64,
}

#[derive(Serialize)]
struct Report {
    files: usize,
    file_size: usize,
    delay_ms: u64,
    servers_per_zone: usize,
    clients: usize,
    pinned: Case,
    unpinned: Case,
    split_wall_s: f64,
    halves_alone_wall_s: f64,
    /// Reads of replicated data (the unpinned tree, copies in both zones) answered in the
    /// client's zone.
    reads_in_zone_fraction: f64,
}

const DIRS: usize = 100;
const PORT_BASE: u16 = 7401;

pub async fn run(args: ZonesArgs) -> anyhow::Result<()> {
    if args.clients < 2 || args.files < 2 || args.servers_per_zone == 0 {
        bail!("--clients and --files must be at least 2, --servers-per-zone at least 1");
    }
    std::fs::create_dir_all(&args.out_dir)?;
    let zones = TwoZones::new(args.delay_ms)?;
    let tmp = tempfile::Builder::new()
        .prefix("myriad-bench-zones-")
        .tempdir()?;
    eprintln!(
        "bench zones: 2 zones x {} servers, {} ms each way between them, {} files of {} B, {} clients",
        args.servers_per_zone, args.delay_ms, args.files, args.file_size, args.clients
    );

    // One cluster over both zones.
    let both: Vec<Placement> = (0..args.servers_per_zone)
        .flat_map(|k| (0..ZONES.len()).map(move |i| (i, k)))
        .map(|(i, k)| placement(&zones, i, k))
        .collect();
    let dir = tmp.path().join("both");
    let cluster = LocalCluster::up_placed(&dir, &both, &options()).await?;
    let result = zone_a_cases(&args, &zones, &cluster).await;
    cluster.down()?;
    let (pinned, unpinned) = result?;
    // The two sites on a fresh cluster over both zones, as the halves alone get fresh
    // ones: not on stores still compacting the 20,000 files the cases above made and
    // deleted.
    let dir = tmp.path().join("both-again");
    let cluster = LocalCluster::up_placed(&dir, &both, &options()).await?;
    let result = two_sites(&args, &zones, &cluster).await;
    cluster.down()?;
    let split_wall_s = result?;

    // Two independent clusters, one per zone, each running its half at the same time.
    let mut alone = Vec::new();
    for (i, zone) in ZONES.iter().enumerate() {
        let places: Vec<Placement> = (0..args.servers_per_zone)
            .map(|k| placement(&zones, i, k + args.servers_per_zone))
            .collect();
        let dir = tmp.path().join(format!("alone-{zone}"));
        alone.push(LocalCluster::up_placed(&dir, &places, &options()).await?);
    }
    let halves = halves_alone(&args, &zones, &alone).await;
    for c in &alone {
        c.down()?;
    }
    let halves_alone_wall_s = halves?;

    let report = Report {
        files: args.files,
        file_size: args.file_size,
        delay_ms: args.delay_ms,
        servers_per_zone: args.servers_per_zone,
        clients: args.clients,
        reads_in_zone_fraction: unpinned.reads_in_zone_fraction,
        pinned,
        unpinned,
        split_wall_s,
        halves_alone_wall_s,
    };
    print_report(&report);
    let json = args.out_dir.join("bench-zones.json");
    std::fs::write(&json, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", json.display());
    Ok(())
}

fn placement(zones: &TwoZones, i: usize, k: usize) -> Placement {
    let port = PORT_BASE + u16::try_from(k).unwrap_or(0);
    Placement {
        addr: format!("{}:{port}", zones.addr(i)),
        zone: ZONES[i].to_string(),
        netns: Some(zones.ns(i)),
    }
}

fn options() -> NodeOptions {
    NodeOptions::for_bench(Vec::new())
}

/// `/pa` pinned to zone a and `/pb` to zone b, and the trees the jobs work in; the
/// administrator's client.
async fn set_up(cluster: &LocalCluster) -> anyhow::Result<Client> {
    let admin = cluster.client_as(Duration::from_secs(60), Caller::root())?;
    for (root, zone) in [("/pa", "a"), ("/pb", "b")] {
        crate::policy_cmd::change(&admin, |m: &ClusterMap| {
            m.with_policy(root, zone, 3, myriad_client::DEFAULT_PARTITIONS_PER_NODE)
                .map(Some)
                .map_err(anyhow::Error::from)
        })
        .await
        .with_context(|| format!("pinning {root} to zone {zone}"))?;
    }
    let map = admin.newest_map().await;
    if map.policies.len() != 2 {
        bail!(
            "the cluster map holds {} policies, not the 2 set",
            map.policies.len()
        );
    }
    let user = cluster.client_as(Duration::from_secs(60), bench_identity())?;
    user.newest_map().await;
    // The trees' set-up, outside the measured jobs: a pinned root's own entry lives in its
    // parent, outside the tree (docs/zones.md).
    for d in [
        "/pa", "/pa/job", "/pa/half", "/pb", "/pb/half", "/u", "/u/job",
    ] {
        user.mkdir(d, 0o755)
            .await
            .with_context(|| format!("mkdir {d}"))?;
    }
    Ok(admin)
}

/// The pinned and unpinned jobs, run in zone a on one cluster over both zones.
async fn zone_a_cases(
    args: &ZonesArgs,
    zones: &TwoZones,
    cluster: &LocalCluster,
) -> anyhow::Result<(Case, Case)> {
    let admin = set_up(cluster).await?;
    let mut cases = Vec::new();
    for (name, dir) in [("pinned", "/pa/job"), ("unpinned", "/u/job")] {
        admin.reset_counters().await?;
        let r = job(args, zones, cluster, 0, dir, args.files, args.clients).await?;
        let (file, ancestors) = cross_zone_bytes(&admin).await;
        eprintln!(
            "  {name}: {:.1} s (mkdir, create, stat, read, unlink, rmdir: {:.1?}), {file} file bytes and {ancestors} ancestor bytes across zones, {:.3} of reads in zone",
            r.wall_s, r.phases_s, r.reads_in_zone_fraction
        );
        cases.push(Case {
            wall_s: r.wall_s,
            cross_zone_file_bytes: file,
            cross_zone_ancestor_bytes: ancestors,
            reads_in_zone_fraction: r.reads_in_zone_fraction,
        });
    }
    let unpinned = cases.pop().unwrap_or_default();
    let pinned = cases.pop().unwrap_or_default();
    Ok((pinned, unpinned))
}

/// The seed's two sites on one cluster over both zones: half the clients in each zone,
/// each on the tree pinned to its zone, at the same time; their wall time.
async fn two_sites(
    args: &ZonesArgs,
    zones: &TwoZones,
    cluster: &LocalCluster,
) -> anyhow::Result<f64> {
    let admin = set_up(cluster).await?;
    admin.reset_counters().await?;
    let start = Instant::now();
    let halves = join_all((0..ZONES.len()).map(|i| {
        let dir = if i == 0 { "/pa/half" } else { "/pb/half" };
        job(
            args,
            zones,
            cluster,
            i,
            dir,
            args.files / 2,
            args.clients / 2,
        )
    }))
    .await;
    let split = start.elapsed().as_secs_f64();
    eprintln!("  two sites, one cluster: {split:.1} s");
    print_halves(halves)?;
    // Where the one cluster could lose to two: what still crosses zones, by kind.
    let counters = admin.all_counters().await;
    let across: Vec<String> = TrafficKind::ALL
        .iter()
        .map(|&kind| {
            let bytes: u64 = counters
                .iter()
                .filter_map(|(_, r)| r.as_ref().ok())
                .map(|s| s.cross_zone_bytes(kind))
                .sum();
            format!("{kind:?} {bytes}")
        })
        .collect();
    eprintln!("    bytes across zones: {}", across.join(", "));
    Ok(split)
}

/// Each half's phases, as its worker measured them.
fn print_halves(halves: Vec<anyhow::Result<JobResult>>) -> anyhow::Result<()> {
    for (i, h) in halves.into_iter().enumerate() {
        let h = h?;
        eprintln!(
            "    zone {}: {:.1} s (mkdir, create, stat, read, unlink, rmdir: {:.1?})",
            ZONES[i], h.wall_s, h.phases_s
        );
    }
    Ok(())
}

/// Each zone's half on its own cluster, at the same time: the wall time of both.
async fn halves_alone(
    args: &ZonesArgs,
    zones: &TwoZones,
    clusters: &[LocalCluster],
) -> anyhow::Result<f64> {
    for c in clusters {
        let user = c.client_as(Duration::from_secs(60), bench_identity())?;
        user.mkdir("/half", 0o755).await.context("mkdir /half")?;
    }
    let start = Instant::now();
    let runs = join_all(
        clusters
            .iter()
            .enumerate()
            .map(|(i, c)| job(args, zones, c, i, "/half", args.files / 2, args.clients / 2)),
    )
    .await;
    let wall = start.elapsed().as_secs_f64();
    eprintln!("  two sites, two independent clusters: {wall:.1} s");
    print_halves(runs)?;
    Ok(wall)
}

/// Runs one job in a worker process in zone `zone`'s namespace.
async fn job(
    args: &ZonesArgs,
    zones: &TwoZones,
    cluster: &LocalCluster,
    zone: usize,
    dir: &str,
    files: usize,
    clients: usize,
) -> anyhow::Result<JobResult> {
    let exe = std::env::current_exe().context("cannot find the myriad executable")?;
    let mut cmd = zones.enter(zone, exe);
    cmd.arg("--cluster")
        .arg(crate::cluster::map_path(&cluster.dir))
        .arg("--secret-file")
        .arg(cluster.dir.join(crate::keys::SECRET_FILE))
        .args(["--zone", ZONES[zone], "bench", "zone-job", "--dir", dir])
        .args(["--files", &files.to_string()])
        .args(["--file-size", &args.file_size.to_string()])
        .args(["--clients", &clients.max(1).to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .context("cannot start a zone-job worker")?;
    if !out.status.success() {
        bail!("the job in {dir} (zone {}) failed", ZONES[zone]);
    }
    serde_json::from_slice(&out.stdout).context("the worker's result")
}

/// File and ancestor bytes every server exchanged with other zones since the last reset.
async fn cross_zone_bytes(admin: &Client) -> (u64, u64) {
    let mut file = 0;
    let mut ancestors = 0;
    for (_, r) in admin.all_counters().await {
        if let Ok(s) = r {
            file += s.cross_zone_bytes(TrafficKind::File);
            ancestors += s.cross_zone_bytes(TrafficKind::Ancestors);
        }
    }
    (file, ancestors)
}

fn print_report(r: &Report) {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    println!(
        "bench zones: {} files of {} B, {} clients, 2 zones x {} servers, {} ms each way",
        r.files, r.file_size, r.clients, r.servers_per_zone, r.delay_ms
    );
    println!(
        "  pinned to the clients' zone: {:8.1} s  {:>10} file bytes across zones  reads in zone {:.3}",
        r.pinned.wall_s, r.pinned.cross_zone_file_bytes, r.pinned.reads_in_zone_fraction
    );
    println!(
        "  over both zones:             {:8.1} s  {:>10} file bytes across zones  reads in zone {:.3}",
        r.unpinned.wall_s, r.unpinned.cross_zone_file_bytes, r.unpinned.reads_in_zone_fraction
    );
    println!(
        "  unpinned / pinned: {:.2}x (target at least 5, with 0 bytes across)",
        ratio(r.unpinned.wall_s, r.pinned.wall_s)
    );
    println!(
        "  two sites on one cluster {:.1} s, two independent clusters {:.1} s: {:.2}x (target at most 1.1)",
        r.split_wall_s,
        r.halves_alone_wall_s,
        ratio(r.split_wall_s, r.halves_alone_wall_s)
    );
    println!(
        "  reads of replicated data in the client's zone: {:.3} (target at least 0.99)",
        r.reads_in_zone_fraction
    );
}

/// The worker: `clients` clients in this process's zone, each one request at a time,
/// create then stat then fetch then unlink `files` files in `DIRS` directories.
pub async fn worker(
    args: ZoneJobArgs,
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    let keys = crate::keys::client_keys(secret_file.as_deref(), cluster.as_deref())?;
    let map = crate::fs_cmds::load_map(cluster.as_deref(), &keys)?;
    let zone = crate::identity::client_zone().to_string();
    let clients: Vec<Arc<Client>> = (0..args.clients)
        .map(|_| {
            let mut cfg = ClientConfig::new(map.clone(), bench_identity(), keys.clone());
            cfg.request_timeout = Duration::from_secs(60);
            cfg.zone = zone.clone();
            Client::new(cfg).map(Arc::new)
        })
        .collect::<Result<_, _>>()?;
    let first = &clients[0];
    first.newest_map().await;
    let dirs = DIRS.min(args.files);
    let path = |i: usize| format!("{}/d{}/f{i}", args.dir, i % dirs);
    let start = Instant::now();
    let mut phases_s = [0.0; 6];
    let mut lap = Instant::now();
    let mut next_lap = |k: usize| {
        phases_s[k] = lap.elapsed().as_secs_f64();
        lap = Instant::now();
    };
    each_file(&clients, dirs, |c, d| {
        let p = format!("{}/d{d}", args.dir);
        async move { c.mkdir(&p, 0o755).await.map(|_| ()) }
    })
    .await
    .context("mkdir")?;
    next_lap(0);
    let data = crate::workload::file_content(7, args.file_size);
    each_file(&clients, args.files, |c, i| {
        let (p, data) = (path(i), data.clone());
        async move { c.create(&p, 0o644, true, &data).await.map(|_| ()) }
    })
    .await
    .context("create")?;
    next_lap(1);
    each_file(&clients, args.files, |c, i| {
        let p = path(i);
        async move { c.stat(&p).await.map(|_| ()) }
    })
    .await
    .context("stat")?;
    next_lap(2);
    let before = first.all_counters().await;
    each_file(&clients, args.files, |c, i| {
        let (p, want) = (path(i), data.len());
        async move {
            let (_, got) = c.fetch(&p).await?;
            if got.len() == want {
                Ok(())
            } else {
                Err(myriad_client::FsError::Io(format!("{p}: short read")))
            }
        }
    })
    .await
    .context("read")?;
    next_lap(3);
    let after = first.all_counters().await;
    each_file(&clients, args.files, |c, i| {
        let p = path(i);
        async move { c.unlink(&p).await }
    })
    .await
    .context("unlink")?;
    next_lap(4);
    each_file(&clients, dirs, |c, d| {
        let p = format!("{}/d{d}", args.dir);
        async move { c.rmdir(&p).await }
    })
    .await
    .context("rmdir")?;
    next_lap(5);
    let result = JobResult {
        wall_s: start.elapsed().as_secs_f64(),
        reads_in_zone_fraction: in_zone_fraction(&zone, &before, &after),
        phases_s,
    };
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// Runs `op` for files 0..n, file i by client `i mod clients`, each client one at a time.
async fn each_file<F, Fut>(
    clients: &[Arc<Client>],
    n: usize,
    op: F,
) -> Result<(), myriad_client::FsError>
where
    F: Fn(Arc<Client>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), myriad_client::FsError>>,
{
    let k = clients.len();
    let runs = clients.iter().enumerate().map(|(j, c)| {
        let op = &op;
        async move {
            for i in (j..n).step_by(k) {
                op(c.clone(), i).await?;
            }
            Ok::<(), myriad_client::FsError>(())
        }
    });
    for r in join_all(runs).await {
        r?;
    }
    Ok(())
}

type Counters = Vec<(
    myriad_client::NodeId,
    Result<myriad_client::CounterSnapshot, myriad_client::FsError>,
)>;

/// Of the file requests from `zone` between the two snapshots, the share that servers in
/// `zone` answered.
fn in_zone_fraction(zone: &str, before: &Counters, after: &Counters) -> f64 {
    let from_zone = |snap: &myriad_client::CounterSnapshot| -> u64 {
        snap.zone_traffic
            .iter()
            .filter(|t| t.kind == TrafficKind::File && t.zone == zone)
            .map(|t| t.requests)
            .sum()
    };
    let (mut inside, mut all) = (0u64, 0u64);
    for (id, r) in after {
        let Ok(a) = r else { continue };
        let was = before
            .iter()
            .find(|(b, _)| b == id)
            .and_then(|(_, r)| r.as_ref().ok())
            .map_or(0, from_zone);
        let delta = from_zone(a).saturating_sub(was);
        all += delta;
        if a.zone == zone {
            inside += delta;
        }
    }
    if all == 0 {
        0.0
    } else {
        inside as f64 / all as f64
    }
}
