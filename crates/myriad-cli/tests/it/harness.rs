use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use myriad_client::{Caller, Client, ClientConfig, ClusterMap, Keyring, NodeId};

pub const BIN: &str = env!("CARGO_BIN_EXE_myriad");

/// A local cluster of real server processes; stopped (by pid) when dropped.
pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub map: ClusterMap,
}

impl TestCluster {
    pub fn start(nodes: usize) -> TestCluster {
        TestCluster::start_with(nodes, &[])
    }

    /// A cluster whose root is owned by the test user (1000:1000), with extra `cluster up` flags.
    /// One partition per server and one copy unless `extra` says otherwise, so tests that
    /// reason about which server holds a key can read it off the ring (partition i is on
    /// server i).
    pub fn start_with(nodes: usize, extra: &[&str]) -> TestCluster {
        TestCluster::start_prepared(nodes, extra, |_| {})
    }

    /// `start_with`, after `prepare` has run on the cluster's (empty) directory: e.g. to
    /// mount a small file system where a node's data will go.
    pub fn start_prepared(
        nodes: usize,
        extra: &[&str],
        prepare: impl FnOnce(&std::path::Path),
    ) -> TestCluster {
        TestCluster::up(nodes, extra, prepare, &[])
    }

    /// `start_with`, its servers started with `env` too.
    pub fn start_with_env(nodes: usize, extra: &[&str], env: &[(&str, &str)]) -> TestCluster {
        TestCluster::up(nodes, extra, |_| {}, env)
    }

    fn up(
        nodes: usize,
        extra: &[&str],
        prepare: impl FnOnce(&std::path::Path),
        env: &[(&str, &str)],
    ) -> TestCluster {
        let mut layout: Vec<&str> = Vec::new();
        if !extra.iter().any(|a| a.starts_with("--partitions-per-node")) {
            layout.extend(["--partitions-per-node", "1"]);
        }
        // One copy unless asked: these tests kill servers to test two-node protocols, not
        // failover (failover.rs and replication.rs ask for 3).
        if !extra.iter().any(|a| a.starts_with("--replicas")) {
            layout.extend(["--replicas", "1"]);
        }
        let dir = tempfile::Builder::new()
            .prefix("myriad-it-")
            .tempdir()
            .unwrap_or_else(|e| panic!("{e}"));
        prepare(dir.path());
        let out = Command::new(BIN)
            .args([
                "cluster",
                "up",
                "--nodes",
                &nodes.to_string(),
                "--root-owner",
                "1000:1000",
                "--data-dir",
            ])
            .arg(dir.path())
            .args(&layout)
            // "{dir}" in an argument stands for the cluster's directory.
            .args(
                extra
                    .iter()
                    .map(|a| a.replace("{dir}", &dir.path().display().to_string())),
            )
            .envs(env.iter().copied())
            .output()
            .unwrap_or_else(|e| panic!("cannot run myriad: {e}"));
        assert!(
            out.status.success(),
            "cluster up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(dir.path().join("cluster.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        let map = ClusterMap::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
        TestCluster { dir, map }
    }

    pub fn map_file(&self) -> PathBuf {
        self.dir.path().join("cluster.json")
    }

    pub fn client(&self) -> Client {
        self.client_with(self.map.clone(), Duration::from_secs(10))
    }

    pub fn client_with(&self, map: ClusterMap, timeout: Duration) -> Client {
        let user = Caller {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        self.client_as(map, timeout, user)
    }

    /// The cluster secret `cluster up` made (this test administers the cluster).
    pub fn keys(&self) -> Keyring {
        self.key_file("cluster.secret")
    }

    /// The client key `cluster up` made (what a client machine holds).
    pub fn client_key(&self) -> Keyring {
        self.key_file("client.key")
    }

    fn key_file(&self, name: &str) -> Keyring {
        let text = std::fs::read_to_string(self.dir.path().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        Keyring::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    pub fn client_as(&self, map: ClusterMap, timeout: Duration, caller: Caller) -> Client {
        self.client_with_keys(map, timeout, caller, self.keys())
    }

    pub fn client_with_keys(
        &self,
        map: ClusterMap,
        timeout: Duration,
        caller: Caller,
        keys: Keyring,
    ) -> Client {
        let mut cfg = ClientConfig::new(map, caller, keys);
        cfg.request_timeout = timeout;
        cfg.connect_timeout = Duration::from_secs(1);
        Client::new(cfg).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn pid(&self, node: NodeId) -> i32 {
        let text =
            std::fs::read_to_string(self.dir.path().join("cluster-state.json")).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        v["nodes"]
            .as_array()
            .and_then(|a| a.iter().find(|n| n["id"].as_u64() == Some(u64::from(node))))
            .and_then(|n| n["pid"].as_i64())
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or_else(|| panic!("no pid for node {node}"))
    }

    /// kill -9 of one node's process.
    pub fn kill9(&self, node: NodeId) {
        let pid = self.pid(node);
        // SAFETY: signalling a server process this test started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        wait_gone(pid, Duration::from_secs(2));
    }

    pub fn restart(&self, node: NodeId) {
        self.restart_with_env(node, &[]);
    }

    /// `restart`, the server started with `env` too.
    pub fn restart_with_env(&self, node: NodeId, env: &[(&str, &str)]) {
        let out = Command::new(BIN)
            .args([
                "cluster",
                "start-node",
                "--node",
                &node.to_string(),
                "--data-dir",
            ])
            .arg(self.dir.path())
            .envs(env.iter().copied())
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "start-node failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until `node` answers an echo and the cluster map `client` learns from the
    /// servers counts it up again (until then a partition whose only copies are on it has
    /// "no copy up", which a request right after a restart would meet).
    pub async fn wait_up(&self, client: &Client, node: NodeId) {
        for _ in 0..200 {
            if client.echo(node, vec![]).await.is_ok() && client.newest_map().await.is_up(node) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("node {node} did not come back");
    }

    /// Runs `myriad fsck` until it reports the namespace clean (recovery of interrupted
    /// operations runs every 2 s); panics with its last report after 20 s.
    pub async fn fsck_until_clean(&self) {
        let mut last = String::new();
        for _ in 0..40 {
            let out = self.cli(&["fsck"]);
            if out.status.success() {
                return;
            }
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("fsck never came clean: {last}");
    }

    /// Runs the CLI against this cluster.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .arg("--cluster")
            .arg(self.map_file())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // A failing test shows what the servers said.
        if std::thread::panicking() {
            for n in &self.map.nodes {
                let log =
                    std::fs::read_to_string(self.dir.path().join(format!("node-{}.log", n.id)))
                        .unwrap_or_default();
                // A panic's message comes before its backtrace, which fills any tail.
                let lines: Vec<&str> = log.lines().collect();
                for (i, l) in lines.iter().enumerate() {
                    if l.contains("panicked at") {
                        eprintln!("---- node {} panicked ----", n.id);
                        for m in lines.iter().skip(i).take(3) {
                            eprintln!("{m}");
                        }
                    }
                }
                let keep = log_lines(40);
                let tail: Vec<&str> = lines.iter().rev().take(keep).copied().collect();
                eprintln!("---- node {} log (last {} lines) ----", n.id, tail.len());
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
        let _ = Command::new(BIN)
            .args(["cluster", "down", "--data-dir"])
            .arg(self.dir.path())
            .output();
        // A server task that panicked (an invariant's assertion, a bug) fails the test even
        // when the cluster hid it (tokio catches a task's panic; the server goes on).
        if !std::thread::panicking() {
            for n in &self.map.nodes {
                let log =
                    std::fs::read_to_string(self.dir.path().join(format!("node-{}.log", n.id)))
                        .unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                if let Some(i) = lines.iter().position(|l| l.contains("panicked at")) {
                    let said: Vec<&str> = lines.iter().skip(i).take(3).copied().collect();
                    panic!("server {} panicked:\n{}", n.id, said.join("\n"));
                }
            }
        }
    }
}

/// The server serving partition `p` (the primary).
pub fn server_of(map: &ClusterMap, p: myriad_client::PartitionId) -> NodeId {
    map.primary_of(p)
        .unwrap_or_else(|| panic!("partition {p} has no primary"))
}

/// A directory path whose directory object is served by server `node`, with a unique prefix.
pub fn dir_on_node(client: &Client, map: &ClusterMap, node: NodeId, prefix: &str) -> String {
    let ring = map.ring();
    let _ = client;
    (0..10_000)
        .map(|i| format!("/{prefix}{i}"))
        .find(|p| map.primary_of(ring.owner_of_dir(p)) == Some(node))
        .unwrap_or_else(|| panic!("no path for node {node}"))
}

/// Waits until process `pid` is gone or a zombie (reaping it is not ours: the CLI detached
/// it), at most `within`; true if it is.
pub fn wait_gone(pid: i32, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How many lines of a process's log a failure shows: `default`, or MYRIAD_TEST_LOG_LINES
/// (more for a failure under debug logging).
pub fn log_lines(default: usize) -> usize {
    std::env::var("MYRIAD_TEST_LOG_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether a test that needs root is skipped here (not running as root): says so, with
/// `why`.
pub fn skipped_unless_root(why: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: {why}");
    }
    !root
}
