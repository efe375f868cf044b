//! `myriad bench stress` (issue 47): the random namespace and data stress of `stress.rs`
//! in several processes through a mount of a local cluster, and the same through bindfs
//! over tmpfs (a FUSE file system that does nothing but pass calls to memory: what any
//! FUSE file system pays here) in the same run; then cross-directory renames and hard
//! links one at a time on the idle mount, with their latency distribution. Every answer
//! is checked against the workers' models (a mismatch fails the bench), and the mount's
//! log is searched for error and warning lines (there should be none).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;

use crate::bench_fuse::MountProc;
use crate::cluster::bench_identity;
use crate::stress::{StressReport, percentile_ms};

#[derive(Args, Clone)]
pub struct StressArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Worker processes, each in a directory of its own.
    #[arg(long, default_value_t = 4)]
    procs: usize,
    /// Operations per worker.
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cross-directory renames (and as many links) timed one at a time on the idle mount.
    #[arg(long, default_value_t = 1000)]
    latency_ops: u64,
    #[command(flatten)]
    mounted: crate::bench_fuse::MountedBenchArgs,
}

/// The targets of issue 47.
const RATIO_TARGET: f64 = 5.0;
const P99_TARGET_MS: f64 = 10.0;

#[derive(Serialize)]
struct OpRow {
    op: String,
    count: usize,
    myriad_p50_ms: f64,
    myriad_p99_ms: f64,
    myriad_max_ms: f64,
    base_p50_ms: f64,
    base_p99_ms: f64,
}

#[derive(Serialize)]
struct Report {
    procs: usize,
    ops_per_proc: u64,
    baseline: String,
    myriad_s: f64,
    base_s: f64,
    ratio: f64,
    ops: Vec<OpRow>,
    rename_ms: [f64; 4],
    link_ms: [f64; 4],
    base_rename_ms: [f64; 4],
    base_link_ms: [f64; 4],
    mount_log_error_lines: usize,
    base_mismatches: usize,
}

/// Starts one worker process (as the benchmark identity when run as root).
fn spawn_worker(dir: &Path, extra: &[String]) -> anyhow::Result<Child> {
    let who = bench_identity();
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["bench", "stress-worker", "--dir"])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped());
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        std::os::unix::process::CommandExt::uid(&mut cmd, who.uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, who.gid);
    }
    Ok(cmd.spawn()?)
}

/// `procs` workers of the random mix under `root` (`p0`, `p1`, ...), `ops` operations
/// each, worker `p` with seed `seed + p`.
pub(crate) fn spawn_mix(
    root: &Path,
    procs: usize,
    ops: u64,
    seed: u64,
) -> anyhow::Result<Vec<Child>> {
    (0..procs)
        .map(|p| {
            let extra = [
                "--ops".to_string(),
                ops.to_string(),
                "--seed".to_string(),
                (seed + p as u64).to_string(),
            ];
            spawn_worker(&root.join(format!("p{p}")), &extra)
        })
        .collect()
}

pub(crate) fn collect(child: Child) -> anyhow::Result<StressReport> {
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("a stress worker failed ({})", out.status);
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).context("a stress worker's report")
}

/// A directory the benchmark identity may work in.
pub(crate) fn owned_dir(p: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(p)?;
    let who = bench_identity();
    std::os::unix::fs::chown(p, Some(who.uid), Some(who.gid)).ok();
    Ok(())
}

/// The idle renames and links first (on a fresh file system), then the random mix in
/// `procs` processes under `root`; (wall seconds of the mix, the mix's reports, the
/// latency report).
fn run_on(root: &Path, a: &StressArgs) -> anyhow::Result<(f64, Vec<StressReport>, StressReport)> {
    owned_dir(root)?;
    let lat_dir = root.join("latency");
    owned_dir(&lat_dir)?;
    let lat = collect(spawn_worker(
        &lat_dir,
        &[
            "--ops".into(),
            "0".into(),
            "--latency".into(),
            a.latency_ops.to_string(),
        ],
    )?)?;
    let started = Instant::now();
    let reports = spawn_mix(root, a.procs, a.ops, a.seed)?
        .into_iter()
        .map(collect)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let secs = started.elapsed().as_secs_f64();
    Ok((secs, reports, lat))
}

/// bindfs over a fresh tmpfs (root and bindfs needed), unmounted when dropped.
struct Bindfs {
    src: PathBuf,
    mnt: PathBuf,
}

impl Bindfs {
    fn start(dir: &Path) -> anyhow::Result<Bindfs> {
        let (src, mnt) = (dir.join("bindfs-src"), dir.join("bindfs-mnt"));
        fs::create_dir_all(&src)?;
        fs::create_dir_all(&mnt)?;
        let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
        if !ok(Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&src))
        {
            bail!("cannot mount a tmpfs (root needed)");
        }
        if !ok(Command::new("bindfs").arg(&src).arg(&mnt)) {
            let _ = Command::new("umount").arg(&src).status();
            bail!("bindfs did not mount (is it installed?)");
        }
        Ok(Bindfs { src, mnt })
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        let _ = Command::new("umount").arg(&self.src).status();
    }
}

/// Prints each operation's latencies through the mount beside the baseline's, and returns
/// them as rows for the report.
fn op_table(
    mine: &std::collections::BTreeMap<String, Vec<u32>>,
    base: &std::collections::BTreeMap<String, Vec<u32>>,
) -> Vec<OpRow> {
    println!(
        "\n{:>10} | {:>7} | {:>9} {:>9} {:>9} | {:>9} {:>9}",
        "op", "count", "p50 ms", "p99 ms", "max ms", "base p50", "base p99"
    );
    let mut rows = Vec::new();
    for (op, v) in mine {
        let b = base.get(op).cloned().unwrap_or_default();
        let row = OpRow {
            op: op.clone(),
            count: v.len(),
            myriad_p50_ms: percentile_ms(v, 50),
            myriad_p99_ms: percentile_ms(v, 99),
            myriad_max_ms: percentile_ms(v, 100),
            base_p50_ms: percentile_ms(&b, 50),
            base_p99_ms: percentile_ms(&b, 99),
        };
        println!(
            "{:>10} | {:>7} | {:>9.2} {:>9.2} {:>9.2} | {:>9.2} {:>9.2}",
            row.op,
            row.count,
            row.myriad_p50_ms,
            row.myriad_p99_ms,
            row.myriad_max_ms,
            row.base_p50_ms,
            row.base_p99_ms
        );
        rows.push(row);
    }
    rows
}

fn merged(reports: &[StressReport]) -> std::collections::BTreeMap<String, Vec<u32>> {
    let mut all: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for r in reports {
        for (op, v) in &r.micros {
            all.entry(op.clone()).or_default().extend(v);
        }
    }
    for v in all.values_mut() {
        v.sort_unstable();
    }
    all
}

fn dist(v: Option<&Vec<u32>>) -> [f64; 4] {
    let mut v = v.cloned().unwrap_or_default();
    v.sort_unstable();
    [
        percentile_ms(&v, 50),
        percentile_ms(&v, 90),
        percentile_ms(&v, 99),
        percentile_ms(&v, 100),
    ]
}

/// Lines of the mount's log that report an error or a warning.
fn error_lines(log: &Path) -> Vec<String> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .map(str::to_string)
        .collect()
}

pub async fn run(a: StressArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new()
        .prefix("myriad-bench-stress-")
        .tempdir()?;
    eprintln!(
        "bench stress: {} processes x {} operations, {}-node cluster, 3 copies",
        a.procs, a.ops, a.nodes
    );
    let (cluster, map, mnt) =
        crate::bench_fuse::cluster_and_mountpoint(tmp.path(), a.nodes).await?;
    let log = tmp.path().join("mount.log");
    let mine = (|| {
        let m = MountProc::start_logged(&map, &mnt, &a.mounted.mount_args, &log)?;
        let r = run_on(&mnt.join("stress"), &a);
        m.stop()?;
        r
    })();
    let _ = cluster.down();
    let (my_s, my_reports, my_lat) = mine?;
    let errors = error_lines(&log);

    // The baseline: bindfs over tmpfs, else local disk.
    let (baseline, base) = match Bindfs::start(tmp.path()) {
        Ok(b) => (
            "bindfs over tmpfs".to_string(),
            run_on(&b.mnt.join("stress"), &a),
        ),
        Err(e) => {
            eprintln!("bench stress: {e}; local disk instead");
            let local = a.mounted.local_root("myriad-bench-stress-local-")?;
            let r = run_on(&local.path().join("stress"), &a);
            ("local disk".to_string(), r)
        }
    };
    let (base_s, base_reports, base_lat) = base?;

    // Only Myriad's answers must match: bindfs keeps attributes per name, so a hard
    // link's count or size read through another name than the one changed is stale for
    // its cache time (counted and shown, not failed).
    let mismatches: Vec<&String> = my_reports
        .iter()
        .chain([&my_lat])
        .flat_map(|r| &r.mismatches)
        .collect();
    let base_mismatches = base_reports
        .iter()
        .chain([&base_lat])
        .map(|r| r.mismatches.len())
        .sum::<usize>();
    let (mine_ops, base_ops) = (merged(&my_reports), merged(&base_reports));
    let rows = op_table(&mine_ops, &base_ops);
    let ratio = my_s / base_s.max(1e-9);
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "\n{} x {} operations: myriad {my_s:.1} s, {baseline} {base_s:.1} s: {ratio:.1}x \
         (target <= {RATIO_TARGET}x: {})",
        a.procs,
        a.ops,
        met(ratio <= RATIO_TARGET)
    );
    let (rename, link) = (
        dist(my_lat.micros.get("rename")),
        dist(my_lat.micros.get("link")),
    );
    let (b_rename, b_link) = (
        dist(base_lat.micros.get("rename")),
        dist(base_lat.micros.get("link")),
    );
    for (what, d, b) in [("rename", rename, b_rename), ("link", link, b_link)] {
        println!(
            "idle cross-directory {what} (ms): p50 {:.2} p90 {:.2} p99 {:.2} max {:.2}; \
             {baseline} p99 {:.2} (target p99 < {P99_TARGET_MS} ms: {})",
            d[0],
            d[1],
            d[2],
            d[3],
            b[2],
            met(d[2] < P99_TARGET_MS)
        );
    }
    if base_mismatches > 0 {
        println!(
            "{baseline}: {base_mismatches} answers differed from the model (stale attributes \
             of hard links; not Myriad's)"
        );
    }
    println!(
        "mount log: {} error or warning lines{}",
        errors.len(),
        errors
            .first()
            .map(|l| format!(" (first: {l})"))
            .unwrap_or_default()
    );
    fs::create_dir_all(&a.mounted.out_dir)?;
    let out = a.mounted.out_dir.join("bench-stress.json");
    fs::write(
        &out,
        serde_json::to_string_pretty(&Report {
            procs: a.procs,
            ops_per_proc: a.ops,
            baseline,
            myriad_s: my_s,
            base_s,
            ratio,
            ops: rows,
            rename_ms: rename,
            link_ms: link,
            base_rename_ms: b_rename,
            base_link_ms: b_link,
            mount_log_error_lines: errors.len(),
            base_mismatches,
        })?,
    )?;
    println!("results: {}", out.display());
    if !mismatches.is_empty() {
        for m in mismatches.iter().take(20) {
            eprintln!("mismatch: {m}");
        }
        bail!(
            "{} answers differed from the workers' models",
            mismatches.len()
        );
    }
    Ok(())
}
