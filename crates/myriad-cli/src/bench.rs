//! `myriad bench`: benchmarks on a local cluster. Every run measures the transport floor
//! (`rpc`: an empty echo over the same connections) first and prints each result's ratio to
//! it, plus requests counted by the servers. Results go to stdout, JSON, and an SVG chart.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand};
use futures::StreamExt;
use myriad_client::Client;
use myriad_placement::map_wire::QUOTAS_SINCE;
use serde::Serialize;

use crate::cluster::LocalCluster;
use crate::demo::rpc_totals;
use crate::workload::file_content;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Raw echo round trips: the floor every other number is compared with. Every bench
    /// measures it before and after its own phases and compares with the better of the two.
    Rpc(BenchArgs),
    /// Durable creates of small files (create with data: one request each).
    Create(BenchArgs),
    /// stat of existing small files.
    Stat(BenchArgs),
    /// fetch (attributes + contents in one request) of existing small files.
    Fetch(BenchArgs),
    /// rpc, create, stat and fetch in one run.
    All(BenchArgs),
    /// Time to rename a directory tree of 100, 1,000 and 10,000 files (its cost grows with
    /// the number of descendants because placement follows the path).
    RenameDir(RenameDirArgs),
    /// TyrFS Fig. 6/7: one data set stored as files of each size at depth 4, read entirely
    /// with fetch by parallel readers, with metadata replication on and off and on the local
    /// file system; throughput, metadata share of time, requests per file, and a PNG plot.
    Smallread(crate::bench_smallread::SmallreadArgs),
    /// Small-file phases through a FUSE mount with worker processes (create+write, stat,
    /// cold read, reread on the same mount, cold `ls -l`, unlink) for 4 KiB and 32 KiB
    /// files, next to local disk.
    Fuse(crate::bench_fuse::FuseArgs),
    /// What one FUSE kernel request costs over /dev/fuse (the mount's channel) and over FUSE
    /// over io_uring, each serving a do-nothing file system, at 1, 4 and 16 callers: calls
    /// per second and CPU per request (needs root; sets `fuse.enable_uring` for the run).
    FuseTransport(crate::bench_fuse_transport::FuseTransportArgs),
    /// What a user does with a source tree, through a mount and on local disk in the same
    /// run: one `tar -x` of about 10,000 files (generated in the shape of a source tree, or
    /// --tarball), `find | xargs stat`, `du -s`, `rm -rf`; seconds, ratios and targets.
    Untar(crate::bench_untar::UntarArgs),
    /// MetaFS's metadata storm: K mounts each start J Python processes importing a large
    /// package from a Python installation copied into Myriad, all at once, cold and warm,
    /// with no index and with the tree indexed (`myriad index build`), against local disk;
    /// wall times and the metadata requests reaching the servers.
    Storm(crate::bench_storm::StormArgs),
    /// FPFS single shared directory: P clients create, stat, then unlink 200,000 empty files
    /// in one directory (which splits across the nodes); ops/s per phase, each node's share
    /// of requests, and the same phases on the local file system.
    SharedDir(crate::bench_shared_dir::SharedDirArgs),
    /// Many directories of empty files created, stat'ed and unlinked on clusters of each
    /// size in --nodes: each server's share of the requests (busiest / mean) per phase;
    /// writes bench-spread.json.
    Spread(crate::bench_spread::SpreadArgs),
    /// `ls -l` of a 1,000,000-entry directory (split across the nodes) against local disk:
    /// entries per second and requests per entry.
    Ls(crate::bench_ls::LsArgs),
    /// Failure handling: writers on a 5-server cluster with 3 copies while one server is
    /// killed with SIGKILL; time to the first write after failover and to full
    /// re-replication, and the write throughput during recovery relative to before.
    Failover(crate::bench_failover::FailoverArgs),
    /// Panasas Fig. 1 and 2: files from 0 to 1 MiB in 4 KiB steps and a few large ones;
    /// the raw bytes stored for each (copies, checksums, metadata: `du --raw`) against the
    /// same file's blocks on local disk; JSON and a PNG of raw bytes per byte.
    Capacity(crate::bench_capacity::CapacityArgs),
    /// The network seed: two zones of servers with --delay-ms between them (network
    /// namespaces and a delay line between them; needs root); a small-file job by clients in zone a on a
    /// tree pinned to zone a and on one placed over both zones, and the two-sites case
    /// (half the clients in each zone, each on its own pinned half) against the halves on
    /// two independent clusters; wall times, bytes across zones, reads answered in zone.
    Zones(crate::bench_zones::ZonesArgs),
    /// Small-file reads from Python (`fetch_many` of the `myriad` package) and S3 GETs
    /// through the gateway, each beside the native client's `fetch_many` in the same run;
    /// writes bench-python.json.
    Python(crate::bench_python::PythonArgs),
    /// Issue 47's stress: P processes x N random namespace and data operations (creates,
    /// renames and links across directories, unlinks, truncates, writes, fallocates,
    /// mapped writes, ...) through a mount, every answer checked against a model, beside
    /// bindfs over tmpfs in the same run; then cross-directory renames and links one at a
    /// time on the idle mount (their latency distribution) and the mount log's error lines.
    Stress(crate::bench_stress::StressArgs),
    /// Issue 49's "slow is not dead": every server, a mount and more stress workers than
    /// cores share this host at full load for --minutes (30 by default) with no kill; the
    /// servers marked down (target: none), the map's epoch changes, every answer checked
    /// against the workers' models, and fsck at the end.
    Soak(crate::bench_soak::SoakArgs),
    /// One worker of `bench stress` (internal).
    #[command(hide = true)]
    StressWorker(crate::stress::StressWorkerArgs),
    /// One job of `bench zones` in a zone (internal).
    #[command(hide = true)]
    ZoneJob(crate::bench_zones::ZoneJobArgs),
    /// One worker process of `bench fuse` (internal).
    #[command(hide = true)]
    FuseWorker(crate::bench_fuse::WorkerArgs),
}

#[derive(Args, Clone)]
pub struct RenameDirArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Tree sizes (files), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    sizes: Vec<u64>,
    /// Files per directory in the tree.
    #[arg(long, default_value_t = 100)]
    files_per_dir: u64,
    /// File size in bytes.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

#[derive(Args, Clone)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Operations per phase.
    #[arg(long, default_value_t = 50_000)]
    ops: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// File size in bytes.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Directories the files are spread over.
    #[arg(long, default_value_t = 64)]
    dirs: u64,
    /// Where to write JSON and SVG results.
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
    /// Where the cluster keeps its data (default: a temporary directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Set a directory quota on the run's directory first, with limits far above what the
    /// run makes (nothing is refused): what counting and enforcing a quota cost
    /// (docs/quotas.md "Cost"). Needs every server on protocol 37 or later, and with
    /// --cluster root and the cluster secret.
    #[arg(long)]
    quota: bool,
    /// The directory the files go under.
    #[arg(skip = String::from("/bench"))]
    root: String,
}

#[derive(Serialize)]
struct Result_ {
    name: String,
    ops: u64,
    secs: f64,
    ops_per_sec: f64,
    ratio_to_rpc: f64,
    client_rpcs_per_op: f64,
    server_rpcs_per_op: f64,
    /// Server-to-server requests per operation, by kind (what `server_rpcs_per_op` is made of).
    server_rpcs_by_kind: std::collections::BTreeMap<String, f64>,
    fsyncs: u64,
}

#[derive(Serialize)]
struct Report {
    bench: String,
    nodes: usize,
    inflight: usize,
    file_size_bytes: usize,
    results: Vec<Result_>,
    /// Cluster map changes during the run: with no server stopped, each one is a false
    /// failover (a server marked down under load).
    map_changes: u64,
}

/// An existing cluster to benchmark (`--cluster`), with its key file and request timeout.
pub struct Target {
    pub cluster: Option<PathBuf>,
    pub secret_file: Option<PathBuf>,
    pub timeout: std::time::Duration,
}

pub async fn run(cmd: BenchCmd, target: Target) -> anyhow::Result<()> {
    let own_cluster_only = |what: &str| {
        if let Some(c) = &target.cluster {
            eprintln!(
                "bench {what} starts a cluster of its own (it sets the servers' options or kills \
                 them): {} (--cluster / MYRIAD_CLUSTER) is not used",
                c.display()
            );
        }
    };
    let (name, mut args, phases): (&str, BenchArgs, &[&str]) = match cmd {
        BenchCmd::RenameDir(a) => {
            own_cluster_only("rename-dir");
            return rename_dir(a).await;
        }
        BenchCmd::Smallread(a) => {
            own_cluster_only("smallread");
            return crate::bench_smallread::run(a).await;
        }
        BenchCmd::Fuse(a) => {
            own_cluster_only("fuse");
            return crate::bench_fuse::run(a).await;
        }
        BenchCmd::FuseTransport(a) => return crate::bench_fuse_transport::run(a),
        BenchCmd::Untar(a) => {
            own_cluster_only("untar");
            return crate::bench_untar::run(a).await;
        }
        BenchCmd::Storm(a) => {
            own_cluster_only("storm");
            return crate::bench_storm::run(a).await;
        }
        BenchCmd::Spread(a) => {
            own_cluster_only("spread");
            return crate::bench_spread::run(a).await;
        }
        BenchCmd::SharedDir(a) => {
            own_cluster_only("shared-dir");
            return crate::bench_shared_dir::run(a).await;
        }
        BenchCmd::Ls(a) => {
            own_cluster_only("ls");
            return crate::bench_ls::run(a).await;
        }
        BenchCmd::Failover(a) => {
            own_cluster_only("failover");
            return crate::bench_failover::run(a).await;
        }
        BenchCmd::Capacity(a) => {
            own_cluster_only("capacity");
            return crate::bench_capacity::run(a).await;
        }
        BenchCmd::Python(a) => {
            own_cluster_only("python");
            return crate::bench_python::run(a).await;
        }
        BenchCmd::Zones(a) => {
            own_cluster_only("zones");
            return crate::bench_zones::run(a).await;
        }
        BenchCmd::ZoneJob(a) => {
            return crate::bench_zones::worker(a, target.cluster, target.secret_file).await;
        }
        BenchCmd::FuseWorker(a) => return crate::bench_fuse::worker(&a),
        BenchCmd::Stress(a) => {
            own_cluster_only("stress");
            return crate::bench_stress::run(a).await;
        }
        BenchCmd::Soak(a) => {
            own_cluster_only("soak");
            return crate::bench_soak::run(a).await;
        }
        BenchCmd::StressWorker(a) => return crate::stress::worker_main(&a),
        BenchCmd::Rpc(a) => ("rpc", a, &["rpc"]),
        BenchCmd::Create(a) => ("create", a, &["rpc", "create", "rpc"]),
        BenchCmd::Stat(a) => ("stat", a, &["rpc", "stat", "rpc"]),
        BenchCmd::Fetch(a) => ("fetch", a, &["rpc", "fetch", "rpc"]),
        BenchCmd::All(a) => ("all", a, &["rpc", "create", "stat", "fetch", "rpc"]),
    };
    if target.cluster.is_some() {
        // An existing cluster: its own servers and options; this run's files go to a
        // directory of their own, left in place (the run prints it).
        let client = crate::fs_cmds::connect(
            target.cluster.clone(),
            target.secret_file.clone(),
            target.timeout,
        )?;
        args.nodes = client.map().nodes.len();
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        args.root = format!("/bench-{stamp}-{}", std::process::id());
        eprintln!(
            "bench {name}: existing {}-node cluster, {} in flight, {} B files, {} ops per phase, files in {}",
            args.nodes, args.inflight, args.size, args.ops, args.root
        );
        if args.quota {
            quota_on(&client, &args.root).await?;
        }
        let result = body(Arc::new(client), name, &args, phases).await;
        eprintln!(
            "bench files left in {} (remove with `myriad rm -r {}`)",
            args.root, args.root
        );
        return result;
    }
    let (_tmp, dir) = match &args.data_dir {
        Some(d) => (None, d.clone()),
        None => {
            let t = tempfile::Builder::new().prefix("myriad-bench-").tempdir()?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };
    eprintln!(
        "bench {name}: {}-node local cluster, {} in flight, {} B files, {} ops per phase",
        args.nodes, args.inflight, args.size, args.ops
    );
    let cluster = LocalCluster::up(
        &dir,
        args.nodes,
        &crate::cluster::NodeOptions::for_bench(Vec::new()),
    )
    .await?;
    if args.quota {
        // A map change: as the cluster's administrator, not the benchmark's identity.
        quota_on(
            &cluster.client(std::time::Duration::from_secs(30))?,
            &args.root,
        )
        .await?;
    }
    let client = cluster.client_as(
        std::time::Duration::from_secs(30),
        crate::cluster::bench_identity(),
    );
    let result = match client {
        Ok(c) => body(Arc::new(c), name, &args, phases).await,
        Err(e) => Err(e),
    };
    cluster.down()?;
    result
}

/// Sets a quota on `root` far above any run (2^40 names, 2^50 bytes), once the cluster's
/// protocol floor allows quotas (a cluster just started raises it within moments).
async fn quota_on(client: &Client, root: &str) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while client.newest_map().await.ext.protocol_floor < QUOTAS_SINCE {
        if std::time::Instant::now() > deadline {
            anyhow::bail!("--quota: the cluster's protocol floor stays below {QUOTAS_SINCE}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    crate::map_change::commit_part(
        client,
        |m| Ok(Some(m.with_quota(root, 1 << 50, 1 << 40)?)),
        |m| m.quota_at(root).map(|q| (q.max_files, q.max_bytes)),
    )
    .await?;
    eprintln!("bench: quota on {root} (limits 2^40 names, 2^50 bytes)");
    Ok(())
}

async fn body(
    client: Arc<Client>,
    name: &str,
    args: &BenchArgs,
    phases: &[&str],
) -> anyhow::Result<()> {
    for d in 0..args.dirs {
        client
            .mkdir_p(&format!("{}/d{d:03}", args.root), 0o755)
            .await?;
    }
    let data = Arc::new(file_content(1, args.size));
    let epoch_before = client.newest_map().await.epoch;
    let mut created = false;
    let mut results: Vec<Result_> = Vec::new();
    let mut rpc_rate = 0.0;
    // Warm up connections and server tasks so the baseline is not handicapped by a cold start.
    let warm = BenchArgs {
        ops: args.ops.min(20_000),
        ..args.clone()
    };
    run_phase(&client, "rpc", &warm, &data).await?;
    for &phase in phases {
        if (phase == "stat" || phase == "fetch") && !created {
            run_phase(&client, "create", args, &data).await?;
            created = true;
        }
        client.reset_counters().await?;
        let secs = run_phase(&client, phase, args, &data).await?;
        if phase == "create" {
            created = true;
        }
        let (c, s) = rpc_totals(&client).await?;
        let snaps: Vec<_> = client
            .all_counters()
            .await
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .collect();
        let fsyncs: u64 = snaps.iter().map(|c| c.syncs).sum();
        let mut by_kind = std::collections::BTreeMap::<String, f64>::new();
        for c in snaps.iter().flat_map(|s| &s.server_requests) {
            *by_kind.entry(c.op.clone()).or_default() += c.count as f64 / args.ops as f64;
        }
        let rate = args.ops as f64 / secs;
        if phase == "rpc" {
            rpc_rate = f64::max(rpc_rate, rate);
        }
        results.push(Result_ {
            name: if phase == "rpc" && results.iter().any(|r| r.name.starts_with("rpc")) {
                "rpc-again".to_string()
            } else {
                phase.to_string()
            },
            ops: args.ops,
            secs,
            ops_per_sec: rate,
            ratio_to_rpc: if rpc_rate > 0.0 { rate / rpc_rate } else { 0.0 },
            client_rpcs_per_op: c as f64 / args.ops as f64,
            server_rpcs_per_op: s as f64 / args.ops as f64,
            server_rpcs_by_kind: by_kind,
            fsyncs,
        });
    }
    for r in &mut results {
        r.ratio_to_rpc = r.ops_per_sec / rpc_rate.max(1.0);
    }
    println!(
        "{:<8} {:>9} {:>8} {:>11} {:>10} {:>13} {:>13} {:>8}",
        "phase", "ops", "seconds", "ops/s", "x rpc", "client RPC/op", "server RPC/op", "fsyncs"
    );
    for r in &results {
        println!(
            "{:<8} {:>9} {:>8.2} {:>11.0} {:>10.2} {:>13.3} {:>13.3} {:>8}",
            r.name,
            r.ops,
            r.secs,
            r.ops_per_sec,
            r.ratio_to_rpc,
            r.client_rpcs_per_op,
            r.server_rpcs_per_op,
            r.fsyncs
        );
    }
    for r in results.iter().filter(|r| r.server_rpcs_per_op >= 0.01) {
        let kinds: Vec<String> = r
            .server_rpcs_by_kind
            .iter()
            .filter(|(_, n)| **n >= 0.01)
            .map(|(k, n)| format!("{k} {n:.2}"))
            .collect();
        println!("{}: server requests per op: {}", r.name, kinds.join(", "));
    }
    let map_changes = client.newest_map().await.epoch.saturating_sub(epoch_before);
    println!("cluster map changes during the run (false failovers): {map_changes}");
    let report = Report {
        bench: name.to_string(),
        nodes: args.nodes,
        inflight: args.inflight,
        file_size_bytes: args.size,
        results,
        map_changes,
    };
    std::fs::create_dir_all(&args.out_dir)?;
    let json = args.out_dir.join(format!("bench-{name}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(&report)?)?;
    let svg = args.out_dir.join(format!("bench-{name}.svg"));
    std::fs::write(
        &svg,
        bar_chart(
            &format!(
                "myriad bench {name}: ops/s ({} nodes, {} in flight)",
                args.nodes, args.inflight
            ),
            &report.results,
        ),
    )?;
    println!("\nresults: {} and {}", json.display(), svg.display());
    Ok(())
}

fn bench_path(args: &BenchArgs, i: u64) -> String {
    format!("{}/d{:03}/f{i:07}", args.root, i % args.dirs)
}

/// Runs `args.ops` operations of one kind with `args.inflight` in flight; returns seconds.
async fn run_phase(
    client: &Arc<Client>,
    phase: &str,
    args: &BenchArgs,
    data: &Arc<Vec<u8>>,
) -> anyhow::Result<f64> {
    let nodes: Vec<myriad_client::NodeId> = client.map().nodes.iter().map(|n| n.id).collect();
    let t = Instant::now();
    let mut s = futures::stream::iter((0..args.ops).map(|i| {
        let c = client.clone();
        let data = data.clone();
        let path = bench_path(args, i);
        let node = nodes[usize::try_from(i).unwrap_or(0) % nodes.len()];
        let phase = phase.to_string();
        async move {
            match phase.as_str() {
                "rpc" => c.echo(node, Vec::new()).await.map(|_| ()),
                "create" => c.create(&path, 0o644, true, &data).await.map(|_| ()),
                "stat" => c.stat(&path).await.map(|_| ()),
                _ => c.fetch(&path).await.map(|_| ()),
            }
        }
    }))
    .buffer_unordered(args.inflight);
    while let Some(r) = s.next().await {
        r?;
    }
    Ok(t.elapsed().as_secs_f64())
}

fn bar_chart(title: &str, results: &[Result_]) -> String {
    let max = results.iter().map(|r| r.ops_per_sec).fold(1.0, f64::max);
    let (w, bar_h, gap, left) = (720.0, 28.0, 14.0, 90.0);
    let h = 60.0 + results.len() as f64 * (bar_h + gap);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"24\" font-size=\"15\">{title}</text>\n"
    );
    for (i, r) in results.iter().enumerate() {
        let y = 44.0 + i as f64 * (bar_h + gap);
        let bw = (w - left - 170.0) * r.ops_per_sec / max;
        s.push_str(&format!(
            "<text x=\"10\" y=\"{:.0}\">{}</text><rect x=\"{left}\" y=\"{y:.0}\" width=\"{bw:.0}\" height=\"{bar_h}\" fill=\"#4a78b5\"/><text x=\"{:.0}\" y=\"{:.0}\">{:.0}/s ({:.2}x rpc)</text>\n",
            y + 19.0, r.name, left + bw + 6.0, y + 19.0, r.ops_per_sec, r.ratio_to_rpc
        ));
    }
    s.push_str("</svg>\n");
    s
}

#[derive(Serialize)]
struct RenameRow {
    files: u64,
    dirs: u64,
    secs: f64,
    files_per_sec: f64,
    client_rpcs: u64,
    server_rpcs: u64,
}

async fn rename_dir(args: RenameDirArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("myriad-bench-").tempdir()?;
    eprintln!(
        "bench rename-dir: {}-node local cluster, trees of {:?} files",
        args.nodes, args.sizes
    );
    let cluster = LocalCluster::up(
        tmp.path(),
        args.nodes,
        &crate::cluster::NodeOptions::for_bench(Vec::new()),
    )
    .await?;
    let result = rename_dir_body(&cluster, &args).await;
    cluster.down()?;
    result
}

async fn rename_dir_body(cluster: &LocalCluster, args: &RenameDirArgs) -> anyhow::Result<()> {
    let client = Arc::new(cluster.client_as(
        std::time::Duration::from_secs(120),
        crate::cluster::bench_identity(),
    )?);
    let data = Arc::new(file_content(2, args.size));
    let mut rows = Vec::new();
    for (t, &files) in args.sizes.iter().enumerate() {
        let root = format!("/tree{t}");
        let dirs = files.div_ceil(args.files_per_dir.max(1));
        for d in 0..dirs {
            client.mkdir_p(&format!("{root}/d{d:05}"), 0o755).await?;
        }
        let mut s = futures::stream::iter((0..files).map(|i| {
            let c = client.clone();
            let data = data.clone();
            let path = format!("{root}/d{:05}/f{i:07}", i / args.files_per_dir.max(1));
            async move { c.create(&path, 0o644, true, &data).await.map(|_| ()) }
        }))
        .buffer_unordered(64);
        while let Some(r) = s.next().await {
            r?;
        }
        client.reset_counters().await?;
        let t0 = Instant::now();
        client
            .rename(
                &root,
                &format!("{root}-moved"),
                myriad_client::RenameFlags::default(),
            )
            .await?;
        let secs = t0.elapsed().as_secs_f64();
        let (c, sv) = rpc_totals(&client).await?;
        // Spot-check the move.
        let last = format!(
            "{root}-moved/d{:05}/f{:07}",
            (files - 1) / args.files_per_dir.max(1),
            files - 1
        );
        anyhow::ensure!(
            client.fetch(&last).await?.1 == *data,
            "moved file has wrong contents"
        );
        rows.push(RenameRow {
            files,
            dirs: dirs + 1,
            secs,
            files_per_sec: files as f64 / secs,
            client_rpcs: c,
            server_rpcs: sv,
        });
    }
    println!(
        "{:>9} {:>7} {:>9} {:>12} {:>12} {:>12}",
        "files", "dirs", "seconds", "files/s", "client RPCs", "server RPCs"
    );
    for r in &rows {
        println!(
            "{:>9} {:>7} {:>9.3} {:>12.0} {:>12} {:>12}",
            r.files, r.dirs, r.secs, r.files_per_sec, r.client_rpcs, r.server_rpcs
        );
    }
    std::fs::create_dir_all(&args.out_dir)?;
    let json = args.out_dir.join("bench-rename-dir.json");
    std::fs::write(&json, serde_json::to_string_pretty(&rows)?)?;
    println!("\nresults: {}", json.display());
    Ok(())
}
