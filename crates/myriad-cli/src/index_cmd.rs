//! `myriad index build|drop|status`: metadata indexes of frozen trees
//! (docs/metadata-index.md).

use clap::Subcommand;
use myriad_client::proto::tree_index::{DEFAULT_INLINE_BYTES, DEFAULT_MAX_BYTES};
use myriad_client::{BuildOptions, Client};

use crate::fs_cmds::normalize;

#[derive(Subcommand)]
pub enum IndexCmd {
    /// Freeze the tree under PATH (every change inside it then fails with EROFS) and write
    /// its metadata index: every name, attributes, symlink targets, listings, and the
    /// contents of small files everyone may read. Mounts then answer lookups, stats,
    /// listings and failed opens below PATH from it with no server request. To change the
    /// tree: drop, change, build again. Root only.
    Build {
        path: String,
        /// Keep the contents of public files up to this many bytes in the index.
        #[arg(long, default_value_t = DEFAULT_INLINE_BYTES)]
        inline_bytes: u64,
        /// Refuse to write an index bigger than this (bytes, after compression).
        #[arg(long, default_value_t = DEFAULT_MAX_BYTES)]
        max_bytes: u64,
        /// Build an automatic index instead: the tree is not frozen, and its first change
        /// unregisters the index (clients fall back to the servers until it is built
        /// again). Mounts build these by themselves for trees read far more than changed.
        #[arg(long)]
        auto: bool,
    },
    /// Stop every client using the index of PATH, then make the tree writable again and
    /// remove the index. Also thaws a tree a failed build left frozen. Root only.
    Drop { path: String },
    /// Directories the servers saw read at least --min-reads times in their popularity
    /// window and not changed for --quiet-secs: the candidates for automatic indexes.
    Candidates {
        #[arg(long, default_value_t = 100)]
        min_reads: u64,
        #[arg(long, default_value_t = 60)]
        quiet_secs: u64,
    },
    /// List every index: tree, version, directories, names, size, answers given from it
    /// (as mounts report them every 30 s), manual or automatic.
    Status {
        /// One JSON object per index, one per line.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(cmd: IndexCmd, client: &Client) -> anyhow::Result<()> {
    match cmd {
        IndexCmd::Build {
            path,
            inline_bytes,
            max_bytes,
            auto,
        } => {
            let root = normalize(&path)?;
            let started = std::time::Instant::now();
            let opts = BuildOptions {
                inline_bytes,
                max_bytes,
                version: None,
                max_dirs: None,
                auto,
            };
            let r = client
                .build_index(&root, opts)
                .await
                .map_err(|e| anyhow::anyhow!("index build {root}: {e}"))?;
            println!(
                "indexed {root}: version {}, {} directories {}, {} listed in the index, {} names, {} files inline, {} bytes ({}/{}), {:.2} s",
                r.tree.version,
                r.frozen_dirs,
                if auto {
                    "marked (automatic: the first change unregisters it)"
                } else {
                    "frozen"
                },
                r.indexed_dirs,
                r.tree.entries,
                r.inline_files,
                r.tree.bytes,
                myriad_client::proto::tree_index::INDEX_DIR,
                r.tree.file,
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        IndexCmd::Drop { path } => {
            let root = normalize(&path)?;
            let thawed = client
                .drop_index(&root)
                .await
                .map_err(|e| anyhow::anyhow!("index drop {root}: {e}"))?;
            println!("dropped the index of {root}: {thawed} directories writable again");
            Ok(())
        }
        IndexCmd::Candidates {
            min_reads,
            quiet_secs,
        } => {
            let found = client
                .index_candidates(min_reads, std::time::Duration::from_secs(quiet_secs))
                .await
                .map_err(|e| anyhow::anyhow!("index candidates: {e}"))?;
            if found.is_empty() {
                println!("no directory read {min_reads} times and quiet for {quiet_secs} s");
            }
            for d in found {
                let quiet = d.since_ms.map_or_else(
                    || "no change seen".to_string(),
                    |ms| format!("last change {:.0} s ago", ms as f64 / 1000.0),
                );
                // Readers as their reads name them (mounts'), counted up to 8; 0 from
                // clients without leases or a server older than protocol 33.
                let readers = match d.readers {
                    0 => "readers not named".to_string(),
                    1 => "1 reader".to_string(),
                    n => format!("{n} readers"),
                };
                println!("{:>10}  {}  ({quiet}, {readers})", d.reads, d.path);
            }
            Ok(())
        }
        IndexCmd::Status { json } => {
            let reg = client
                .index_registry()
                .await
                .map_err(|e| anyhow::anyhow!("index status: {e}"))?;
            let hits = client
                .index_hit_counts()
                .await
                .map_err(|e| anyhow::anyhow!("index status: hit counts: {e}"))?;
            let hits_of = |t: &myriad_client::proto::tree_index::RegisteredTree| {
                hits.get(&t.file).copied().unwrap_or(0)
            };
            if json {
                for t in &reg.trees {
                    let v = serde_json::json!({
                        "root": t.root, "version": t.version, "kind": kind(t),
                        "dirs": t.dirs, "entries": t.entries, "bytes": t.bytes,
                        "file": t.file, "built_ns": t.built_ns, "hits": hits_of(t),
                    });
                    println!("{v}");
                }
                return Ok(());
            }
            if reg.trees.is_empty() {
                println!("no indexes (`myriad index build PATH` makes one)");
                return Ok(());
            }
            println!(
                "{:<40} {:>14} {:>7} {:>9} {:>11} {:>11}  KIND",
                "TREE", "VERSION", "DIRS", "NAMES", "BYTES", "HITS"
            );
            for t in &reg.trees {
                println!(
                    "{:<40} {:>14} {:>7} {:>9} {:>11} {:>11}  {}",
                    t.root,
                    t.version,
                    t.dirs,
                    t.entries,
                    t.bytes,
                    hits_of(t),
                    kind(t)
                );
            }
            println!("(hits: answers mounts gave from each index, as they report them every 30 s)");
            Ok(())
        }
    }
}

/// "manual" (frozen by `index build`) or "auto" (unregistered by its tree's first change).
fn kind(t: &myriad_client::proto::tree_index::RegisteredTree) -> &'static str {
    if t.auto { "auto" } else { "manual" }
}
