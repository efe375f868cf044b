//! A server process: the partitions it serves, and what they share (the engine and its fsync
//! thread, the cluster map, the connection pool, the counters).
//!
//! ```text
//! frame { target partition, source partition } ─> Host::handle ─┬─ target 0: server requests
//!                                                               │   (map, counters, statfs)
//!                                                               └─ partition p: Partition p, if this
//!                                                                  server is its primary, else
//!                                                                  Redirect(map)
//! ```
//! docs/replication.md: a partition is what the rest of the server calls a node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use myriad_net::{Handler, Peer, Pool};
use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::auth::Credential;
use myriad_proto::{
    Caller, CounterSnapshot, FsError, PeerKind, Request, RequestFrame, Response, ResponseFrame,
    StatFs,
};
use myriad_storage::Kv;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::cluster::MapState;
use crate::commit::{Applier, Runner, Syncer};
use crate::config::ServerConfig;
use crate::counters::Counters;
use crate::membership::Membership;
use crate::partition::core::Partition;
use crate::partition::env::Env;
use crate::replication::copy::Backup;
use crate::replication::peers::Peers;
use crate::replication::primary::Replicator;
use crate::replication::wire::{digest, drop_copy, partition_store};
use crate::state::mutation::{IdAlloc, Layout, Mutation};
use myriad_proto::{AdminRequest, ClientRequest, PeerRequest, RaftRpc, ServerRequest};

pub struct Host {
    /// This server's id in the map.
    pub(crate) id: NodeId,
    pub(crate) map: RwLock<Arc<MapState>>,
    pub(crate) map_path: Option<PathBuf>,
    pub(crate) data_dir: PathBuf,
    /// How it reaches other servers (the connection pool; the simulated network).
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) counters: Counters,
    pub(crate) config: ServerConfig,
    pub(crate) syncer: Syncer,
    /// Where the appliers run (threads here; tasks under a simulation).
    pub(crate) runner: Runner,
    /// The wall clock of file times (the system's; a simulation's own).
    pub(crate) clock: Clock,
    /// The engine all partitions share (each sees it through a `PartitionKv`).
    pub(crate) kv: Arc<dyn Kv>,
    /// The partitions this server serves as primary.
    pub(crate) partitions: RwLock<BTreeMap<PartitionId, Arc<Partition>>>,
    /// The partitions this server holds a backup copy of.
    pub(crate) backups: RwLock<BTreeMap<PartitionId, Arc<Backup>>>,
    /// Held while partitions are started or stopped.
    pub(crate) reconciling: tokio::sync::Mutex<()>,
    /// The cluster-map authority as this server sees it: its member of the Raft group (the
    /// serving lease, proposals), or the simulation's authority.
    pub(crate) authority: Arc<dyn Authority>,
    /// The current map, published for membership (which reads, never writes it).
    pub(crate) map_news: watch::Sender<Arc<MapState>>,
    /// Partitions whose copy here a completed move made redundant (dropped by the next
    /// reconcile).
    pub(crate) moved_away: Mutex<Vec<PartitionId>>,
    /// Partitions handed over by a live primary, not served before the given time.
    pub(crate) handed_over: Mutex<BTreeMap<PartitionId, tokio::time::Instant>>,
    /// Membership tasks, ended at shutdown.
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// This server itself, for tasks it starts from `&self` (set once, at start).
    pub(crate) me: std::sync::Weak<Host>,
    /// Free space of the data disk; refuses writes before the engine runs out (space.rs).
    pub(crate) space: crate::space::DiskSpace,
}

/// A read guard even if a writer panicked (the tables stay usable).
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

pub(crate) enum OpenError {
    Store(myriad_storage::StorageError),
    Io(std::io::Error),
    Fs(FsError),
}

/// What a server is assembled from: the process wires sockets and the Raft group, a
/// simulation its own network and authority.
pub(crate) struct HostParts {
    pub config: ServerConfig,
    pub kv: Arc<dyn Kv>,
    pub syncer: Syncer,
    pub runner: Runner,
    pub clock: Clock,
    pub transport: Arc<dyn Transport>,
    pub authority: Arc<dyn Authority>,
    /// Holds the first map state; the host publishes every newer one on it.
    pub map_news: watch::Sender<Arc<MapState>>,
}

impl Host {
    pub(crate) fn assemble(parts: HostParts) -> Arc<Host> {
        let HostParts {
            config,
            kv,
            syncer,
            runner,
            clock,
            transport,
            authority,
            map_news,
        } = parts;
        let first = map_news.borrow().clone();
        Arc::new_cyclic(|me| Host {
            me: me.clone(),
            id: config.node_id,
            map: RwLock::new(first),
            map_news,
            map_path: config.map_path.clone(),
            data_dir: config.data_dir.clone(),
            transport,
            counters: Counters::default(),
            syncer,
            runner,
            clock,
            kv,
            partitions: RwLock::new(BTreeMap::new()),
            backups: RwLock::new(BTreeMap::new()),
            reconciling: tokio::sync::Mutex::new(()),
            authority,
            moved_away: Mutex::new(Vec::new()),
            handed_over: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(Vec::new()),
            space: crate::space::DiskSpace::new(config.data_dir.clone(), config.disk_reserve_bytes),
            config,
        })
    }

    pub(crate) fn state(&self) -> Arc<MapState> {
        read(&self.map).clone()
    }

    pub(crate) fn partition(&self, pid: PartitionId) -> Option<Arc<Partition>> {
        read(&self.partitions).get(&pid).cloned()
    }

    /// The answer for a request to partition `pid` that this server does not serve: `Busy`
    /// if the map makes it the primary (it is still being opened), else `Redirect`.
    fn not_here(&self, pid: PartitionId) -> FsError {
        let st = self.state();
        if st.map.primary_of(pid) == Some(self.id) {
            FsError::Busy
        } else {
            FsError::Redirect(Box::new(st.map.clone()))
        }
    }

    /// The partition `pid` if this server may serve it now: it holds a lease and its map
    /// makes it the primary (a primary demoted by a newer map stops at once, before its
    /// handler is stopped).
    fn serving(&self, pid: PartitionId, epoch: u64) -> Result<Arc<Partition>, FsError> {
        let st = self.state();
        let node = match self.partition(pid) {
            Some(node) if st.map.primary_of(pid) == Some(self.id) => node,
            // The sender knows a newer map: it sends it (or waits for us to follow it).
            _ if epoch > st.map.epoch => return Err(FsError::MapTooOld(st.map.epoch)),
            _ => return Err(self.not_here(pid)),
        };
        match self.authority.lease_error() {
            Some(e) => Err(e),
            None => Ok(node),
        }
    }

    /// Holds a request for a partition handed over by a live primary until that one can no
    /// longer be serving it (see `adopt_map`): the request is only delayed, never refused.
    async fn wait_for_handover(&self, pid: PartitionId) {
        let until = match self.handed_over.lock() {
            Ok(h) => h.get(&pid).copied(),
            Err(_) => None,
        };
        if let Some(t) = until
            && t > tokio::time::Instant::now()
        {
            tokio::time::sleep_until(t).await;
        }
    }

    /// The backup copy of `pid` if server `sender`, at map `epoch`, may write to it: only
    /// the primary of the same map (a deposed primary's late batches are refused, so a
    /// promoted backup's batches cannot collide with them; docs/replication.md).
    fn backup_for(
        &self,
        pid: PartitionId,
        sender: NodeId,
        epoch: u64,
    ) -> Result<Arc<Backup>, FsError> {
        let st = self.state();
        if epoch > st.map.epoch {
            return Err(FsError::MapTooOld(st.map.epoch));
        }
        if epoch < st.map.epoch || st.map.primary_of(pid) != Some(sender) {
            return Err(FsError::Redirect(Box::new(st.map.clone())));
        }
        self.backup(pid).ok_or_else(|| self.not_here(pid))
    }

    /// Adopts `map` if newer and reconciles in the background (for callers that may run
    /// inside a reconcile).
    pub(crate) fn adopt_in_background(self: &Arc<Self>, map: ClusterMap) {
        if let Ok(true) = self.adopt_map(map) {
            let host = self.clone();
            tokio::spawn(async move {
                if let Err(OpenError::Fs(e)) = host.reconcile().await {
                    tracing::warn!("reconciling partitions with a newer map failed: {e}");
                }
            });
        }
    }

    pub(crate) fn backup(&self, pid: PartitionId) -> Option<Arc<Backup>> {
        read(&self.backups).get(&pid).cloned()
    }

    /// The partitions served here as primary, in id order.
    pub(crate) fn nodes(&self) -> Vec<Arc<Partition>> {
        let mut out: Vec<Arc<Partition>> = read(&self.partitions).values().cloned().collect();
        out.sort_by_key(|p| p.me);
        out
    }

    /// The copies kept here as backup, in id order.
    pub(crate) fn backup_list(&self) -> Vec<(PartitionId, Arc<Backup>)> {
        let mut out: Vec<(PartitionId, Arc<Backup>)> = read(&self.backups)
            .iter()
            .map(|(p, b)| (*p, b.clone()))
            .collect();
        out.sort_by_key(|(p, _)| *p);
        out
    }

    /// Stops every partition and drops them (their handlers hold the host; this ends the
    /// cycle at shutdown), and the membership tasks.
    pub(crate) fn clear(&self) {
        if let Ok(mut t) = self.tasks.lock() {
            for task in t.drain(..) {
                task.abort();
            }
        }
        let nodes: Vec<Arc<Partition>> = match self.partitions.write() {
            Ok(mut p) => std::mem::take(&mut *p).into_values().collect(),
            Err(_) => Vec::new(),
        };
        for n in nodes {
            n.stop();
        }
    }

    /// Adopts `map` if it is newer (persisting it to the map file first), then starts and
    /// stops partitions to match it.
    pub(crate) async fn install_map(self: &Arc<Self>, map: ClusterMap) -> Result<(), FsError> {
        if self.adopt_map(map)? {
            self.reconcile().await.map_err(|e| match e {
                OpenError::Fs(e) => e,
                OpenError::Store(e) => FsError::Io(e.to_string()),
                OpenError::Io(e) => FsError::Io(e.to_string()),
            })?;
        }
        Ok(())
    }

    /// True if `map` was newer and is now the current map.
    fn adopt_map(&self, map: ClusterMap) -> Result<bool, FsError> {
        map.validate()
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
        if map.node(self.id).is_none() {
            // Maps are committed by the Raft group: one without this server means it was
            // removed (remove-node). It then holds and serves nothing, and a restart with
            // this map file refuses to start with a clear message.
            tracing::warn!(
                server = self.id,
                epoch = map.epoch,
                "this server is not in the cluster map any more: it serves nothing"
            );
        }
        let mut guard = self
            .map
            .write()
            .map_err(|_| FsError::Io("map lock poisoned".into()))?;
        if map.epoch <= guard.map.epoch {
            return Ok(false);
        }
        // Copies this server gave up by a completed move: their data goes (moves only; a
        // copy dropped from a list any other way is left in place, see reconcile_backups).
        let moved_away: Vec<PartitionId> = guard
            .map
            .partitions
            .iter()
            .filter(|p| p.moving.is_some_and(|m| m.from == self.id))
            .filter(|p| {
                map.partition(p.id)
                    .is_some_and(|n| !n.replicas.contains(&self.id))
            })
            .map(|p| p.id)
            .collect();
        if let Ok(mut q) = self.moved_away.lock() {
            q.extend(moved_away);
        }
        // Partitions handed to this server by a live primary (a completed move, not a
        // failover): that server may serve them until it sees this map or its lease ends,
        // so this one waits out a lease before serving them (no two primaries at once).
        let until = tokio::time::Instant::now() + crate::membership::LEASE;
        let handed: Vec<PartitionId> = map
            .primaries_of(self.id)
            .into_iter()
            .filter(|&p| {
                guard.map.primary_of(p).is_some_and(|old| {
                    old != self.id
                        && map
                            .node(old)
                            .is_none_or(|n| n.state != myriad_placement::NodeState::Down)
                })
            })
            .collect();
        if let Ok(mut h) = self.handed_over.lock() {
            h.retain(|_, t| *t > tokio::time::Instant::now());
            for p in handed {
                h.insert(p, until);
            }
        }
        if let Some(p) = &self.map_path {
            // Servers of a local cluster share one map file: a temporary name of our own.
            let tmp = p.with_extension(format!("tmp.{}", self.id));
            std::fs::write(&tmp, map.to_json())
                .and_then(|()| std::fs::rename(&tmp, p))
                .map_err(|e| FsError::Io(e.to_string()))?;
        }
        tracing::info!(epoch = map.epoch, "installed newer cluster map");
        let ring = map.ring();
        *guard = Arc::new(MapState { map, ring });
        self.map_news.send_replace(guard.clone());
        Ok(true)
    }

    /// True if the map makes this server the primary of a partition it does not serve yet
    /// (its opening failed, or a reconcile is under way).
    pub(crate) fn missing_partitions(&self) -> bool {
        let st = self.state();
        let have = read(&self.partitions);
        st.map
            .primaries_of(self.id)
            .iter()
            .any(|p| st.map.primary_of(*p) == Some(self.id) && !have.contains_key(p))
    }

    /// Serves the partitions the current map makes this server the primary of, and stops
    /// serving the others. Serialized, so two map installs cannot open a partition twice.
    pub(crate) async fn reconcile(self: &Arc<Self>) -> Result<(), OpenError> {
        let _one = self.reconciling.lock().await;
        let st = self.state();
        let want: BTreeSet<PartitionId> = st
            .map
            .primaries_of(self.id)
            .into_iter()
            .filter(|&p| st.map.primary_of(p) == Some(self.id))
            .collect();
        let have: BTreeSet<PartitionId> = read(&self.partitions).keys().copied().collect();
        for pid in have.difference(&want) {
            let gone = match self.partitions.write() {
                Ok(mut p) => p.remove(pid),
                Err(p) => p.into_inner().remove(pid),
            };
            if let Some(node) = gone {
                tracing::info!(
                    partition = pid,
                    epoch = st.map.epoch,
                    "no longer primary; stopped serving"
                );
                node.stop();
                // Nothing more may reach the store before a backup copy opens on it.
                node.applier.retire().await;
            }
        }
        for pid in have.intersection(&want) {
            if let Some(node) = self.partition(*pid) {
                node.replicator.set_backups(&st.map.backups_of(*pid));
            }
        }
        self.reconcile_backups(&st.map)?;
        let mut started = Vec::new();
        for &pid in want.difference(&have) {
            let node = match self.open_partition(pid).await {
                Ok(node) => node,
                // Catching up from the other copies failed (they are changing too): the
                // partition answers Busy until the next reconcile (membership.rs retries).
                Err(OpenError::Fs(e)) => {
                    tracing::warn!(partition = pid, "cannot open the partition yet: {e}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Ok(mut p) = self.partitions.write() {
                p.insert(pid, node.clone());
            }
            started.push(node);
        }
        for node in started {
            if node.state().ring.owner_of_dir("/") == node.me {
                // Not awaited here: the write waits for the backups, which may be down
                // until a newer map drops them, and that map needs this reconcile to end.
                let init = node.clone();
                let (uid, gid) = (self.config.root_uid, self.config.root_gid);
                let clock = self.clock;
                let task = tokio::spawn(async move {
                    let mut backoff = std::time::Duration::from_millis(20);
                    loop {
                        let root = Mutation::InitRoot {
                            now: clock.now_ns(),
                            uid,
                            gid,
                        };
                        match init.applier.run(root).await {
                            Ok(_) => return,
                            Err(e) => {
                                tracing::warn!("creating the root directory failed, retrying: {e}");
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
                            }
                        }
                    }
                });
                if let Ok(mut t) = node.tasks.lock() {
                    t.push(task);
                }
            }
            node.start_tasks();
        }
        Ok(())
    }

    /// Opens the backup copies the map gives this server; drops the others.
    fn reconcile_backups(&self, map: &ClusterMap) -> Result<(), OpenError> {
        let want: BTreeSet<PartitionId> = map
            .partitions
            .iter()
            .filter(|p| map.backups_of(p.id).contains(&self.id))
            .map(|p| p.id)
            .collect();
        let mut backups = self
            .backups
            .write()
            .map_err(|_| OpenError::Fs(FsError::Io("backup table poisoned".into())))?;
        backups.retain(|pid, _| want.contains(pid));
        // Copies moved elsewhere: their data goes.
        let moved: Vec<PartitionId> = match self.moved_away.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for p in map.partitions.iter().filter(|p| moved.contains(&p.id)) {
            if !p.replicas.contains(&self.id) && self.partition(p.id).is_none() {
                match drop_copy(self.kv.clone(), p.id) {
                    Ok(true) => tracing::info!(
                        partition = p.id,
                        epoch = map.epoch,
                        "dropped this server's copy (the map moved it elsewhere)"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(partition = p.id, "dropping a moved copy failed: {e}"),
                }
            }
        }
        for pid in want {
            if let std::collections::btree_map::Entry::Vacant(v) = backups.entry(pid) {
                let b = Backup::open(self.kv.clone(), pid).map_err(OpenError::Store)?;
                v.insert(Arc::new(b));
            }
        }
        Ok(())
    }

    /// Opens partition `pid`'s store on this server and starts its applier.
    async fn open_partition(
        self: &Arc<Self>,
        pid: PartitionId,
    ) -> Result<Arc<Partition>, OpenError> {
        let store = partition_store(self.kv.clone(), pid).map_err(OpenError::Store)?;
        let fresh = store.is_fresh();
        let backups = self.state().map.backups_of(pid);
        let peers: Arc<dyn Peers> = self.clone();
        crate::replication::catchup::catch_up_from_backups(&peers, pid, &store, &backups)
            .await
            .map_err(OpenError::Fs)?;
        let ids = IdAlloc::load(&store, pid).map_err(OpenError::Store)?;
        let layout = Layout {
            chunk_size_bytes: self.config.map.chunk_size_bytes,
        };
        let (changed, _) = watch::channel(0u64);
        let start_seq = store
            .meta_u64(crate::commit::SEQ_KEY)
            .map_err(OpenError::Store)?
            .unwrap_or(0);
        let replicator = Arc::new(Replicator::new(self.clone(), pid, &store, start_seq));
        replicator.set_backups(&backups);
        let applier = Applier::start(
            store.clone(),
            ids,
            layout,
            changed.clone(),
            &self.syncer,
            start_seq,
            replicator.clone(),
            self.runner,
        )
        .map_err(OpenError::Io)?;
        Ok(Arc::new(Partition {
            me: pid,
            env: self.clone(),
            store,
            applier,
            replicator,
            changed,
            live: Mutex::new(BTreeSet::new()),
            replicas: crate::partition::replicas::Replicas::new(
                self.config.replication.clone(),
                !fresh,
            ),
            shard_maps: myriad_placement::ShardCache::default(),
            splits: crate::partition::split_state::SplitState::default(),
            dir_touches: crate::partition::touches::DirTouches::default(),
            tasks: Mutex::new(Vec::new()),
        }))
    }

    /// Requests addressed to the server rather than a partition.
    pub(crate) async fn dispatch_server(
        self: &Arc<Self>,
        peer: &Peer,
        caller: &Caller,
        epoch: u64,
        body: Request,
    ) -> Result<Response, FsError> {
        let from_server = matches!(peer.kind, PeerKind::Server { .. });
        let st = self.state();
        if !body.is_admin() && epoch > st.map.epoch {
            return Err(FsError::MapTooOld(st.map.epoch));
        }
        match body {
            Request::Client(ClientRequest::Echo(p)) => Ok(Response::Echo(p)),
            Request::Server(ServerRequest::StatFs) => Ok(Response::StatFs(self.statfs())),
            Request::Server(ServerRequest::GetCounters) => {
                Ok(Response::Counters(self.counter_snapshot(&st)))
            }
            Request::Admin(AdminRequest::ResetCounters) => {
                self.counters.reset();
                for n in self.nodes() {
                    n.replicas.stats.reset();
                }
                self.syncer.stats.syncs.store(0, Ordering::Relaxed);
                self.syncer
                    .stats
                    .synced_mutations
                    .store(0, Ordering::Relaxed);
                Ok(Response::Unit)
            }
            Request::Server(ServerRequest::GetMap) => Ok(Response::Map(Box::new(st.map.clone()))),
            // From a server: a committed map it holds and we lack.
            Request::Server(ServerRequest::InstallMap(map)) if from_server => {
                map.validate()
                    .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
                self.adopt_in_background(*map);
                Ok(Response::Unit)
            }
            // From an administrator (root): a change, committed through the Raft group. From
            // anyone else: a map the client learned from another server (it is committed and
            // on its way here), so only wait for it.
            Request::Server(ServerRequest::InstallMap(map)) => {
                map.validate()
                    .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
                let epoch = map.epoch;
                // A cluster change needs root with the cluster secret (a client key's root is
                // no administrator: SECURITY.md).
                let admin = caller.uid == 0 && peer.credential == Credential::Cluster;
                if admin
                    && self
                        .authority
                        .committed_map()
                        .is_none_or(|m| m.epoch < epoch)
                {
                    self.authority.propose_map(*map).await?;
                }
                // Answer once this server follows it (it arrives through the group).
                let deadline = tokio::time::Instant::now() + crate::membership::PROPOSE_TIMEOUT;
                while self.state().map.epoch < epoch && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Ok(Response::Unit)
            }
            Request::Peer(PeerRequest::Raft { rpc, payload }) if from_server => {
                self.authority.serve_raft(rpc, payload).await
            }
            Request::Peer(PeerRequest::PartitionSeqs) if from_server => {
                Ok(Response::Seqs(self.partition_seqs()))
            }
            Request::Peer(PeerRequest::Lease) => match &peer.kind {
                PeerKind::Server { node_id } => Ok(self.authority.grant_lease(*node_id, epoch)),
                PeerKind::Client => Err(FsError::PermissionDenied),
            },
            _ if from_server => Err(FsError::InvalidArgument(
                "request needs a target partition".into(),
            )),
            _ => Err(FsError::Redirect(Box::new(st.map.clone()))),
        }
    }

    /// Starts the server's own tasks: following the maps the group commits (`maps`), and
    /// opening again a partition whose opening failed.
    pub(crate) fn start_tasks(
        self: &Arc<Self>,
        mut maps: tokio::sync::mpsc::UnboundedReceiver<ClusterMap>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let follower = {
            let host = self.clone();
            tokio::spawn(async move {
                while let Some(mut map) = maps.recv().await {
                    while let Ok(newer) = maps.try_recv() {
                        map = newer;
                    }
                    if let Err(e) = host.install_map(map).await {
                        tracing::error!("cannot apply the committed cluster map: {e}");
                    }
                }
            })
        };
        let reopener = {
            let host = self.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(crate::membership::RENEW_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    // A partition whose opening failed is tried again (unless one is under
                    // way).
                    if host.missing_partitions()
                        && let Ok(_idle) = host.reconciling.try_lock()
                    {
                        drop(_idle);
                        let h = host.clone();
                        tokio::spawn(async move {
                            let _ = h.reconcile().await;
                        });
                    }
                }
            })
        };
        vec![follower, reopener]
    }

    /// The last batch of every partition copy held here (`PeerRequest::PartitionSeqs`).
    pub(crate) fn partition_seqs(&self) -> Vec<(PartitionId, Option<u64>)> {
        let mut out: Vec<(PartitionId, Option<u64>)> = self
            .nodes()
            .iter()
            .map(|n| {
                let seq = n.store.meta_u64(crate::commit::SEQ_KEY).ok().flatten();
                (n.me, Some(seq.unwrap_or(0)))
            })
            .collect();
        out.extend(read(&self.backups).iter().map(|(pid, b)| (*pid, b.seq())));
        out
    }

    fn counter_snapshot(&self, st: &MapState) -> CounterSnapshot {
        let (client_requests, server_requests) = self.counters.snapshot();
        let mut snap = CounterSnapshot {
            node_id: self.id,
            epoch: st.map.epoch,
            client_requests,
            server_requests,
            server_requests_sent: self.counters.sent_to_servers.load(Ordering::Relaxed),
            syncs: self.syncer.stats.syncs.load(Ordering::Relaxed),
            synced_mutations: self.syncer.stats.synced_mutations.load(Ordering::Relaxed),
            serving: self.authority.lease_error().is_none(),
            raft_leader: self
                .authority
                .leader()
                .and_then(|l| u32::try_from(l).ok())
                .unwrap_or(0),
            primaries: read(&self.partitions).len() as u64,
            backups: read(&self.backups).len() as u64,
            ..CounterSnapshot::default()
        };
        for n in self.nodes() {
            let s = &n.replicas.stats;
            snap.ancestor_checks_local += s.local.load(Ordering::Relaxed);
            snap.ancestor_checks_remote += s.remote.load(Ordering::Relaxed);
            snap.replicas_held += n.replicas.held();
            snap.subscriptions_served += n.replicas.subscriptions_served();
            snap.invalidations_sent += s.invalidations.load(Ordering::Relaxed);
            snap.invalidation_latency_us += s.invalidation_us.load(Ordering::Relaxed);
        }
        snap
    }

    fn statfs(&self) -> StatFs {
        let (total, free) = crate::space::disk_space(&self.data_dir).unwrap_or((0, 0));
        StatFs {
            total_bytes: total,
            free_bytes: free,
            used_bytes: self.kv.disk_bytes(),
            files: 0,
        }
    }
}

impl Handler for Host {
    fn identity(&self) -> (u32, u64) {
        (self.id, self.state().map.epoch)
    }

    fn handle(
        self: Arc<Self>,
        peer: Peer,
        frame: RequestFrame,
    ) -> BoxFuture<'static, ResponseFrame> {
        Box::pin(async move {
            let host = &self;
            let id = frame.id;
            let from_server = matches!(peer.kind, PeerKind::Server { .. });
            if !frame.body.is_admin() {
                host.counters.count(frame.body.op_name(), from_server);
            }
            let result = match frame.ends.target {
                0 => {
                    host.dispatch_server(&peer, &frame.caller, frame.epoch, frame.body)
                        .await
                }
                _ if is_server_request(&frame.body) => {
                    host.dispatch_server(&peer, &frame.caller, frame.epoch, frame.body)
                        .await
                }
                pid if matches!(frame.body, Request::Admin(AdminRequest::FsckReplica)) => {
                    if frame.caller.uid != 0 {
                        Err(FsError::PermissionDenied)
                    } else if let Some(node) = host.partition(pid) {
                        replica_digest(&node.store)
                    } else if let Some(b) = host.backup(pid) {
                        replica_digest(b.store())
                    } else {
                        Err(FsError::NotFound)
                    }
                }
                pid if matches!(frame.body, Request::Replica(_)) => match peer.kind {
                    PeerKind::Server { node_id } => {
                        match host.backup_for(pid, node_id, frame.epoch) {
                            Ok(b) => b.handle(&host.syncer, frame.body).await,
                            Err(e) => Err(e),
                        }
                    }
                    PeerKind::Client => Err(FsError::PermissionDenied),
                },
                pid => {
                    host.wait_for_handover(pid).await;
                    match host.serving(pid, frame.epoch) {
                        Ok(node) => {
                            let from = from_server.then_some(frame.ends.source);
                            node.dispatch(from, frame.epoch, frame.caller, frame.body)
                                .await
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            ResponseFrame { id, result }
        })
    }
}

/// How a server reaches the others: the connection pool in the process, the simulated
/// network in a simulation (addresses are the map's).
pub trait Transport: Send + Sync {
    fn call<'a>(
        &'a self,
        addr: &'a str,
        epoch: u64,
        ends: myriad_proto::Endpoints,
        caller: &'a Caller,
        req: &'a Request,
    ) -> BoxFuture<'a, Result<Response, FsError>>;
}

impl Transport for Pool {
    fn call<'a>(
        &'a self,
        addr: &'a str,
        epoch: u64,
        ends: myriad_proto::Endpoints,
        caller: &'a Caller,
        req: &'a Request,
    ) -> BoxFuture<'a, Result<Response, FsError>> {
        Box::pin(Pool::call(self, addr, epoch, ends, caller, req))
    }
}

/// What a server needs from the cluster-map authority: its member of the Raft group in the
/// process (`Membership`), the simulation's authority in a simulation.
pub trait Authority: Send + Sync {
    /// Why this server may not serve partition requests now (no lease), if it may not.
    fn lease_error(&self) -> Option<FsError>;
    /// Leader side of `PeerRequest::Lease` from server `from` at map `epoch`.
    fn grant_lease(&self, from: NodeId, epoch: u64) -> Response;
    /// A map change, committed through the authority.
    fn propose_map(&self, map: ClusterMap) -> BoxFuture<'_, Result<(), FsError>>;
    /// The newest map the authority committed, if any.
    fn committed_map(&self) -> Option<ClusterMap>;
    /// The current leader's server id, if known (0: none).
    fn leader(&self) -> Option<u64>;
    /// A Raft message from a peer.
    fn serve_raft(
        &self,
        rpc: RaftRpc,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<Response, FsError>>;
}

impl Authority for Membership {
    fn lease_error(&self) -> Option<FsError> {
        Membership::lease_error(self)
    }
    fn grant_lease(&self, from: NodeId, epoch: u64) -> Response {
        Membership::grant_lease(self, from, epoch)
    }
    fn propose_map(&self, map: ClusterMap) -> BoxFuture<'_, Result<(), FsError>> {
        Box::pin(Membership::propose_map(self, map))
    }
    fn committed_map(&self) -> Option<ClusterMap> {
        self.group.map()
    }
    fn leader(&self) -> Option<u64> {
        self.group.leader()
    }
    fn serve_raft(
        &self,
        rpc: RaftRpc,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<Response, FsError>> {
        Box::pin(async move {
            self.group
                .serve(rpc, &payload)
                .await
                .map(Response::Raft)
                .map_err(FsError::Protocol)
        })
    }
}

/// Requests about the server as a whole, answered by it whatever partition they name.
fn is_server_request(body: &Request) -> bool {
    matches!(
        body,
        Request::Server(_) | Request::Admin(AdminRequest::ResetCounters)
    )
}

impl Peers for Host {
    fn map(&self) -> Arc<MapState> {
        self.state()
    }

    fn send<'a>(
        &'a self,
        to: NodeId,
        epoch: u64,
        ends: myriad_proto::Endpoints,
        req: &'a Request,
    ) -> BoxFuture<'a, Result<Response, FsError>> {
        Box::pin(async move {
            let addr = self
                .state()
                .map
                .node(to)
                .map(|n| n.addr.clone())
                .ok_or_else(|| FsError::Unavailable(format!("server {to} is not in the map")))?;
            self.transport
                .call(&addr, epoch, ends, &Caller::root(), req)
                .await
        })
    }

    fn newer_map(&self, map: ClusterMap) {
        if let Some(me) = self.me.upgrade() {
            me.adopt_in_background(map);
        }
    }

    fn request_timeout(&self) -> std::time::Duration {
        self.config.request_timeout
    }
}

impl Env for Host {
    fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }

    fn server_id(&self) -> NodeId {
        self.id
    }

    fn config(&self) -> &ServerConfig {
        &self.config
    }

    fn count(&self, what: &'static str) {
        self.counters.count(what, true);
    }

    fn admit(&self, req: &Request) -> Result<(), FsError> {
        self.space.admit(req)
    }

    fn call_partition(
        &self,
        source: PartitionId,
        pid: PartitionId,
        body: Request,
    ) -> BoxFuture<'_, Result<Response, FsError>> {
        Box::pin(call_partition(self, source, pid, body))
    }
}

/// Corrupt blocks one copy lists in its fsck digest (the rest are found once these are fixed).
const CORRUPT_LISTED_MAX: usize = 64;

fn replica_digest(store: &myriad_storage::Store) -> Result<Response, FsError> {
    let (seq, keys, digest) = digest(store)?;
    let corrupt = store
        .corrupt_blocks(CORRUPT_LISTED_MAX)
        .map_err(crate::state::mutation::storage_err)?;
    Ok(Response::ReplicaDigest {
        seq,
        keys,
        digest,
        corrupt,
    })
}

/// Calls partition `pid` wherever it is served; used by partitions (`source` = the caller's
/// partition) and by the server's own tasks (`source` = 0). A partition that is unavailable
/// (its server without a lease, or dead and about to fail over) is asked again, under the
/// newest map, for up to `NESTED_RETRY`: a multi-partition operation left half done costs
/// its client an in-doubt answer.
pub(crate) async fn call_partition(
    host: &Host,
    source: PartitionId,
    pid: PartitionId,
    body: Request,
) -> Result<Response, FsError> {
    let deadline = tokio::time::Instant::now() + NESTED_RETRY;
    let mut backoff = std::time::Duration::from_millis(20);
    loop {
        let st = host.state();
        if let Some(node) = host.partition(pid)
            && st.map.primary_of(pid) == Some(host.id)
        {
            let from = Some(source);
            return Box::pin(node.dispatch(from, st.map.epoch, Caller::root(), body)).await;
        }
        let result = match st.map.partition_addr(pid) {
            Some(addr) => {
                host.counters
                    .sent_to_servers
                    .fetch_add(1, Ordering::Relaxed);
                let ends = myriad_proto::Endpoints {
                    target: pid,
                    source,
                };
                host.transport
                    .call(addr, st.map.epoch, ends, &Caller::root(), &body)
                    .await
            }
            None => Err(FsError::Unavailable(format!(
                "partition {pid} has no copy up"
            ))),
        };
        match result {
            Err(FsError::Unavailable(_))
                if failover_possible(&st.map, pid)
                    && tokio::time::Instant::now() + backoff < deadline =>
            {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_millis(250));
            }
            other => return other,
        }
    }
}

/// True if partition `pid` has more than one copy: when its server dies, another one takes
/// over, so waiting for that is worth it (with one copy, only the server's return helps).
pub(crate) fn failover_possible(map: &ClusterMap, pid: PartitionId) -> bool {
    map.partition(pid).is_some_and(|p| p.replicas.len() > 1)
}

/// How long a server-to-partition call is retried while its target cannot answer.
const NESTED_RETRY: std::time::Duration = std::time::Duration::from_secs(2);
