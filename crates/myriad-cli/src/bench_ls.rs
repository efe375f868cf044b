//! `myriad bench ls`: `ls -l` (every name with its attributes) of one directory of N entries
//! (1,000,000 by default) on a local cluster, against the same listing of the same number of
//! files on local disk in the same run; entries per second and requests per entry.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use futures::StreamExt;
use serde::Serialize;

use crate::cluster::LocalCluster;

#[derive(Args, Clone)]
pub struct LsArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Entries in the directory.
    #[arg(long, default_value_t = 1_000_000)]
    entries: u64,
    /// Listings timed (the best is reported; all are printed).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Requests in flight while the directory is filled.
    #[arg(long, default_value_t = 128)]
    inflight: usize,
    /// Where the local-disk directory is made (default: a temporary directory).
    #[arg(long)]
    local_dir: Option<PathBuf>,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

#[derive(Serialize)]
struct LsResult {
    entries: u64,
    shards: usize,
    myriad_secs: Vec<f64>,
    myriad_entries_per_sec: f64,
    requests: u64,
    requests_per_entry: f64,
    local_secs: Vec<f64>,
    local_entries_per_sec: f64,
}

pub async fn run(args: LsArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("myriad-bench-").tempdir()?;
    eprintln!(
        "bench ls: {}-node local cluster, one directory of {} entries, {} timed listings",
        args.nodes, args.entries, args.runs
    );
    let cluster = LocalCluster::up(
        tmp.path(),
        args.nodes,
        &crate::cluster::NodeOptions::for_bench(Vec::new()),
    )
    .await?;
    let result = body(&cluster, &args).await;
    cluster.down()?;
    result
}

async fn body(cluster: &LocalCluster, args: &LsArgs) -> anyhow::Result<()> {
    let timeout = std::time::Duration::from_secs(300);
    let client = Arc::new(cluster.client_as(timeout, crate::cluster::bench_identity())?);
    client.mkdir("/huge", 0o755).await?;
    let t = Instant::now();
    let mut s = futures::stream::iter((0..args.entries).map(|i| {
        let c = client.clone();
        async move {
            c.create(&format!("/huge/entry-{i:08}"), 0o644, true, b"")
                .await
                .map(|_| ())
        }
    }))
    .buffer_unordered(args.inflight);
    while let Some(r) = s.next().await {
        r?;
    }
    eprintln!(
        "filled /huge in {:.1} s ({:.0} creates/s)",
        t.elapsed().as_secs_f64(),
        args.entries as f64 / t.elapsed().as_secs_f64()
    );
    let mut myriad_secs = Vec::new();
    let mut requests = 0;
    let mut shards = 1;
    for _ in 0..args.runs.max(1) {
        // A fresh client each time: no shard map or connection state carried over.
        let fresh = cluster.client_as(timeout, crate::cluster::bench_identity())?;
        client.reset_counters().await?;
        let t = Instant::now();
        let listed = fresh.readdir("/huge").await?;
        myriad_secs.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            listed.len() as u64 == args.entries,
            "listed {} of {} entries",
            listed.len(),
            args.entries
        );
        requests = crate::demo::rpc_totals(&client).await?.0;
        shards = fresh.shard_map("/huge").map_or(1, |m| m.leaves.len());
    }
    let local_secs = local_ls(args)?;
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let r = LsResult {
        entries: args.entries,
        shards,
        myriad_entries_per_sec: args.entries as f64 / best(&myriad_secs),
        requests,
        requests_per_entry: requests as f64 / args.entries as f64,
        local_entries_per_sec: args.entries as f64 / best(&local_secs),
        myriad_secs,
        local_secs,
    };
    println!(
        "ls -l of {} entries ({} shards): Myriad {:.0} entries/s (runs {:?} s), local disk {:.0} entries/s (runs {:?} s), ratio {:.2}",
        r.entries,
        r.shards,
        r.myriad_entries_per_sec,
        rounded(&r.myriad_secs),
        r.local_entries_per_sec,
        rounded(&r.local_secs),
        r.myriad_entries_per_sec / r.local_entries_per_sec
    );
    println!(
        "requests: {} for {} entries = {:.4} per entry (target <= 0.01: {}); entries/s target >= 100,000: {}",
        r.requests,
        r.entries,
        r.requests_per_entry,
        if r.requests_per_entry <= 0.01 {
            "met"
        } else {
            "NOT met"
        },
        if r.myriad_entries_per_sec >= 100_000.0 {
            "met"
        } else {
            "NOT met"
        }
    );
    std::fs::create_dir_all(&args.out_dir)?;
    let json = args.out_dir.join("bench-ls.json");
    std::fs::write(&json, serde_json::to_string_pretty(&r)?)?;
    println!("results: {}", json.display());
    Ok(())
}

fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|s| (s * 1000.0).round() / 1000.0).collect()
}

/// `ls -l` on local disk: one directory of the same size, read with readdir and an lstat of
/// every entry (what `ls -l` does), after a first listing that warms the caches as the
/// cluster's are warm.
fn local_ls(args: &LsArgs) -> anyhow::Result<Vec<f64>> {
    let tmp = match &args.local_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("myriad-local-")
            .tempdir_in(d)?,
        None => tempfile::Builder::new().prefix("myriad-local-").tempdir()?,
    };
    for i in 0..args.entries {
        std::fs::File::create(tmp.path().join(format!("entry-{i:08}")))?;
    }
    let mut secs = Vec::new();
    for _ in 0..args.runs.max(1) {
        let t = Instant::now();
        let mut n = 0u64;
        for e in std::fs::read_dir(tmp.path())? {
            let e = e?;
            std::fs::symlink_metadata(e.path())?;
            n += 1;
        }
        secs.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(n == args.entries, "local listing found {n} entries");
    }
    Ok(secs)
}
