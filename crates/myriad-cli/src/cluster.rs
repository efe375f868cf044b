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
struct At<'a> {
    addr: &'a str,
    netns: Option<&'a str>,
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
            let l = std::net::TcpListener::bind("127.0.0.1:0")
                .context("cannot bind a port on 127.0.0.1")?;
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

/// " zone NAME" after a server's address, nothing for the unnamed zone.
fn zone_label(zone: &str) -> String {
    if zone.is_empty() {
        String::new()
    } else {
        format!(" zone {zone}")
    }
}

/// "zones: a (3 servers, 48 copies), b (...)" and whether every partition covers as many
/// zones as it can; `None` for a cluster in one zone.
fn zones_line(map: &ClusterMap) -> Option<String> {
    let zones = map.zones();
    if zones.len() < 2 && zones.first().is_none_or(|z| z.is_empty()) {
        return None;
    }
    let per_zone: Vec<String> = zones
        .iter()
        .map(|z| {
            let servers = map.nodes.iter().filter(|n| n.zone == *z).count();
            let copies = map
                .partitions
                .iter()
                .flat_map(|p| &p.replicas)
                .filter(|r| map.zone_of(**r) == *z)
                .count();
            format!("{z} ({servers} servers, {copies} copies)")
        })
        .collect();
    let short = map
        .partitions
        .iter()
        .filter(|p| map.zone_count(&p.replicas) < map.zones_wanted(p))
        .count();
    let spread = if short == 0 {
        "every partition spans as many zones as it can".to_string()
    } else {
        format!("{short} partitions span fewer zones than they could (moving)")
    };
    Some(format!("zones: {}; {spread}", per_zone.join(", ")))
}

/// "from zone b: file 120 req 1.2 MiB, membership 30 req 4.0 KiB" per zone that sent this
/// server requests (bytes both ways), when any came from a zone but the server's own.
fn zone_traffic_lines(c: &myriad_client::proto::CounterSnapshot) -> Vec<String> {
    if c.zone_traffic.iter().all(|t| t.zone == c.zone) {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    let mut zone: Option<&str> = None;
    for t in &c.zone_traffic {
        let part = format!(
            "{} {} req {}",
            t.kind.name(),
            t.requests,
            crate::fs_cmds::human(t.bytes())
        );
        if zone == Some(t.zone.as_str())
            && let Some(last) = out.last_mut()
        {
            last.push_str(", ");
            last.push_str(&part);
        } else {
            let whose = if t.zone == c.zone { " (own)" } else { "" };
            let name = if t.zone.is_empty() { "\"\"" } else { &t.zone };
            out.push(format!("from zone {name}{whose}: {part}"));
            zone = Some(t.zone.as_str());
        }
    }
    out
}

/// Spawns one `myriad server` child, detached from our process group so Ctrl-C of the CLI
/// does not reach it, logging to `node-<id>.log`.
fn spawn_node(
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

fn read_state(dir: &Path) -> anyhow::Result<ClusterState> {
    let text = std::fs::read_to_string(state_path(dir)).with_context(|| {
        format!(
            "no local cluster in {} (cluster-state.json missing)",
            dir.display()
        )
    })?;
    Ok(serde_json::from_str(&text)?)
}

fn write_state(dir: &Path, st: &ClusterState) -> anyhow::Result<()> {
    std::fs::write(state_path(dir), serde_json::to_string_pretty(st)?)?;
    Ok(())
}

/// True if `pid` is alive and is a myriad server (never signal a recycled pid).
fn pid_is_server(pid: u32) -> bool {
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

fn signal(pid: u32, sig: i32) {
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
async fn admin_client(dir: &Path, timeout: Duration) -> anyhow::Result<Client> {
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

/// One line about the moves in progress.
fn moves_line(map: &ClusterMap) -> String {
    let moves = map.moves();
    let behind: Vec<String> = map
        .partitions
        .iter()
        .flat_map(|p| p.behind.iter().map(move |b| format!("{}@{b}", p.id)))
        .collect();
    // Copies that missed writes while down, until the leader sees them caught up; and
    // partitions whose only live copies are behind, which wait for an in-sync one.
    let mut tail = String::new();
    if !behind.is_empty() {
        tail = format!(
            "; {} copies catching up (partition@server: {})",
            behind.len(),
            behind.join(" ")
        );
    }
    let waiting = map
        .partitions
        .iter()
        .filter(|p| map.primary_of(p.id).is_none())
        .count();
    if waiting > 0 {
        tail.push_str(&format!(
            "; {waiting} partitions have no copy up and in sync (waiting for one to return; \
             if those servers are lost for good: `myriad node lost ID`)"
        ));
    }
    if moves.is_empty() {
        return format!("no copies moving{tail}");
    }
    let list: Vec<String> = moves
        .iter()
        .map(|(p, m)| {
            if m.adds() {
                format!("partition {p}: a copy added on server {}", m.to)
            } else {
                format!("partition {p}: server {} -> {}", m.from, m.to)
            }
        })
        .collect();
    format!("{} copies moving ({}){tail}", moves.len(), list.join(", "))
}

/// How long `--wait` goes on without the map changing before it gives up (a move waits
/// for a server that is down, say); the cluster keeps trying in the background.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// Polls the newest map until `done` holds, printing progress when it changes; an error
/// if nothing changes for `STALL_LIMIT`.
async fn wait_for_map(
    client: &Client,
    what: &str,
    done: impl Fn(&ClusterMap) -> bool,
) -> anyhow::Result<ClusterMap> {
    let mut said = String::new();
    let (mut epoch, mut changed) = (0, Instant::now());
    loop {
        let map = client.newest_map().await;
        if done(&map) {
            return Ok(map);
        }
        if map.epoch != epoch {
            (epoch, changed) = (map.epoch, Instant::now());
        } else if changed.elapsed() > STALL_LIMIT {
            bail!(
                "{what}: no progress for {} s (epoch {}, {}); the cluster keeps trying, see `myriad cluster status`",
                STALL_LIMIT.as_secs(),
                map.epoch,
                moves_line(&map)
            );
        }
        let line = moves_line(&map);
        if line != said {
            println!("  {what}: epoch {}, {line}", map.epoch);
            said = line;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn add_node(
    dir: &Path,
    weight: u32,
    zone: Option<String>,
    wait: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut st = read_state(dir)?;
    let client = admin_client(dir, timeout).await?;
    let map = client.map();
    let zone = match zone {
        Some(z) => z,
        None if map.zones().len() == 1 => map.zone_of(map.nodes[0].id).to_string(),
        None => bail!(
            "the cluster's servers are in zones {}: name the new server's with --zone",
            map.zones().into_iter().collect::<Vec<_>>().join(",")
        ),
    };
    let id = map
        .nodes
        .iter()
        .map(|n| n.id)
        .chain(st.nodes.iter().map(|n| n.id))
        .max()
        .map_or(NodeId(1), |n| NodeId(n.0 + 1));
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a port on 127.0.0.1")?;
    let addr = listener.local_addr()?.to_string();
    let mut next = map.clone();
    next.epoch += 1;
    next.nodes.push(myriad_client::NodeInfo {
        id,
        addr: addr.clone(),
        weight,
        state: myriad_client::NodeState::Up,
        zone: zone.clone(),
    });
    next.validate()?;
    // The new server starts from a map that lists it (not committed yet: it serves nothing
    // until the group has committed it and its leader granted it a lease).
    std::fs::write(map_path(dir), next.to_json())?;
    let at = At {
        addr: &addr,
        netns: None,
    };
    let pid = spawn_node(dir, id, Some(listener), &at, &zone, &st.server_args)?;
    st.nodes.push(NodeState {
        id,
        pid,
        addr: addr.clone(),
        netns: None,
    });
    write_state(dir, &st)?;
    // Made again on the newest map if another change got in first.
    let added = next.nodes.last().cloned();
    crate::map_change::commit(
        &client,
        |m| {
            if m.node(id).is_some() {
                return Ok(None);
            }
            let mut n = m.clone();
            n.epoch += 1;
            n.nodes.extend(added.clone());
            n.validate()?;
            Ok(Some(n))
        },
        |now| now.node(id).is_some(),
    )
    .await
    .context("adding the server to the cluster map")?;
    println!("node {id} started on {addr} (pid {pid}) and added to the map");
    if wait {
        // Balanced: nothing moving and nothing left to move.
        let none = std::collections::BTreeSet::new();
        let map = wait_for_map(&client, "rebalancing", |m| {
            m.moves().is_empty() && m.plan_moves(&none, usize::MAX).is_none()
        })
        .await?;
        let held = map
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&id))
            .count();
        println!("node {id} holds {held} copies (epoch {})", map.epoch);
    } else {
        println!("copies move to it in the background: see `myriad cluster status`");
    }
    Ok(())
}

async fn remove_node(dir: &Path, id: NodeId, wait: bool, timeout: Duration) -> anyhow::Result<()> {
    let mut st = read_state(dir)?;
    let client = admin_client(dir, timeout).await?;
    let map = client.map();
    if map.node(id).is_none() {
        bail!("node {id} is not in the cluster map (epoch {})", map.epoch);
    }
    crate::node_cmd::leave(&client, id).await?;
    println!("node {id} is leaving: its copies move to the other servers");
    if !wait {
        return Ok(());
    }
    let map = wait_for_map(&client, "draining", |m| m.node(id).is_none()).await?;
    println!("node {id} left the map (epoch {}); stopping it", map.epoch);
    if let Some(entry) = st.nodes.iter().find(|n| n.id == id)
        && pid_is_server(entry.pid)
    {
        signal(entry.pid, libc::SIGTERM);
    }
    st.nodes.retain(|n| n.id != id);
    write_state(dir, &st)?;
    Ok(())
}

pub async fn run(
    cmd: ClusterCmd,
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Up {
            nodes,
            data_dir,
            root_owner,
            metrics,
            replication,
            security,
            tiers,
            layout,
            zones,
        } => {
            let mut opts = NodeOptions::for_current_user();
            opts.layout = layout;
            opts.zones = zones;
            if let Some(o) = root_owner {
                opts.root_owner = o;
            }
            opts.server_args = replication.to_args();
            opts.server_args.extend(security.to_args());
            opts.server_args.extend(tiers.to_args());
            if metrics {
                opts.server_args.push("--metrics=127.0.0.1:0".into());
            }
            let c = LocalCluster::up(&data_dir, nodes, &opts).await?;
            let map = map_path(&data_dir);
            println!(
                "Myriad cluster of {nodes} nodes is up (map epoch {}):",
                c.map.epoch
            );
            for n in &c.map.nodes {
                println!(
                    "  node {}  {}{}  data {}",
                    n.id,
                    n.addr,
                    zone_label(&n.zone),
                    data_dir.join(format!("node-{}", n.id)).display()
                );
            }
            println!(
                "\nUse it:\n  export MYRIAD_CLUSTER={}\n  myriad ls -l /\n  myriad cluster status\nStop it:\n  myriad cluster down --data-dir {}",
                map.display(),
                data_dir.display()
            );
            Ok(())
        }
        ClusterCmd::Init {
            secret_file,
            client_key_file,
        } => {
            let client = client_key_file.unwrap_or_else(|| {
                secret_file
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join(crate::keys::CLIENT_KEY_FILE)
            });
            crate::keys::init(&secret_file, &client)?;
            println!(
                "cluster secret: {} (servers: --secret-file; keep it on servers and admin hosts)\nclient key:     {} (client machines: --secret-file or MYRIAD_SECRET_FILE)",
                secret_file.display(),
                client.display()
            );
            Ok(())
        }
        ClusterCmd::Down { data_dir } => {
            down(&data_dir)?;
            println!("cluster in {} is down", data_dir.display());
            Ok(())
        }
        ClusterCmd::StartNode { data_dir, node } => {
            let node = NodeId(node);
            let mut st = read_state(&data_dir)?;
            let server_args = st.server_args.clone();
            let Some(entry) = st.nodes.iter_mut().find(|n| n.id == node) else {
                bail!("no node {node} in this cluster")
            };
            if pid_is_server(entry.pid) {
                bail!("node {node} is already running (pid {})", entry.pid);
            }
            let zone = ClusterMap::from_json(&std::fs::read_to_string(map_path(&data_dir))?)?
                .zone_of(node)
                .to_string();
            let at = At {
                addr: &entry.addr,
                netns: entry.netns.as_deref(),
            };
            entry.pid = spawn_node(&data_dir, node, None, &at, &zone, &server_args)?;
            let pid = entry.pid;
            write_state(&data_dir, &st)?;
            println!("node {node} started (pid {pid})");
            Ok(())
        }
        ClusterCmd::AddNode {
            data_dir,
            weight,
            wait,
            zone,
        } => add_node(&data_dir, weight, zone, wait, timeout).await,
        ClusterCmd::RemoveNode {
            data_dir,
            node,
            no_wait,
        } => remove_node(&data_dir, NodeId(node), !no_wait, timeout).await,
        ClusterCmd::Status => {
            // A local cluster's servers write their metrics address beside their data.
            let local_dir = cluster
                .as_deref()
                .and_then(Path::parent)
                .map(Path::to_path_buf);
            let client = crate::fs_cmds::connect(cluster, secret_file, timeout)?;
            // The newest map any server has (the map file may be behind a failover).
            let map = client.newest_map().await;
            println!(
                "cluster map epoch {}, {} nodes, chunk {} KiB, inline max {} KiB",
                map.epoch,
                map.nodes.len(),
                map.chunk_size_bytes / 1024,
                map.inline_max_bytes / 1024
            );
            println!(
                "{} partitions, {} copies each; {}",
                map.partitions.len(),
                map.replication,
                moves_line(&map)
            );
            if let Some(line) = zones_line(&map) {
                println!("{line}");
            }
            for (id, r) in client.all_counters().await {
                let addr = map.node(id).map(|n| n.addr.clone()).unwrap_or_default();
                match r {
                    Ok(c) => {
                        let ops: Vec<String> = c
                            .client_requests
                            .iter()
                            .map(|o| format!("{}={}", o.op, o.count))
                            .collect();
                        let s2s: Vec<String> = c
                            .server_requests
                            .iter()
                            .map(|o| format!("{}={}", o.op, o.count))
                            .collect();
                        let state = match (map.node(id).map(|n| n.state), c.serving) {
                            (Some(myriad_client::NodeState::Leaving), _) => "leaving",
                            (Some(myriad_client::NodeState::Down), _) => "marked down",
                            (_, true) => "up, serving",
                            (_, false) => "up, no lease",
                        };
                        println!(
                            "node {id} {addr}{} {state}  epoch {}  leader {}  partitions: {} primary, {} backup  fsyncs {} ({} mutations)",
                            zone_label(map.zone_of(id)),
                            c.epoch,
                            c.raft_leader,
                            c.primaries,
                            c.backups,
                            c.syncs,
                            c.synced_mutations
                        );
                        println!(
                            "    client requests: {}",
                            if ops.is_empty() {
                                "-".into()
                            } else {
                                ops.join(" ")
                            }
                        );
                        println!(
                            "    server requests: {} (sent {})",
                            if s2s.is_empty() {
                                "-".into()
                            } else {
                                s2s.join(" ")
                            },
                            c.server_requests_sent
                        );
                        for line in zone_traffic_lines(&c) {
                            println!("    {line}");
                        }
                        if let Some(addr) = local_dir.as_ref().and_then(|d| {
                            std::fs::read_to_string(d.join(format!("node-{id}/metrics.addr"))).ok()
                        }) {
                            println!("    metrics: http://{}/metrics", addr.trim());
                        }
                        if let Ok(s) = client.server_statfs(id).await {
                            println!(
                                "    disk: {} stored, {} free of {}",
                                crate::fs_cmds::human(s.used_bytes),
                                crate::fs_cmds::human(s.free_bytes),
                                crate::fs_cmds::human(s.total_bytes)
                            );
                            for t in &s.tiers {
                                println!("  {}", crate::fs_cmds::tier_line(t));
                            }
                        }
                    }
                    Err(e) => println!("node {id} {addr} DOWN ({e})"),
                }
            }
            Ok(())
        }
        ClusterCmd::ResetCounters => {
            let client = crate::fs_cmds::connect(cluster, secret_file, timeout)?;
            client.reset_counters().await?;
            println!("counters reset on every node");
            Ok(())
        }
    }
}
