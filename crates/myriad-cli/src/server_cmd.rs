//! `myriad server`: one server process on this machine, from its data directory and the
//! cluster map (its flags, their defaults, and start-up).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use myriad_placement::ClusterMap;
use myriad_server::ServerConfig;

#[derive(Args)]
pub struct ServerArgs {
    /// Directory for this node's store (created if missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// Address to listen on, e.g. 127.0.0.1:7401. Defaults to this node's address in the map.
    #[arg(long)]
    listen: Option<String>,
    /// Cluster map file (JSON). A newer map received from a peer is written back to it.
    /// Default: the one in --data-dir (`cluster.json`, written by --init or --join).
    #[arg(long)]
    cluster_map: Option<PathBuf>,
    /// Make a new cluster of this one server, in an empty --data-dir: its cluster secret
    /// and client key are written there (unless --secret-file names a secret), with the
    /// map and this server's id. Others then join it (docs/deploy.md).
    #[arg(long, conflicts_with = "join")]
    init: bool,
    /// Join the cluster these servers serve (HOST:PORT[,HOST:PORT...]; any one that
    /// answers will do), with the cluster secret (--secret-file): this server is added to
    /// the cluster map and copies move to it online. Restarting with the same --data-dir
    /// runs it as the same server again.
    #[arg(long, value_delimiter = ',', value_name = "SEEDS")]
    join: Vec<String>,
    /// The address other servers and clients reach this one at (HOST:PORT), when it is not
    /// --listen's (0.0.0.0, NAT, containers).
    #[arg(long)]
    advertise: Option<String>,
    /// With --init: partitions of the new cluster (fixed for its life; 8 per server of the
    /// size it will grow to is a good choice).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    partitions: u32,
    /// With --init: copies of every file and directory (the cluster adds them as servers
    /// join, up to this many).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
    replicas: u32,
    /// This node's id in the map. Defaults to the node whose address equals --listen.
    #[arg(long)]
    node_id: Option<u32>,
    /// Serve Prometheus metrics over HTTP at this address (`GET /metrics`, OpenMetrics
    /// text; docs/metrics.md). Port 0 takes a free port; the address bound is written to
    /// `metrics.addr` in the data directory. Default: no metrics endpoint.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Listen on an inherited, already bound socket (used by `cluster up`).
    #[arg(long, hide = true)]
    listen_fd: Option<i32>,
    /// Deadline of one server-to-server request, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    request_timeout_ms: u64,
    /// Worker threads of this node's runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[command(flatten)]
    pub replication: ReplicationArgs,
    #[command(flatten)]
    pub security: SecurityArgs,
    #[command(flatten)]
    pub tiers: TierArgs,
    /// Owner of the root directory, set when this node creates it (UID:GID).
    #[arg(long, default_value = "0:0", value_parser = parse_owner)]
    root_owner: (u32, u32),
    /// The zone this server is in. The cluster map is the authority on zones: given, it
    /// must match this server's zone in the map, or the server refuses to start (a server
    /// started in the wrong place would break the promise that a zone can be lost).
    #[arg(long, value_parser = parse_zone)]
    zone: Option<String>,
}

/// Server tuning that `cluster up` passes on to its nodes: ancestor metadata replication
/// (TyrFS dynamic metadata replication) and huge-directory splitting.
#[derive(Args, Clone, Debug)]
pub struct ReplicationArgs {
    /// A directory holding more entries than this splits and spreads over every server
    /// (docs/huge-dirs.md); in a cluster of more than 16 partitions (2 servers) it splits
    /// sooner, at this times 16 / partitions (1,024 by default at 16 servers). 0: never
    /// split automatically (`mkdir --shards` still works).
    #[arg(long, default_value_t = myriad_server::DEFAULT_DIR_SPLIT_ENTRIES)]
    pub dir_split_entries: u64,
    /// on: replicate popular ancestors' permissions locally; off: ask their owner every time.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub metadata_replication: String,
    /// How many directories count as popular on each node (TyrFS: 20).
    #[arg(long, default_value_t = 20)]
    pub popularity_k: usize,
    /// Sliding window of the popularity estimate, in seconds (TyrFS: 60).
    #[arg(long, default_value_t = 60)]
    pub popularity_window_secs: u64,
    /// Most replicas a node keeps before evicting unpopular ones.
    #[arg(long, default_value_t = 1024)]
    pub replica_slots: usize,
    /// Subscription lease in milliseconds: the longest a dead subscriber can delay a
    /// permission change, and how long a replica is trusted without renewal.
    #[arg(long, default_value_t = 10_000)]
    pub lease_ms: u64,
    /// Seconds a server may stay down before the copies it held are made again on other
    /// servers (to restore every partition's replica count). Shorter re-replicates sooner
    /// after a real loss; longer avoids copying whole partitions for a reboot.
    #[arg(long, default_value_t = myriad_server::DEFAULT_DOWN_GRACE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub down_grace_secs: u64,
    /// Copies of a partition (the primary's included) that must hold a change before it is
    /// acknowledged. Default: a majority of the partition's copies (2 of 3, 1 of 2, 3 of 5).
    /// With fewer copies up, changes to that partition wait (clients retry until their
    /// deadline, then get an error saying so) instead of being acknowledged on fewer disks,
    /// as Ceph does below `min_size`; reads go on. 1 keeps writing with a single copy up,
    /// at the risk of losing what was written then if that disk is lost. Give every server
    /// the same value.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub min_copies: Option<u32>,
    /// Seconds between anti-entropy rounds: each primary compares every partition it leads
    /// with its copies (sums of key buckets, at one batch) and rewrites on every copy the
    /// keys that differ, so damage on a copy that no read meets is repaired by itself. A
    /// round reads the whole partition on every copy. 0: never (`myriad fsck --repair`
    /// still does it on demand).
    #[arg(long, default_value_t = myriad_server::DEFAULT_ANTI_ENTROPY_INTERVAL.as_secs())]
    pub anti_entropy_secs: u64,
    /// Seconds between passes of the trash's expiry (docs/trash.md): each partition frees
    /// what it holds of the days kept longer than `myriad trash days`, at most 500 names
    /// a pass, passes a second apart while there is more. 0: never (`myriad trash purge`
    /// still frees by hand).
    #[arg(long, default_value_t = myriad_server::DEFAULT_TRASH_EXPIRY_INTERVAL.as_secs())]
    pub trash_expiry_secs: u64,
    /// Erasure-code large files (docs/redundancy.md): chunks past the first (4 MiB) of
    /// files larger than --ec-min-bytes are kept as k data + m parity fragments on k+m
    /// servers (m = copies - 1, k = servers - m, 2..=8) once nobody wrote them for
    /// --ec-settle-ms, instead of full copies: 1.5x raw bytes at 4+2 instead of 3x. Needs
    /// at least copies + 1 servers up. `--ec=false` keeps every chunk in full copies.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub ec: bool,
    /// Keep fsstats on the servers as files change, so that `myriad fsstats --kept`
    /// answers for the whole file system at once (docs/redundancy.md). Costs about a
    /// tenth of create throughput (one more record per committed batch); turned off
    /// again, the servers drop what they kept.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub kept_stats: bool,
    /// Files reaching past this many bytes have their chunks past the first coded.
    #[arg(long, default_value_t = 64 << 10)]
    pub ec_min_bytes: u64,
    /// A chunk not written for this long is coded (writes to a coded chunk decode it
    /// back into copies first, so a file still being written should not be coded).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub ec_settle_ms: u64,
}

impl ReplicationArgs {
    /// The flags as they would be given on a command line (to start nodes with them).
    #[must_use]
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("--metadata-replication={}", self.metadata_replication),
            format!("--popularity-k={}", self.popularity_k),
            format!("--popularity-window-secs={}", self.popularity_window_secs),
            format!("--replica-slots={}", self.replica_slots),
            format!("--lease-ms={}", self.lease_ms),
            format!("--dir-split-entries={}", self.dir_split_entries),
            format!("--down-grace-secs={}", self.down_grace_secs),
            format!("--anti-entropy-secs={}", self.anti_entropy_secs),
            format!("--trash-expiry-secs={}", self.trash_expiry_secs),
            format!("--ec={}", self.ec),
            format!("--ec-min-bytes={}", self.ec_min_bytes),
            format!("--ec-settle-ms={}", self.ec_settle_ms),
            format!("--kept-stats={}", self.kept_stats),
        ]
        .into_iter()
        .chain(self.min_copies.map(|n| format!("--min-copies={n}")))
        .collect()
    }

    fn config(&self) -> anyhow::Result<myriad_server::ReplicationConfig> {
        if self.popularity_k == 0 || self.popularity_window_secs == 0 || self.lease_ms < 500 {
            bail!(
                "--popularity-k and --popularity-window-secs must be at least 1, --lease-ms at least 500"
            );
        }
        Ok(myriad_server::ReplicationConfig {
            enabled: self.metadata_replication == "on",
            popularity_k: self.popularity_k,
            window: Duration::from_secs(self.popularity_window_secs),
            replica_slots: self.replica_slots,
            lease: Duration::from_millis(self.lease_ms),
        })
    }
}

/// Storage tiers (docs/redundancy.md "Tiers"). `cluster up` passes them on to its nodes.
#[derive(Args, Clone, Debug)]
pub struct TierArgs {
    /// Fast tier, e.g. on an SSD: this server's metadata, small files and the first chunk
    /// of every file are stored here; later chunks and erasure-coded fragments in
    /// --data-dir (the capacity tier). Default: one store in --data-dir. Given to
    /// `cluster up`, each node takes DIR/node-N.
    #[arg(long)]
    pub fast_dir: Option<PathBuf>,
    /// The fast tier of each node of a local cluster is DIR/node-N (set by `cluster up`).
    #[arg(long, hide = true)]
    pub fast_dir_root: Option<PathBuf>,
    /// Percent of the fast tier's disk in use past which new files' first chunks go to the
    /// capacity tier instead.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u8).range(2..=99))]
    pub fast_high_water_pct: u8,
    /// Below this percent in use, first chunks that went to the capacity tier move back to
    /// the fast tier in the background.
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u8).range(1..=98))]
    pub fast_low_water_pct: u8,
}

impl TierArgs {
    /// The flags for the nodes of a local cluster (each its own fast directory).
    #[must_use]
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("--fast-high-water-pct={}", self.fast_high_water_pct),
            format!("--fast-low-water-pct={}", self.fast_low_water_pct),
        ];
        if let Some(d) = &self.fast_dir {
            v.push(format!("--fast-dir-root={}", d.display()));
        }
        v
    }

    /// This server's tiers, if it has a fast directory.
    fn config(&self, node_id: u32) -> anyhow::Result<Option<myriad_server::TierConfig>> {
        if self.fast_low_water_pct >= self.fast_high_water_pct {
            bail!("--fast-low-water-pct must be below --fast-high-water-pct");
        }
        let dir = match (&self.fast_dir, &self.fast_dir_root) {
            (Some(d), _) => d.clone(),
            (None, Some(root)) => root.join(format!("node-{node_id}")),
            (None, None) => return Ok(None),
        };
        Ok(Some(myriad_server::TierConfig {
            fast_dir: dir,
            high_water: f64::from(self.fast_high_water_pct) / 100.0,
            low_water: f64::from(self.fast_low_water_pct) / 100.0,
        }))
    }
}

/// Who may do what, and the limits on every connection (myriad_net::limits has the reason
/// for each default). `cluster up` passes them on to its nodes.
#[derive(Args, Clone, Debug)]
pub struct SecurityArgs {
    /// Requests of uid 0 from client-key connections run as nobody (65534:65534), as NFS
    /// root_squash. Connections made with the cluster secret are never squashed.
    #[arg(long)]
    pub root_squash: bool,
    /// Connections one IP address may hold open; more are refused with the reason.
    #[arg(long, default_value_t = myriad_net::limits::CONNS_PER_ADDR_MAX)]
    pub max_conns_per_addr: usize,
    /// Requests one connection may have in flight; more wait in the socket.
    #[arg(long, default_value_t = myriad_net::limits::IN_FLIGHT_PER_CONN_MAX)]
    pub max_in_flight_per_conn: usize,
    /// Seconds a peer has to finish the handshake.
    #[arg(long, default_value_t = myriad_net::limits::HANDSHAKE_TIMEOUT.as_secs())]
    pub handshake_timeout_secs: u64,
    /// Seconds a started frame has to arrive whole (slow-client limit).
    #[arg(long, default_value_t = myriad_net::limits::FRAME_TIMEOUT.as_secs())]
    pub frame_timeout_secs: u64,
    /// Seconds after which a connection with nothing in flight and nothing received closes.
    #[arg(long, default_value_t = myriad_net::limits::IDLE_TIMEOUT.as_secs())]
    pub idle_timeout_secs: u64,
    /// Seconds a peer may leave our replies unread before its connection closes.
    #[arg(long, default_value_t = myriad_net::limits::WRITE_STALL_TIMEOUT.as_secs())]
    pub write_stall_timeout_secs: u64,
    /// MiB kept free on the data disk: below it, writes that grow the store get ENOSPC
    /// (below a quarter of it, every write does) while reads go on, so the storage engine
    /// itself never runs out of space.
    #[arg(long, default_value_t = myriad_server::DEFAULT_RESERVE_BYTES >> 20)]
    pub disk_reserve_mib: u64,
}

impl SecurityArgs {
    /// The flags as they would be given on a command line (to start nodes with them).
    #[must_use]
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("--max-conns-per-addr={}", self.max_conns_per_addr),
            format!("--max-in-flight-per-conn={}", self.max_in_flight_per_conn),
            format!("--handshake-timeout-secs={}", self.handshake_timeout_secs),
            format!("--frame-timeout-secs={}", self.frame_timeout_secs),
            format!("--idle-timeout-secs={}", self.idle_timeout_secs),
            format!(
                "--write-stall-timeout-secs={}",
                self.write_stall_timeout_secs
            ),
            format!("--disk-reserve-mib={}", self.disk_reserve_mib),
        ];
        if self.root_squash {
            v.push("--root-squash".into());
        }
        v
    }

    fn limits(&self) -> anyhow::Result<myriad_net::ServeLimits> {
        let secs = |n: u64, what: &str| {
            if n == 0 {
                bail!("--{what} must be at least 1");
            }
            Ok(Duration::from_secs(n))
        };
        if self.max_conns_per_addr == 0 || self.max_in_flight_per_conn == 0 {
            bail!("--max-conns-per-addr and --max-in-flight-per-conn must be at least 1");
        }
        Ok(myriad_net::ServeLimits {
            in_flight_per_conn: self.max_in_flight_per_conn,
            conns_per_addr: self.max_conns_per_addr,
            handshake_timeout: secs(self.handshake_timeout_secs, "handshake-timeout-secs")?,
            frame_timeout: secs(self.frame_timeout_secs, "frame-timeout-secs")?,
            idle_timeout: secs(self.idle_timeout_secs, "idle-timeout-secs")?,
            write_stall_timeout: secs(self.write_stall_timeout_secs, "write-stall-timeout-secs")?,
        })
    }
}

pub fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').ok_or("expected UID:GID")?;
    Ok((
        u.parse().map_err(|_| "bad UID")?,
        g.parse().map_err(|_| "bad GID")?,
    ))
}

/// `secret_file`: the global `--secret-file`, which a server must be given: the cluster
/// secret (`myriad cluster init`), with more than one `cluster:` line while a secret is
/// rotated (SECURITY.md).
/// The member this server starts as when `--init`, `--join` or its data directory says
/// (`join.rs`); `None`: as `--cluster-map` says.
fn membership(
    args: &ServerArgs,
    secret_file: Option<PathBuf>,
) -> anyhow::Result<Option<crate::join::Member>> {
    let addr = || crate::join::advertised(args.advertise.as_deref(), args.listen.as_deref());
    if args.init {
        let new = crate::join::NewCluster {
            partitions: args.partitions,
            replicas: args.replicas,
        };
        let m = crate::join::init(
            &args.data_dir,
            &addr()?,
            args.zone.clone(),
            secret_file,
            new,
        )?;
        eprintln!(
            "myriad: a new cluster of one server (id {}) in {}; others join it with \
             --join {} --secret-file {}",
            m.node_id,
            args.data_dir.display(),
            addr()?,
            m.secret_file.display()
        );
        return Ok(Some(m));
    }
    if !args.join.is_empty() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let joined = rt.block_on(crate::join::join(
            &args.data_dir,
            &addr()?,
            args.zone.clone(),
            &args.join,
            secret_file,
        ))?;
        return Ok(Some(joined));
    }
    if args.cluster_map.is_none() {
        return crate::join::existing_member(&args.data_dir, secret_file);
    }
    Ok(None)
}

pub fn run(args: ServerArgs, secret_file: Option<PathBuf>) -> anyhow::Result<()> {
    let member = membership(&args, secret_file.clone())?;
    let (map_path, secret_file) = match &member {
        Some(m) => (m.map_path.clone(), Some(m.secret_file.clone())),
        None => match &args.cluster_map {
            Some(p) => (p.clone(), secret_file),
            None => bail!(
                "pass --cluster-map FILE, or --init (a new cluster) or --join SEEDS (an \
                 existing one); a data directory that joined before needs neither"
            ),
        },
    };
    let Some(secret_file) = secret_file else {
        bail!(
            "a server needs --secret-file (or MYRIAD_SECRET_FILE): the cluster secret from `myriad cluster init`"
        );
    };
    let text = std::fs::read_to_string(&map_path)
        .with_context(|| format!("cannot read cluster map {}", map_path.display()))?;
    let map = ClusterMap::from_json(&text)
        .with_context(|| format!("bad cluster map {}", map_path.display()))?;
    let me = args.advertise.as_ref().or(args.listen.as_ref());
    let node_id = match (args.node_id, &member, me) {
        (Some(id), _, _) => myriad_placement::NodeId(id),
        (None, Some(m), _) => m.node_id,
        (None, None, Some(l)) => map
            .nodes
            .iter()
            .find(|n| &n.addr == l)
            .map(|n| n.id)
            .with_context(|| format!("no node in the map listens on {l}; pass --node-id"))?,
        (None, None, None) => bail!("pass --node-id or --listen"),
    };
    let node = map
        .node(node_id)
        .with_context(|| format!("node id {node_id} is not in the cluster map"))?
        .clone();
    if let Some(z) = &args.zone
        && *z != node.zone
    {
        bail!(
            "--zone {z}: the cluster map {} puts node {node_id} in zone {:?}",
            map_path.display(),
            node.zone
        );
    }
    let keys = crate::keys::load(&secret_file)?;
    if !keys.has_cluster_secret() {
        bail!(
            "{} holds no cluster secret (a client key cannot run a server)",
            secret_file.display()
        );
    }
    let mut config = ServerConfig::new(node_id, args.data_dir, map, keys);
    config.root_squash = args.security.root_squash;
    config.metrics_listen = args.metrics;
    config.limits = args.security.limits()?;
    config.disk_reserve_bytes = args.security.disk_reserve_mib.saturating_mul(1 << 20);
    config.map_path = Some(map_path);
    config.request_timeout = Duration::from_millis(args.request_timeout_ms);
    config.replication = args.replication.config()?;
    config.dir_split_entries = args.replication.dir_split_entries;
    config.down_grace = Duration::from_secs(args.replication.down_grace_secs);
    config.min_copies = args.replication.min_copies;
    config.anti_entropy_interval = Duration::from_secs(args.replication.anti_entropy_secs);
    config.trash_expiry_interval = Duration::from_secs(args.replication.trash_expiry_secs);
    config.tiers = args.tiers.config(node_id.0)?;
    config.kept_stats = args.replication.kept_stats;
    config.coding.enabled = args.replication.ec;
    config.coding.min_bytes = args.replication.ec_min_bytes;
    config.coding.settle = Duration::from_millis(args.replication.ec_settle_ms);
    config.coding.interval = config.coding.settle.min(Duration::from_secs(2));
    (config.root_uid, config.root_gid) = args.root_owner;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = match args.listen_fd {
            Some(fd) => {
                use std::os::fd::FromRawFd;
                // SAFETY: `cluster up` passes exactly one bound listening socket at this fd,
                // and nothing else in this process owns it.
                let std_listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
                std_listener.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(std_listener)?
            }
            None => {
                let addr = args.listen.unwrap_or(node.addr);
                tokio::net::TcpListener::bind(&addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))?
            }
        };
        let shutdown = crate::signals::server_stop_signal();
        myriad_server::run(listener, config, shutdown).await?;
        Ok(())
    })
}

/// A zone name given on the command line.
pub fn parse_zone(s: &str) -> Result<String, String> {
    if s.is_empty() || !myriad_client::zone_name_ok(s) {
        return Err(format!(
            "{s:?}: a zone name is 1 to {} printable characters, without spaces, commas or quotes",
            myriad_client::ZONE_NAME_MAX
        ));
    }
    Ok(s.to_string())
}
