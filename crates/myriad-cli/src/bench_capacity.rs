//! `myriad bench capacity` (issue 21, the Panasas seed's Fig. 1 and 2): files from 0 to
//! 1 MiB in 4 KiB steps and a few large ones, written to a local cluster; for each, the raw
//! bytes Myriad stores for it (`du --raw`: every copy of its blocks with their checksums,
//! and of its entry), against what the same file takes on local disk (its blocks) in the
//! same run. Writes `bench-capacity.json` (rows `{"size", "raw_bytes", "local_bytes"}`)
//! and `bench-capacity.png` (raw bytes per byte against size) into `--out-dir`.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::cluster::LocalCluster;

#[derive(Args, Clone)]
pub struct CapacityArgs {
    #[arg(long, default_value_t = 6)]
    nodes: usize,
    /// Small files from 0 up to this many KiB...
    #[arg(long, default_value_t = 1024)]
    max_kib: u64,
    /// ...in steps of this many KiB.
    #[arg(long, default_value_t = 4)]
    step_kib: u64,
    /// Large files, in MiB.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    large_mib: Vec<u64>,
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
}

#[derive(Serialize)]
struct Row {
    size: u64,
    raw_bytes: u64,
    local_bytes: u64,
}

#[derive(Serialize)]
struct CapacityResult {
    nodes: usize,
    copies: u64,
    rows: Vec<Row>,
}

pub async fn run(args: CapacityArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("myriad-bench-").tempdir()?;
    let sizes: Vec<u64> = (0..=args.max_kib / args.step_kib.max(1))
        .map(|i| i * args.step_kib.max(1) * 1024)
        .chain(args.large_mib.iter().map(|m| m << 20))
        .collect();
    eprintln!(
        "bench capacity: {}-node local cluster, {} files from 0 to {} KiB and {:?} MiB",
        args.nodes,
        sizes.len(),
        args.max_kib,
        args.large_mib
    );
    let cluster = LocalCluster::up(
        tmp.path(),
        args.nodes,
        // Chunks coded half a second after they are written (docs/redundancy.md), so the
        // large files are measured as they are kept once settled.
        &crate::cluster::NodeOptions::for_bench(vec!["--ec-settle-ms=500".into()]),
    )
    .await?;
    let result = body(&cluster, &args, &sizes, &tmp.path().join("local")).await;
    cluster.down()?;
    result
}

/// `du --raw` of `path` once `coded` of its chunks are erasure coded (or a minute passed:
/// a cluster too small for a code keeps copies, and that is what it reports).
async fn settled_usage(
    client: &myriad_client::Client,
    path: &str,
    coded: u64,
) -> anyhow::Result<crate::du_cmd::Usage> {
    let start = std::time::Instant::now();
    loop {
        let u = crate::du_cmd::usage(client, path, 1).await?;
        if u.coded_chunks >= coded || start.elapsed() > std::time::Duration::from_secs(60) {
            return Ok(u);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

async fn body(
    cluster: &LocalCluster,
    args: &CapacityArgs,
    sizes: &[u64],
    local: &std::path::Path,
) -> anyhow::Result<()> {
    let timeout = std::time::Duration::from_secs(300);
    let client = cluster.client_as(timeout, crate::cluster::bench_identity())?;
    client.mkdir("/capacity", 0o755).await?;
    std::fs::create_dir_all(local)?;
    let mut rows = Vec::new();
    for &size in sizes {
        let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let path = format!("/capacity/f{size}");
        let h = client.create(&path, 0o644, true, &[]).await?;
        // In pieces the size of a request (as `myriad put` writes).
        for (n, piece) in data.chunks(1 << 20).enumerate() {
            client.write(&h, (n as u64) << 20, piece).await?;
        }
        let chunk = cluster.map.chunk_size_bytes;
        let coded = if size > chunk {
            size.div_ceil(chunk) - 1
        } else {
            0
        };
        let raw = settled_usage(&client, &path, coded).await?.raw_bytes;
        let file = local.join(format!("f{size}"));
        std::fs::write(&file, &data)?;
        let f = std::fs::File::open(&file)?;
        f.sync_all()?;
        let local_bytes = f.metadata()?.blocks() * 512;
        rows.push(Row {
            size,
            raw_bytes: raw,
            local_bytes,
        });
    }
    let copies = crate::tree_walk::copies(&client);
    let ratio = |r: &Row| {
        if r.size == 0 {
            0.0
        } else {
            r.raw_bytes as f64 / r.size as f64
        }
    };
    println!(
        "{:>12} {:>14} {:>14} {:>9}",
        "size", "raw bytes", "local bytes", "raw/size"
    );
    for r in rows
        .iter()
        .filter(|r| [4096, 65_536, 1 << 20].contains(&r.size) || r.size > args.max_kib * 1024)
    {
        println!(
            "{:>12} {:>14} {:>14} {:>9.3}",
            r.size,
            r.raw_bytes,
            r.local_bytes,
            ratio(r)
        );
    }
    let result = CapacityResult {
        nodes: args.nodes,
        copies,
        rows,
    };
    std::fs::create_dir_all(&args.out_dir)?;
    let json = args.out_dir.join("bench-capacity.json");
    std::fs::write(&json, serde_json::to_string_pretty(&result)?)?;
    let series = |name: &str, f: &dyn Fn(&Row) -> u64| crate::plot::Series {
        name: name.into(),
        points: result
            .rows
            .iter()
            .filter(|r| r.size > 0)
            .map(|r| (r.size as f64, f(r) as f64 / r.size as f64))
            .collect(),
    };
    let png = crate::plot::line_chart_png(
        "raw bytes stored per byte of file",
        "file size (bytes)",
        "raw / size",
        &[
            series("myriad", &|r| r.raw_bytes),
            series("local disk", &|r| r.local_bytes),
        ],
    )
    .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    let png_path = args.out_dir.join("bench-capacity.png");
    std::fs::write(&png_path, png)?;
    println!("results: {} and {}", json.display(), png_path.display());
    Ok(())
}
