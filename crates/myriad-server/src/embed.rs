//! A server without sockets or a Raft group, for running several in one process: the
//! deterministic simulation (`myriad-sim`, docs/simulation.md). It is the same server (the
//! same partitions, replication, commit and state) assembled from parts the caller supplies:
//! a disk (`Kv`), a network (`Transport`), the cluster-map authority (`Authority`). Its
//! commit loops run as tasks of the caller's runtime, not threads.

use std::sync::Arc;

use futures::future::BoxFuture;
use myriad_net::{Handler, Peer};
use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::auth::Credential;
use myriad_proto::{PeerKind, RequestFrame, ResponseFrame};
use myriad_storage::{Kv, Store};

use crate::cluster::MapState;
use crate::commit::{Runner, Syncer};
use crate::config::ServerConfig;
use crate::host::{Host, HostParts, OpenError};
/// The lease and failure-detector timing a map authority must keep (membership.rs).
pub use crate::membership::{DOWN_AFTER, LEASE, RENEW_EVERY};
pub use crate::seams::Authority;
pub use myriad_net::Transport;

/// File times of embedded servers start here (2026-01-01T00:00:00Z) and follow the runtime's
/// clock.
pub const VIRTUAL_EPOCH_NS: i64 = 1_767_225_600_000_000_000;

/// One embedded server.
pub struct EmbeddedServer {
    host: Arc<Host>,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

/// A copy's state as a digest (`replication::wire::digest`): last batch, keys, digest.
pub type CopyDigest = (Option<u64>, u64, u64);

impl EmbeddedServer {
    /// Assembles server `config.node_id` on `kv`; it answers requests at once (partitions
    /// not open yet answer `Busy`, as a starting process does) and opens its partitions on
    /// `open`. Call from inside the runtime the server is to run on.
    /// `fsync`: how long each sync of `kv` takes on the runtime's clock. `clock_start`:
    /// the runtime instant at which the cluster's wall clock read `VIRTUAL_EPOCH_NS` (the
    /// same for every server of a run, restarts included: servers' clocks agree, as NTP
    /// keeps them, and capabilities and outcome ages compare times across servers).
    pub fn new(
        config: ServerConfig,
        kv: Arc<dyn Kv>,
        transport: Arc<dyn Transport>,
        authority: Arc<dyn Authority>,
        fsync: std::time::Duration,
        clock_start: tokio::time::Instant,
    ) -> Result<EmbeddedServer, String> {
        let runner = Runner::Tasks { fsync };
        let _own = Store::open(
            Arc::new(myriad_storage::PartitionKv::new(kv.clone(), 0)),
            config.node_id.0,
        )
        .map_err(|e| e.to_string())?;
        let syncer = Syncer::start(kv.clone(), runner).map_err(|e| e.to_string())?;
        let first = Arc::new(MapState::new(config.map.clone()));
        let (map_news, _) = tokio::sync::watch::channel(first);
        let failure = syncer.clone();
        let host = Host::assemble(HostParts {
            config,
            kv,
            syncer,
            runner,
            clock: crate::clock::Clock::Virtual {
                start: clock_start,
                epoch_ns: VIRTUAL_EPOCH_NS,
            },
            transport,
            authority,
            map_news,
            tiers: None,
        });
        // As the process does (`run`): a failed fsync stops the server, which hands its
        // partitions over.
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let weak = Arc::downgrade(&host);
        let flag = stopped.clone();
        tokio::spawn(async move {
            let e = failure.failure().await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Some(host) = weak.upgrade() {
                tracing::error!(server = %host.id, "stopping: the disk failed an fsync: {e}");
                host.step_down(crate::step_down::Why::DiskFailed).await;
            }
        });
        // As the process does (`Host::start_tasks`): a leaving server drops the fragments
        // rebuilt elsewhere.
        let flag = stopped.clone();
        crate::host::spawn_leaving_sweeper(Arc::downgrade(&host), move || {
            flag.load(std::sync::atomic::Ordering::SeqCst)
        });
        Ok(EmbeddedServer { host, stopped })
    }

    /// True once the server stopped itself (its disk failed an fsync): as a process that
    /// exited, it answers nothing more.
    #[must_use]
    pub fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Opens what the map gives this server (as a restarted server does: a primary first
    /// catches up from its copies).
    pub async fn open(&self) -> Result<(), String> {
        self.host.reconcile().await.map_err(|e| match e {
            OpenError::Store(e) => e.to_string(),
            OpenError::Io(e) => e.to_string(),
            OpenError::Fs(e) => e.to_string(),
        })
    }

    #[must_use]
    pub fn id(&self) -> NodeId {
        self.host.id
    }

    /// Serves one frame as if it came over a connection authenticated with the cluster
    /// secret, from server `from` (or from a client: `None`).
    pub fn handle(
        &self,
        from: Option<NodeId>,
        frame: RequestFrame,
    ) -> BoxFuture<'static, ResponseFrame> {
        let kind = match from {
            Some(node_id) => PeerKind::Server { node_id },
            None => PeerKind::Client,
        };
        let zone = from.map_or(String::new(), |n| {
            self.host.state().map.zone_of(n).to_string()
        });
        let peer = Peer {
            kind,
            credential: Credential::Cluster,
            zone: zone.into(),
            version: myriad_proto::PROTOCOL_VERSION,
        };
        self.host.clone().handle(peer, frame)
    }

    /// Adopts `map` if it is newer, and starts and stops partitions to match it.
    pub async fn install_map(&self, map: ClusterMap) -> Result<(), String> {
        self.host.install_map(map).await.map_err(|e| e.to_string())
    }

    /// The last batch of every partition copy this server holds, primary or backup (None: a
    /// whole copy is arriving): a map authority completes a move once the new copy holds
    /// what its primary held.
    #[must_use]
    pub fn partition_seqs(&self) -> Vec<(PartitionId, Option<u64>)> {
        self.host.partition_seqs()
    }

    /// Whether this server keeps any erasure-coded fragment (a leaving one stays in the map
    /// until it keeps none); a store that cannot be read counts as keeping.
    #[must_use]
    pub fn keeps_fragments(&self) -> bool {
        self.host.keeps_fragments().unwrap_or(true)
    }

    /// The epoch of the map this server serves under.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.host.state().map.epoch
    }

    /// How many times this server counted `what` (`Env::count`, the server counters).
    #[must_use]
    pub fn counted(&self, what: &str) -> u64 {
        let (_, from_servers) = self.host.counters.snapshot();
        from_servers
            .iter()
            .filter(|o| o.op == what)
            .map(|o| o.count)
            .sum()
    }

    /// Digests of the copies this server holds, as primary or as backup.
    #[must_use]
    pub fn digests(&self) -> Vec<(PartitionId, CopyDigest)> {
        let mut out = Vec::new();
        for p in self.host.nodes() {
            if let Ok(d) = crate::replication::wire::digest(&p.committed) {
                out.push((p.me, d));
            }
        }
        for (pid, b) in self.host.backup_list() {
            if let Ok(d) = crate::replication::wire::digest(b.store()) {
                out.push((pid, d));
            }
        }
        out.sort_by_key(|(pid, _)| *pid);
        out
    }

    /// Partitions led here whose kept fsstats differ from a count from scratch, with the
    /// difference (docs/redundancy.md "Cluster-wide fsstats").
    #[must_use]
    pub fn kept_stats_drift(&self) -> Vec<(PartitionId, String)> {
        let mut out = Vec::new();
        for p in self.host.nodes() {
            match p.committed.kept_stats_drift() {
                Ok(None) => {}
                Ok(Some(d)) => out.push((p.me, d)),
                Err(e) => out.push((p.me, format!("cannot count: {e}"))),
            }
        }
        out
    }

    /// Partitions led here whose quotas' usage differs from a count from scratch, or that
    /// do not count exactly the quotas `ids` (docs/quotas.md "Invariants", 2).
    #[must_use]
    pub fn quota_drift(&self, ids: &[u64]) -> Vec<(PartitionId, String)> {
        let mut out = Vec::new();
        for p in self.host.nodes() {
            match p.committed.quota_set() {
                Ok((_, set)) => {
                    let counted: Vec<u64> = set.iter().map(|q| q.id).collect();
                    if counted != ids {
                        out.push((
                            p.me,
                            format!("counts quotas {counted:?}, the map has {ids:?}"),
                        ));
                    }
                }
                Err(e) => out.push((p.me, format!("cannot read its quotas: {e}"))),
            }
            match p.committed.quota_drift() {
                Ok(None) => {}
                Ok(Some(d)) => out.push((p.me, d)),
                Err(e) => out.push((p.me, format!("cannot count: {e}"))),
            }
        }
        out
    }

    /// Each partition led here and its usage of each quota it counts: (partition, quota,
    /// names, bytes).
    #[must_use]
    pub fn quota_usage(&self) -> Vec<(PartitionId, u64, u64, u64)> {
        let mut out = Vec::new();
        for p in self.host.nodes() {
            let Ok((_, set)) = p.committed.quota_set() else {
                continue;
            };
            for q in set {
                if let Ok(u) = p.committed.quota_usage(q.id) {
                    out.push((p.me, q.id, u.files, u.bytes));
                }
            }
        }
        out
    }

    /// The keys (space code, key, hash of the value) of this server's copy of `pid`, for
    /// finding what copies disagree on. Empty if it holds none.
    #[must_use]
    pub fn copy_keys(&self, pid: PartitionId) -> Vec<(u8, Vec<u8>, u64)> {
        let store = match (self.host.partition(pid), self.host.backup(pid)) {
            (Some(p), _) => p.committed.clone(),
            (None, Some(b)) => b.store().clone(),
            (None, None) => return Vec::new(),
        };
        crate::replication::wire::key_hashes(&store).unwrap_or_default()
    }

    /// Stops at once (a crash: what its disk did not sync is the disk's business): its
    /// partitions stop taking requests and its tasks end.
    pub fn stop(&self) {
        self.host.clear();
    }

    /// A planned stop, as the process does on SIGTERM (`run`, `Stop::HandOver`): syncs,
    /// stops serving and hands its partitions over by marking itself down; returns
    /// whether the hand-over was proposed. It answers nothing more.
    pub async fn stop_planned(&self) -> bool {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.host.kv.sync();
        self.host.step_down(crate::step_down::Why::Stop).await
    }
}
