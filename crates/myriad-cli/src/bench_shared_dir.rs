//! `myriad bench shared-dir`: the FPFS single-shared-directory benchmark at small scale.
//! P clients create, then stat, then unlink N empty files in one directory on a local
//! cluster of each size in `--nodes`; per phase: operations per second, each server's
//! share of the client requests (busiest / mean), and the same phases on the local file
//! system in the same run. `myriad bench spread` (`bench_spread.rs`) runs the same phases
//! over many directories.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use futures::StreamExt;
use myriad_client::Client;
use serde::Serialize;

use crate::cluster::LocalCluster;

#[derive(Args, Clone)]
pub struct SharedDirArgs {
    /// Cluster sizes, one cluster each, in turn (e.g. 4,8,16,32).
    #[arg(long, value_delimiter = ',', default_value = "4")]
    nodes: Vec<usize>,
    /// Files created, stat'ed and unlinked (all in one directory).
    #[arg(long, default_value_t = 200_000)]
    files: u64,
    #[command(flatten)]
    load: LoadArgs,
    /// Split threshold of the servers (entries per shard); 0 never splits.
    #[arg(long, default_value_t = myriad_server::DEFAULT_DIR_SPLIT_ENTRIES)]
    dir_split_entries: u64,
}

/// How the phases load the cluster, and where results go (shared by `bench spread`).
#[derive(Args, Clone)]
pub struct LoadArgs {
    /// Client processes' worth of clients (each its own connections).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Requests in flight per client.
    #[arg(long, default_value_t = 16)]
    pub inflight: usize,
    /// Where the local-file-system phases run (default: a temporary directory).
    #[arg(long)]
    pub local_dir: Option<PathBuf>,
    #[arg(long, default_value = "bench-results")]
    pub out_dir: PathBuf,
}

/// One phase on one cluster size.
#[derive(Serialize)]
pub struct Row {
    pub nodes: usize,
    pub phase: String,
    pub myriad_ops_per_sec: f64,
    pub local_ops_per_sec: f64,
    /// Client requests per server during the phase.
    pub per_node_requests: Vec<(myriad_client::NodeId, u64)>,
    pub busiest_over_mean: f64,
    /// What placement alone gives (`Workload::even_dirs`): busiest / mean of the servers'
    /// shares of the directories, each counted once, by the cluster's map.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_busiest_over_mean: Option<f64>,
}

pub const PHASES: [&str; 3] = ["create", "stat", "unlink"];

pub async fn run(args: SharedDirArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.nodes.is_empty() && args.files > 0,
        "--nodes and --files must be given"
    );
    eprintln!(
        "bench shared-dir: clusters of {:?} servers, {} clients x {} in flight, {} files in one directory, split at {} entries",
        args.nodes, args.load.clients, args.load.inflight, args.files, args.dir_split_entries
    );
    let server_args = vec![format!("--dir-split-entries={}", args.dir_split_entries)];
    let work = Workload {
        server_args,
        files: args.files,
        path_of: Arc::new(|i| format!("/shared/f{i:08}")),
        prepare: prepare(|c| Box::pin(async move { c.mkdir("/shared", 0o755).await.map(|_| ()) })),
        shared_dir: Some("/shared"),
        even_dirs: Vec::new(),
    };
    let rows = run_sizes(&args.nodes, &args.load, &work, |root| {
        std::fs::create_dir(root.join("shared"))
    })
    .await?;
    let worst = rows.iter().map(|r| r.busiest_over_mean).fold(0.0, f64::max);
    println!(
        "busiest/mean, worst over every phase and size: {worst:.2} (target <= 1.20: {}); after the creates: {:.2}",
        if worst <= 1.2 { "met" } else { "NOT met" },
        worst_after_create(&rows)
    );
    write_json(&args.load, "bench-shared-dir.json", &rows)
}

/// The worst busiest/mean of the phases after the creates (whose splits move entries).
pub fn worst_after_create(rows: &[Row]) -> f64 {
    rows.iter()
        .filter(|r| r.phase != "create")
        .map(|r| r.busiest_over_mean)
        .fold(0.0, f64::max)
}

pub fn write_json(load: &LoadArgs, name: &str, rows: &[Row]) -> anyhow::Result<()> {
    std::fs::create_dir_all(&load.out_dir)?;
    let json = load.out_dir.join(name);
    std::fs::write(&json, serde_json::to_string_pretty(rows)?)?;
    println!("results: {}", json.display());
    Ok(())
}

/// The path of file number i.
pub type PathOf = Arc<dyn Fn(u64) -> String + Send + Sync>;

/// A `Prepare` of `f` (a closure given here gets the signature for every lifetime).
pub fn prepare<F>(f: F) -> Prepare
where
    F: for<'a> Fn(&'a Client) -> futures::future::BoxFuture<'a, Result<(), myriad_client::FsError>>
        + Send
        + Sync
        + 'static,
{
    Box::new(f)
}

/// Makes what the phases need before the creates (their directories).
pub type Prepare = Box<
    dyn for<'a> Fn(&'a Client) -> futures::future::BoxFuture<'a, Result<(), myriad_client::FsError>>
        + Send
        + Sync,
>;

/// What the phases do: the files, where they are, what is made before them.
pub struct Workload {
    /// Extra flags of every server.
    pub server_args: Vec<String>,
    pub files: u64,
    pub path_of: PathOf,
    pub prepare: Prepare,
    /// A directory whose shard count is reported after the creates.
    pub shared_dir: Option<&'static str>,
    /// Directories that take equal shares of the work (unsplit): their spread over the
    /// servers by the map alone is printed as the floor the measured spread can reach.
    pub even_dirs: Vec<String>,
}

/// The three phases of `work` on a fresh cluster of each size in `sizes`, and once on the
/// local file system (`local_setup` makes its directories). Prints a table per size.
pub async fn run_sizes(
    sizes: &[usize],
    load: &LoadArgs,
    work: &Workload,
    local_setup: impl Fn(&std::path::Path) -> std::io::Result<()>,
) -> anyhow::Result<Vec<Row>> {
    let local_tmp = match &load.local_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("myriad-local-")
            .tempdir_in(d)?,
        None => tempfile::Builder::new().prefix("myriad-local-").tempdir()?,
    };
    local_setup(local_tmp.path())?;
    let mut local = Vec::new();
    for phase in PHASES {
        local.push(local_phase(local_tmp.path(), phase, load, work).await?);
    }
    let mut rows = Vec::new();
    for &n in sizes {
        let tmp = tempfile::Builder::new().prefix("myriad-bench-").tempdir()?;
        let opts = crate::cluster::NodeOptions::for_bench(work.server_args.clone());
        let cluster = LocalCluster::up(tmp.path(), n, &opts).await?;
        let result = match cluster
            .wait_settled(std::time::Duration::from_secs(120))
            .await
        {
            Ok(changes) => {
                if changes > 0 {
                    eprintln!("{n} servers: waited for {changes} map change(s) after the start");
                }
                one_size(&cluster, n, load, work, &local).await
            }
            Err(e) => Err(e),
        };
        cluster.down()?;
        let size_rows = result?;
        print_rows(&size_rows);
        rows.extend(size_rows);
    }
    Ok(rows)
}

async fn one_size(
    cluster: &LocalCluster,
    nodes: usize,
    load: &LoadArgs,
    work: &Workload,
    local_secs: &[f64],
) -> anyhow::Result<Vec<Row>> {
    let timeout = std::time::Duration::from_secs(120);
    let mut clients = Vec::new();
    for _ in 0..load.clients.max(1) {
        clients.push(Arc::new(
            cluster.client_as(timeout, crate::cluster::bench_identity())?,
        ));
    }
    (work.prepare)(&clients[0]).await?;
    let floor = placement_floor(&clients[0].newest_map().await, &work.even_dirs);
    if let Some(f) = floor {
        eprintln!(
            "{nodes} servers: by placement alone, {} directories give busiest/mean {f:.2}",
            work.even_dirs.len()
        );
    }
    let mut rows = Vec::new();
    for (phase, local) in PHASES.iter().zip(local_secs) {
        clients[0].reset_counters().await?;
        let secs = myriad_phase(&clients, phase, load, work).await?;
        let per_node = per_node_requests(&clients[0]).await?;
        let total: u64 = per_node.iter().map(|n| n.1).sum();
        let mean = total as f64 / per_node.len().max(1) as f64;
        let busiest = per_node.iter().map(|n| n.1).max().unwrap_or(0) as f64;
        rows.push(Row {
            nodes,
            phase: (*phase).to_string(),
            myriad_ops_per_sec: work.files as f64 / secs,
            local_ops_per_sec: work.files as f64 / local,
            per_node_requests: per_node,
            busiest_over_mean: if mean > 0.0 { busiest / mean } else { 0.0 },
            placement_busiest_over_mean: floor,
        });
        if let Some(dir) = work.shared_dir.filter(|_| *phase == "create") {
            clients[0].readdir(dir).await?;
            let shards = clients[0].shard_map(dir).map_or(1, |m| m.leaves.len());
            eprintln!("{nodes} servers: after create, {dir} has {shards} shard(s)");
        }
    }
    Ok(rows)
}

/// Busiest / mean of the servers' shares of `dirs` (each on its home partition's primary),
/// over every server up; `None` without directories.
fn placement_floor(map: &myriad_placement::ClusterMap, dirs: &[String]) -> Option<f64> {
    if dirs.is_empty() {
        return None;
    }
    let ring = map.ring();
    let mut per: std::collections::BTreeMap<myriad_placement::NodeId, u64> = map
        .nodes
        .iter()
        .filter(|n| n.state == myriad_placement::NodeState::Up)
        .map(|n| (n.id, 0))
        .collect();
    for d in dirs {
        if let Some(server) = map.primary_of(ring.owner_of_dir(d)) {
            *per.entry(server).or_default() += 1;
        }
    }
    let mean = dirs.len() as f64 / per.len().max(1) as f64;
    Some(per.values().copied().max().unwrap_or(0) as f64 / mean)
}

fn print_rows(rows: &[Row]) {
    println!(
        "{:>5} {:<8} {:>12} {:>12} {:>8} {:>14}  requests per server",
        "nodes", "phase", "myriad op/s", "local op/s", "ratio", "busiest/mean"
    );
    for r in rows {
        let nodes: Vec<String> = r
            .per_node_requests
            .iter()
            .map(|(n, c)| format!("{n}:{c}"))
            .collect();
        println!(
            "{:>5} {:<8} {:>12.0} {:>12.0} {:>8.2} {:>14.2}  {}",
            r.nodes,
            r.phase,
            r.myriad_ops_per_sec,
            r.local_ops_per_sec,
            r.myriad_ops_per_sec / r.local_ops_per_sec,
            r.busiest_over_mean,
            nodes.join(" ")
        );
    }
}

async fn myriad_phase(
    clients: &[Arc<Client>],
    phase: &str,
    load: &LoadArgs,
    work: &Workload,
) -> anyhow::Result<f64> {
    let (files, path_of) = (work.files, &work.path_of);
    let t = Instant::now();
    let p = clients.len() as u64;
    let tasks = clients.iter().enumerate().map(|(k, c)| {
        let c = c.clone();
        let phase = phase.to_string();
        let inflight = load.inflight;
        async move {
            let mut s = futures::stream::iter((k as u64..files).step_by(p as usize).map(|i| {
                let c = c.clone();
                let phase = phase.clone();
                let path = path_of(i);
                async move {
                    match phase.as_str() {
                        "create" => c.create(&path, 0o644, true, b"").await.map(|_| ()),
                        "stat" => c.stat(&path).await.map(|_| ()),
                        _ => c.unlink(&path).await,
                    }
                }
            }))
            .buffer_unordered(inflight);
            while let Some(r) = s.next().await {
                r?;
            }
            Ok::<(), myriad_client::FsError>(())
        }
    });
    for r in futures::future::join_all(tasks).await {
        r?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The same phase with `clients * inflight` threads' worth of blocking calls on local disk
/// (paths `path_of` under `root`).
async fn local_phase(
    root: &std::path::Path,
    phase: &str,
    load: &LoadArgs,
    work: &Workload,
) -> anyhow::Result<f64> {
    let (files, path_of) = (work.files, &work.path_of);
    let workers = (load.clients * load.inflight).clamp(1, 64) as u64;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..workers {
        let root = root.to_path_buf();
        let phase = phase.to_string();
        let path_of = path_of.clone();
        tasks.push(tokio::task::spawn_blocking(
            move || -> std::io::Result<()> {
                for i in (k..files).step_by(workers as usize) {
                    let path = root.join(path_of(i).trim_start_matches('/'));
                    match phase.as_str() {
                        "create" => drop(std::fs::File::create(&path)?),
                        "stat" => {
                            std::fs::metadata(&path)?;
                        }
                        _ => std::fs::remove_file(&path)?,
                    }
                }
                Ok(())
            },
        ));
    }
    for t in tasks {
        t.await??;
    }
    Ok(t.elapsed().as_secs_f64())
}

async fn per_node_requests(client: &Client) -> anyhow::Result<Vec<(myriad_client::NodeId, u64)>> {
    let mut out = Vec::new();
    for (node, r) in client.all_counters().await {
        out.push((node, r?.client_total()));
    }
    out.sort_unstable();
    Ok(out)
}
