//! One simulated run: start the servers, set up the namespace, run the clients while the
//! fault injector crashes, restarts and isolates servers and the network loses, delays and
//! duplicates messages; then heal everything and check that nothing acknowledged was lost
//! and that every partition's copies converged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use myriad_client::{Caller, Client, ClientConfig, ClusterMap, FsError, Keyring, NodeState};
use myriad_placement::{NodeId, PartitionId};
use myriad_server::ServerConfig;
use myriad_server::embed::{CopyDigest, EmbeddedServer, LEASE};
use myriad_storage::{BLOCK_BYTES, Kv, TieredKv};
use rand::Rng;
use tokio::time::Instant;

use crate::authority::{Leases, SimAuthority};
use crate::disk::SimDisk;
use crate::history::History;
use crate::net::{CLIENTS, Endpoint, Net, NetFaults};
use crate::rng::SimRng;
use crate::trace::Trace;
use crate::workload::{BIG, CHUNK_BYTES, ClientRun, SIDES, final_reads};

/// A copy's keys (space code, key) and the hashes of their values.
type KeyHashes = BTreeMap<(u8, Vec<u8>), u64>;

/// How long the healed cluster gets to converge before the final checks fail.
const SETTLE_MAX: Duration = Duration::from_secs(120);
/// How long an fsync takes on the virtual clock: writes committed meanwhile are visible and
/// not durable, and a crash may lose them.
const FSYNC: Duration = Duration::from_millis(2);
/// How often every primary runs an anti-entropy round in a simulation (virtual time).
/// How long a chunk stays unwritten before it is coded.
const CODING_SETTLE: std::time::Duration = std::time::Duration::from_millis(500);
const ANTI_ENTROPY_EVERY: Duration = Duration::from_secs(3);
/// How often the fault injector draws.
const FAULT_TICK: Duration = Duration::from_secs(1);
/// Copies moving at once (as the leader's `MOVES_MAX`).
const MOVES_AT_ONCE: usize = 2;
/// Partitions handed to another copy in one map change (as the leader's `HANDOVERS_MAX`).
const HANDOVERS_AT_ONCE: usize = 8;

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub servers: u32,
    pub partitions_per_server: u32,
    pub replicas: u32,
    pub clients: u32,
    pub ops_per_client: u32,
    /// Crashes, isolations, disk errors and a lossy network; off: only delays.
    pub faults: bool,
    /// Directory shards split above this many entries (low, so `/big` splits often).
    pub split_entries: u64,
    /// A broken disk that forgets synced writes when its server crashes: the checks must
    /// then fail (the test that they can).
    pub broken_disk: bool,
    /// Servers join and leave while the clients work: one more server is added (its copies
    /// move to it) and servers are removed (their copies move away), as the Raft leader
    /// does it (`plan_moves`, `complete_moves`).
    pub moves: bool,
    /// Two clients of three read through directory leases (docs/fuse.md "Directory
    /// leases"), each read done twice (the second mostly answered from the lease). Off by
    /// default: `--leases`, and the CI set `seeds_with_leases_keep_every_invariant`.
    pub leases: bool,
    /// The leased clients whose changes are answered once applied also write behind
    /// (docs/fuse.md "Write-behind"): they list directories asking exclusive leases and
    /// their creates, writes and unlinks there are answered at once and sent in batches.
    /// Implies `leases`. Off by default: `--behind`, and the CI set with write-behind.
    pub behind: bool,
    /// Every client also takes, renews and gives back write locks on three shared inodes
    /// (docs/fuse.md "File locks between mounts"); two holding one at once is a
    /// violation. Off by default: `--locks`, and the CI set with locks.
    pub locks: bool,
    /// Every client also moves a small directory tree of its own back and forth over an
    /// empty directory (ARCHITECTURE.md "Directory rename") while any client reads it:
    /// the target is a directory throughout, the file inside is under exactly one name.
    /// Off by default: `--dir-moves`, and the CI set with directory moves.
    pub dir_moves: bool,
    /// Every client also freezes a small tree of its own and thaws it again
    /// (docs/metadata-index.md) while it writes into it and any client reads it: no
    /// change is acknowledged while it is known frozen, none refused once it is known
    /// thawed, and a refused one is never seen. Off by default: `--freeze`, and its CI set.
    pub freeze: bool,
    /// With `freeze`: the trees are frozen by building their metadata index and thawed by
    /// dropping it, and the leased clients answer from indexes
    /// (docs/metadata-index.md): a read answered from an index must be as fresh as any.
    /// Off by default: `--indexes` (implies `--freeze` and `--leases`).
    pub indexes: bool,
    /// With `indexes`: the indexes are automatic ones (docs/metadata-index.md "Automatic
    /// indexes"): the trees are never frozen, every write into them is taken, and a read
    /// answered from an index must still be as fresh as any (the write unregistered it
    /// first). Off by default: `--auto-indexes` (implies `--indexes`).
    pub auto_indexes: bool,
    /// Every server keeps two stores, a fast and a capacity tier (`TieredKv`,
    /// docs/redundancy.md "Tiers"), each on a disk of its own that crashes on its own;
    /// the fast tier overflows and blocks move back at random. Off by default: `--tiers`.
    pub tiers: bool,
    /// The servers are in two zones (alternately) and two client trees are pinned, `/c1`
    /// to the first zone and `/x2` to the second (docs/zones.md): their directories,
    /// files and data are placed by their own partition groups, whose copies stay in
    /// their zone through failovers and moves (the map is checked after every change).
    /// The workload's clients are in the zones alternately and read entries from copies
    /// in their zone under loans of reads (docs/zones.md "Nearest copy"), so the history
    /// check covers those reads too. Off by default: `--zones`.
    pub zones: bool,
    /// With `zones`: the driver sets and clears policies on client trees that exist
    /// (`/c0`, `/x1`, ...), so those trees move between zones online (docs/zones.md
    /// section 3) while the clients work: their partitions propose the decisions to the
    /// authority. Off by default: `--tree-moves` (implies `--zones`).
    pub tree_moves: bool,
    /// Directory quotas on `/`, `/big` and `/c0` (docs/quotas.md), the last two with
    /// limits the workload meets: every primary's usage of each must equal a count from
    /// scratch of what it holds at the end, and the partitions' usage of a quota must sum
    /// to no more than its limit. Off by default: `--quotas`.
    pub quotas: bool,
    /// The trash on (docs/trash.md): every unlink moves its file to `/.trash`; at the end
    /// the trash must keep one file for every removal acknowledged, and none that was not
    /// tried. Off by default: `--trash`.
    pub trash: bool,
}

/// The trees of `--quotas` and their limits (names, bytes; 0: none): low enough that the
/// workload meets them.
pub const SIM_QUOTAS: [(&str, u64, u64); 3] = [("/", 0, 0), ("/big", 24, 0), ("/c0", 10, 6000)];

/// The zones of `--zones`, and the trees pinned to each.
pub const SIM_ZONES: [(&str, &str); 2] = [("z0", "/c1"), ("z1", "/x2")];

impl SimConfig {
    #[must_use]
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            servers: 4,
            partitions_per_server: 2,
            replicas: 3,
            clients: 3,
            ops_per_client: 100,
            faults: true,
            split_entries: 16,
            broken_disk: false,
            moves: false,
            leases: false,
            behind: false,
            locks: false,
            dir_moves: false,
            freeze: false,
            indexes: false,
            auto_indexes: false,
            tiers: false,
            zones: false,
            tree_moves: false,
            quotas: false,
            trash: false,
        }
    }

    /// The command that replays this run.
    #[must_use]
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run -p myriad-sim -- --seed {} --ops {} --clients {} --servers {} --split {}{}{}{}{}{}{}{}{}{}{}{}{}{}",
            self.seed,
            self.ops_per_client,
            self.clients,
            self.servers,
            self.split_entries,
            if self.faults { "" } else { " --no-faults" },
            if self.moves { " --moves" } else { "" },
            if self.leases { " --leases" } else { "" },
            if self.behind { " --behind" } else { "" },
            if self.locks { " --locks" } else { "" },
            if self.dir_moves { " --dir-moves" } else { "" },
            if self.freeze { " --freeze" } else { "" },
            if self.indexes { " --indexes" } else { "" },
            if self.auto_indexes {
                " --auto-indexes"
            } else {
                ""
            },
            if self.tiers { " --tiers" } else { "" },
            if self.tree_moves {
                " --tree-moves"
            } else if self.zones {
                " --zones"
            } else {
                ""
            },
            if self.quotas { " --quotas" } else { "" },
            if self.trash { " --trash" } else { "" }
        )
    }
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub ops: u64,
    pub events: u64,
    pub digest: u64,
    pub virtual_ms: u64,
    pub crashes: u32,
    pub isolations: u32,
    pub disk_errors: u32,
    /// Planned stops (SIGTERM): the server hands its partitions over, then restarts.
    pub planned_stops: u32,
    pub map_changes: u32,
    pub lost_unsynced: u64,
    /// Copies moved (with `moves`): added server filled, removed server drained.
    pub moves_completed: u32,
    /// Map changes that handed primaries to other copies for balance.
    pub handovers: u32,
    /// With `tree_moves`: trees set moving, and moves settled or abandoned by their
    /// partitions' proposals.
    pub tree_moves_started: u32,
    pub tree_moves_settled: u32,
    pub tree_moves_abandoned: u32,
    /// Requests delivered to servers, by name (with the client envelopes they came in:
    /// `leased`, `leased_exclusive`, `read_as`, `once`): what the run exercised.
    pub delivered: BTreeMap<&'static str, u64>,
    /// Entries the clients answered with no request: from a directory lease, from an index.
    pub answered_by_lease: u64,
    pub answered_by_index: u64,
    /// Batches written behind that went before a directory's setattr still waiting for
    /// the directory's own changes (`Client::behind_passes`).
    pub behind_passes: u64,
    /// Setattrs written behind that went inside the create before them
    /// (`Client::setattrs_in_creates`).
    pub setattrs_in_creates: u64,
    /// With `tiers`: first-chunk blocks written to a capacity tier because the fast tier
    /// was full.
    pub tier_overflowed_blocks: u64,
}

impl Report {
    /// Requests named `op` delivered to servers in the run.
    #[must_use]
    pub fn delivered(&self, op: &str) -> u64 {
        self.delivered.get(op).copied().unwrap_or(0)
    }
}

#[derive(Debug)]
pub struct Failure {
    pub config: SimConfig,
    pub what: String,
    pub tail: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed: {}",
            self.config.seed, self.what
        )?;
        writeln!(f, "replay: {}", self.config.replay_command())?;
        writeln!(f, "last events:")?;
        for line in &self.tail {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// Runs one simulation on a fresh one-thread runtime with a paused (virtual) clock.
pub fn run(config: &SimConfig) -> Result<Report, Failure> {
    // On a thread of its own with a roomy stack: the whole cluster's futures are polled on
    // it, and a debug build's futures are large (a grown client loop once overflowed the
    // 2 MiB of a test thread).
    let config = config.clone();
    let failed = config.clone();
    std::thread::Builder::new()
        .name(format!("sim-{}", config.seed))
        .stack_size(SIM_STACK_BYTES)
        .spawn(move || run_here(&config))
        .map_err(|e| e.to_string())
        .and_then(|t| {
            t.join()
                .map_err(|_| "the simulation thread panicked".to_string())
        })
        .unwrap_or_else(|what| {
            Err(Failure {
                config: failed,
                what,
                tail: Vec::new(),
            })
        })
}

/// The simulation thread's stack.
const SIM_STACK_BYTES: usize = 64 << 20;

fn run_here(config: &SimConfig) -> Result<Report, Failure> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // Tokio draws from its own generator in places (which of its notifiers a `watch`
    // receiver waits on, and so the order waiters wake in); seeded, that replays too.
    // Only with `--cfg tokio_unstable` (.cargo/config.toml); without it a seed may not
    // replay exactly (the determinism test says so).
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(
        &config.seed.to_le_bytes(),
    ));
    let rt = builder.build().map_err(|e| Failure {
        config: config.clone(),
        what: format!("cannot start a runtime: {e}"),
        tail: Vec::new(),
    })?;
    rt.block_on(async { Sim::new(config.clone()).run().await })
}

fn keyring() -> Keyring {
    Keyring::from_secret(&[7u8; 32])
}

#[derive(Default)]
struct Faults {
    /// Crashed servers and when they restart.
    down: BTreeMap<NodeId, Instant>,
    /// The isolated server and when the network heals.
    isolated: Option<(NodeId, Instant)>,
    /// Servers whose disk failed an fsync and that have not been restarted since (their
    /// operator restarts them; at the end, the healing does).
    sick: std::collections::BTreeSet<NodeId>,
    /// Servers removed from the cluster (stopped for good once their copies moved away).
    removed: std::collections::BTreeSet<NodeId>,
    /// The spare server (moves): added to the map and started.
    added: bool,
}

struct Sim {
    cfg: SimConfig,
    rng: SimRng,
    trace: Trace,
    net: Arc<Net>,
    leases: Arc<Leases>,
    /// Map changes the servers proposed (tree moves), committed by the authority's round.
    proposals: Arc<crate::authority::Proposals>,
    /// Index = server id (0 unused).
    disks: Vec<Arc<SimDisk>>,
    /// With `tiers`: each server's capacity tier (`disks` holds the fast one).
    capacity_disks: Vec<Arc<SimDisk>>,
    /// With `tiers`: each running server's two stores as one.
    tiered: Mutex<BTreeMap<NodeId, Arc<TieredKv>>>,
    map: Mutex<ClusterMap>,
    history: Arc<History>,
    lock_check: Arc<crate::lock_check::LockCheck>,
    faults: Mutex<Faults>,
    report: Mutex<Report>,
    /// Clients made so far: each gets the next number as its id (`ClientConfig::id`), so
    /// a seed runs the same every time.
    clients_made: std::sync::atomic::AtomicU64,
    /// What the clients answered themselves (from a lease, from an index) and their
    /// journals' batches that passed a waiting setattr and setattrs folded into creates,
    /// added by each client run as it ends.
    answered: Arc<Mutex<[u64; 4]>>,
    /// When the servers' shared wall clock started (`EmbeddedServer::new`).
    clock_start: tokio::time::Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Sim {
    fn new(cfg: SimConfig) -> Arc<Sim> {
        let rng = SimRng::new(cfg.seed);
        let trace = Trace::new();
        // With moves, one slot more: the server added while the clients work.
        let slots = cfg.servers + u32::from(cfg.moves);
        let net = Net::new(
            slots as usize,
            NetFaults::none(),
            rng.clone(),
            trace.clone(),
        );
        let addrs: Vec<String> = (1..=cfg.servers).map(|i| format!("sim-{i}")).collect();
        let mut map = if cfg.zones {
            let zones: Vec<String> = SIM_ZONES.iter().map(|(z, _)| (*z).to_string()).collect();
            let mut m = ClusterMap::build_in_zones(
                1,
                &addrs,
                &zones,
                cfg.partitions_per_server,
                cfg.replicas,
            );
            for (zone, root) in SIM_ZONES {
                m = m
                    .with_policy(root, zone, cfg.replicas, cfg.partitions_per_server)
                    .unwrap_or_else(|e| panic!("pinning {root} to {zone}: {e}"));
            }
            m.epoch = 1;
            m
        } else {
            ClusterMap::build(1, &addrs, cfg.partitions_per_server, cfg.replicas)
        };
        if cfg.quotas {
            for (root, files, bytes) in SIM_QUOTAS {
                map = map
                    .with_quota(root, bytes, files)
                    .unwrap_or_else(|e| panic!("a quota on {root}: {e}"));
            }
            map.epoch = 1;
        }
        if cfg.trash {
            map.ext.trash_days = 7;
        }
        // Every server is this build: the floor a real cluster's membership raises to once
        // it has heard each of them (what gates, e.g., undecided directory objects).
        map.ext.protocol_floor = myriad_proto::PROTOCOL_VERSION;
        // Small chunks: the workload's two-chunk files reach a second partition.
        map.chunk_size_bytes = CHUNK_BYTES;
        map.inline_max_bytes = map.inline_max_bytes.min(CHUNK_BYTES);
        Arc::new(Sim {
            disks: (0..=slots).map(|_| Arc::new(SimDisk::default())).collect(),
            capacity_disks: (0..=slots).map(|_| Arc::new(SimDisk::default())).collect(),
            tiered: Mutex::new(BTreeMap::new()),
            report: Mutex::new(Report {
                seed: cfg.seed,
                ..Report::default()
            }),
            cfg,
            rng,
            trace,
            net,
            leases: Arc::new(Leases::default()),
            proposals: Arc::default(),
            map: Mutex::new(map),
            history: Arc::new(History::default()),
            lock_check: Arc::default(),
            faults: Mutex::new(Faults::default()),
            clients_made: std::sync::atomic::AtomicU64::new(0),
            answered: Arc::default(),
            clock_start: tokio::time::Instant::now(),
        })
    }

    fn fail(&self, what: impl Into<String>) -> Failure {
        Failure {
            config: self.cfg.clone(),
            what: what.into(),
            tail: self.trace.tail(),
        }
    }

    fn map(&self) -> ClusterMap {
        lock(&self.map).clone()
    }

    /// Every server slot (the spare too, with moves; those not running are skipped by
    /// whoever looks at them).
    fn ids(&self) -> impl Iterator<Item = NodeId> {
        (1..=self.cfg.servers + u32::from(self.cfg.moves)).map(NodeId)
    }

    fn client(&self) -> Result<Arc<Client>, Failure> {
        self.client_with(false, false, "")
    }

    /// A client; `visible`: its changes are answered once applied (durable at its syncs);
    /// `leases`: it answers reads from directory leases; in `zone` (non-empty): it reads
    /// entries from copies there.
    fn client_with(&self, visible: bool, leases: bool, zone: &str) -> Result<Arc<Client>, Failure> {
        let endpoint = Endpoint::new(self.net.clone(), CLIENTS);
        let mut config = ClientConfig::new(self.map(), Caller::root(), keyring());
        config.zone = zone.to_string();
        config.durable_changes = !visible;
        config.leases = leases;
        config.indexes = leases && self.cfg.indexes;
        config.id = 1 + self
            .clients_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Client::with_transport(config, Arc::new(endpoint))
            .map(Arc::new)
            .map_err(|e| self.fail(format!("cannot make a client: {e}")))
    }

    /// Starts (or restarts) server `id` on its disk, reachable at once, opening its
    /// partitions in the background.
    fn start_server(&self, id: NodeId) -> Result<(), Failure> {
        let mut config = ServerConfig::new(id, std::env::temp_dir(), self.map(), keyring());
        config.dir_split_entries = self.cfg.split_entries;
        config.disk_reserve_bytes = 0;
        // Anti-entropy rounds often, so that they run among the faults (a round must never
        // change what a client sees).
        config.anti_entropy_interval = ANTI_ENTROPY_EVERY;
        // Chunks coded soon after they are written, so that coding, uncoding for a
        // write and reads of coded chunks run among the faults (with 5 servers or more).
        // Kept fsstats on: the final check compares every primary's with a count.
        config.kept_stats = true;
        config.coding.settle = CODING_SETTLE;
        config.coding.interval = CODING_SETTLE;
        let disk: Arc<dyn Kv> = Arc::new(self.disks[id.index()].handle());
        let disk = if self.cfg.tiers {
            let capacity = Arc::new(self.capacity_disks[id.index()].handle());
            let tiered = TieredKv::open(disk, capacity, CHUNK_BYTES / BLOCK_BYTES)
                .map(Arc::new)
                .map_err(|e| self.fail(format!("server {id}'s tiers do not open: {e}")))?;
            tiered.set_overflowing(self.rng.with(|r| r.gen_bool(0.5)));
            lock(&self.tiered).insert(id, tiered.clone());
            tiered
        } else {
            disk
        };
        let endpoint = Endpoint::new(self.net.clone(), id);
        let authority = SimAuthority {
            me: id,
            leases: self.leases.clone(),
            proposals: self.proposals.clone(),
        };
        let server = EmbeddedServer::new(
            config,
            disk,
            Arc::new(endpoint),
            Arc::new(authority),
            FSYNC,
            self.clock_start,
        )
        .map(Arc::new)
        .map_err(|e| self.fail(format!("server {id} does not start: {e}")))?;
        self.net.set_server(id, Some(server.clone()));
        let trace = self.trace.clone();
        tokio::spawn(async move {
            if let Err(e) = server.open().await {
                trace.event(format_args!("server {id} open: {e}"));
            }
        });
        self.trace.event(format_args!("server {id} started"));
        Ok(())
    }

    async fn setup(&self, client: &Client) -> Result<(), Failure> {
        let mut dirs: Vec<String> = (0..self.cfg.clients)
            .flat_map(|c| SIDES.iter().map(move |side| format!("/{side}{c}")))
            .collect();
        dirs.push(BIG.to_string());
        for d in dirs {
            let mut tries = 0;
            loop {
                match client.mkdir(&d, 0o755).await {
                    Ok(_) | Err(FsError::AlreadyExists) => break,
                    Err(e) if tries < 20 => {
                        tries += 1;
                        self.trace.event(format_args!("setup mkdir {d}: {e}"));
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => return Err(self.fail(format!("setup: mkdir {d}: {e}"))),
                }
            }
        }
        Ok(())
    }

    /// After the faults: every copy of every partition holds its primary's state.
    async fn converged(&self) -> Result<(), String> {
        // Anti-entropy rounds run here too (`ANTI_ENTROPY_EVERY`); a simulated disk never
        // changes a value behind the engine's back, so a round that had to repair a copy
        // found copies diverged by the replication protocol (which the repair would hide
        // from the check below).
        for id in self.ids() {
            if let Some(s) = self.net.server(id) {
                let repaired = s.counted("anti_entropy_keys_repaired");
                if repaired > 0 {
                    return Err(format!(
                        "server {id}: anti-entropy repaired {repaired} keys: copies diverged"
                    ));
                }
            }
        }
        // Every primary's kept fsstats count what it holds (kept in each change's batch).
        for id in self.ids() {
            if let Some(s) = self.net.server(id)
                && let Some((pid, d)) = s.kept_stats_drift().into_iter().next()
            {
                return Err(format!(
                    "server {id}, partition {pid}: kept fsstats drifted: {d}"
                ));
            }
        }
        let map = self.map();
        // Every primary counts the map's quotas, each exactly (kept in each change's batch).
        let quotas: Vec<u64> = map.ext.quotas.iter().map(|q| q.id).collect();
        for id in self.ids() {
            if let Some(s) = self.net.server(id)
                && let Some((pid, d)) = s.quota_drift(&quotas).into_iter().next()
            {
                return Err(format!(
                    "server {id}, partition {pid}: quotas' usage drifted: {d}"
                ));
            }
        }
        // No quota's usage passes its limit (docs/quotas.md "Invariants", 1).
        let mut sums: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for id in self.ids() {
            if let Some(s) = self.net.server(id) {
                for (_, q, files, bytes) in s.quota_usage() {
                    let e = sums.entry(q).or_default();
                    *e = (e.0 + files, e.1 + bytes);
                }
            }
        }
        for q in &map.ext.quotas {
            let (files, bytes) = sums.get(&q.id).copied().unwrap_or_default();
            if (q.max_files > 0 && files > q.max_files) || (q.max_bytes > 0 && bytes > q.max_bytes)
            {
                return Err(format!(
                    "quota on {}: {files} names and {bytes} bytes, past its limits ({} names, {} bytes)",
                    q.path, q.max_files, q.max_bytes
                ));
            }
        }
        let mut by_pid: BTreeMap<PartitionId, Vec<(NodeId, CopyDigest)>> = BTreeMap::new();
        for id in self.ids() {
            if let Some(s) = self.net.server(id) {
                for (pid, d) in s.digests() {
                    by_pid.entry(pid).or_default().push((id, d));
                }
            }
        }
        for p in &map.partitions {
            let copies = by_pid.get(&p.id).cloned().unwrap_or_default();
            if copies.len() != p.replicas.len() {
                return Err(format!(
                    "partition {}: {} copies open, the map lists {:?}",
                    p.id,
                    copies.len(),
                    p.replicas
                ));
            }
            if copies.windows(2).any(|w| w[0].1 != w[1].1) {
                return Err(format!(
                    "partition {}: copies differ: {copies:?}; {}",
                    p.id,
                    self.copy_difference(p.id, &copies)
                ));
            }
        }
        Ok(())
    }

    /// What the copies of `pid` disagree on (keys one has and another lacks, or holds with
    /// another value).
    fn copy_difference(&self, pid: PartitionId, copies: &[(NodeId, CopyDigest)]) -> String {
        let sets: Vec<(NodeId, KeyHashes)> = copies
            .iter()
            .filter_map(|(id, _)| self.net.server(*id).map(|s| (*id, s)))
            .map(|(id, s)| {
                let keys = s
                    .copy_keys(pid)
                    .into_iter()
                    .map(|(sp, k, h)| ((sp, k), h))
                    .collect();
                (id, keys)
            })
            .collect();
        let mut out = Vec::new();
        for (a, ka) in &sets {
            for (b, kb) in &sets {
                if a >= b {
                    continue;
                }
                for (k, h) in ka {
                    if kb.get(k) != Some(h) {
                        out.push(format!(
                            "space {} key {:?}: on {a}, {} on {b}",
                            k.0,
                            String::from_utf8_lossy(&k.1),
                            if kb.contains_key(k) {
                                "other value"
                            } else {
                                "absent"
                            }
                        ));
                    }
                }
                for k in kb.keys().filter(|k| !ka.contains_key(*k)) {
                    out.push(format!(
                        "space {} key {:?}: on {b}, absent on {a}",
                        k.0,
                        String::from_utf8_lossy(&k.1)
                    ));
                }
            }
        }
        out.truncate(8);
        out.join("; ")
    }

    /// Client `id`'s run: how it works (as a mount does, through leases, writing behind,
    /// in a zone) follows from its number and the configuration.
    fn client_run(&self, id: u32) -> Result<ClientRun, Failure> {
        // Every other client works as a mount does (docs/fuse.md "Durability"): its
        // changes answered once applied, acknowledged only by its next good sync.
        let visible = id % 2 == 1;
        // And two clients of three read through directory leases (docs/fuse.md
        // "Directory leases"): a read answered from a lease must be as fresh as any.
        let leases = (self.cfg.leases || self.cfg.behind || self.cfg.indexes) && id % 3 != 2;
        let behind = self.cfg.behind && leases && visible;
        let zone = if self.cfg.zones {
            SIM_ZONES[id as usize % SIM_ZONES.len()].0
        } else {
            ""
        };
        let client = self.client_with(visible, leases, zone)?;
        if behind {
            let weak = Arc::downgrade(&client);
            client.set_behind_spawner(Arc::new(move |task| {
                if let Some(c) = weak.upgrade() {
                    tokio::spawn(async move { c.run_behind(task).await });
                }
            }));
        }
        Ok(ClientRun {
            id,
            clients: self.cfg.clients,
            client,
            behind,
            rng: self.rng.clone(),
            history: self.history.clone(),
            trace: self.trace.clone(),
            ops: self.cfg.ops_per_client,
            visible,
            deferred: std::sync::Mutex::new(Vec::new()),
            leases,
            locks: self.cfg.locks.then(|| self.lock_check.clone()),
            dir_moves: self.cfg.dir_moves,
            freeze: (self.cfg.freeze || self.cfg.indexes)
                .then(|| std::sync::Mutex::new(crate::workload::Frozen::No)),
            indexes: self.cfg.indexes,
            auto_indexes: self.cfg.auto_indexes,
            answered: self.answered.clone(),
        })
    }

    /// Heals the world: no more faults, every server back (a server whose disk failed is
    /// restarted: it acknowledges no writes until then).
    fn heal(&self, injector: Option<tokio::task::JoinHandle<()>>) -> Result<(), Failure> {
        if let Some(i) = injector {
            i.abort();
        }
        self.net.set_faults(NetFaults::none());
        self.net.heal();
        // A server whose disk failed acknowledges no writes until it restarts.
        let sick: Vec<NodeId> = std::mem::take(&mut lock(&self.faults).sick)
            .into_iter()
            .collect();
        for id in sick {
            if self.net.server(id).is_some() {
                self.crash(id);
            }
        }
        let down: Vec<NodeId> = std::mem::take(&mut lock(&self.faults).down)
            .into_keys()
            .collect();
        for id in down {
            if !self.gone(id) {
                self.start_server(id)?;
            }
        }
        Ok(())
    }

    async fn run(self: Arc<Self>) -> Result<Report, Failure> {
        let started = Instant::now();
        for id in self.ids() {
            self.leases.grant(id, Instant::now() + LEASE);
            self.start_server(id)?;
        }
        let authority = tokio::spawn(self.clone().authority());
        let setup = self.client()?;
        self.setup(&setup).await?;
        let injector = if self.cfg.faults {
            self.net.set_faults(NetFaults {
                drop_request: 0.002,
                drop_answer: 0.002,
                duplicate: 0.002,
                delay_max: Duration::from_millis(1),
                delay_tail: Duration::from_millis(50),
            });
            Some(tokio::spawn(self.clone().inject()))
        } else {
            None
        };
        let mut runs = Vec::new();
        for id in 0..self.cfg.clients {
            runs.push(tokio::spawn(self.client_run(id)?.run()));
        }
        // The first violation ends the run at once (the trace's tail then ends with it).
        let mut pending: futures::stream::FuturesUnordered<_> = runs.into_iter().collect();
        while let Some(r) = futures::StreamExt::next(&mut pending).await {
            let verdict = match r {
                Ok(v) => v,
                Err(e) => Err(format!("a client task panicked: {e}")),
            }
            .and_then(|()| self.net.violation().map_or(Ok(()), Err));
            if let Err(e) = verdict {
                self.trace.event(format_args!("VIOLATION: {e}"));
                for p in pending.iter() {
                    p.abort();
                }
                return Err(self.fail(e));
            }
        }
        self.heal(injector)?;
        self.trace.event(format_args!("healed: checking"));
        let deadline = Instant::now() + SETTLE_MAX;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let all_up = self.map().nodes.iter().all(|n| n.state == NodeState::Up);
            let converged = if all_up {
                self.converged().await
            } else {
                Err("servers still down".into())
            };
            match converged {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => {
                    return Err(
                        self.fail(format!("not converged {SETTLE_MAX:?} after healing: {e}"))
                    );
                }
                Err(_) => {}
            }
        }
        if let Some(e) = self.net.violation() {
            return Err(self.fail(e));
        }
        let checker = self.client()?;
        final_reads(&checker, &self.history)
            .await
            .map_err(|e| self.fail(e))?;
        let invoked = Instant::now();
        let names: Vec<String> = checker
            .readdir(BIG)
            .await
            .map_err(|e| self.fail(format!("final listing: {e}")))?
            .into_iter()
            .map(|e| e.name)
            .collect();
        self.history
            .check_listing(invoked, &names)
            .map_err(|e| self.fail(format!("final listing: {e}")))?;
        if self.cfg.trash {
            let kept = trash_check::check(&checker, &self.history)
                .await
                .map_err(|e| self.fail(format!("trash: {e}")))?;
            self.trace
                .event(format_args!("the trash keeps {kept} files"));
        }
        authority.abort();
        let (events, digest) = self.trace.digest();
        let mut rep = lock(&self.report).clone();
        rep.ops = u64::from(self.cfg.clients) * u64::from(self.cfg.ops_per_client);
        rep.events = events;
        rep.digest = digest;
        rep.virtual_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        rep.delivered = self.net.delivered();
        [
            rep.answered_by_lease,
            rep.answered_by_index,
            rep.behind_passes,
            rep.setattrs_in_creates,
        ] = *lock(&self.answered);
        for t in lock(&self.tiered).values() {
            rep.tier_overflowed_blocks += t.counts().overflowed_blocks;
        }
        Ok(rep)
    }
}

mod faults;
mod map_duties;
mod trash_check;
