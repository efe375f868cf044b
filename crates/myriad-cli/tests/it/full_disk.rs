//! A data disk that fills up (issue 7): each server's data directory is a small tmpfs of its
//! own. At 90% writes go on; at 100% writes get ENOSPC while reads, listings and fsck go on
//! and nothing is lost; once space is freed, writes work again (the engine never hit the
//! wall itself). Needs root (mount), like the FUSE tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use myriad_client::FsError;

use crate::harness::TestCluster;

const DISK_MIB: u64 = 256;
const NODES: u32 = 3;

/// Unmounts the tmpfs file systems when the test ends (after the cluster stopped).
pub(crate) struct Disks(pub(crate) Vec<PathBuf>);

impl Disks {
    /// Mounts a tmpfs of `mib` MiB on `dir` (made if missing). Needs root.
    pub(crate) fn mount(&mut self, dir: &Path, mib: u64) {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "this test needs root to mount a tmpfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.0.push(dir.to_path_buf());
    }
}

impl Drop for Disks {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = Command::new("umount").arg("-l").arg(d).output();
        }
    }
}

pub(crate) fn statvfs(dir: &Path) -> (u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: valid path, zeroed out-parameter.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        assert_eq!(
            libc::statvfs(c.as_ptr(), &mut st),
            0,
            "statvfs {}",
            dir.display()
        );
        let f = st.f_frsize as u64;
        (st.f_blocks as u64 * f, st.f_bavail as u64 * f)
    }
}

/// Adds a filler file so that `dir`'s disk has `leave` bytes free (none if 0).
pub(crate) fn fill(dir: &Path, name: &str, leave: u64) {
    use std::os::fd::AsRawFd;
    let (_, free) = statvfs(dir);
    let len = free.saturating_sub(leave);
    let f = std::fs::File::create(dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: a valid fd we own; allocates `len` bytes of the file.
    let r = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, i64::try_from(len).unwrap_or(0)) };
    // A full disk may refuse the last pages: fill what remains byte by byte-ish.
    if r != 0 {
        let mut rest = f;
        let chunk = vec![0u8; 4096];
        while std::io::Write::write_all(&mut rest, &chunk).is_ok() {}
    }
}

/// A cluster of `NODES` servers, each on a `DISK_MIB` tmpfs of its own (reserve 16 MiB).
/// Needs root. The disks go when the returned `Disks` is dropped (after the cluster).
pub(crate) fn cluster_on_small_disks() -> (TestCluster, Disks) {
    let mut disks = Disks(Vec::new());
    let tc = TestCluster::start_prepared(
        NODES as usize,
        &["--replicas", "3", "--disk-reserve-mib", "16"],
        |dir| {
            for n in 1..=NODES {
                disks.mount(&dir.join(format!("node-{n}")), DISK_MIB);
            }
        },
    );
    (tc, disks)
}

fn data(i: usize) -> Vec<u8> {
    format!("file {i} ").repeat(6000).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_disk_gives_enospc_keeps_reads_and_recovers() {
    let (tc, disks) = cluster_on_small_disks();
    let c = tc.client_with(tc.map.clone(), Duration::from_secs(10));
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    for i in 0..20 {
        c.create(&format!("/d/f{i}"), 0o644, true, &data(i))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    // 90% full: still above the reserve, writes go on.
    for d in &disks.0 {
        let (total, _) = statvfs(d);
        fill(d, "filler-90", total / 10);
    }
    for i in 20..40 {
        c.create(&format!("/d/f{i}"), 0o644, true, &data(i))
            .await
            .unwrap_or_else(|e| panic!("at 90% full: {e}"));
    }

    let files = 40;

    // 100% full: writes are refused with ENOSPC...
    for d in &disks.0 {
        fill(d, "filler-100", 0);
        assert!(statvfs(d).1 < 1 << 20, "{} is not full", d.display());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        c.create("/d/new", 0o644, true, b"x").await.err(),
        Some(FsError::NoSpace)
    );
    assert_eq!(c.mkdir("/d/sub", 0o755).await.err(), Some(FsError::NoSpace));
    let h = c.open("/d/f0").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.write(&h, 0, b"overwrite").await.err(),
        Some(FsError::NoSpace)
    );
    assert_eq!(c.unlink("/d/f1").await.err(), Some(FsError::NoSpace));
    let cli = tc.cli(&["mkdir", "/via-cli"]);
    assert_eq!(cli.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("no space left on device"),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    // ... while everything reads back whole, listings work, and fsck is clean.
    for i in 0..files {
        let (_, got) = c
            .fetch(&format!("/d/f{i}"))
            .await
            .unwrap_or_else(|e| panic!("read at 100% full: {e}"));
        assert!(got == data(i), "f{i} damaged");
    }
    assert_eq!(c.readdir("/d").await.map(|e| e.len()).ok(), Some(files));
    tc.fsck_until_clean().await;

    // Space freed: writes work again, without a restart.
    for d in &disks.0 {
        std::fs::remove_file(d.join("filler-100")).unwrap_or_else(|e| panic!("{e}"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let files = 50;
    for i in 40..files {
        c.create(&format!("/d/f{i}"), 0o644, true, &data(i))
            .await
            .unwrap_or_else(|e| panic!("after freeing space: {e}"));
    }
    c.unlink("/d/f1").await.unwrap_or_else(|e| panic!("{e}"));
    c.write(&h, 0, b"overwrite")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for i in (0..files).filter(|&i| i != 1 && i != 0) {
        assert_eq!(
            c.fetch(&format!("/d/f{i}")).await.map(|x| x.1).ok(),
            Some(data(i))
        );
    }
    tc.fsck_until_clean().await;
    for n in 1..=NODES {
        let log = std::fs::read_to_string(tc.dir.path().join(format!("node-{n}.log")))
            .unwrap_or_default();
        assert!(
            !log.contains("Poisoned"),
            "node {n}'s engine hit the wall:\n{log}"
        );
    }
    drop(tc);
}
