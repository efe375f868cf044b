//! A local cluster: N server processes on 127.0.0.1, their map file and a state file with
//! their pids, all under one data directory.
//!
//! ```text
//! D/cluster.json        the cluster map (give it to clients: --cluster or MYRIAD_CLUSTER)
//! D/cluster.secret      the cluster secret (0600; servers and administrators)
//! D/client.key          the client key (0600; give it to client machines)
//! D/cluster-state.json  pids and addresses, for `cluster down` / `start-node`
//! D/node-<id>/          each node's store;   D/node-<id>.log  its log
//! ```
//! Listening sockets are bound here (port 0) and handed to each child, so there is no window
//! in which another process could take a port between choosing and using it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;
use myriad_client::{Client, ClientConfig, ClusterMap, NodeId};
use serde::{Deserialize, Serialize};

use crate::identity::current_caller;

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Start N server processes on 127.0.0.1 and write the cluster map.
    Up {
        #[arg(long, default_value_t = 4)]
        nodes: usize,
        #[arg(long)]
        data_dir: PathBuf,
        /// Owner of the root directory (UID:GID); default: the user running this command.
        #[arg(long, value_parser = crate::server_cmd::parse_owner)]
        root_owner: Option<(u32, u32)>,
        /// Every server serves Prometheus metrics on a free port of 127.0.0.1 (its
        /// address is in `node-N/metrics.addr`; `cluster status` lists them).
        #[arg(long)]
        metrics: bool,
        #[command(flatten)]
        replication: Box<crate::server_cmd::ReplicationArgs>,
        #[command(flatten)]
        security: crate::server_cmd::SecurityArgs,
        #[command(flatten)]
        tiers: Box<crate::server_cmd::TierArgs>,
        #[command(flatten)]
        layout: LayoutArgs,
        /// Zones to spread the servers over, comma-separated (node N is in the
        /// ((N-1) mod count)-th): every partition then has copies in as many zones as it
        /// can, so a whole zone can be lost without losing data (docs/zones.md).
        #[arg(long, value_delimiter = ',', value_parser = crate::server_cmd::parse_zone)]
        zones: Vec<String>,
    },
    /// Create a new cluster secret (mode 0600) for servers and administrators, and its client
    /// key for client machines (`cluster up` makes both in its data directory if missing).
    Init {
        /// Where to write the secret; refuses to overwrite an existing file.
        #[arg(long)]
        secret_file: PathBuf,
        /// Where to write the client key (default: client.key beside the secret).
        #[arg(long)]
        client_key_file: Option<PathBuf>,
    },
    /// Stop the servers of a local cluster (SIGINT: at once, no hand-over; SIGKILL after 5 s).
    Down {
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Restart one node of a local cluster on its old address (after a crash or kill).
    StartNode {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        node: u32,
    },
    /// Add a server to a local cluster: start it on a new port and add it to the map (through
    /// the Raft group); copies of partitions then move to it in the background, a few at a
    /// time, while clients keep reading and writing. Progress: `myriad cluster status`.
    AddNode {
        #[arg(long)]
        data_dir: PathBuf,
        /// Relative capacity (a server of weight 2 gets twice the copies).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        weight: u32,
        /// Wait until the moves to it are done.
        #[arg(long)]
        wait: bool,
        /// The zone it is in (default: the zone of the cluster's servers if they are all in
        /// one, else required).
        #[arg(long, value_parser = crate::server_cmd::parse_zone)]
        zone: Option<String>,
    },
    /// Remove a server from a local cluster: it keeps serving while its copies move to the
    /// others, then it leaves the map and is stopped.
    RemoveNode {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        node: u32,
        /// Return once the server is marked leaving, without waiting for its copies to move.
        #[arg(long)]
        no_wait: bool,
    },
    /// Nodes, map epoch, and per-node request counters by operation.
    Status,
    /// Reset every node's request counters.
    ResetCounters,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeState {
    pub id: NodeId,
    pub pid: u32,
    pub addr: String,
    /// The network namespace it runs in (`None`: the one `cluster up` ran in).
    #[serde(default)]
    pub netns: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterState {
    pub nodes: Vec<NodeState>,
    /// Extra `myriad server` flags every node was started with (kept for `start-node`).
    #[serde(default)]
    pub server_args: Vec<String>,
}

/// How data is spread over the servers of a new cluster (docs/replication.md).
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct LayoutArgs {
    /// Partitions per server (the unit of placement, replication and movement; the total is
    /// fixed for the cluster's life). More spreads a dead server's load wider.
    #[arg(long, default_value_t = myriad_client::DEFAULT_PARTITIONS_PER_NODE, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub partitions_per_node: u32,
    /// Copies of every file and directory (capped by the number of servers). With 3, any
    /// one server (and often two) can die without losing an acknowledged write or service.
    #[arg(long, default_value_t = myriad_client::DEFAULT_REPLICATION, value_parser = clap::value_parser!(u32).range(1..=5))]
    pub replicas: u32,
}

impl Default for LayoutArgs {
    fn default() -> LayoutArgs {
        LayoutArgs {
            partitions_per_node: myriad_client::DEFAULT_PARTITIONS_PER_NODE,
            replicas: myriad_client::DEFAULT_REPLICATION,
        }
    }
}

/// How to start the nodes of a local cluster.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub root_owner: (u32, u32),
    pub server_args: Vec<String>,
    pub layout: LayoutArgs,
    /// Zones the servers are spread over (empty: one zone).
    pub zones: Vec<String>,
}

/// The identity benchmarks run as: the calling user, or uid/gid 1000 when that is root,
/// because root skips permission checks and would not measure them.
#[must_use]
pub fn bench_identity() -> myriad_client::Caller {
    let me = current_caller();
    if me.uid == 0 {
        myriad_client::Caller {
            uid: 1000,
            gid: 1000,
            groups: Vec::new(),
        }
    } else {
        me
    }
}

impl NodeOptions {
    /// Root owned by the benchmark identity, with extra server flags.
    #[must_use]
    pub fn for_bench(server_args: Vec<String>) -> NodeOptions {
        let c = bench_identity();
        NodeOptions {
            root_owner: (c.uid, c.gid),
            server_args,
            layout: LayoutArgs::default(),
            zones: Vec::new(),
        }
    }

    /// Root owned by the calling user, replication on with default settings.
    #[must_use]
    pub fn for_current_user() -> NodeOptions {
        let c = current_caller();
        NodeOptions {
            root_owner: (c.uid, c.gid),
            server_args: Vec::new(),
            layout: LayoutArgs::default(),
            zones: Vec::new(),
        }
    }
}

pub struct LocalCluster {
    pub dir: PathBuf,
    pub map: ClusterMap,
    /// The cluster secret: this process administers the cluster it started.
    pub keys: myriad_client::Keyring,
}

/// Where one server of a local cluster runs: its address, its zone, and the network
/// namespace it is started in (`None`: this process's).
#[derive(Clone, Debug)]
pub struct Placement {
    pub addr: String,
    pub zone: String,
    pub netns: Option<String>,
}

impl Placement {
    fn at(&self) -> At<'_> {
        At {
            addr: &self.addr,
            netns: self.netns.as_deref(),
        }
    }
}

/// Where to start a server: its address and network namespace.
pub(crate) struct At<'a> {
    pub(crate) addr: &'a str,
    pub(crate) netns: Option<&'a str>,
}

/// Refuses to start a cluster where one is running.
fn refuse_running(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if state_path(dir).exists()
        && let Ok(st) = read_state(dir)
        && st.nodes.iter().any(|nd| pid_is_server(nd.pid))
    {
        bail!(
            "a cluster is already running in {} (run `myriad cluster down --data-dir {}`)",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

pub fn map_path(dir: &Path) -> PathBuf {
    dir.join("cluster.json")
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("cluster-state.json")
}

impl LocalCluster {
    /// Starts `n` nodes under `dir` and waits until every one answers.
    pub async fn up(dir: &Path, n: usize, opts: &NodeOptions) -> anyhow::Result<LocalCluster> {
        if n == 0 || n > 64 {
            bail!("--nodes must be 1..=64");
        }
        refuse_running(dir)?;
        let mut listeners = Vec::new();
        let mut places = Vec::new();
        for i in 0..n {
            let l = crate::local_ports::listener()?;
            places.push(Placement {
                addr: l.local_addr()?.to_string(),
                zone: opts
                    .zones
                    .get(i.checked_rem(opts.zones.len()).unwrap_or(0))
                    .cloned()
                    .unwrap_or_default(),
                netns: None,
            });
            listeners.push(Some(l));
        }
        LocalCluster::start(dir, &places, listeners, opts).await
    }

    /// Starts one server per placement (each listening on its address, inside its network
    /// namespace if it names one) and waits until every one answers: a cluster over hosts
    /// this process set up (`bench zones`).
    pub async fn up_placed(
        dir: &Path,
        places: &[Placement],
        opts: &NodeOptions,
    ) -> anyhow::Result<LocalCluster> {
        refuse_running(dir)?;
        let none = places.iter().map(|_| None).collect();
        LocalCluster::start(dir, places, none, opts).await
    }

    async fn start(
        dir: &Path,
        places: &[Placement],
        listeners: Vec<Option<std::net::TcpListener>>,
        opts: &NodeOptions,
    ) -> anyhow::Result<LocalCluster> {
        let addrs: Vec<String> = places.iter().map(|p| p.addr.clone()).collect();
        let zones: Vec<String> = places.iter().map(|p| p.zone.clone()).collect();
        let map = ClusterMap::build_in_zones(
            1,
            &addrs,
            &zones,
            opts.layout.partitions_per_node,
            opts.layout.replicas,
        );
        std::fs::write(map_path(dir), map.to_json())?;
        let (secret, keys) = crate::keys::ensure_local(dir)?;
        let mut server_args = opts.server_args.clone();
        server_args.push(format!("--secret-file={}", secret.display()));
        server_args.push(format!(
            "--root-owner={}:{}",
            opts.root_owner.0, opts.root_owner.1
        ));
        let mut state = ClusterState {
            nodes: Vec::new(),
            server_args: server_args.clone(),
        };
        for ((node, listener), place) in map.nodes.iter().zip(listeners).zip(places) {
            let pid = spawn_node(
                dir,
                node.id,
                listener,
                &place.at(),
                &node.zone,
                &server_args,
            )?;
            state.nodes.push(NodeState {
                id: node.id,
                pid,
                addr: node.addr.clone(),
                netns: place.netns.clone(),
            });
        }
        write_state(dir, &state)?;
        let cluster = LocalCluster {
            dir: dir.to_path_buf(),
            map,
            keys,
        };
        cluster.wait_ready(Duration::from_secs(20)).await?;
        Ok(cluster)
    }

    pub fn client(&self, timeout: Duration) -> anyhow::Result<Client> {
        self.client_as(timeout, current_caller())
    }

    pub fn client_as(
        &self,
        timeout: Duration,
        caller: myriad_client::Caller,
    ) -> anyhow::Result<Client> {
        let mut cfg = ClientConfig::new(self.map.clone(), caller, self.keys.clone());
        cfg.request_timeout = timeout;
        Ok(Client::new(cfg)?)
    }

    async fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let client = self.client(Duration::from_secs(1))?;
        let start = Instant::now();
        for n in &self.map.nodes {
            loop {
                match client.echo(n.id, Vec::new()).await {
                    Ok(_) => break,
                    Err(e) if start.elapsed() > within => {
                        bail!(
                            "node {} at {} did not come up: {e} (see {})",
                            n.id,
                            n.addr,
                            self.dir.join(format!("node-{}.log", n.id)).display()
                        )
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
        // Every server serves once the Raft group has a leader that granted it a lease.
        loop {
            let all = client.all_counters().await;
            let waiting: Vec<NodeId> = all
                .iter()
                .filter(|(_, r)| !r.as_ref().is_ok_and(|c| c.serving))
                .map(|(id, _)| *id)
                .collect();
            if waiting.is_empty() {
                break;
            }
            if start.elapsed() > within {
                bail!(
                    "servers {waiting:?} hold no lease from the cluster-map leader (no Raft majority?); see the node logs in {}",
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The root directory object is created by its owner at start; wait for it.
        loop {
            match client.stat("/").await {
                Ok(_) => return Ok(()),
                Err(e) if start.elapsed() > within => bail!("root directory not available: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Waits until the cluster's map is at rest (for benchmarks that measure how requests
    /// spread): every server up, no copy behind, no move in progress, primaries even
    /// (`balance_primaries` has nothing to hand over), and then one lease more, the pause
    /// a hand-over's partition takes before its new primary serves. A slow start on a busy
    /// machine can mark a server down for a moment; its primaries come back this way.
    /// Returns how many map changes it waited through.
    pub async fn wait_settled(&self, within: Duration) -> anyhow::Result<u64> {
        let client = self.client(Duration::from_secs(2))?;
        let start = Instant::now();
        let mut first = None;
        loop {
            let map = client.newest_map().await;
            let first = *first.get_or_insert(map.epoch);
            let at_rest = map
                .nodes
                .iter()
                .all(|n| n.state == myriad_placement::NodeState::Up)
                && map
                    .partitions
                    .iter()
                    .all(|p| p.behind.is_empty() && p.moving.is_none())
                && map.balance_primaries(usize::MAX).is_none();
            if at_rest {
                let changes = map.epoch - first;
                if changes > 0 {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                }
                return Ok(changes);
            }
            if start.elapsed() > within {
                bail!(
                    "the cluster map did not settle within {} s (epoch {}); see the node logs in {}",
                    within.as_secs(),
                    map.epoch,
                    self.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn down(&self) -> anyhow::Result<()> {
        down(&self.dir)
    }

    /// SIGKILL to one server of this cluster (benchmarks of failure handling); returns once
    /// it is gone.
    pub fn kill9(&self, node: NodeId) -> anyhow::Result<()> {
        let st = read_state(&self.dir)?;
        let Some(entry) = st.nodes.iter().find(|n| n.id == node) else {
            bail!("no node {node} in this cluster");
        };
        if pid_is_server(entry.pid) {
            signal(entry.pid, libc::SIGKILL);
        }
        let start = Instant::now();
        while pid_is_server(entry.pid) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// Spawns one `myriad server` child, detached from our process group so Ctrl-C of the CLI
/// does not reach it, logging to `node-<id>.log`.
pub(crate) fn spawn_node(
    dir: &Path,
    id: NodeId,
    listener: Option<std::net::TcpListener>,
    at: &At<'_>,
    zone: &str,
    server_args: &[String],
) -> anyhow::Result<u32> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the myriad executable")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("node-{id}.log")))?;
    // In another network namespace: through nsenter, which execs the server (its pid is
    // the server's) and, unlike `ip netns exec`, leaves the mount namespace alone.
    let mut cmd = match at.netns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net=/run/netns/{ns}")).arg("--").arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.arg("server")
        .arg("--data-dir")
        .arg(dir.join(format!("node-{id}")))
        .arg("--cluster-map")
        .arg(map_path(dir))
        .arg("--node-id")
        .arg(id.to_string())
        .args(server_args)
        .args((!zone.is_empty()).then(|| format!("--zone={zone}")))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    let child = match &listener {
        Some(l) => {
            let fd = l.as_raw_fd();
            cmd.arg("--listen-fd").arg(fd.to_string());
            // Only this child may inherit this socket: clear close-on-exec just for the spawn.
            set_cloexec(fd, false);
            let child = cmd.spawn();
            set_cloexec(fd, true);
            child
        }
        None => cmd.arg("--listen").arg(at.addr).spawn(),
    }
    .context("cannot start a server process")?;
    drop(listener);
    Ok(child.id())
}

fn set_cloexec(fd: i32, on: bool) {
    // SAFETY: fcntl on a valid fd we own; only the FD_CLOEXEC flag changes.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            let new = if on {
                flags | libc::FD_CLOEXEC
            } else {
                flags & !libc::FD_CLOEXEC
            };
            libc::fcntl(fd, libc::F_SETFD, new);
        }
    }
}

pub(crate) fn read_state(dir: &Path) -> anyhow::Result<ClusterState> {
    let text = std::fs::read_to_string(state_path(dir)).with_context(|| {
        format!(
            "no local cluster in {} (cluster-state.json missing)",
            dir.display()
        )
    })?;
    Ok(serde_json::from_str(&text)?)
}

pub(crate) fn write_state(dir: &Path, st: &ClusterState) -> anyhow::Result<()> {
    std::fs::write(state_path(dir), serde_json::to_string_pretty(st)?)?;
    Ok(())
}

/// True if `pid` is alive and is a myriad server (never signal a recycled pid).
pub(crate) fn pid_is_server(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let s = String::from_utf8_lossy(&c);
            s.contains("myriad") && s.contains("server")
        })
        .unwrap_or(false)
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

pub(crate) fn signal(pid: u32, sig: i32) {
    if let Ok(p) = i32::try_from(pid) {
        // SAFETY: sending a signal to a pid we verified is our server.
        unsafe {
            libc::kill(p, sig);
        }
    }
}

pub fn down(dir: &Path) -> anyhow::Result<()> {
    let st = read_state(dir)?;
    let live: Vec<u32> = st
        .nodes
        .iter()
        .map(|n| n.pid)
        .filter(|&p| pid_is_server(p))
        .collect();
    // SIGINT: every server stops at once. (SIGTERM would have each hand its partitions to
    // the others, which are stopping too.)
    for &p in &live {
        signal(p, libc::SIGINT);
    }
    let start = Instant::now();
    while live.iter().any(|&p| pid_is_server(p)) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in &live {
        if pid_is_server(p) {
            signal(p, libc::SIGKILL);
        }
    }
    Ok(())
}

/// A root client of the local cluster in `dir`, following its newest map: local clusters
/// belong to whoever runs them, so their administration acts as root.
pub(crate) async fn admin_client(dir: &Path, timeout: Duration) -> anyhow::Result<Client> {
    let text = std::fs::read_to_string(map_path(dir))
        .with_context(|| format!("no cluster map in {}", dir.display()))?;
    let keys = crate::keys::load(&dir.join(crate::keys::SECRET_FILE))?;
    let mut cfg = ClientConfig::new(
        ClusterMap::from_json(&text)?,
        myriad_client::Caller::root(),
        keys,
    );
    cfg.request_timeout = timeout;
    let client = Client::new(cfg)?;
    client.newest_map().await;
    Ok(client)
}
