//! `myriad bench untar`: what a user does with a source tree, through a real mount and on
//! local disk in the same run: one `tar -x` of about 10,000 files, `find | xargs stat`,
//! `du -s`, `rm -rf` (issue 19, item 5), then where git is installed `git clone` of a
//! repository holding the same tree, `git status` in the clone and its `rm -rf` (issue 51).
//! The tarball is generated deterministically in the shape of a source tree (nested
//! directories, mostly small files, a few big ones), or taken from `--tarball`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;

use crate::bench_fuse::MountProc;
use crate::workload::Rng;

#[derive(Args, Clone)]
pub struct UntarArgs {
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Files in the generated tarball (ignored with --tarball).
    #[arg(long, default_value_t = 10_000)]
    files: u64,
    /// A tarball to unpack instead of the generated one (any format `tar -x` reads).
    #[arg(long)]
    tarball: Option<PathBuf>,
    /// Keep removed files in the trash for N days (docs/trash.md): what moving every file
    /// `rm -rf` removes into /.trash costs. 0 (default): off.
    #[arg(long, default_value_t = 0)]
    trash_days: u32,
    /// Skip the bindfs column (run where `bindfs` is installed: the phases again on bindfs
    /// over a local directory, the FUSE floor).
    #[arg(long)]
    no_bindfs: bool,
    /// Skip the git phases (run where `git` is installed: a repository of the tree is made
    /// on local disk once, then cloned with `git clone --no-local` into each file system).
    #[arg(long)]
    no_git: bool,
    #[command(flatten)]
    mounted: crate::bench_fuse::MountedBenchArgs,
}

#[derive(Serialize)]
struct Phase {
    phase: &'static str,
    myriad_s: f64,
    local_s: f64,
    /// On bindfs over a local directory (`None`: not run).
    bindfs_s: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    files: u64,
    phases: Vec<Phase>,
}

/// A phase: its name, its target (at most this many times local disk's time) and the shell
/// command it times, run in the directory under test.
type Script = (&'static str, f64, String);

/// The phases: the four on the unpacked tree, then, given a repository, the three git ones.
fn scripts(tarball: &Path, repo: Option<&Path>) -> Vec<Script> {
    let mut s = vec![
        (
            "untar",
            4.0,
            format!("tar -xf '{}' -C tree", tarball.display()),
        ),
        (
            "stat",
            2.0,
            "find tree -print0 | xargs -0 stat > /dev/null".into(),
        ),
        ("du", 2.0, "du -s tree > /dev/null".into()),
        ("rm", 4.0, "rm -rf tree".into()),
    ];
    if let Some(r) = repo {
        // `--no-local`: the pack protocol, as from a server (a local clone would hard-link
        // the objects, which a clone into another file system cannot do).
        let clone = format!("git clone -q --no-local '{}' clone", r.display());
        s.push(("clone", 2.0, clone));
        s.push((
            "status",
            2.0,
            "git -C clone status --porcelain > /dev/null".into(),
        ));
        s.push(("rm clone", 4.0, "rm -rf clone".into()));
    }
    s
}

/// A git repository at `dir` holding the tarball's tree in one commit.
fn make_repo(dir: &Path, tarball: &Path) -> anyhow::Result<()> {
    fs::create_dir(dir)?;
    sh(dir, &format!("tar -xf '{}'", tarball.display()))?;
    sh(
        dir,
        "git init -q . && git add -A && git -c user.name=bench -c user.email=bench@localhost \
         commit -q -m tree",
    )?;
    Ok(())
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Writes a source-tree-shaped tree of `files` files under `root`: directories nested up to
/// four deep with 5-40 entries each, sizes mostly under 8 KiB (80%), some to 64 KiB (18%),
/// a few to 256 KiB (2%): about 13 KiB on average, as source trees go (Linux: 17 KiB).
/// Contents from a seeded generator. Returns the bytes written.
fn generate_tree(root: &Path, files: u64) -> anyhow::Result<u64> {
    let mut rng = Rng::new(0x5eed_7a2b);
    let mut dirs = vec![root.to_path_buf()];
    let mut bytes = 0u64;
    let mut made = 0u64;
    let exts = ["c", "h", "rs", "py", "txt", "md", "json", "S"];
    while made < files {
        // A directory: a new one under a random existing one (depth bounded), or reuse.
        let parent = dirs[usize::try_from(rng.below(dirs.len() as u64)).unwrap_or(0)].clone();
        let depth = parent
            .strip_prefix(root)
            .map_or(0, |p| p.components().count());
        let dir = if depth < 4 && rng.below(3) > 0 {
            let d = parent.join(format!("mod{}", dirs.len()));
            fs::create_dir_all(&d)?;
            dirs.push(d.clone());
            d
        } else {
            parent
        };
        for _ in 0..(5 + rng.below(36)) {
            if made >= files {
                break;
            }
            let size = match rng.below(100) {
                0..=79 => 100 + rng.below(8 * 1024),
                80..=97 => 8 * 1024 + rng.below(56 * 1024),
                _ => 64 * 1024 + rng.below(192 * 1024),
            };
            let ext = exts[usize::try_from(rng.below(exts.len() as u64)).unwrap_or(0)];
            let data: Vec<u8> = (0..size)
                .map(|i| b' ' + ((rng.next_u64() ^ i) % 94) as u8)
                .collect();
            fs::write(dir.join(format!("file{made}.{ext}")), &data)?;
            bytes += size;
            made += 1;
        }
    }
    Ok(bytes)
}

/// Runs `script` with `sh -c` in `dir`; its standard output.
pub(crate) fn sh(dir: &Path, script: &str) -> anyhow::Result<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {script}"))?;
    if !out.status.success() {
        bail!(
            "`{script}` in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// Runs `script` with `sh -c` in `dir`; its wall time.
fn timed(dir: &Path, script: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    sh(dir, script)?;
    Ok(t.elapsed().as_secs_f64())
}

/// The phases in `dir` (holding an empty `tree` at first); seconds each.
fn phases(dir: &Path, scripts: &[Script]) -> anyhow::Result<Vec<f64>> {
    scripts.iter().map(|(_, _, s)| timed(dir, s)).collect()
}

/// Seconds of each phase: on the mount, on local disk, on bindfs (if run).
type Timings = (Vec<f64>, Vec<f64>, Option<Vec<f64>>);

/// The four phases on bindfs over a fresh directory under `local` (the FUSE floor).
fn bindfs_phases(local: &Path, scripts: &[Script]) -> anyhow::Result<Vec<f64>> {
    let (src, at) = (local.join("bindfs-src"), local.join("bindfs-mnt"));
    let mount = crate::bench_bindfs::Bindfs::mount(&src, &at, false)?;
    fs::create_dir(at.join("tree"))?;
    let r = phases(&at, scripts);
    drop(mount);
    r
}

pub async fn run(a: UntarArgs) -> anyhow::Result<()> {
    for tool in ["tar", "find", "xargs", "stat", "du", "rm"] {
        if !on_path(tool) {
            bail!("bench untar needs `{tool}` on the PATH");
        }
    }
    let tmp = tempfile::Builder::new()
        .prefix("myriad-bench-untar-")
        .tempdir()?;
    let local_root = a.mounted.local_root("myriad-bench-untar-local-")?;
    let (tarball, files) = match &a.tarball {
        Some(t) => {
            let listed = Command::new("tar").arg("-tf").arg(t).output()?;
            if !listed.status.success() {
                bail!(
                    "cannot list {}: {}",
                    t.display(),
                    String::from_utf8_lossy(&listed.stderr)
                );
            }
            (
                t.clone(),
                listed
                    .stdout
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .count() as u64,
            )
        }
        None => {
            let src = tmp.path().join("src");
            fs::create_dir(&src)?;
            let bytes = generate_tree(&src, a.files)?;
            let t = tmp.path().join("tree.tar");
            timed(&src, &format!("tar -cf '{}' .", t.display()))?;
            eprintln!(
                "bench untar: generated {} files, {:.1} MiB",
                a.files,
                bytes as f64 / f64::from(1 << 20)
            );
            (t, a.files)
        }
    };
    let repo = if !a.no_git && on_path("git") {
        let r = tmp.path().join("repo");
        make_repo(&r, &tarball).context("making the git repository to clone")?;
        Some(r)
    } else {
        None
    };
    let scripts = scripts(&tarball, repo.as_deref());
    eprintln!(
        "bench untar: {files} entries, {}-node cluster, 3 copies",
        a.nodes
    );
    let (cluster, map, mnt) =
        crate::bench_fuse::cluster_and_mountpoint(tmp.path(), a.nodes).await?;
    if a.trash_days > 0 {
        // A map change: as the cluster's administrator.
        let admin = cluster.client(std::time::Duration::from_secs(30))?;
        crate::trash_cmd::turn_on(&admin, a.trash_days).await?;
    }
    let result = (|| -> anyhow::Result<Timings> {
        let m = MountProc::start(&map, &mnt, &a.mounted.mount_args)?;
        let r = fs::create_dir(mnt.join("tree"))
            .context("mkdir on the mount")
            .and_then(|()| phases(&mnt, &scripts));
        m.stop()?;
        let mine = r?;
        fs::create_dir(local_root.path().join("tree"))?;
        let local = phases(local_root.path(), &scripts)?;
        let floor = if !a.no_bindfs && crate::bench_bindfs::installed() {
            Some(bindfs_phases(local_root.path(), &scripts)?)
        } else {
            None
        };
        Ok((mine, local, floor))
    })();
    let _ = cluster.down();
    let (mine, local, floor) = result?;

    println!(
        "\n{:>8} | {:>10} {:>10} | {:>7} | {:>10} {:>8} | {:>8}",
        "phase", "myriad s", "local s", "ratio", "bindfs s", "x bindfs", "target"
    );
    let mut rows = Vec::new();
    for (i, &(phase, target, _)) in scripts.iter().enumerate() {
        let ratio = mine[i] / local[i].max(1e-9);
        let bindfs_s = floor.as_ref().map(|f| f[i]);
        let (b, x) = bindfs_s.map_or(("-".into(), "-".into()), |b| {
            (format!("{b:.2}"), format!("{:.2}", mine[i] / b.max(1e-9)))
        });
        println!(
            "{phase:>8} | {:>10.2} {:>10.2} | {ratio:>7.1} | {b:>10} {x:>8} | {:>8}",
            mine[i],
            local[i],
            if ratio <= target {
                format!("{target}x met")
            } else {
                format!("{target}x NOT")
            }
        );
        rows.push(Phase {
            phase,
            myriad_s: mine[i],
            local_s: local[i],
            bindfs_s,
        });
    }
    println!(
        "(ratio: Myriad's time over local disk's; bindfs: the phases on bindfs \
         --multithreaded over a local directory, the FUSE floor; x bindfs: Myriad's time over \
         bindfs's)"
    );
    fs::create_dir_all(&a.mounted.out_dir)?;
    let out = a.mounted.out_dir.join("bench-untar.json");
    fs::write(
        &out,
        serde_json::to_string_pretty(&Report {
            files,
            phases: rows,
        })?,
    )?;
    println!("results: {}", out.display());
    Ok(())
}
