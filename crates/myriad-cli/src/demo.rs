//! `myriad demo`: the main job of the README. Brings up a 4-node local cluster, writes 20,000
//! small files (1-64 KiB) in 100 directories, reads them back with `fetch`, verifies every
//! byte, and prints files/s and client requests per file for each phase.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use futures::StreamExt;
use myriad_client::Client;

use crate::cluster::{LocalCluster, map_path};
use crate::workload::{file_content, small_file_size};

#[derive(Args)]
pub struct DemoArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    #[arg(long, default_value_t = 100)]
    dirs: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// Where the cluster keeps its data (default: a temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Leave the cluster running afterwards.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    layout: crate::cluster::LayoutArgs,
}

pub struct PhaseResult {
    pub name: &'static str,
    pub ops: u64,
    pub bytes: u64,
    pub secs: f64,
    pub client_rpcs: u64,
    pub server_rpcs: u64,
}

impl PhaseResult {
    pub fn print_header() {
        println!(
            "{:<10} {:>8} {:>9} {:>11} {:>9} {:>13} {:>13}",
            "phase", "ops", "seconds", "ops/s", "MiB/s", "client RPC/op", "server RPC/op"
        );
    }
    pub fn print(&self) {
        let ops = self.ops.max(1) as f64;
        println!(
            "{:<10} {:>8} {:>9.2} {:>11.0} {:>9.1} {:>13.3} {:>13.3}",
            self.name,
            self.ops,
            self.secs,
            self.ops as f64 / self.secs.max(1e-9),
            self.bytes as f64 / 1_048_576.0 / self.secs.max(1e-9),
            self.client_rpcs as f64 / ops,
            self.server_rpcs as f64 / ops
        );
    }
}

/// Client and server-to-server requests received by all nodes since the last reset.
pub async fn rpc_totals(client: &Client) -> anyhow::Result<(u64, u64)> {
    let mut c = 0;
    let mut s = 0;
    let map = client.map();
    for (id, r) in client.all_counters().await {
        // A server the map marks down (a benchmark killed it) serves nothing meanwhile.
        let down = map
            .node(id)
            .is_some_and(|n| n.state == myriad_client::NodeState::Down);
        let snap = match r {
            Ok(s) => s,
            Err(_) if down => continue,
            Err(e) => anyhow::bail!("node {id}: {e}"),
        };
        c += snap.client_total();
        s += snap.server_total();
    }
    Ok((c, s))
}

fn file_path(dirs: u64, i: u64) -> String {
    format!("/demo/d{:03}/f{i:06}", i % dirs)
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if args.dirs == 0 || args.files == 0 {
        bail!("--files and --dirs must be at least 1");
    }
    let (tmp, dir) = match &args.data_dir {
        Some(d) => (None, d.clone()),
        None => {
            let t = tempfile::Builder::new().prefix("myriad-demo-").tempdir()?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };
    println!(
        "starting a {}-node local cluster in {} ...",
        args.nodes,
        dir.display()
    );
    let mut opts = crate::cluster::NodeOptions::for_bench(Vec::new());
    opts.layout = args.layout;
    let cluster = LocalCluster::up(&dir, args.nodes, &opts).await?;
    let result = demo_body(&cluster, &args).await;
    if args.keep {
        if let Some(t) = tmp {
            let _ = t.keep();
        }
        println!(
            "\ncluster left running:\n  export MYRIAD_CLUSTER={}\n  myriad ls -l /demo/d000\n  myriad cluster down --data-dir {}",
            map_path(&dir).display(),
            dir.display()
        );
    } else {
        cluster.down()?;
    }
    result
}

async fn demo_body(cluster: &LocalCluster, args: &DemoArgs) -> anyhow::Result<()> {
    let client =
        Arc::new(cluster.client_as(Duration::from_secs(30), crate::cluster::bench_identity())?);
    let mut results = Vec::new();

    client.reset_counters().await?;
    let t = Instant::now();
    client.mkdir_p("/demo", 0o755).await?;
    let mut s = futures::stream::iter((0..args.dirs).map(|d| {
        let c = client.clone();
        async move { c.mkdir(&format!("/demo/d{d:03}"), 0o755).await }
    }))
    .buffer_unordered(args.inflight);
    while let Some(r) = s.next().await {
        r?;
    }
    let (c, sv) = rpc_totals(&client).await?;
    results.push(PhaseResult {
        name: "mkdir",
        ops: args.dirs + 1,
        bytes: 0,
        secs: t.elapsed().as_secs_f64(),
        client_rpcs: c,
        server_rpcs: sv,
    });

    client.reset_counters().await?;
    let t = Instant::now();
    let total_bytes: u64 = (0..args.files).map(|i| small_file_size(i) as u64).sum();
    let mut s = futures::stream::iter((0..args.files).map(|i| {
        let c = client.clone();
        let dirs = args.dirs;
        async move {
            let data = file_content(i, small_file_size(i));
            c.create(&file_path(dirs, i), 0o644, true, &data)
                .await
                .map(|_| ())
        }
    }))
    .buffer_unordered(args.inflight);
    while let Some(r) = s.next().await {
        r?;
    }
    let (c, sv) = rpc_totals(&client).await?;
    results.push(PhaseResult {
        name: "write",
        ops: args.files,
        bytes: total_bytes,
        secs: t.elapsed().as_secs_f64(),
        client_rpcs: c,
        server_rpcs: sv,
    });

    client.reset_counters().await?;
    let t = Instant::now();
    let mut bad = 0u64;
    let mut s = futures::stream::iter((0..args.files).map(|i| {
        let c = client.clone();
        let dirs = args.dirs;
        async move {
            let (_, data) = c.fetch(&file_path(dirs, i)).await?;
            Ok::<bool, myriad_client::FsError>(data == file_content(i, small_file_size(i)))
        }
    }))
    .buffer_unordered(args.inflight);
    while let Some(r) = s.next().await {
        if !r? {
            bad += 1;
        }
    }
    let (c, sv) = rpc_totals(&client).await?;
    results.push(PhaseResult {
        name: "fetch",
        ops: args.files,
        bytes: total_bytes,
        secs: t.elapsed().as_secs_f64(),
        client_rpcs: c,
        server_rpcs: sv,
    });

    client.reset_counters().await?;
    let t = Instant::now();
    let mut listed = 0u64;
    for d in 0..args.dirs {
        listed += client.readdir(&format!("/demo/d{d:03}")).await?.len() as u64;
    }
    let (c, sv) = rpc_totals(&client).await?;
    results.push(PhaseResult {
        name: "ls -l",
        ops: listed,
        bytes: 0,
        secs: t.elapsed().as_secs_f64(),
        client_rpcs: c,
        server_rpcs: sv,
    });

    println!();
    PhaseResult::print_header();
    for r in &results {
        r.print();
    }
    println!();
    if bad > 0 || listed != args.files {
        bail!(
            "verification FAILED: {bad} files with wrong contents, {listed} of {} files listed",
            args.files
        );
    }
    println!(
        "verified: all {} files read back byte for byte ({:.1} MiB)",
        args.files,
        total_bytes as f64 / 1_048_576.0
    );
    Ok(())
}
