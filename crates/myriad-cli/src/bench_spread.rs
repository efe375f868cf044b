//! `myriad bench spread`: ordinary placement under load. P clients create, stat and unlink
//! N empty files spread over many directories, on a local cluster of each size in
//! `--nodes`; per phase, each server's share of the client requests (busiest / mean).
//! Directories are placed by the hash ring over partitions, so this measures how evenly
//! that ring, and the partitions' primaries, spread a many-directory workload.

use std::sync::Arc;

use clap::Args;

use crate::bench_shared_dir::{
    LoadArgs, Workload, prepare, run_sizes, worst_after_create, write_json,
};

#[derive(Args, Clone)]
pub struct SpreadArgs {
    /// Cluster sizes, one cluster each, in turn (e.g. 4,8,16,32).
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32")]
    nodes: Vec<usize>,
    /// Directories the files are spread over (file i goes to directory i mod DIRS).
    #[arg(long, default_value_t = 1000)]
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
                for d in 0..dirs {
                    c.mkdir(&dir_of(d), 0o755).await?;
                }
                Ok(())
            })
        }),
        shared_dir: None,
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
