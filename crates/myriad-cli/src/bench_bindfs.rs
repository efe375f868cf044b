//! The FUSE floor for the benchmarks through a mount: bindfs (a FUSE file system that
//! only forwards every request to a local directory, `--multithreaded`) over a local
//! directory, mounted and unmounted by the benchmark. Used only where `bindfs` is
//! installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::mount_cmd::is_mounted;

/// Whether `bindfs` can be run.
pub fn installed() -> bool {
    Command::new("bindfs")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A bindfs mount of `src` at `at`, unmounted when dropped.
pub struct Bindfs {
    at: PathBuf,
}

impl Bindfs {
    /// Mounts it (`read_only`: `-r`), open to every user as the benchmarks' workers run
    /// as another; `src` and `at` are made if missing.
    pub fn mount(src: &Path, at: &Path, read_only: bool) -> anyhow::Result<Bindfs> {
        std::fs::create_dir_all(src)?;
        std::fs::create_dir_all(at)?;
        let mut cmd = Command::new("bindfs");
        cmd.arg("--multithreaded").args(["-o", "allow_other"]);
        if read_only {
            cmd.arg("-r");
        }
        let st = cmd.arg(src).arg(at).status().context("running bindfs")?;
        if !st.success() || !is_mounted(at) {
            bail!("bindfs {} {} failed ({st})", src.display(), at.display());
        }
        Ok(Bindfs {
            at: at.to_path_buf(),
        })
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        let done = Command::new("umount")
            .arg(&self.at)
            .status()
            .is_ok_and(|s| s.success());
        if !done {
            // Busy (a worker's file still closing): detached now, gone once unused, so
            // the next mount never stacks on it.
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        }
    }
}
