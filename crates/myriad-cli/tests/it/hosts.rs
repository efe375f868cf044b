//! Hosts for tests of what a cluster spread over machines does (issue 48): each host a
//! network namespace of its own with one address on a bridge this harness makes
//! (10.{net}.0.{k}/24; the test process itself sits on the bridge at .254, as a client
//! host would), and its own directory for data, keys and logs. Everything is removed
//! when dropped; every process started in a host is killed then.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::harness::BIN;

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct Hosts {
    tag: String,
    net: u32,
    count: u32,
    pub dir: tempfile::TempDir,
    procs: Vec<(u32, Child)>,
}

impl Hosts {
    /// `count` hosts, or `None` (saying the test is skipped) when not run as root, which
    /// network namespaces need.
    pub fn for_root(count: u32) -> Option<Hosts> {
        if crate::harness::skipped_unless_root("network namespaces need root") {
            return None;
        }
        Some(Hosts::new(count))
    }

    /// `count` hosts, 1..=count. Needs root (network namespaces, veths, a bridge).
    pub fn new(count: u32) -> Hosts {
        // Unique per harness in this process too: a namespace's links outlive `ip netns
        // del` for a moment (the kernel tears it down later), so a second harness with the
        // same names met "File exists".
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nth = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() + nth * 7) % 10_000;
        let h = Hosts {
            tag: format!("mh{id}"),
            net: 20 + id % 80,
            count,
            dir: tempfile::Builder::new()
                .prefix("myriad-hosts-")
                .tempdir()
                .unwrap_or_else(|e| panic!("{e}")),
            procs: Vec::new(),
        };
        let bridge = h.name("br");
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&["link", "set", &bridge, "up"]);
        ip(&[
            "addr",
            "add",
            &format!("10.{}.0.254/24", h.net),
            "dev",
            &bridge,
        ]);
        for k in 1..=count {
            let ns = h.ns(k);
            let (v, p) = (h.name(&format!("v{k}")), h.name(&format!("p{k}")));
            ip(&["netns", "add", &ns]);
            ip(&["link", "add", &v, "type", "veth", "peer", "name", &p]);
            ip(&["link", "set", &p, "netns", &ns]);
            ip(&["link", "set", &v, "master", &bridge, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", h.ip(k)),
                "dev",
                &p,
            ]);
            ip(&["-n", &ns, "link", "set", &p, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        h
    }

    fn name(&self, what: &str) -> String {
        format!("{}{what}", self.tag)
    }

    fn ns(&self, k: u32) -> String {
        self.name(&format!("n{k}"))
    }

    /// Host `k`'s address.
    pub fn ip(&self, k: u32) -> String {
        format!("10.{}.0.{k}", self.net)
    }

    /// Host `k`'s directory (its data, keys and logs live below it).
    pub fn home(&self, k: u32) -> PathBuf {
        let d = self.dir.path().join(format!("host{k}"));
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        d
    }

    /// `myriad` in host `k`'s network namespace.
    pub fn on(&self, k: u32) -> Command {
        self.command(k, BIN)
    }

    /// `program` (any, not only myriad) in host `k`'s network namespace only (`nsenter
    /// --net`: `ip netns exec` would also give it a copy of the mount namespace).
    pub fn command(&self, k: u32, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.ns(k)))
            .arg("--")
            .arg(program);
        c
    }

    /// Stops every process started on host `k` with SIGTERM (a planned stop: a server
    /// hands its partitions over), and waits for them to end (SIGKILL after 20 s).
    pub fn stop_host(&mut self, k: u32) {
        for (h, c) in &mut self.procs {
            if *h != k {
                continue;
            }
            if let Ok(pid) = i32::try_from(c.id()) {
                // SAFETY: signalling a child this harness started and has not reaped.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while c.try_wait().ok().flatten().is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        self.procs
            .retain_mut(|(h, c)| *h != k || c.try_wait().ok().flatten().is_none());
    }

    /// Starts `myriad ARGS` on host `k` in the background, its output in `log` under the
    /// host's directory.
    pub fn spawn(&mut self, k: u32, log: &str, args: &[&str]) {
        self.spawn_program(k, log, BIN, args);
    }

    /// Starts `program ARGS` (another myriad binary: an older release) on host `k` in the
    /// background, its output in `log` under the host's directory.
    pub fn spawn_program(&mut self, k: u32, log: &str, program: &str, args: &[&str]) {
        let out = std::fs::File::create(self.home(k).join(log)).unwrap_or_else(|e| panic!("{e}"));
        let child = self
            .command(k, program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap_or_else(|e| panic!("{e}")))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {args:?} on host {k}: {e}"));
        self.procs.push((k, child));
    }

    /// Runs `myriad ARGS` on host `k` to its end.
    pub fn run(&self, k: u32, args: &[&str]) -> std::process::Output {
        self.on(k)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Kills every process started on host `k` (SIGKILL) and takes its link down: the
    /// whole machine gone.
    pub fn kill_host(&mut self, k: u32) {
        for (h, c) in &mut self.procs {
            if *h == k {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        ip(&["link", "set", &self.name(&format!("v{k}")), "down"]);
    }

    /// The tail of a log of host `k`.
    pub fn log_tail(&self, k: u32, log: &str) -> String {
        let text = std::fs::read_to_string(self.home(k).join(log)).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains("lsm_tree") && !l.contains("fjall"))
            .collect();
        let keep = crate::harness::log_lines(25);
        lines[lines.len().saturating_sub(keep)..].join("\n")
    }

    /// Copies a key file into host `k`'s directory (mode 0600), as an administrator would.
    pub fn give_key(&self, from: &Path, k: u32) -> PathBuf {
        let name = from.file_name().unwrap_or_default().to_string_lossy();
        self.give_key_at(from, k, &name)
    }

    /// Copies a key file to `to` under host `k`'s directory (`/etc/myriad/client.key` is
    /// `HOME/etc/myriad/client.key`), owner-only, making the directories it needs.
    pub fn give_key_at(&self, from: &Path, k: u32, to: &str) -> PathBuf {
        let to = self.home(k).join(to.trim_start_matches('/'));
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::copy(from, &to).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        to
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for k in 1..=self.count {
                for log in ["server.log", "server-restarted.log"] {
                    eprintln!("---- host {k} {log} ----\n{}", self.log_tail(k, log));
                }
            }
        }
        for (_, c) in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
        for k in 1..=self.count {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(k)])
                .output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.name("br")])
            .output();
        // MYRIAD_TEST_KEEP=1 keeps the hosts' directories (their logs) for a look after.
        if std::env::var("MYRIAD_TEST_KEEP").as_deref() == Ok("1") {
            let dir = std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().unwrap_or_else(|e| panic!("{e}")),
            );
            eprintln!("hosts kept in {}", dir.keep().display());
        }
    }
}
