//! `myriad-sim`: runs simulations. `--seed S` (default 1) and `--seeds N` (default 1) run
//! seeds S..S+N; a failing seed prints itself, the command that replays it, and the last
//! events, and the run exits 1.

use std::process::ExitCode;

use myriad_sim::{SimConfig, run};

const HELP: &str = "myriad-sim: deterministic simulation of a Myriad cluster (docs/simulation.md)

Usage: myriad-sim [--seed S] [--seeds N] [--ops N] [--clients N] [--servers N] [--split N] [--no-faults] [--moves] [--leases] [--behind] [--locks] [--dir-moves] [--freeze] [--indexes] [--auto-indexes] [--tiers] [--zones] [--tree-moves] [--quotas] [--trash]

  --seed S      first seed (default 1)
  --seeds N     how many seeds, S..S+N (default 1)
  --ops N       operations per client (default 100)
  --clients N   clients (default 3)
  --servers N   servers (default 4; 3 copies of each partition)
  --split N     directory shards split above N entries (default 16)
  --no-faults   only delays: no crashes, isolations, disk errors or lost messages
  --moves       servers join and leave while the clients work (copies move)
  --leases      two clients of three read through directory leases
  --behind      leased clients write behind, under exclusive leases
  --locks       clients also take and give back file locks on shared inodes
  --dir-moves   clients also move a directory tree back and forth over an empty directory
  --freeze      clients also freeze a tree of their own, write into it and thaw it
  --indexes     ... by building and dropping its metadata index; leased clients read from indexes
  --auto-indexes  ... automatic indexes: never frozen, each write unregisters the index first
  --tiers       every server keeps a fast and a capacity tier, each on a disk that crashes on its own
  --zones       servers in two zones, /c1 and /x2 pinned one to each (copies stay in their zone)
  --tree-moves  with --zones: other client trees are pinned and unpinned while in use (moved online)
  --quotas      quotas on /, /big and /c0: every partition's usage must equal a count from scratch
  --trash       the trash on: every acknowledged removal's file kept in /.trash, nothing more
  MYRIAD_SIM_LOG=debug shows the servers' logs.";

fn parse() -> Result<(SimConfig, u64), String> {
    let mut cfg = SimConfig::new(1);
    let mut seeds = 1u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--seed" => cfg.seed = value("--seed")?,
            "--seeds" => seeds = value("--seeds")?,
            "--ops" => {
                cfg.ops_per_client = u32::try_from(value("--ops")?).map_err(|e| e.to_string())?
            }
            "--clients" => {
                cfg.clients = u32::try_from(value("--clients")?).map_err(|e| e.to_string())?
            }
            "--servers" => {
                cfg.servers = u32::try_from(value("--servers")?).map_err(|e| e.to_string())?
            }
            "--split" => cfg.split_entries = value("--split")?,
            "--no-faults" => cfg.faults = false,
            "--moves" => cfg.moves = true,
            "--leases" => cfg.leases = true,
            "--behind" => cfg.behind = true,
            "--locks" => cfg.locks = true,
            "--dir-moves" => cfg.dir_moves = true,
            "--freeze" => cfg.freeze = true,
            "--indexes" => cfg.indexes = true,
            "--auto-indexes" => {
                cfg.indexes = true;
                cfg.auto_indexes = true;
            }
            "--tiers" => cfg.tiers = true,
            "--quotas" => cfg.quotas = true,
            "--trash" => cfg.trash = true,
            "--zones" => cfg.zones = true,
            "--tree-moves" => {
                cfg.zones = true;
                cfg.tree_moves = true;
            }
            "-h" | "--help" => return Err(HELP.to_string()),
            other => return Err(format!("unknown argument {other}\n\n{HELP}")),
        }
    }
    Ok((cfg, seeds))
}

fn main() -> ExitCode {
    let (cfg, seeds) = match parse() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Ok(level) = std::env::var("MYRIAD_SIM_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(level))
            .with_writer(std::io::stderr)
            .init();
    }
    let first = cfg.seed;
    for seed in first..first.saturating_add(seeds) {
        let c = SimConfig {
            seed,
            ..cfg.clone()
        };
        let wall = std::time::Instant::now();
        match run(&c) {
            Ok(r) => println!(
                "seed {seed}: ok  {} ops, {} events, digest {:016x}, {:.1} s virtual, {:.1} s wall; crashes {}, isolations {}, disk errors {}, planned stops {}, map changes {}, unsynced batches lost {}, copies moved {}, hand-overs {}, trees moved {}/{} (abandoned {}), batches past a waiting setattr {}, setattrs in creates {}",
                r.ops,
                r.events,
                r.digest,
                r.virtual_ms as f64 / 1000.0,
                wall.elapsed().as_secs_f64(),
                r.crashes,
                r.isolations,
                r.disk_errors,
                r.planned_stops,
                r.map_changes,
                r.lost_unsynced,
                r.moves_completed,
                r.handovers,
                r.tree_moves_settled,
                r.tree_moves_started,
                r.tree_moves_abandoned,
                r.behind_passes,
                r.setattrs_in_creates
            ),
            Err(f) => {
                eprintln!("{f}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
