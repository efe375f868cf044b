//! `myriad bench fuse`: the small-file phases through a real FUSE mount with worker
//! processes (create+write, stat, cold read, a second read of the same files on the same
//! mount, cold `ls -l`, unlink), next to the same phases on the local file system and,
//! where it is installed, on bindfs over a local directory (the FUSE floor: a FUSE file
//! system that only forwards to local disk) in the same run.
//!
//! Each worker works in its own directory: the kernel serializes creates and unlinks within
//! one directory (the VFS holds the directory lock), on any file system, so one shared
//! directory would measure that lock rather than the file system.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;

use crate::cluster::{LocalCluster, NodeOptions, bench_identity};
use crate::mount_cmd::is_mounted;

#[derive(Args, Clone)]
pub struct FuseArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Files per phase (split over the workers).
    #[arg(long, default_value_t = 10_000)]
    files: u64,
    /// File sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4096,32768")]
    sizes: Vec<usize>,
    /// Entries in the directory listed by the `ls -l` phase.
    #[arg(long, default_value_t = 10_000)]
    ls_entries: u64,
    /// Skip the bindfs column (run where `bindfs` is installed: every phase again on
    /// bindfs over a local directory, the FUSE floor).
    #[arg(long)]
    no_bindfs: bool,
    #[command(flatten)]
    mounted: MountedBenchArgs,
}

/// What every benchmark through a mount takes: where its baseline runs, where results go,
/// extra mount flags.
#[derive(Args, Clone)]
pub struct MountedBenchArgs {
    /// Where the local-disk baseline runs (default: the system temp dir).
    #[arg(long)]
    pub local_dir: Option<PathBuf>,
    #[arg(long, default_value = "bench-results")]
    pub out_dir: PathBuf,
    /// Extra `myriad mount` flag for the mounts (repeatable), e.g.
    /// `--mount-arg=--attr-ttl-ms=10000`; the defaults are measured without any.
    #[arg(long = "mount-arg", allow_hyphen_values = true)]
    pub mount_args: Vec<String>,
}

/// One worker process's share of a phase (hidden subcommand).
#[derive(Args, Clone)]
pub struct WorkerArgs {
    #[arg(long)]
    phase: String,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    files: u64,
    #[arg(long)]
    size: usize,
}

#[derive(Serialize, Clone, Debug)]
struct Row {
    size: usize,
    phase: String,
    myriad_ops_s: f64,
    local_ops_s: f64,
    /// The same phase on bindfs over a local directory (`None`: not run).
    bindfs_ops_s: Option<f64>,
    target_ops_s: Option<f64>,
    /// CPU of the mount process per operation (all its threads), microseconds.
    mount_cpu_us_per_op: f64,
}

/// `reread` opens and reads the files `read` read, on the same mount: what a second
/// reader of a file (another process of an import storm, a build reading its headers
/// again) pays once the mount holds it (issue 51's "cold after the first open").
/// `read-ro` and `reread-ro` do the same on a fresh read-only mount whose kernel opens
/// files without asking (`--zero-message-opens`).
const PHASES: [&str; 8] = [
    "create",
    "stat",
    "read",
    "reread",
    "read-ro",
    "reread-ro",
    "ls",
    "unlink",
];

/// Phases run on a fresh mount (a cold kernel cache), and whether it is read-only.
fn fresh_mount(phase: &str) -> Option<bool> {
    match phase {
        "read" | "ls" => Some(false),
        "read-ro" => Some(true),
        _ => None,
    }
}

fn target(phase: &str, size: usize) -> Option<f64> {
    if size != 4096 {
        return None;
    }
    Some(match phase {
        "create" | "unlink" => 15_000.0,
        "stat" => 100_000.0,
        "read" | "read-ro" => 30_000.0,
        "reread" | "reread-ro" => 100_000.0,
        "ls" => 100_000.0,
        _ => return None,
    })
}

pub fn worker(a: &WorkerArgs) -> anyhow::Result<()> {
    let data = vec![b'm'; a.size];
    for i in 0..a.files {
        let p = a.dir.join(format!("f{i:06}"));
        match a.phase.as_str() {
            "create" => {
                let mut f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&p)
                    .with_context(|| p.display().to_string())?;
                f.write_all(&data)?;
            }
            "stat" => {
                let m = fs::metadata(&p).with_context(|| p.display().to_string())?;
                if m.len() != a.size as u64 {
                    bail!("{}: size {} != {}", p.display(), m.len(), a.size);
                }
            }
            "read" | "reread" | "read-ro" | "reread-ro" => {
                let d = fs::read(&p).with_context(|| p.display().to_string())?;
                if d != data {
                    bail!("{}: contents differ", p.display());
                }
            }
            "unlink" => fs::remove_file(&p).with_context(|| p.display().to_string())?,
            other => bail!("unknown phase {other}"),
        }
    }
    Ok(())
}

/// Runs `phase` in `workers` processes (as the bench identity), one directory each; ops/s.
fn run_workers(root: &Path, phase: &str, a: &FuseArgs, size: usize) -> anyhow::Result<f64> {
    let per = a.files / a.workers as u64;
    let me = std::env::current_exe()?;
    let who = bench_identity();
    // SAFETY: getuid has no preconditions.
    let switch = unsafe { libc::getuid() } == 0;
    let start = Instant::now();
    let mut kids: Vec<Child> = Vec::new();
    for w in 0..a.workers {
        let mut cmd = Command::new(&me);
        cmd.args(["bench", "fuse-worker", "--phase", phase, "--files"])
            .arg(per.to_string())
            .arg("--size")
            .arg(size.to_string())
            .arg("--dir")
            .arg(root.join(format!("w{w}")))
            .stdout(Stdio::null());
        if switch {
            cmd.uid(who.uid).gid(who.gid);
        }
        kids.push(cmd.spawn()?);
    }
    for mut k in kids {
        let st = k.wait()?;
        if !st.success() {
            bail!("a {phase} worker failed ({st})");
        }
    }
    Ok((per * a.workers as u64) as f64 / start.elapsed().as_secs_f64())
}

/// `ls -l` of a directory with `n` entries; entries/s.
fn run_ls(dir: &Path, n: u64) -> anyhow::Result<f64> {
    let start = Instant::now();
    let out = Command::new("ls")
        .arg("-l")
        .arg(dir)
        .stderr(Stdio::inherit())
        .output()?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("ls -l {} failed", dir.display());
    }
    let lines = out.stdout.iter().filter(|b| **b == b'\n').count() as u64;
    if lines < n {
        bail!("ls -l listed {lines} lines, expected {n}+");
    }
    Ok(n as f64 / secs)
}

fn prepare_dirs(root: &Path, a: &FuseArgs) -> anyhow::Result<()> {
    let who = bench_identity();
    fs::create_dir_all(root)?;
    std::os::unix::fs::chown(root, Some(who.uid), Some(who.gid)).ok();
    for w in 0..a.workers {
        let d = root.join(format!("w{w}"));
        fs::create_dir(&d).with_context(|| d.display().to_string())?;
        std::os::unix::fs::chown(&d, Some(who.uid), Some(who.gid)).ok();
    }
    Ok(())
}

fn fill_ls_dir(dir: &Path, n: u64, size: usize) -> anyhow::Result<()> {
    fs::create_dir_all(dir)?;
    let data = vec![b'l'; size];
    for i in 0..n {
        fs::write(dir.join(format!("e{i:07}")), &data)?;
    }
    Ok(())
}

pub(crate) struct MountProc {
    child: Child,
    at: PathBuf,
}

impl MountProc {
    pub(crate) fn start(map: &Path, at: &Path, extra: &[String]) -> anyhow::Result<MountProc> {
        MountProc::spawn(map, at, extra, Stdio::null())
    }

    /// `start`, with the mount's log (its standard error) in `log`.
    pub(crate) fn start_logged(
        map: &Path,
        at: &Path,
        extra: &[String],
        log: &Path,
    ) -> anyhow::Result<MountProc> {
        MountProc::spawn(map, at, extra, Stdio::from(fs::File::create(log)?))
    }

    fn spawn(map: &Path, at: &Path, extra: &[String], log: Stdio) -> anyhow::Result<MountProc> {
        let child = Command::new(std::env::current_exe()?)
            .arg("--cluster")
            .arg(map)
            .arg("mount")
            .arg(at)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(at) {
            if Instant::now() > deadline {
                bail!("mount on {} did not come up", at.display());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(MountProc {
            child,
            at: at.to_path_buf(),
        })
    }

    /// CPU seconds the mount process has used so far (all threads, user and system).
    fn cpu_secs(&self) -> f64 {
        let stat =
            fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which may hold spaces): utime and stime are the
        // 12th and 13th.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let ticks: f64 = after
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|t| t.parse::<f64>().ok())
            .sum();
        // SAFETY: sysconf has no memory effects.
        ticks / (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64)
    }

    pub(crate) fn stop(mut self) -> anyhow::Result<()> {
        myriad_fuse::unmount(&self.at).map_err(anyhow::Error::msg)?;
        self.child.wait()?;
        Ok(())
    }
}

impl MountedBenchArgs {
    /// The local-disk side's directory (under `--local-dir`, or the temporary directory),
    /// removed when dropped.
    pub(crate) fn local_root(&self, prefix: &str) -> std::io::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(self.local_dir.clone().unwrap_or_else(std::env::temp_dir))
    }
}

/// A benchmark's local cluster of `nodes` servers under `dir` (`cluster/`), its map file,
/// and an empty mount point (`mnt/`).
pub(crate) async fn cluster_and_mountpoint(
    dir: &Path,
    nodes: usize,
) -> anyhow::Result<(LocalCluster, PathBuf, PathBuf)> {
    let cluster = LocalCluster::up(
        &dir.join("cluster"),
        nodes,
        &NodeOptions::for_bench(Vec::new()),
    )
    .await?;
    settled_floor(&cluster).await?;
    let map = crate::cluster::map_path(&cluster.dir);
    let mnt = dir.join("mnt");
    fs::create_dir(&mnt)?;
    Ok((cluster, map, mnt))
}

/// Waits (at most 15 s) for the cluster's protocol floor to reach this build's protocol,
/// as it does in its first seconds (docs/upgrades.md): a benchmark measures a cluster as it
/// runs after that (a mkdir is answered behind only at 42), not its start.
async fn settled_floor(cluster: &LocalCluster) -> anyhow::Result<()> {
    let client = cluster.client(std::time::Duration::from_secs(10))?;
    for _ in 0..150 {
        if client.newest_map().await.ext.protocol_floor >= myriad_client::proto::PROTOCOL_VERSION {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    eprintln!("bench: the cluster's protocol floor did not rise within 15 s; measuring anyway");
    Ok(())
}

/// Drops the local page cache (root only) so local "cold" phases are cold too.
fn drop_local_caches() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

pub async fn run(a: FuseArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.workers > 0 && a.files >= a.workers as u64,
        "need files >= workers > 0"
    );
    let tmp = tempfile::Builder::new()
        .prefix("myriad-bench-fuse-")
        .tempdir()?;
    let (cluster, map, mnt) = cluster_and_mountpoint(tmp.path(), a.nodes).await?;
    let local_root = a.mounted.local_root("myriad-bench-fuse-local-")?;
    eprintln!(
        "bench fuse: {} files per phase, {} workers, sizes {:?}, ls of {} entries, {}-node cluster",
        a.files, a.workers, a.sizes, a.ls_entries, a.nodes
    );
    let result = phases(&a, &map, &mnt, local_root.path()).await;
    let _ = cluster.down();
    let rows = result?;

    println!(
        "\n{:>6} {:>9} | {:>12} {:>12} | {:>7} | {:>12} {:>8} | {:>9} | {:>11}",
        "size",
        "phase",
        "myriad op/s",
        "local op/s",
        "ratio",
        "bindfs op/s",
        "x bindfs",
        "target",
        "mount us/op"
    );
    for r in &rows {
        let (bindfs, times) = match r.bindfs_ops_s {
            Some(b) => (
                format!("{b:.0}"),
                format!("{:.2}", r.myriad_ops_s / b.max(1e-9)),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:>6} {:>9} | {:>12.0} {:>12.0} | {:>7.2} | {:>12} {:>8} | {:>9} | {:>11.1}",
            r.size,
            r.phase,
            r.myriad_ops_s,
            r.local_ops_s,
            r.myriad_ops_s / r.local_ops_s.max(1e-9),
            bindfs,
            times,
            match r.target_ops_s {
                Some(t) if r.myriad_ops_s >= t => format!("{t:.0} met"),
                Some(t) => format!("{t:.0} NOT"),
                None => "-".into(),
            },
            r.mount_cpu_us_per_op
        );
    }
    println!(
        "(ls: entries/s of one `ls -l`; read, read-ro and ls run on a fresh mount: cold kernel \
         cache; reread: the files read again on the mount that read them, local disk's page \
         cache warm; -ro: on a read-only mount with zero-message opens; bindfs: the same \
         phases on bindfs --multithreaded over a local directory, remounted where the mount \
         is; x bindfs: Myriad's op/s over bindfs's; mount us/op: CPU of the mount process per \
         operation)"
    );
    fs::create_dir_all(&a.mounted.out_dir)?;
    let out = a.mounted.out_dir.join("bench-fuse.json");
    fs::write(&out, serde_json::to_string_pretty(&rows)?)?;
    println!("results: {}", out.display());
    Ok(())
}

async fn phases(a: &FuseArgs, map: &Path, mnt: &Path, local: &Path) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &size in &a.sizes {
        let name = format!("s{size}");
        // Myriad, through the mount.
        let mut m = MountProc::start(map, mnt, &a.mounted.mount_args)?;
        let root = mnt.join(&name);
        prepare_root(&root, a, size)?;
        let mut mine = Vec::new();
        for phase in PHASES {
            if let Some(read_only) = fresh_mount(phase) {
                // Cold: a fresh mount has nothing cached in the kernel.
                m.stop()?;
                let mut args = a.mounted.mount_args.clone();
                if read_only {
                    args.push("--read-only".into());
                    args.push("--zero-message-opens".into());
                }
                m = MountProc::start(map, mnt, &args)?;
            }
            let cpu0 = m.cpu_secs();
            let v = run_phase(&root, phase, a, size)?;
            let ops = if phase == "ls" { a.ls_entries } else { a.files };
            let cpu_us = (m.cpu_secs() - cpu0) * 1e6 / ops.max(1) as f64;
            eprintln!(
                "  myriad {size:>6} B {phase:>7}: {v:>10.0} op/s, mount CPU {cpu_us:.1} us/op"
            );
            mine.push((v, cpu_us));
        }
        m.stop()?;
        // The same on local disk.
        let root = local.join(&name);
        prepare_root(&root, a, size)?;
        for (phase, (v, cpu_us)) in PHASES.iter().zip(mine) {
            if fresh_mount(phase).is_some() {
                drop_local_caches();
            }
            let l = run_phase(&root, phase, a, size)?;
            eprintln!("  local  {size:>6} B {phase:>7}: {l:>10.0} op/s");
            rows.push(Row {
                size,
                phase: (*phase).to_string(),
                myriad_ops_s: v,
                local_ops_s: l,
                bindfs_ops_s: None,
                target_ops_s: target(phase, size),
                mount_cpu_us_per_op: cpu_us,
            });
        }
        if !a.no_bindfs && crate::bench_bindfs::installed() {
            let floor = bindfs_phases(a, local, size)?;
            let mine = rows.iter_mut().filter(|r| r.size == size);
            for (r, b) in mine.zip(floor) {
                r.bindfs_ops_s = Some(b);
            }
        }
    }
    Ok(rows)
}

/// Every phase of `PHASES` on bindfs over a fresh directory under `local` (the FUSE
/// floor), remounted before the phases Myriad's mount is remounted for (a cold kernel
/// cache): op/s (entries/s for `ls`), in `PHASES`' order.
fn bindfs_phases(a: &FuseArgs, local: &Path, size: usize) -> anyhow::Result<Vec<f64>> {
    use crate::bench_bindfs::Bindfs;
    let src = local.join(format!("bindfs-src-{size}"));
    let at = local.join(format!("bindfs-mnt-{size}"));
    let mut mount = Bindfs::mount(&src, &at, false)?;
    let root = at.join(format!("s{size}"));
    prepare_root(&root, a, size)?;
    let mut out = Vec::new();
    for phase in PHASES {
        if let Some(read_only) = fresh_mount(phase) {
            drop(mount);
            drop_local_caches();
            mount = Bindfs::mount(&src, &at, read_only)?;
        }
        let v = run_phase(&root, phase, a, size)?;
        eprintln!("  bindfs {size:>6} B {phase:>7}: {v:>10.0} op/s");
        out.push(v);
    }
    drop(mount);
    Ok(out)
}

/// Runs `phase` (one of `PHASES`) in `root` (made by `prepare_dirs` and `fill_ls_dir`):
/// op/s, or entries/s for `ls`.
fn run_phase(root: &Path, phase: &str, a: &FuseArgs, size: usize) -> anyhow::Result<f64> {
    if phase == "ls" {
        run_ls(&root.join("ls"), a.ls_entries)
    } else {
        run_workers(root, phase, a, size)
    }
}

/// Makes `root` ready for the phases: the workers' directories and the listed one.
fn prepare_root(root: &Path, a: &FuseArgs, size: usize) -> anyhow::Result<()> {
    prepare_dirs(root, a)?;
    fill_ls_dir(&root.join("ls"), a.ls_entries, size)
}
