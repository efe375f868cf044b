//! `myriad bench smallread`: the TyrFS small-file read experiment (Fig. 6 and 7) at small
//! scale. One data set is stored as files of each size at depth 4 and read entirely with
//! `fetch` by parallel readers, with ancestor metadata replication on and off (a cluster
//! each) and on the local file system, all in the same run.
//!
//! Metadata share of time: a `stat` pass over the same files (metadata only) divided by the
//! `fetch` pass (metadata + data).
//!
//! The two passes above keep every chunk in full copies (`--ec=false`); a third cluster
//! stores the sizes larger than a chunk erasure coded (docs/redundancy.md), waits until
//! every chunk past the first is coded, and reads them healthy and then with one server
//! killed (reads decoding around its fragments).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use serde::Serialize;

use crate::cluster::{LocalCluster, NodeOptions, bench_identity};
use crate::demo::rpc_totals;
use crate::workload::file_content;

#[derive(Args, Clone)]
pub struct SmallreadArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Size of the data set in MiB, stored once per file size.
    #[arg(long, default_value_t = 256)]
    dataset_mib: u64,
    /// File sizes in bytes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "33554432,8388608,1048576,262144,32768,4096"
    )]
    sizes: Vec<u64>,
    /// Parallel readers (requests in flight).
    #[arg(long, default_value_t = 16)]
    readers: usize,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

#[derive(Serialize, Clone, Default)]
struct Row {
    size: u64,
    files: u64,
    mib_s: f64,
    meta_share: f64,
    client_rpcs_per_file: f64,
    server_rpcs_per_file: f64,
}

#[derive(Serialize)]
struct Report {
    dataset_mib: u64,
    readers: usize,
    nodes: usize,
    replication_on: Vec<Row>,
    replication_off: Vec<Row>,
    local_fs: Vec<Row>,
    /// Files larger than a chunk, erasure coded (replication on): healthy.
    coded: Vec<Row>,
    /// The same with one server killed.
    coded_one_down: Vec<Row>,
}

fn label(size: u64) -> String {
    if size >= 1 << 20 {
        format!("{}M", size >> 20)
    } else {
        format!("{}K", size >> 10)
    }
}

fn path_of(size: u64, i: u64) -> String {
    format!("/set-{}/a/b/c/f{i:06}", label(size))
}

pub async fn run(args: SmallreadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.sizes.iter().all(|&s| s > 0) && args.readers > 0,
        "sizes and readers must be positive"
    );
    let tmp = tempfile::Builder::new()
        .prefix("myriad-smallread-")
        .tempdir()?;
    eprintln!(
        "bench smallread: {} MiB per size, sizes {:?}, {} readers, {}-node clusters",
        args.dataset_mib, args.sizes, args.readers, args.nodes
    );
    let on = cluster_pass(&args, &tmp.path().join("on"), true).await?;
    let off = cluster_pass(&args, &tmp.path().join("off"), false).await?;
    let local = local_pass(&args, &tmp.path().join("local")).await?;
    let (coded, coded_one_down) = coded_pass(&args, &tmp.path().join("coded")).await?;

    println!(
        "{:>6} {:>7} | {:>9} {:>9} {:>9} | {:>7} | {:>10} {:>10} | {:>9} {:>9}",
        "size",
        "files",
        "on MiB/s",
        "off MiB/s",
        "local",
        "on/off",
        "meta% on",
        "meta% off",
        "req/f on",
        "req/f off"
    );
    for ((a, b), l) in on.iter().zip(&off).zip(&local) {
        println!(
            "{:>6} {:>7} | {:>9.1} {:>9.1} {:>9.1} | {:>7.2} | {:>9.0}% {:>9.0}% | {:>9.2} {:>9.2}",
            label(a.size),
            a.files,
            a.mib_s,
            b.mib_s,
            l.mib_s,
            a.mib_s / b.mib_s.max(1e-9),
            a.meta_share * 100.0,
            b.meta_share * 100.0,
            a.client_rpcs_per_file + a.server_rpcs_per_file,
            b.client_rpcs_per_file + b.server_rpcs_per_file
        );
    }
    let find = |rows: &[Row], size: u64| rows.iter().find(|r| r.size == size).map(|r| r.mib_s);
    if let (Some(big), Some(small)) = (find(&on, 32 << 20), find(&on, 32 << 10)) {
        println!(
            "\ntarget: 32 KiB keeps >= 70% of 32 MiB throughput (replication on): {:.0}%",
            small / big * 100.0
        );
    }
    if !coded.is_empty() {
        println!(
            "\n{:>6} {:>7} | {:>12} {:>12} {:>14} | {:>10}",
            "size", "files", "copies MiB/s", "coded MiB/s", "1 down MiB/s", "coded/copies"
        );
        for (c, d) in coded.iter().zip(&coded_one_down) {
            let copies = find(&on, c.size).unwrap_or(0.0);
            println!(
                "{:>6} {:>7} | {:>12.1} {:>12.1} {:>14.1} | {:>10.2}",
                label(c.size),
                c.files,
                copies,
                c.mib_s,
                d.mib_s,
                c.mib_s / copies.max(1e-9)
            );
        }
    }
    if let (Some(a), Some(b)) = (find(&on, 4096), find(&off, 4096)) {
        println!(
            "target: 4 KiB reads >= 2x faster with replication on than off: {:.2}x",
            a / b
        );
    }

    std::fs::create_dir_all(&args.out_dir)?;
    let series = |name: &str, rows: &[Row]| crate::plot::Series {
        name: name.to_string(),
        points: rows.iter().map(|r| (r.size as f64, r.mib_s)).collect(),
    };
    let png = crate::plot::line_chart_png(
        &format!(
            "myriad bench smallread: {} MiB read with fetch, {} readers",
            args.dataset_mib, args.readers
        ),
        "file size (bytes, log scale)",
        "MiB/s",
        &[
            series("replication on", &on),
            series("replication off", &off),
            series("local fs", &local),
        ],
    )
    .map_err(|e| anyhow::anyhow!("cannot draw the plot: {e}"))?;
    let png_path = args.out_dir.join("bench-smallread.png");
    std::fs::write(&png_path, png)?;
    let report = Report {
        dataset_mib: args.dataset_mib,
        readers: args.readers,
        nodes: args.nodes,
        replication_on: on,
        replication_off: off,
        local_fs: local,
        coded,
        coded_one_down,
    };
    let json = args.out_dir.join("bench-smallread.json");
    std::fs::write(&json, serde_json::to_string_pretty(&report)?)?;
    println!("\nresults: {} and {}", json.display(), png_path.display());
    Ok(())
}

async fn cluster_pass(
    args: &SmallreadArgs,
    dir: &Path,
    replication: bool,
) -> anyhow::Result<Vec<Row>> {
    let flag = format!(
        "--metadata-replication={}",
        if replication { "on" } else { "off" }
    );
    let opts = NodeOptions::for_bench(vec![flag, "--ec=false".into()]);
    let cluster = LocalCluster::up(dir, args.nodes, &opts).await?;
    let result = cluster_body(&cluster, args, &args.sizes, false).await;
    cluster.down()?;
    result
}

/// The sizes larger than a chunk, erasure coded: read healthy, then with one server
/// killed. Empty if no size is larger than a chunk.
async fn coded_pass(args: &SmallreadArgs, dir: &Path) -> anyhow::Result<(Vec<Row>, Vec<Row>)> {
    let opts = NodeOptions::for_bench(vec![
        "--metadata-replication=on".into(),
        "--ec=true".into(),
        "--ec-settle-ms=500".into(),
    ]);
    let cluster = LocalCluster::up(dir, args.nodes, &opts).await?;
    let result = async {
        let chunk = cluster.map.chunk_size_bytes;
        let sizes: Vec<u64> = args.sizes.iter().copied().filter(|&s| s > chunk).collect();
        if sizes.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let healthy = cluster_body(&cluster, args, &sizes, true).await?;
        let victim = cluster
            .map
            .nodes
            .last()
            .map(|n| n.id)
            .ok_or_else(|| anyhow::anyhow!("no servers"))?;
        cluster.kill9(victim)?;
        eprintln!("  server {victim} killed: reading again");
        let down = read_rows(&cluster, args, &sizes).await?;
        Ok((healthy, down))
    }
    .await;
    cluster.down()?;
    result
}

/// The coded chunks the servers counted so far (`chunks_coded`).
async fn chunks_coded(client: &myriad_client::Client) -> u64 {
    client
        .all_counters()
        .await
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .flat_map(|s| s.server_requests)
        .filter(|c| c.op == "chunks_coded")
        .map(|c| c.count)
        .sum()
}

/// Waits until `want` chunks are coded (at most a minute past the last progress).
async fn wait_coded(client: &myriad_client::Client, want: u64) -> anyhow::Result<()> {
    let mut last = (0, Instant::now());
    loop {
        let n = chunks_coded(client).await;
        if n >= want {
            return Ok(());
        }
        if n > last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > std::time::Duration::from_secs(60) {
            anyhow::bail!("only {n} of {want} chunks were coded");
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

async fn cluster_body(
    cluster: &LocalCluster,
    args: &SmallreadArgs,
    sizes: &[u64],
    coding: bool,
) -> anyhow::Result<Vec<Row>> {
    let client =
        Arc::new(cluster.client_as(std::time::Duration::from_secs(120), bench_identity())?);
    let chunk = cluster.map.chunk_size_bytes;
    let mut rows = Vec::new();
    for &size in sizes {
        let files = (args.dataset_mib << 20).div_ceil(size);
        let coded_before = chunks_coded(&client).await;
        client
            .mkdir_p(&format!("/set-{}/a/b/c", label(size)), 0o755)
            .await?;
        let data = Arc::new(file_content(size, usize::try_from(size)?));
        run_all(files, args.readers, |i| {
            let (c, data) = (client.clone(), data.clone());
            async move {
                c.create(&path_of(size, i), 0o644, true, &data)
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        if size > chunk && coding {
            let chunks = files * (size.div_ceil(chunk) - 1);
            wait_coded(&client, coded_before + chunks).await?;
        }
        rows.push(read_size(&client, args, size, files).await?);
    }
    Ok(rows)
}

/// The read passes over every size again (a cluster whose files are already there).
async fn read_rows(
    cluster: &LocalCluster,
    args: &SmallreadArgs,
    sizes: &[u64],
) -> anyhow::Result<Vec<Row>> {
    let client =
        Arc::new(cluster.client_as(std::time::Duration::from_secs(120), bench_identity())?);
    let mut rows = Vec::new();
    for &size in sizes {
        let files = (args.dataset_mib << 20).div_ceil(size);
        rows.push(read_size(&client, args, size, files).await?);
    }
    Ok(rows)
}

/// Warm-up, a `stat` pass and a `fetch` pass over the `files` files of `size`.
async fn read_size(
    client: &Arc<myriad_client::Client>,
    args: &SmallreadArgs,
    size: u64,
    files: u64,
) -> anyhow::Result<Row> {
    // Warm-up, the same for every configuration: a few reads to let popularity build.
    run_all(files.min(64), args.readers, |i| {
        let c = client.clone();
        async move { c.fetch(&path_of(size, i)).await.map(|_| ()) }
    })
    .await?;
    let t = Instant::now();
    run_all(files, args.readers, |i| {
        let c = client.clone();
        async move { c.stat(&path_of(size, i)).await.map(|_| ()) }
    })
    .await?;
    let meta_secs = t.elapsed().as_secs_f64();
    client.reset_counters().await?;
    let t = Instant::now();
    run_all(files, args.readers, |i| {
        let c = client.clone();
        async move {
            let (inode, bytes) = c.fetch(&path_of(size, i)).await?;
            if bytes.len() as u64 != inode.size {
                return Err(myriad_client::FsError::Io("short fetch".into()));
            }
            Ok(())
        }
    })
    .await?;
    let secs = t.elapsed().as_secs_f64();
    let (c, s) = rpc_totals(client).await?;
    let row = Row {
        size,
        files,
        mib_s: (files * size) as f64 / 1048576.0 / secs,
        meta_share: (meta_secs / secs).min(1.0),
        client_rpcs_per_file: c as f64 / files as f64,
        server_rpcs_per_file: s as f64 / files as f64,
    };
    eprintln!(
        "  {} files of {}: {:.1} MiB/s",
        files,
        label(size),
        row.mib_s
    );
    Ok(row)
}

async fn run_all<F, Fut>(n: u64, parallel: usize, f: F) -> anyhow::Result<()>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), myriad_client::FsError>>,
{
    let mut s = futures::stream::iter((0..n).map(f)).buffer_unordered(parallel);
    while let Some(r) = s.next().await {
        r?;
    }
    Ok(())
}

/// The same data set on the local file system, read with the same parallelism (page cache
/// warm, as the cluster's caches are).
async fn local_pass(args: &SmallreadArgs, dir: &Path) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let files = (args.dataset_mib << 20).div_ceil(size);
        let base = dir.join(format!("set-{}/a/b/c", label(size)));
        std::fs::create_dir_all(&base)
            .with_context(|| format!("cannot create {}", base.display()))?;
        let data = file_content(size, usize::try_from(size)?);
        for i in 0..files {
            std::fs::write(base.join(format!("f{i:06}")), &data)?;
        }
        let base = Arc::new(base);
        let pass = |meta: bool| {
            let base = base.clone();
            async move {
                let t = Instant::now();
                let mut s = futures::stream::iter((0..files).map(|i| {
                    let p = base.join(format!("f{i:06}"));
                    tokio::task::spawn_blocking(move || {
                        if meta {
                            std::fs::metadata(&p).map(|_| ())
                        } else {
                            std::fs::read(&p).map(|_| ())
                        }
                    })
                }))
                .buffer_unordered(args.readers);
                while let Some(r) = s.next().await {
                    r??;
                }
                Ok::<f64, anyhow::Error>(t.elapsed().as_secs_f64())
            }
        };
        let meta = pass(true).await?;
        let secs = pass(false).await?;
        rows.push(Row {
            size,
            files,
            mib_s: (files * size) as f64 / 1048576.0 / secs,
            meta_share: (meta / secs).min(1.0),
            ..Row::default()
        });
        let _ = std::fs::remove_dir_all(dir.join(format!("set-{}", label(size))));
    }
    Ok(rows)
}
