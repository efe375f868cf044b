//! A server's settings (`ServerConfig`) and their defaults: directories, the map, timeouts,
//! split thresholds, root squashing, the disk reserve, coding, tiers.

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use myriad_net::ServeLimits;
use myriad_placement::{ClusterMap, NodeId};
use myriad_proto::auth::Keyring;

/// A server down this long has its copies replaced (docs/replication.md): long enough for a
/// restart or a reboot, short enough that a dead disk does not leave partitions on fewer
/// copies for long.
pub const DEFAULT_DOWN_GRACE: Duration = Duration::from_secs(60);

/// Default split threshold (for a group of up to 16 partitions; bigger ones split sooner);
/// why: docs/huge-dirs.md "Threshold".
pub const DEFAULT_DIR_SPLIT_ENTRIES: u64 = 8192;

/// Everything a node needs, validated by the binary before `run` is called.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub node_id: NodeId,
    pub data_dir: PathBuf,
    pub map: ClusterMap,
    /// Where to persist a newer map received from a peer or client (the `--cluster-map` file).
    pub map_path: Option<PathBuf>,
    /// Deadline of one server-to-server request.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// How long a reader waits for a pending multi-node operation on an entry before `Busy`.
    pub pending_wait: Duration,
    /// How often the recovery task looks for abandoned intents.
    pub recovery_interval: Duration,
    /// Ancestor metadata replication (popularity, leases).
    pub replication: ReplicationConfig,
    /// A directory shard holding more entries than this splits (docs/huge-dirs.md); 0 never
    /// splits automatically.
    pub dir_split_entries: u64,
    /// Owner of the root directory when this node creates it (first start of the owner of "/").
    pub root_uid: u32,
    pub root_gid: u32,
    /// How long a server may stay down before its copies are made again elsewhere (the
    /// Raft leader's setting is the one that counts).
    pub down_grace: Duration,
    /// Copies (the primary's included) that must hold a write before it is acknowledged;
    /// `None`: a majority of each partition's replica count (`cluster::other_copies_needed`).
    pub min_copies: Option<u32>,
    /// The cluster secret (and older ones being rotated out): proven to peers, expected of them.
    pub keys: Arc<Keyring>,
    /// Requests of uid 0 over client-key connections run as nobody.
    pub root_squash: bool,
    /// Where to serve metrics over HTTP (`GET /metrics`, docs/metrics.md); None: nowhere.
    /// Port 0 takes a free port; the address bound is written to `metrics.addr` in the
    /// data directory.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Limits on every connection (myriad_net::limits).
    pub limits: ServeLimits,
    /// Free space kept on the data disk (space.rs): below it, writes get ENOSPC.
    pub disk_reserve_bytes: u64,
    /// How often a primary compares each partition with its copies and repairs what
    /// differs (partition/anti_entropy.rs); zero: never.
    pub anti_entropy_interval: Duration,
    /// How often each partition frees what it holds of the trash's expired days
    /// (partition/trash_expiry.rs; a pass that removed something is followed by the next
    /// a second later); zero: never (`myriad trash purge` still frees them).
    pub trash_expiry_interval: Duration,
    /// Erasure coding of large files' chunks (docs/redundancy.md).
    pub coding: CodingConfig,
    /// Partitions keep fsstats as their files change (docs/redundancy.md "Cluster-wide
    /// fsstats"). Off by default: it costs about a tenth of create throughput.
    pub kept_stats: bool,
    /// A fast tier apart from the data directory (docs/redundancy.md "Tiers"); None: one
    /// store in the data directory.
    pub tiers: Option<TierConfig>,
}

/// The fast tier (`--fast-dir`): metadata, small files and every file's first chunk live
/// there; later chunks and erasure-coded fragments in the data directory (the capacity tier).
#[derive(Clone, Debug)]
pub struct TierConfig {
    pub fast_dir: std::path::PathBuf,
    /// Fraction of the fast tier's disk in use past which new first chunks overflow to the
    /// capacity tier.
    pub high_water: f64,
    /// Below this fraction, overflowed first chunks move back to the fast tier.
    pub low_water: f64,
}

/// When chunks are erasure coded (docs/redundancy.md, `--ec-*`).
#[derive(Clone, Debug)]
pub struct CodingConfig {
    /// Off: every chunk stays in full copies.
    pub enabled: bool,
    /// A chunk is coded once the file reaches past this many bytes with it (chunk 0, with
    /// the inode, never is).
    pub min_bytes: u64,
    /// A chunk not written for this long is settled and may be coded.
    pub settle: Duration,
    /// How often a primary looks for settled chunks and for fragments to rebuild.
    pub interval: Duration,
}

impl CodingConfig {
    /// Files past 64 KiB, chunks settled 10 s, looked for every 2 s.
    #[must_use]
    pub fn default_on() -> CodingConfig {
        CodingConfig {
            enabled: true,
            min_bytes: 64 << 10,
            settle: Duration::from_secs(10),
            interval: Duration::from_secs(2),
        }
    }
}

/// Anti-entropy every ten minutes: a round reads the whole partition on every copy, so it
/// is rare; fsck checks on demand.
pub const DEFAULT_ANTI_ENTROPY_INTERVAL: Duration = Duration::from_secs(600);

/// The trash's expiry every minute: a pass with nothing expired reads one directory
/// record or none.
pub const DEFAULT_TRASH_EXPIRY_INTERVAL: Duration = Duration::from_secs(60);

impl ServerConfig {
    #[must_use]
    pub fn new(node_id: NodeId, data_dir: PathBuf, map: ClusterMap, keys: Keyring) -> ServerConfig {
        ServerConfig {
            node_id,
            data_dir,
            map,
            map_path: None,
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            pending_wait: Duration::from_secs(5),
            recovery_interval: Duration::from_secs(2),
            replication: ReplicationConfig::default_on(),
            dir_split_entries: DEFAULT_DIR_SPLIT_ENTRIES,
            root_uid: 0,
            root_gid: 0,
            down_grace: DEFAULT_DOWN_GRACE,
            min_copies: None,
            keys: Arc::new(keys),
            root_squash: false,
            metrics_listen: None,
            limits: ServeLimits::default(),
            disk_reserve_bytes: crate::space::DEFAULT_RESERVE_BYTES,
            anti_entropy_interval: DEFAULT_ANTI_ENTROPY_INTERVAL,
            trash_expiry_interval: DEFAULT_TRASH_EXPIRY_INTERVAL,
            coding: CodingConfig::default_on(),
            tiers: None,
            kept_stats: false,
        }
    }
}

/// Ancestor metadata replication (TyrFS Algorithm 1): settings (`--metadata-replication`, `--popularity-k`, ...).
#[derive(Clone, Debug)]
pub struct ReplicationConfig {
    /// Off: every ancestor check on another node's metadata is a request to that node.
    pub enabled: bool,
    /// How many paths count as popular (paper: 20).
    pub popularity_k: usize,
    /// Sliding window of the popularity estimate (paper: 60 s).
    pub window: Duration,
    /// Most replicas kept before unpopular ones are evicted.
    pub replica_slots: usize,
    /// How long a subscription lasts without renewal; bounds how long a dead subscriber can
    /// delay a permission change.
    pub lease: Duration,
}

impl ReplicationConfig {
    #[must_use]
    pub fn default_on() -> ReplicationConfig {
        ReplicationConfig {
            enabled: true,
            popularity_k: 20,
            window: Duration::from_secs(60),
            replica_slots: 1024,
            lease: Duration::from_secs(10),
        }
    }
}
