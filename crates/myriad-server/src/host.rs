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
use std::sync::{Arc, Mutex, RwLock};

use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::WireError;
use myriad_storage::Kv;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::cluster::MapState;
use crate::commit::{Applier, Runner, Syncer};
use crate::config::ServerConfig;
use crate::counters::Counters;
use crate::partition::core::Partition;
use crate::replication::copy_side::Backup;
use crate::replication::peers::Peers;
use crate::replication::primary::Replicator;
use crate::replication::wire::drop_copy;
use crate::seams::Authority;
use crate::state::mutation::{IdAlloc, Layout, Mutation};
use crate::unpoisoned::read;
use myriad_net::Transport;

pub struct Host {
    /// This server's id in the map.
    pub(crate) id: NodeId,
    /// The address the map gave this server when it started. A later map listing `id` at
    /// another address gave the id to a new server after this one left (ids of servers
    /// that left are reused): this server then adopts no more maps (`adopt_map`).
    pub(crate) addr: Option<String>,
    /// The map this server serves under; membership reads it through a receiver.
    pub(crate) map: watch::Sender<Arc<MapState>>,
    pub(crate) map_path: Option<PathBuf>,
    pub(crate) data_dir: PathBuf,
    /// How it reaches other servers (the connection pool; the simulated network).
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) counters: Counters,
    /// Requests counted and timed by operation and outcome (`--metrics`).
    pub(crate) request_metrics: crate::metrics::RequestMetrics,
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
    /// Batches to one peer share frames (replication/bundle.rs).
    pub(crate) bundler: crate::replication::bundle::Bundler,
    /// Directory touches of all partitions here, sent together per target partition.
    pub(crate) touch_sender: Arc<crate::partition::touch_sender::TouchSender>,
    /// Directory-lease recalls on their way to clients (recalls.rs).
    pub(crate) recalls: Arc<crate::recalls::Recalls>,
    /// Each partition's directory leases, kept across the partition's reopenings here (a
    /// reopened partition still owes the leases it granted a recall).
    pub(crate) lease_tables: Mutex<BTreeMap<PartitionId, Arc<crate::commit::leases::LeaseTable>>>,
    /// Loans of reads from primaries, for reads answered by copies kept here.
    pub(crate) loans: crate::replication::loans::Loans,
    /// The two tiers behind `kv`, when the server has a fast tier (tiers.rs).
    pub(crate) tiers: Option<Arc<myriad_storage::TieredKv>>,
    /// The last map reconciled had quotas: the next one changes them or keeps them, and
    /// either way its partitions are told (`host_quotas.rs`).
    pub(crate) quotas_seen: std::sync::atomic::AtomicBool,
}

pub(crate) enum OpenError {
    Store(myriad_storage::StorageError),
    Io(std::io::Error),
    Fs(WireError),
}

impl OpenError {
    pub(crate) fn into_fs(self) -> WireError {
        match self {
            OpenError::Fs(e) => e,
            OpenError::Store(e) => WireError::Io(e.to_string()),
            OpenError::Io(e) => WireError::Io(e.to_string()),
        }
    }
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
    /// The two tiers behind `kv`, when the server has a fast tier (tiers.rs).
    pub tiers: Option<Arc<myriad_storage::TieredKv>>,
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
            tiers,
        } = parts;
        Arc::new_cyclic(|me| Host {
            me: me.clone(),
            id: config.node_id,
            addr: config.map.node(config.node_id).map(|n| n.addr.clone()),
            map: map_news,
            map_path: config.map_path.clone(),
            data_dir: config.data_dir.clone(),
            transport,
            counters: Counters::default(),
            request_metrics: crate::metrics::RequestMetrics::new(syncer.stats.batch_sizes.clone()),
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
            space: crate::space::DiskSpace::new(
                crate::tiers::admitting_dirs(&config),
                config.disk_reserve_bytes,
            ),
            tiers,
            quotas_seen: Default::default(),
            bundler: crate::replication::bundle::Bundler::default(),
            touch_sender: Arc::default(),
            recalls: Arc::default(),
            lease_tables: Mutex::new(BTreeMap::new()),
            loans: crate::replication::loans::Loans::default(),
            config,
        })
    }

    pub(crate) fn state(&self) -> Arc<MapState> {
        self.map.borrow().clone()
    }

    pub(crate) fn partition(&self, pid: PartitionId) -> Option<Arc<Partition>> {
        read(&self.partitions).get(&pid).cloned()
    }

    /// The answer for a request to partition `pid` that this server does not serve: `Busy`
    /// if the map makes it the primary (it is still being opened), else `Redirect`.
    fn not_here(&self, pid: PartitionId) -> WireError {
        let st = self.state();
        if st.map.primary_of(pid) == Some(self.id) {
            WireError::Busy
        } else {
            WireError::Redirect(Box::new(st.map.clone()))
        }
    }

    /// The partition `pid` if this server may serve it now: it holds a lease and its map
    /// makes it the primary (a primary demoted by a newer map stops at once, before its
    /// handler is stopped).
    pub(crate) fn serving(
        &self,
        pid: PartitionId,
        epoch: u64,
    ) -> Result<Arc<Partition>, WireError> {
        let st = self.state();
        let node = match self.partition(pid) {
            // Only within an unbroken run as primary up to this map (else it is being
            // opened again: `not_here` answers Busy).
            Some(node)
                if st.map.primary_of(pid) == Some(self.id)
                    && node.primary_through() == st.map.epoch =>
            {
                node
            }
            // The sender knows a newer map: it sends it (or waits for us to follow it).
            _ if epoch > st.map.epoch => return Err(WireError::MapTooOld(st.map.epoch)),
            _ => return Err(self.not_here(pid)),
        };
        match self.authority.lease_error() {
            Some(e) => Err(e),
            None => Ok(node),
        }
    }

    /// The directory leases of partition `pid` here (made on its first opening).
    fn lease_table(&self, pid: PartitionId) -> Arc<crate::commit::leases::LeaseTable> {
        let mut g = match self.lease_tables.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.entry(pid)
            .or_insert_with(|| {
                Arc::new(crate::commit::leases::LeaseTable::new(
                    pid,
                    self.recalls.clone(),
                ))
            })
            .clone()
    }

    /// Holds a request for a partition handed over by a live primary until that one can no
    /// longer be serving it (see `adopt_map`): the request is only delayed, never refused.
    pub(crate) async fn wait_for_handover(&self, pid: PartitionId) {
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
    pub(crate) fn backup_for(
        &self,
        pid: PartitionId,
        sender: NodeId,
        epoch: u64,
    ) -> Result<Arc<Backup>, WireError> {
        let st = self.state();
        if epoch > st.map.epoch {
            return Err(WireError::MapTooOld(st.map.epoch));
        }
        if epoch < st.map.epoch || st.map.primary_of(pid) != Some(sender) {
            return Err(WireError::Redirect(Box::new(st.map.clone())));
        }
        self.backup(pid).ok_or_else(|| self.not_here(pid))
    }

    /// Waits (at most the time a proposal may take) until this server follows map `epoch`,
    /// which comes through the cluster-map group.
    pub(crate) async fn follow(&self, epoch: u64) {
        let deadline = tokio::time::Instant::now() + crate::membership::PROPOSE_TIMEOUT;
        while self.state().map.epoch < epoch && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(crate::backoff::MAP_FOLLOW_POLL).await;
        }
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
        // Deposed, not only stopped: their replication streams end too (a stopped server's
        // streams must not go on sending).
        for n in nodes {
            n.depose();
        }
    }

    /// Stops serving (`clear`), then hands every partition over to its copies by marking
    /// this server down (`step_down::hand_over`): in that order, so a copy made primary
    /// never serves beside this server. For a planned stop and a failed disk.
    pub(crate) async fn step_down(&self, why: crate::step_down::Why) -> bool {
        self.clear();
        let known = self.state().map.clone();
        crate::step_down::hand_over(&*self.authority, self.id, &known, why).await
    }

    /// Adopts `map` if it is newer (persisting it to the map file first), then starts and
    /// stops partitions to match it.
    pub(crate) async fn install_map(self: &Arc<Self>, map: ClusterMap) -> Result<(), WireError> {
        if self.adopt_map(map)? {
            self.reconcile().await.map_err(OpenError::into_fs)?;
        }
        Ok(())
    }

    /// True if `map` was newer and is now the current map.
    fn adopt_map(&self, map: ClusterMap) -> Result<bool, WireError> {
        map.validate()
            .map_err(|e| WireError::InvalidArgument(e.to_string()))?;
        if let Some((n, mine)) = map
            .node(self.id)
            .zip(self.addr.as_deref())
            .filter(|(n, mine)| n.addr != *mine)
        {
            // Not this server's map any more: it must not take up the partitions the map
            // gives the new server under this id.
            tracing::error!(
                server = %self.id,
                epoch = map.epoch,
                given_to = %n.addr,
                mine = %mine,
                "the cluster map gives this server's id to another server: this one left \
                 the cluster, serves nothing and takes no more maps; stop it"
            );
            return Err(WireError::InvalidArgument(format!(
                "map epoch {} gives server id {} to {}, not to this server ({})",
                map.epoch, self.id, n.addr, mine
            )));
        }
        if map.node(self.id).is_none() {
            // Maps are committed by the Raft group: one without this server means it was
            // removed (remove-node). It then holds and serves nothing, and a restart with
            // this map file refuses to start with a clear message.
            tracing::warn!(
                server = %self.id,
                epoch = map.epoch,
                "this server is not in the cluster map any more: it serves nothing"
            );
        }
        // The whole adoption under the map's own lock: two adoptions never interleave.
        let mut result = Ok(false);
        self.map.send_if_modified(|current| {
            result = self.adopt_over(current, map);
            matches!(result, Ok(true))
        });
        result
    }

    /// `adopt_map` with the current map locked (`guard`): must not read `self.map`.
    fn adopt_over(&self, guard: &mut Arc<MapState>, map: ClusterMap) -> Result<bool, WireError> {
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
        // so this one waits out a lease before serving them (no two primaries at once),
        // and then the directory leases that one granted until its end (docs/fuse.md
        // "Directory leases": a lease lives in its primary's memory only).
        let until = tokio::time::Instant::now()
            + crate::membership::LEASE
            + crate::commit::leases::LEASE_PERIOD;
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
        // Primary terms (docs/replication.md): a partition served here stays served only
        // through a map that directly follows the last one it was served under and keeps
        // this server its primary. Otherwise another server may have been primary in
        // between, so this copy may lack acknowledged batches: it stops at once, and the
        // reconcile that follows opens it again (catching up) if it is still ours.
        let old_epoch = guard.map.epoch;
        for node in read(&self.partitions).values() {
            if node.primary_through() == old_epoch
                && map.epoch == old_epoch + 1
                && map.primary_of(node.me) == Some(self.id)
            {
                node.extend_primary_through(map.epoch);
            } else {
                node.depose();
            }
        }
        if let Some(p) = &self.map_path {
            // Servers of a local cluster share one map file: a temporary name of our own.
            let tmp = p.with_extension(format!("tmp.{}", self.id));
            std::fs::write(&tmp, map.to_json())
                .and_then(|()| std::fs::rename(&tmp, p))
                .map_err(|e| WireError::Io(e.to_string()))?;
        }
        tracing::info!(
            server = %self.id,
            epoch = map.epoch,
            "installed newer cluster map"
        );
        *guard = Arc::new(MapState::new(map));
        Ok(true)
    }

    /// True if the map makes this server the primary of a partition it does not serve yet
    /// (its opening failed, or a reconcile is under way).
    pub(crate) fn missing_partitions(&self) -> bool {
        let st = self.state();
        let have = read(&self.partitions);
        st.map.primaries_of(self.id).iter().any(|p| {
            have.get(p)
                .is_none_or(|node| node.primary_through() != st.map.epoch)
        })
    }

    /// Serves the partitions the current map makes this server the primary of, and stops
    /// serving the others (and those whose run as primary broke: `adopt_over`). Serialized,
    /// so two map installs cannot open a partition twice. A partition opened while a newer
    /// map arrived is not kept: it caught up under a map that is no longer current, so the
    /// round starts over under the new one.
    pub(crate) async fn reconcile(self: &Arc<Self>) -> Result<(), OpenError> {
        let _one = self.reconciling.lock().await;
        loop {
            let st = self.state();
            let epoch = st.map.epoch;
            let want: BTreeSet<PartitionId> = st.map.primaries_of(self.id).into_iter().collect();
            let stale: Vec<PartitionId> = read(&self.partitions)
                .values()
                .filter(|n| !want.contains(&n.me) || n.primary_through() != epoch)
                .map(|n| n.me)
                .collect();
            for pid in stale {
                let gone = match self.partitions.write() {
                    Ok(mut p) => p.remove(&pid),
                    Err(p) => p.into_inner().remove(&pid),
                };
                if let Some(node) = gone {
                    tracing::info!(
                        server = %self.id,
                        partition = %pid,
                        epoch,
                        primary_through = node.primary_through(),
                        "stopped serving (no longer primary, or not without a break)"
                    );
                    node.depose();
                    // Nothing more may reach the store before a backup copy (or this
                    // partition opened anew) opens on it.
                    node.applier.retire().await;
                }
            }
            let have: BTreeSet<PartitionId> = read(&self.partitions).keys().copied().collect();
            for pid in &have {
                if let Some(node) = self.partition(*pid) {
                    node.replicator.set_backups(
                        &st.map.backups_of(*pid),
                        &st.map.behind_of(*pid),
                        crate::cluster::failover_possible(&st.map, *pid),
                        crate::cluster::other_copies_needed(&st.map, *pid, self.config.min_copies),
                    );
                }
            }
            self.reconcile_backups(&st.map)?;
            // Opened side by side: a copy that does not answer costs one request timeout,
            // not one per partition.
            let opening: Vec<PartitionId> = want.difference(&have).copied().collect();
            let opened = futures::future::join_all(opening.iter().map(|&pid| {
                tracing::debug!(
                    server = %self.id,
                    partition = %pid,
                    epoch,
                    "opening partition"
                );
                self.open_partition(pid, epoch)
            }))
            .await;
            if self.state().map.epoch != epoch {
                for node in opened.into_iter().flatten() {
                    node.depose();
                    node.applier.retire().await;
                }
                continue;
            }
            let mut started = Vec::new();
            for (pid, result) in opening.into_iter().zip(opened) {
                let node = match result {
                    Ok(node) => node,
                    // Catching up from the other copies failed (they are changing too):
                    // the partition answers Busy until the next reconcile (the reopener
                    // task retries).
                    Err(OpenError::Fs(e)) => {
                        tracing::warn!(partition = %pid, "cannot open the partition yet: {e}");
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if let Ok(mut p) = self.partitions.write() {
                    p.insert(pid, node.clone());
                }
                // One line per partition this server starts serving: with the failover and
                // catch-up lines of the map's leader, the log tells an incident's story.
                tracing::info!(
                    server = %self.id,
                    partition = %pid,
                    epoch,
                    backups = ?self.state().map.backups_of(pid),
                    "serving as primary"
                );
                started.push(node);
            }
            // Quotas are counted by every partition served, from its opening on; a map
            // that changes them reaches the partitions served before it too.
            let quotas_changed = self.quotas_seen.swap(
                !st.map.ext.quotas.is_empty(),
                std::sync::atomic::Ordering::Relaxed,
            ) || !st.map.ext.quotas.is_empty();
            for node in read(&self.partitions).values() {
                if quotas_changed || started.iter().any(|s| s.me == node.me) {
                    crate::host_quotas::sync(node, &st.map);
                }
            }
            self.start_opened(started);
            return Ok(());
        }
    }

    /// Starts the tasks of partitions just opened (and creates the root directory where it
    /// lives, once).
    fn start_opened(self: &Arc<Self>, started: Vec<Arc<Partition>>) {
        for node in started {
            if node.state().ring.owner_of_dir("/") == node.me {
                // Not awaited here: the write waits for the backups, which may be down
                // until a newer map drops them, and that map needs this reconcile to end.
                let init = node.clone();
                let (uid, gid) = (self.config.root_uid, self.config.root_gid);
                let clock = self.clock;
                let task = tokio::spawn(async move {
                    let mut backoff = crate::backoff::ROOT_INIT;
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
                                backoff.wait().await;
                            }
                        }
                    }
                });
                if let Ok(mut t) = node.tasks.lock() {
                    t.push(task);
                }
            }
            // Kept fsstats counted once where a partition has none yet (its first opening
            // with them); from then on every change keeps them (docs/redundancy.md).
            let count = node.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = count.applier.run(Mutation::RebuildStats).await {
                    tracing::warn!(partition = %count.me, "counting the partition's files for fsstats failed: {e}");
                }
            });
            if let Ok(mut t) = node.tasks.lock() {
                t.push(task);
            }
            node.start_tasks();
        }
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
            .map_err(|_| OpenError::Fs(WireError::Io("backup table poisoned".into())))?;
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
                        partition = %p.id,
                        epoch = map.epoch,
                        "dropped this server's copy (the map moved it elsewhere)"
                    ),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(partition = %p.id, "dropping a moved copy failed: {e}")
                    }
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

    /// Opens partition `pid` as its primary under the map of `epoch`: catches up from its
    /// copies first.
    async fn open_partition(
        self: &Arc<Self>,
        pid: PartitionId,
        epoch: u64,
    ) -> Result<Arc<Partition>, OpenError> {
        let staged =
            crate::commit::StagedStore::open(self.kv.clone(), pid).map_err(OpenError::Store)?;
        let store = staged.store.clone();
        let committed = staged.committed.clone();
        let fresh = store.is_fresh();
        let backups = self.state().map.backups_of(pid);
        let peers: Arc<dyn Peers> = self.clone();
        crate::replication::catchup::catch_up_from_backups(&peers, pid, &store, &backups)
            .await
            .map_err(OpenError::Fs)?;
        let ids = IdAlloc::load(&store, pid).map_err(OpenError::Store)?;
        let layout = Layout {
            chunk_size_bytes: self.config.map.chunk_size_bytes,
            kept_stats: self.config.kept_stats,
        };
        let (changed, _) = watch::channel(0u64);
        let start_seq = store
            .meta_u64(crate::commit::SEQ_KEY)
            .map_err(OpenError::Store)?
            .unwrap_or(0);
        // Copies are made from what is committed (numbered), never from the applier's stage:
        // a staged change is in no batch yet, and may never be (a deposed partition drops it).
        let replicator = Arc::new(Replicator::new(self.clone(), pid, &committed, start_seq));
        let st = self.state();
        replicator.set_backups(
            &backups,
            &st.map.behind_of(pid),
            crate::cluster::failover_possible(&st.map, pid),
            crate::cluster::other_copies_needed(&st.map, pid, self.config.min_copies),
        );
        let applier = Applier::start(
            staged,
            ids,
            layout,
            changed.clone(),
            &self.syncer,
            (start_seq, epoch),
            replicator.clone(),
            self.runner,
        )
        .map_err(OpenError::Io)?
        .with_leases(self.lease_table(pid))
        .with_auto_indexes(self.clone(), pid);
        let incarnation =
            crate::partition::core::incarnation(self.id, pid, epoch, self.clock.now_ns());
        let locks_before =
            crate::state::lock_marks::granted_before(&store).map_err(OpenError::Store)?;
        Ok(Arc::new(Partition {
            me: pid,
            env: self.clone(),
            store,
            committed,
            applier,
            replicator,
            changed,
            live: Mutex::new(BTreeSet::new()),
            replicas: crate::partition::ancestor_replicas::Replicas::new(
                self.config.replication.clone(),
                !fresh,
            ),
            trash_dirs: crate::partition::trash_dirs::TrashDirs::default(),
            confirmed_dirs: crate::partition::confirmed_dirs::ConfirmedDirs::default(),
            read_mostly: crate::partition::read_mostly::ReadMostly::new(
                self.config.replication.window,
            ),
            shard_maps: myriad_placement::ShardCache::default(),
            splits: crate::partition::split_state::SplitState::default(),
            dir_touches: crate::partition::pending_touches::DirTouches::default(),
            touch_sender: self.touch_sender.clone(),
            changes: crate::partition::changes::ChangesInFlight::default(),
            tasks: Mutex::new(Vec::new()),
            primary_through: std::sync::atomic::AtomicU64::new(epoch),
            incarnation,
            file_locks: crate::partition::lock_table::LockTable::new(
                incarnation,
                locks_before,
                tokio::time::Instant::now(),
            ),
            lock_marked: tokio::sync::Mutex::new(false),
            open_files: crate::partition::open_files::OpenFiles::new(tokio::time::Instant::now()),
            coding: crate::partition::coding_state::CodingState::new(),
            resend_guard: crate::partition::resend_guard::ResendGuard::new(
                tokio::time::Instant::now(),
            ),
            deposed: std::sync::atomic::AtomicBool::new(false),
            quota_homes: Default::default(),
            removal_claims: Default::default(),
        }))
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
                while let Some(map) = maps.recv().await {
                    // Every committed map adopted in order (a partition keeps serving only
                    // through maps that directly follow each other: `adopt_over`), then one
                    // reconcile for all that queued up.
                    let mut newer = host.adopt_map(map);
                    while let Ok(next) = maps.try_recv() {
                        newer = match (newer, host.adopt_map(next)) {
                            (Err(e), _) | (_, Err(e)) => Err(e),
                            (Ok(a), Ok(b)) => Ok(a || b),
                        };
                    }
                    let done = match newer {
                        Ok(true) => host.reconcile().await.map_err(OpenError::into_fs),
                        Ok(false) => Ok(()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = done {
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
        let sweeper = spawn_leaving_sweeper(Arc::downgrade(self), || false);
        vec![follower, reopener, sweeper]
    }
}

/// While this server is leaving, drops every 2 s the fragments rebuilt elsewhere
/// (`sweep_leaving_fragments`); ends with the server (`host` gone, or `stopped`).
pub(crate) fn spawn_leaving_sweeper(
    host: std::sync::Weak<Host>,
    stopped: impl Fn() -> bool + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(LEAVING_SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(host) = host.upgrade().filter(|_| !stopped()) else {
                return;
            };
            let leaving = host
                .state()
                .map
                .node(host.id)
                .is_some_and(|n| n.state == myriad_placement::NodeState::Leaving);
            if !leaving {
                continue;
            }
            match host.sweep_leaving_fragments().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(n, "leaving: fragments rebuilt elsewhere dropped here"),
                Err(e) => tracing::debug!("leaving: fragment sweep: {e}"),
            }
        }
    })
}

/// How often a leaving server drops the fragments rebuilt elsewhere (it leaves the map
/// once it keeps none).
const LEAVING_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

#[cfg(test)]
mod tests;
