//! A real FUSE mount of a test cluster (`myriad mount` as a child process), unmounted and
//! reaped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{BIN, TestCluster};

pub struct Mount {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    log: PathBuf,
}

pub fn is_mounted(p: &Path) -> bool {
    let want = p.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(want.as_str()))
}

impl Mount {
    pub fn new(cluster: &TestCluster, extra: &[&str]) -> Mount {
        Mount::with_env(cluster, extra, &[])
    }

    /// A mount whose process gets `env` too (e.g. `MYRIAD_LOG` to trace it).
    pub fn with_env(cluster: &TestCluster, extra: &[&str], env: &[(&str, &str)]) -> Mount {
        let dir = tempfile::Builder::new()
            .prefix("myriad-mnt-")
            .tempdir()
            .unwrap_or_else(|e| panic!("{e}"));
        let log = cluster.dir.path().join(format!(
            "mount-{}.log",
            dir.path().display().to_string().replace('/', "_")
        ));
        let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(BIN)
            .arg("--cluster")
            .arg(cluster.map_file())
            .args(extra.iter().take_while(|a| **a != "--"))
            .arg("mount")
            .arg(dir.path())
            .args(extra.iter().skip_while(|a| **a != "--").skip(1))
            // The FUSE suite over /dev/fuse instead of FUSE over io_uring, the default
            // where the kernel has it (`fuse_ring.rs`).
            .args(
                std::env::var_os("MYRIAD_TEST_DEV_FUSE")
                    .filter(|v| v == "1" && !extra.contains(&"--fuse-ring"))
                    .map(|_| "--no-fuse-ring"),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start myriad mount: {e}"));
        let mut m = Mount {
            dir,
            child: Some(child),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(m.dir.path()) {
            if let Some(Ok(Some(st))) = m.child.as_mut().map(Child::try_wait) {
                panic!(
                    "myriad mount exited ({st}) - FUSE must work on this machine (/dev/fuse, \
                     root or fusermount3): {}",
                    std::fs::read_to_string(&m.log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "mount did not come up in 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// What the mount process logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for the mount process to exit by itself; its exit status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("no mount process"));
        // It finishes what it was given first (a big file's last writes): generous, as the
        // suite runs clusters side by side on two cores; a hang still fails.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return st;
            }
            assert!(Instant::now() < deadline, "mount process did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9 of the mount process (a crashed client machine), then a lazy unmount of
    /// what it leaves behind.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel.trim_start_matches('/'))
    }

    /// Unmounts (as `myriad umount`) and waits for the mount process to exit cleanly.
    pub fn unmount(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let out = Command::new(BIN)
            .arg("umount")
            .arg(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        if !out.status.success() {
            // Busy (a test failed with a file open): detach so the process can end.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
        // It finishes what it was given first (a big file's last writes): generous, as the
        // suite runs clusters side by side on two cores; a hang still fails.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                assert!(
                    st.success() || std::thread::panicking(),
                    "mount exited with {st}; its log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
                return;
            }
            if Instant::now() > deadline {
                let stuck = threads_of(child.id());
                let _ = child.kill();
                let _ = child.wait();
                // Unmounting after a failed test (a file still mapped by the failing
                // process): report, but do not panic in the unwinding, which would abort
                // every other test of the binary.
                if std::thread::panicking() {
                    eprintln!("mount process did not exit after unmount; its threads:\n{stuck}");
                    return;
                }
                panic!("mount process did not exit after unmount; its threads:\n{stuck}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Each thread of process `pid`: name, state, where it waits in the kernel (diagnosis of
/// a process that does not exit).
fn threads_of(pid: u32) -> String {
    let mut out = String::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = t.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .split(") ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or("?");
        out.push_str(&format!(
            "  {} {} state {} wchan {}\n{}\n",
            t.file_name().to_string_lossy(),
            read("comm").trim(),
            state,
            read("wchan"),
            read("stack")
        ));
    }
    out
}

impl Drop for Mount {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("---- mount log ----\n{log}");
        }
        self.unmount();
    }
}

/// `umount DIR` (a mount made by mount(8) or `--daemon`), which must succeed, and the
/// mount gone within 10 s.
pub fn umount(dir: &Path) {
    let out = Command::new("umount")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("umount: {e}"));
    assert!(
        out.status.success(),
        "umount {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let t = Instant::now();
    while is_mounted(dir) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !is_mounted(dir),
        "{} still mounted after umount",
        dir.display()
    );
}

/// Runs a shell command (in `dir`), panicking with its output if it fails.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "`{script}` failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `/sbin/mount.myriad`, a link to the binary under test, for tests that run `mount -t
/// myriad`: installed while the guard lives, and the tests that use it take turns (one
/// removing it under another's feet would fail that one).
pub struct MountHelper {
    _turn: std::sync::MutexGuard<'static, ()>,
    created: bool,
}

const HELPER: &str = "/sbin/mount.myriad";

/// The helper, installed; `None` when /sbin/mount.myriad is some other program's.
pub fn mount_helper() -> Option<MountHelper> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let helper = Path::new(HELPER);
    let bin = std::fs::canonicalize(BIN).unwrap_or_else(|e| panic!("{e}"));
    let created = match std::fs::read_link(helper) {
        Ok(t) if t == bin => false,
        _ if helper.exists() || helper.is_symlink() => return None,
        _ => {
            std::os::unix::fs::symlink(&bin, helper).unwrap_or_else(|e| panic!("{e}"));
            true
        }
    };
    Some(MountHelper {
        _turn: turn,
        created,
    })
}

impl Drop for MountHelper {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_file(HELPER);
        }
    }
}
