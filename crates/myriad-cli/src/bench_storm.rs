//! `myriad bench storm` (issue 20, MetaFS): K mounts of one cluster, each running J
//! Python processes that start from a Python installation copied into Myriad (the
//! standard library plus `sympy` and `mpmath` when installed) and import a large package,
//! all at once: the metadata storm of many jobs starting the same program. Cold (fresh
//! mounts, page cache dropped) and warm; with no index and with the tree indexed
//! (`myriad index build`); the same from local disk in the same run. Reports wall times
//! and the metadata requests reaching the servers (their counters).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;

use crate::bench_fuse::MountProc;
use crate::bench_untar::sh;

#[derive(Args, Clone)]
pub struct StormArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Mount processes of the one cluster.
    #[arg(long, default_value_t = 4)]
    mounts: usize,
    /// Python processes per mount, all started at once.
    #[arg(long, default_value_t = 4)]
    procs: usize,
    /// What each process imports (default: sympy when installed, else a set of standard
    /// modules).
    #[arg(long)]
    import: Option<String>,
    /// The index's inline limit (`myriad index build --inline-bytes`).
    #[arg(long, default_value_t = myriad_client::proto::tree_index::DEFAULT_INLINE_BYTES)]
    inline_bytes: u64,
    /// The storm's mounts are read-only with zero-message opens (their kernels open
    /// files without asking, docs/fuse.md); the tree is still copied in through a
    /// read-write mount.
    #[arg(long)]
    read_only_mounts: bool,
    #[command(flatten)]
    mounted: crate::bench_fuse::MountedBenchArgs,
}

#[derive(Serialize)]
struct Mode {
    mode: String,
    wall_s: f64,
    local_wall_s: f64,
    server_metadata_requests: u64,
    server_data_requests: u64,
    /// The metadata requests by kind.
    metadata_by_op: std::collections::BTreeMap<String, u64>,
}

#[derive(Serialize)]
struct Report {
    files: u64,
    mounts: usize,
    procs_per_mount: usize,
    import: String,
    index_bytes: u64,
    modes: Vec<Mode>,
}

/// What the standard library's copy leaves out: installed packages (added back one by
/// one) and its own test suites (thousands of files no program imports).
const STDLIB_SKIP: [&str; 3] = ["site-packages", "test", "idlelib"];
/// Packages copied beside the standard library when installed.
const PACKAGES: [&str; 2] = ["sympy", "mpmath"];
const FALLBACK_IMPORT: &str = "json, email.mime.text, http.client, asyncio, decimal, xml.dom.minidom, unittest, argparse, logging.handlers, sqlite3";

/// The Python to run: its real executable, version directory name (`python3.11`),
/// standard library and package directories.
struct Python {
    exe: PathBuf,
    version_dir: String,
    stdlib: PathBuf,
    purelib: PathBuf,
}

fn python() -> anyhow::Result<Python> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, sysconfig; p = sysconfig.get_paths(); \
             print(sys.executable); print('python%d.%d' % sys.version_info[:2]); \
             print(p['stdlib']); print(p['purelib'])",
        ])
        .output()
        .context("bench storm needs python3 on the PATH")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    if !out.status.success() || lines.len() < 4 {
        bail!("python3 did not say where it lives: {text}");
    }
    Ok(Python {
        exe: PathBuf::from(lines[0]),
        version_dir: lines[1].to_string(),
        stdlib: PathBuf::from(lines[2]),
        purelib: PathBuf::from(lines[3]),
    })
}

/// Builds the installation under `home` (a `PYTHONHOME`): `lib/pythonX.Y` with the
/// standard library and the packages, compiled (so that no run writes byte code).
/// Returns the files and what to import.
fn stage(py: &Python, home: &Path, import: Option<&str>) -> anyhow::Result<(u64, String)> {
    let lib = home.join("lib").join(&py.version_dir);
    fs::create_dir_all(&lib)?;
    let skip: Vec<String> = STDLIB_SKIP
        .iter()
        .map(|s| format!("--exclude=./{s}"))
        .collect();
    sh(
        &py.stdlib,
        &format!(
            "tar -cf - {} . | tar -xf - -C '{}'",
            skip.join(" "),
            lib.display()
        ),
    )?;
    let site = lib.join("site-packages");
    fs::create_dir_all(&site)?;
    let mut found = Vec::new();
    for p in PACKAGES {
        if py.purelib.join(p).is_dir() {
            sh(&py.purelib, &format!("cp -a {p} '{}'", site.display()))?;
            found.push(p);
        }
    }
    let import = match import {
        Some(i) => i.to_string(),
        None if found.contains(&"sympy") => "sympy".into(),
        None => FALLBACK_IMPORT.into(),
    };
    sh(
        home,
        &format!(
            "'{}' -m compileall -q -j 0 '{}' > /dev/null 2>&1 || true",
            py.exe.display(),
            lib.display()
        ),
    )?;
    let files = sh(home, "find . -type f | wc -l")?
        .trim()
        .parse()
        .unwrap_or(0);
    Ok((files, import))
}

/// Starts `procs` Python processes per home, all at once, each importing `import`;
/// the wall time until the last ends.
fn storm(py: &Python, homes: &[PathBuf], procs: usize, import: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    let mut children = Vec::new();
    for home in homes {
        for _ in 0..procs {
            let child = Command::new(&py.exe)
                .args(["-s", "-c", &format!("import {import}")])
                .env("PYTHONHOME", home)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env_remove("PYTHONPATH")
                .env_remove("PYTHONSTARTUP")
                .current_dir(home)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("starting python")?;
            children.push(child);
        }
    }
    for c in children {
        let out = c.wait_with_output()?;
        if !out.status.success() {
            bail!("python failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

type ByOp = std::collections::BTreeMap<String, u64>;

/// Metadata requests by kind and data requests the servers received so far (lease
/// upkeep and the benchmark's own counter reads aside).
async fn requests(client: &myriad_client::Client) -> anyhow::Result<(ByOp, u64)> {
    let (mut meta, mut data) = (ByOp::new(), 0);
    for (id, r) in client.all_counters().await {
        let snap = r.with_context(|| format!("counters of server {id}"))?;
        for o in snap.client_requests {
            match o.op.as_ref() {
                "lease_poll" | "lease_renew" | "get_counters" | "get_map" | "statfs" | "echo" => {}
                // A chunk's capability is asked to read its data.
                "read" | "read_chunk" | "grant" => data += o.count,
                op => *meta.entry(op.to_string()).or_insert(0) += o.count,
            }
        }
    }
    Ok((meta, data))
}

/// `after - before`, by kind, without the kinds that did not change.
fn since(before: &ByOp, after: &ByOp) -> ByOp {
    after
        .iter()
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn drop_caches() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

struct Mounts {
    procs: Vec<MountProc>,
    points: Vec<PathBuf>,
}

impl Mounts {
    /// `k` fresh mounts, each with an empty index cache of its own (a cold start loads the
    /// index from the cluster).
    fn start(
        map: &Path,
        root: &Path,
        k: usize,
        extra: &[String],
        run: usize,
    ) -> anyhow::Result<Mounts> {
        let mut m = Mounts {
            procs: Vec::new(),
            points: Vec::new(),
        };
        for i in 0..k {
            let at = root.join(format!("mnt{i}"));
            fs::create_dir_all(&at)?;
            let cache = root.join(format!("index-cache-{run}-{i}"));
            let mut args = extra.to_vec();
            args.push(format!("--index-cache-dir={}", cache.display()));
            m.procs.push(MountProc::start(map, &at, &args)?);
            m.points.push(at);
        }
        Ok(m)
    }

    fn stop(self) -> anyhow::Result<()> {
        for p in self.procs {
            p.stop()?;
        }
        Ok(())
    }
}

pub async fn run(a: StormArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.mounts > 0 && a.procs > 0,
        "--mounts and --procs must be > 0"
    );
    let py = python()?;
    let tmp = tempfile::Builder::new()
        .prefix("myriad-bench-storm-")
        .tempdir()?;
    let local_root = a.mounted.local_root("myriad-bench-storm-local-")?;
    let local_home = local_root.path().join("py");
    let (files, import) = stage(&py, &local_home, a.import.as_deref())?;
    eprintln!(
        "bench storm: {files} files ({} standard library and {:?} where installed), `import {import}`, {} mounts x {} processes, {}-node cluster",
        py.version_dir, PACKAGES, a.mounts, a.procs, a.nodes
    );
    let (cluster, map, _mnt) =
        crate::bench_fuse::cluster_and_mountpoint(tmp.path(), a.nodes).await?;
    let client = cluster.client_as(Duration::from_secs(60), crate::identity::current_caller())?;
    let result = modes(&a, &py, &map, tmp.path(), &local_home, &import, &client).await;
    let _ = cluster.down();
    let (modes, index_bytes) = result?;

    println!(
        "\n{:>16} | {:>8} {:>8} | {:>6} | {:>10} {:>9}",
        "mode", "myriad s", "local s", "ratio", "meta reqs", "data reqs"
    );
    for m in &modes {
        println!(
            "{:>16} | {:>8.2} {:>8.2} | {:>6.2} | {:>10} {:>9}",
            m.mode,
            m.wall_s,
            m.local_wall_s,
            m.wall_s / m.local_wall_s.max(1e-9),
            m.server_metadata_requests,
            m.server_data_requests
        );
    }
    let none = modes.iter().find(|m| m.mode == "no-index-cold");
    for (name, with) in [("manual", "manual-cold"), ("automatic", "auto-cold")] {
        let (Some(n), Some(m)) = (none, modes.iter().find(|m| m.mode == with)) else {
            continue;
        };
        let share = m.server_metadata_requests as f64 / (n.server_metadata_requests.max(1)) as f64;
        println!(
            "{name} index, cold: metadata requests {:.2}% of the run without (target 1%: {}), wall {:.2}x local (target 1x: {})",
            share * 100.0,
            if share <= 0.01 { "met" } else { "NOT met" },
            m.wall_s / m.local_wall_s.max(1e-9),
            if m.wall_s <= m.local_wall_s {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    fs::create_dir_all(&a.mounted.out_dir)?;
    let out = a.mounted.out_dir.join("bench-storm.json");
    fs::write(
        &out,
        serde_json::to_string_pretty(&Report {
            files,
            mounts: a.mounts,
            procs_per_mount: a.procs,
            import,
            index_bytes,
            modes,
        })?,
    )?;
    println!("results: {}", out.display());
    Ok(())
}

/// The flags of the storm's mounts (not of the one the tree is copied in through).
fn storm_mount_args(a: &StormArgs) -> Vec<String> {
    let mut args = a.mounted.mount_args.clone();
    if a.read_only_mounts {
        args.push("--read-only".into());
        args.push("--zero-message-opens".into());
    }
    args
}

/// Every mode, each cold then warm, with the local run of the same temperature.
async fn modes(
    a: &StormArgs,
    py: &Python,
    map: &Path,
    work: &Path,
    local_home: &Path,
    import: &str,
    client: &myriad_client::Client,
) -> anyhow::Result<(Vec<Mode>, u64)> {
    // The local baselines, cold and warm (the same for every mode).
    let locals: Vec<PathBuf> = vec![local_home.to_path_buf(); a.mounts];
    drop_caches();
    let local_cold = storm(py, &locals, a.procs, import)?;
    let local_warm = storm(py, &locals, a.procs, import)?;
    eprintln!("  local: cold {local_cold:.2} s, warm {local_warm:.2} s");

    // The installation, copied in through one mount.
    let copy = Mounts::start(map, work, 1, &a.mounted.mount_args, 0)?;
    let t = Instant::now();
    let copied = sh(
        &copy.points[0],
        &format!("cp -a '{}' py && sync", local_home.display()),
    );
    copy.stop()?;
    copied?;
    eprintln!("  copied into Myriad in {:.1} s", t.elapsed().as_secs_f64());

    let mut out = Vec::new();
    let mut index_bytes = 0;
    // No automatic index in the first two modes: each measures what it names.
    let mut fixed = storm_mount_args(a);
    fixed.push("--auto-index-every=0".into());
    for (run, mode) in ["no-index", "manual"].into_iter().enumerate() {
        if mode == "manual" {
            let r = client
                .build_index(
                    "/py",
                    myriad_client::BuildOptions {
                        inline_bytes: a.inline_bytes,
                        ..myriad_client::BuildOptions::default()
                    },
                )
                .await
                .map_err(|e| anyhow::anyhow!("index build /py: {e}"))?;
            index_bytes = r.tree.bytes;
            eprintln!(
                "  index: {} names, {} bytes, {} files inline",
                r.tree.entries, r.tree.bytes, r.inline_files
            );
        }
        drop_caches();
        let mounts = Mounts::start(map, work, a.mounts, &fixed, run + 1)?;
        let homes: Vec<PathBuf> = mounts.points.iter().map(|p| p.join("py")).collect();
        let temps = [("cold", local_cold), ("warm", local_warm)];
        let r = measure(py, &homes, a.procs, import, client, mode, &temps, &mut out).await;
        mounts.stop()?;
        r?;
    }
    client
        .drop_index("/py")
        .await
        .map_err(|e| anyhow::anyhow!("index drop /py: {e}"))?;
    automatic(
        a,
        py,
        map,
        work,
        import,
        client,
        (local_cold, local_warm),
        &mut out,
    )
    .await?;
    Ok((out, index_bytes))
}

/// The automatic mode: mounts with automatic indexing at its intended setting (every
/// 10 s; the other thresholds their defaults).
/// A first cold run heats the servers' counters; once the mounts have indexed the tree
/// by themselves, fresh mounts run cold and warm again.
#[allow(clippy::too_many_arguments)]
async fn automatic(
    a: &StormArgs,
    py: &Python,
    map: &Path,
    work: &Path,
    import: &str,
    client: &myriad_client::Client,
    (local_cold, local_warm): (f64, f64),
    out: &mut Vec<Mode>,
) -> anyhow::Result<()> {
    // Automatic indexing as mounts have it by default (every 10 s).
    let mut args = storm_mount_args(a);
    args.push("--auto-index-every=10".into());
    drop_caches();
    let mounts = Mounts::start(map, work, a.mounts, &args, 3)?;
    let homes: Vec<PathBuf> = mounts.points.iter().map(|p| p.join("py")).collect();
    let first = [("first", local_cold)];
    let r = async {
        measure(py, &homes, a.procs, import, client, "auto", &first, out).await?;
        // What the servers tracked, and any anti-entropy repairs (which make every
        // directory of a partition count as changed): for working on the policy.
        if std::env::var_os("MYRIAD_STORM_DEBUG").is_some() {
            let tracked = client.index_candidates(1, Duration::ZERO).await;
            if let Ok(t) = tracked {
                let mut top: Vec<_> = t
                    .iter()
                    .filter(|d| d.path.matches('/').count() <= 5)
                    .map(|d| (&d.path, d.reads, d.since_ms, d.readers))
                    .collect();
                top.sort();
                eprintln!("  tracked after the first run: {top:?}");
            }
            let mut ae = std::collections::BTreeMap::new();
            for (_, r) in client.all_counters().await {
                if let Ok(s) = r {
                    for o in s.server_requests.iter().chain(&s.client_requests) {
                        if o.op.contains("anti")
                            || o.op.contains("resync")
                            || o.op.contains("repair")
                        {
                            *ae.entry(o.op.to_string()).or_insert(0u64) += o.count;
                        }
                    }
                }
            }
            eprintln!("  anti-entropy and repairs so far: {ae:?}");
        }
        let t = Instant::now();
        loop {
            let reg = client
                .index_registry()
                .await
                .map_err(|e| anyhow::anyhow!("index registry: {e}"))?;
            if !reg.trees.is_empty() {
                let names: u64 = reg.trees.iter().map(|t| t.entries).sum();
                let roots: Vec<&str> = reg.trees.iter().map(|t| t.root.as_str()).collect();
                eprintln!(
                    "  automatic indexes after {:.0} s: {roots:?}, {names} names",
                    t.elapsed().as_secs_f64()
                );
                return anyhow::Ok(());
            }
            if t.elapsed() > AUTO_WAIT {
                let hot = client.index_candidates(1, Duration::ZERO).await;
                bail!(
                    "no automatic index within {} s; the servers' hot directories: {hot:?}",
                    AUTO_WAIT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    .await;
    mounts.stop()?;
    r?;
    drop_caches();
    let mounts = Mounts::start(map, work, a.mounts, &args, 4)?;
    let homes: Vec<PathBuf> = mounts.points.iter().map(|p| p.join("py")).collect();
    let temps = [("cold", local_cold), ("warm", local_warm)];
    let r = measure(py, &homes, a.procs, import, client, "auto", &temps, out).await;
    mounts.stop()?;
    r
}

/// How long the automatic mode waits for the mounts to index the tree (their defaults:
/// a tree quiet for 30 s, asked every 10 s).
const AUTO_WAIT: Duration = Duration::from_secs(120);

/// One storm per temperature on `homes`, with the servers' requests counted around it.
#[allow(clippy::too_many_arguments)]
async fn measure(
    py: &Python,
    homes: &[PathBuf],
    procs: usize,
    import: &str,
    client: &myriad_client::Client,
    mode: &str,
    temps: &[(&str, f64)],
    out: &mut Vec<Mode>,
) -> anyhow::Result<()> {
    for (temp, local) in temps {
        let before = requests(client).await?;
        let wall = storm(py, homes, procs, import)?;
        let after = requests(client).await?;
        let by_op = since(&before.0, &after.0);
        let m = Mode {
            mode: format!("{mode}-{temp}"),
            wall_s: wall,
            local_wall_s: *local,
            server_metadata_requests: by_op.values().sum(),
            server_data_requests: after.1 - before.1,
            metadata_by_op: by_op,
        };
        eprintln!(
            "  {}: {wall:.2} s, {} metadata ({:?}) and {} data requests",
            m.mode, m.server_metadata_requests, m.metadata_by_op, m.server_data_requests
        );
        out.push(m);
    }
    Ok(())
}
