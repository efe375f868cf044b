//! `myriad bench shared-dir`: the FPFS single-shared-directory benchmark at small scale.
//! P clients create, then stat, then unlink N empty files in one directory on a local
//! cluster; per phase: operations per second, each node's share of the client requests
//! (busiest / mean), and the same phases on the local file system in the same run.

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
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Files created, stat'ed and unlinked (all in one directory).
    #[arg(long, default_value_t = 200_000)]
    files: u64,
    /// Client processes' worth of clients (each its own connections).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Requests in flight per client.
    #[arg(long, default_value_t = 16)]
    inflight: usize,
    /// Split threshold of the servers (entries per shard); 0 never splits.
    #[arg(long, default_value_t = myriad_server::DEFAULT_DIR_SPLIT_ENTRIES)]
    dir_split_entries: u64,
    /// Where the local-file-system phases run (default: a temporary directory).
    #[arg(long)]
    local_dir: Option<PathBuf>,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

#[derive(Serialize)]
struct Row {
    phase: String,
    myriad_ops_per_sec: f64,
    local_ops_per_sec: f64,
    /// Client requests per node during the phase.
    per_node_requests: Vec<(myriad_client::NodeId, u64)>,
    busiest_over_mean: f64,
}

pub async fn run(args: SharedDirArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("myriad-bench-").tempdir()?;
    eprintln!(
        "bench shared-dir: {}-node local cluster, {} clients x {} in flight, {} files in one directory, split at {} entries",
        args.nodes, args.clients, args.inflight, args.files, args.dir_split_entries
    );
    let opts = crate::cluster::NodeOptions::for_bench(vec![format!(
        "--dir-split-entries={}",
        args.dir_split_entries
    )]);
    let cluster = LocalCluster::up(tmp.path(), args.nodes, &opts).await?;
    let result = body(&cluster, &args).await;
    cluster.down()?;
    result
}

async fn body(cluster: &LocalCluster, args: &SharedDirArgs) -> anyhow::Result<()> {
    let timeout = std::time::Duration::from_secs(120);
    let mut clients = Vec::new();
    for _ in 0..args.clients.max(1) {
        clients.push(Arc::new(
            cluster.client_as(timeout, crate::cluster::bench_identity())?,
        ));
    }
    clients[0].mkdir("/shared", 0o755).await?;
    let local_tmp = match &args.local_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("myriad-local-")
            .tempdir_in(d)?,
        None => tempfile::Builder::new().prefix("myriad-local-").tempdir()?,
    };
    let mut rows = Vec::new();
    for phase in ["create", "stat", "unlink"] {
        clients[0].reset_counters().await?;
        let secs = myriad_phase(&clients, phase, args).await?;
        let per_node = per_node_requests(&clients[0]).await?;
        let local = local_phase(local_tmp.path(), phase, args).await?;
        let total: u64 = per_node.iter().map(|n| n.1).sum();
        let mean = total as f64 / per_node.len().max(1) as f64;
        let busiest = per_node.iter().map(|n| n.1).max().unwrap_or(0) as f64;
        rows.push(Row {
            phase: phase.to_string(),
            myriad_ops_per_sec: args.files as f64 / secs,
            local_ops_per_sec: args.files as f64 / local,
            per_node_requests: per_node,
            busiest_over_mean: if mean > 0.0 { busiest / mean } else { 0.0 },
        });
        if phase == "create" {
            let shards = clients[0].readdir("/shared").await.map(|_| {
                clients[0]
                    .shard_map("/shared")
                    .map_or(1, |m| m.leaves.len())
            })?;
            eprintln!("after create: /shared has {shards} shard(s)");
        }
    }
    println!(
        "{:<8} {:>12} {:>12} {:>8} {:>14}  requests per node",
        "phase", "myriad op/s", "local op/s", "ratio", "busiest/mean"
    );
    for r in &rows {
        let nodes: Vec<String> = r
            .per_node_requests
            .iter()
            .map(|(n, c)| format!("{n}:{c}"))
            .collect();
        println!(
            "{:<8} {:>12.0} {:>12.0} {:>8.2} {:>14.2}  {}",
            r.phase,
            r.myriad_ops_per_sec,
            r.local_ops_per_sec,
            r.myriad_ops_per_sec / r.local_ops_per_sec,
            r.busiest_over_mean,
            nodes.join(" ")
        );
    }
    let after_split = rows
        .iter()
        .filter(|r| r.phase != "create")
        .map(|r| r.busiest_over_mean)
        .fold(0.0, f64::max);
    println!(
        "busiest/mean after the split (stat, unlink): {after_split:.2} (target <= 1.20: {})",
        if after_split <= 1.2 { "met" } else { "NOT met" }
    );
    std::fs::create_dir_all(&args.out_dir)?;
    let json = args.out_dir.join("bench-shared-dir.json");
    std::fs::write(&json, serde_json::to_string_pretty(&rows)?)?;
    println!("results: {}", json.display());
    Ok(())
}

async fn myriad_phase(
    clients: &[Arc<Client>],
    phase: &str,
    args: &SharedDirArgs,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let p = clients.len() as u64;
    let tasks = clients.iter().enumerate().map(|(k, c)| {
        let c = c.clone();
        let phase = phase.to_string();
        let inflight = args.inflight;
        let files = args.files;
        async move {
            let mut s = futures::stream::iter((k as u64..files).step_by(p as usize).map(|i| {
                let c = c.clone();
                let phase = phase.clone();
                async move {
                    let path = format!("/shared/f{i:08}");
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

/// The same phase with `clients * inflight` threads' worth of blocking calls on local disk.
async fn local_phase(
    root: &std::path::Path,
    phase: &str,
    args: &SharedDirArgs,
) -> anyhow::Result<f64> {
    let workers = (args.clients * args.inflight).clamp(1, 64) as u64;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..workers {
        let root = root.to_path_buf();
        let phase = phase.to_string();
        let files = args.files;
        tasks.push(tokio::task::spawn_blocking(
            move || -> std::io::Result<()> {
                for i in (k..files).step_by(workers as usize) {
                    let path = root.join(format!("f{i:08}"));
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
