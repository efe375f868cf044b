//! `myriad bench spread`: ordinary placement under load. P clients create, stat and unlink
//! N empty files spread over many directories, on a local cluster of each size in
//! `--nodes`; per phase, each server's share of the client requests (busiest / mean).
//! Directories are placed by the hash ring over partitions, so this measures how evenly
//! that ring, and the partitions' primaries, spread a many-directory workload. Each size
//! also prints the floor placement alone gives (each directory counted once): a hash puts
//! D directories on S servers with the spread of a random draw, so 1,000 directories
//! cannot be even on 32 servers (31 each: 1.25 by placement alone) whatever the servers
//! do; 10,000 directories of 10 files (the shape of a source tree) come within 1.13.

use std::sync::Arc;

use clap::Args;
use futures::StreamExt;

use crate::bench_shared_dir::{
    LoadArgs, Workload, prepare, run_sizes, worst_after_create, write_json,
};

#[derive(Args, Clone)]
pub struct SpreadArgs {
    /// Cluster sizes, one cluster each, in turn (e.g. 4,8,16,32).
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32")]
    nodes: Vec<usize>,
    /// Directories the files are spread over (file i goes to directory i mod DIRS).
    #[arg(long, default_value_t = 10_000)]
    dirs: u64,
    /// Files created, stat'ed and unlinked in all.
    #[arg(long, default_value_t = 100_000)]
    files: u64,
    #[command(flatten)]
    load: LoadArgs,
}

fn dir_of(d: u64) -> String {
    format!("/spread/d{d:05}")
}

pub async fn run(args: SpreadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.nodes.is_empty() && args.files > 0 && args.dirs > 0 && args.dirs <= 100_000,
        "--nodes, --files and --dirs (at most 100,000) must be given"
    );
    eprintln!(
        "bench spread: clusters of {:?} servers, {} clients x {} in flight, {} files over {} directories",
        args.nodes, args.load.clients, args.load.inflight, args.files, args.dirs
    );
    let dirs = args.dirs;
    let work = Workload {
        server_args: Vec::new(),
        files: args.files,
        path_of: Arc::new(move |i| format!("{}/f{i:08}", dir_of(i % dirs))),
        prepare: prepare(move |c| {
            Box::pin(async move {
                c.mkdir("/spread", 0o755).await?;
                let mut made = futures::stream::iter(0..dirs)
                    .map(|d| async move { c.mkdir(&dir_of(d), 0o755).await.map(|_| ()) })
                    .buffer_unordered(32);
                while let Some(r) = made.next().await {
                    r?;
                }
                Ok(())
            })
        }),
        shared_dir: None,
        even_dirs: (0..dirs).map(dir_of).collect(),
    };
    let rows = run_sizes(&args.nodes, &args.load, &work, |root| {
        for d in 0..dirs {
            std::fs::create_dir_all(root.join(dir_of(d).trim_start_matches('/')))?;
        }
        Ok(())
    })
    .await?;
    let worst = rows.iter().map(|r| r.busiest_over_mean).fold(0.0, f64::max);
    println!(
        "busiest/mean, worst over phases and sizes: {worst:.2} (target <= 1.15: {}); after the creates: {:.2}",
        if worst <= 1.15 { "met" } else { "NOT met" },
        worst_after_create(&rows)
    );
    write_json(&args.load, "bench-spread.json", &rows)
}
