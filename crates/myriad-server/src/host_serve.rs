//! A server's answers to frames (`Handler`): routing each to the server itself (maps,
//! counters, statfs, the Raft group, leases), to a partition it serves, or to a copy it keeps.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use myriad_net::{Handler, Peer};
use myriad_placement::{NodeId, PartitionId};
use myriad_proto::auth::Credential;
use myriad_proto::limits;
use myriad_proto::{
    Caller, CounterSnapshot, Envelope, PeerKind, Request, RequestFrame, Response, ResponseFrame,
    StatFs, WireError,
};

use crate::cluster::MapState;
use crate::host::Host;
use crate::replication::wire::digest;
use crate::unpoisoned::read;
use myriad_proto::{
    AdminRequest, ClientRequest, PeerRequest, ReplicaRequest, ServerRequest, TrafficKind,
};

/// The longest a `LeasePoll` waits: well inside a client's request timeout.
const LEASE_POLL_MAX: std::time::Duration = std::time::Duration::from_secs(5);

impl Host {
    /// Requests addressed to the server rather than a partition.
    pub(crate) async fn dispatch_server(
        self: &Arc<Self>,
        peer: &Peer,
        caller: &Caller,
        epoch: u64,
        body: Request,
    ) -> Result<Response, WireError> {
        let from_server = matches!(peer.kind, PeerKind::Server { .. });
        let st = self.state();
        if !body.is_admin() && epoch > st.map.epoch {
            return Err(WireError::MapTooOld(st.map.epoch));
        }
        // The free-space rule partitions apply to their writes (fragments kept here).
        self.space.admit(&body)?;
        match body {
            Request::Client(Envelope::Alone(ClientRequest::Echo(p))) => Ok(Response::Echo(p)),
            Request::Server(ServerRequest::StatFs) => Ok(Response::StatFs(self.statfs())),
            Request::Server(ServerRequest::GetLatencies) => {
                Ok(Response::Latencies(self.request_metrics.client_latencies()))
            }
            Request::Server(ServerRequest::GetCounters) => {
                Ok(Response::Counters(self.counter_snapshot(&st)))
            }
            Request::Admin(AdminRequest::ResetCounters) => {
                self.reset_counters();
                Ok(Response::Unit)
            }
            Request::Server(ServerRequest::GetMap) => Ok(Response::Map(Box::new(st.map.clone()))),
            Request::Server(ServerRequest::LeasePoll {
                holder,
                released,
                wait_ms,
            }) => {
                for key in &released {
                    if let Some(t) = self.partition(key.partition).and_then(|p| p.leases()) {
                        t.release(&key.dir, holder);
                    }
                }
                let wait = std::time::Duration::from_millis(wait_ms).min(LEASE_POLL_MAX);
                Ok(Response::Recalls(self.recalls.poll(holder, wait).await))
            }
            Request::Server(ServerRequest::LeaseRenew { holder, keys }) => {
                let renewed = keys
                    .iter()
                    .map(|k| {
                        // Only while this server serves the partition: past its serving
                        // lease a new primary may open, counting on every client lease
                        // of the old one to end within one lease period.
                        self.serving(k.partition, 0)
                            .ok()
                            .and_then(|p| p.leases())
                            .is_some_and(|t| t.renew(&k.dir, holder))
                    })
                    .collect();
                Ok(Response::Renewed(renewed))
            }
            // From a server: a committed map it holds and we lack.
            Request::Server(ServerRequest::InstallMap(map)) if from_server => {
                map.validate()
                    .map_err(|e| WireError::InvalidArgument(e.to_string()))?;
                self.adopt_in_background(*map);
                Ok(Response::Unit)
            }
            // From an administrator (root): a change, committed through the Raft group. From
            // anyone else: a map the client learned from another server.
            Request::Server(ServerRequest::InstallMap(map)) => {
                self.install_map_from(peer, caller, *map).await
            }
            Request::Peer(PeerRequest::Raft { rpc, payload }) if from_server => {
                self.authority.serve_raft(rpc, payload).await
            }
            Request::Server(ServerRequest::ReadFragment {
                ino,
                chunk,
                index,
                generation,
                offset,
                len,
                cap,
            }) => self.read_fragment(&crate::host_fragments::FragmentRead {
                id: myriad_storage::FragmentId {
                    ino,
                    chunk,
                    index,
                    generation,
                },
                generation,
                offset,
                len,
                cap,
            }),
            Request::Peer(PeerRequest::PutFragments {
                ino,
                chunk,
                generation,
                fragments,
            }) if from_server => self.put_fragments(ino, chunk, generation, fragments).await,
            Request::Peer(PeerRequest::DropFragments {
                ino,
                chunk,
                generation,
            }) if from_server => self.drop_fragments(ino, chunk, generation),
            Request::Admin(AdminRequest::FsckFragments { after, limit }) => {
                if caller.uid != 0 {
                    return Err(WireError::PermissionDenied);
                }
                self.list_fragments(after, limit)
            }
            Request::Peer(PeerRequest::KeepsFragments) if from_server => {
                Ok(Response::Bool(self.keeps_fragments()?))
            }
            Request::Peer(PeerRequest::PartitionSeqs) if from_server => {
                Ok(Response::Seqs(self.partition_seqs()))
            }
            Request::Peer(PeerRequest::Lease) => match &peer.kind {
                PeerKind::Server { node_id } => {
                    Ok(self.authority.grant_lease(*node_id, epoch, peer.version))
                }
                PeerKind::Client => Err(WireError::PermissionDenied),
            },
            _ if from_server => Err(WireError::InvalidArgument(
                "request needs a target partition".into(),
            )),
            _ => Err(WireError::Redirect(Box::new(st.map.clone()))),
        }
    }

    /// `ResetCounters`: every counter this server keeps back to zero.
    fn reset_counters(&self) {
        self.counters.reset();
        for n in self.nodes() {
            n.replicas.stats.reset();
        }
        self.syncer.stats.syncs.store(0, Ordering::Relaxed);
        self.syncer
            .stats
            .synced_mutations
            .store(0, Ordering::Relaxed);
    }

    /// A map a client asks this server to install. From an administrator (root with the
    /// cluster secret): a change, committed through the Raft group. From anyone else: a
    /// map the client learned from another server (it is committed and on its way here),
    /// so only wait for it.
    async fn install_map_from(
        self: &Arc<Self>,
        peer: &Peer,
        caller: &Caller,
        map: myriad_placement::ClusterMap,
    ) -> Result<Response, WireError> {
        map.validate()
            .map_err(|e| WireError::InvalidArgument(e.to_string()))?;
        let epoch = map.epoch;
        // A cluster change needs root with the cluster secret (a client key's root is
        // no administrator: SECURITY.md).
        let admin = caller.uid == 0 && peer.credential == Credential::Cluster;
        let proposed = admin.then(|| map.clone());
        if admin
            && self
                .authority
                .committed_map()
                .is_none_or(|m| m.epoch < epoch)
        {
            self.authority.propose_map(map).await?;
        }
        // Answer once this server follows it (it arrives through the group).
        self.follow(epoch).await;
        // A change based on an older map loses to whatever was committed at its
        // epoch first (the leader's moves, say): the administrator hears so and
        // makes the change again on the newest map, rather than an answer that
        // says it landed.
        if let Some(proposed) = proposed {
            let lost = match self.authority.committed_map() {
                Some(m) if m.epoch == epoch => m != proposed,
                Some(m) => m.epoch < epoch,
                None => true,
            };
            if lost && self.state().map != proposed {
                return Err(WireError::MapTooOld(self.state().map.epoch));
            }
        }
        Ok(Response::Unit)
    }

    /// The last batch of every partition copy held here (`PeerRequest::PartitionSeqs`). A
    /// primary with a copy still joining (not waited for by writes) reports none: a move
    /// completes once its new copy reaches the batch its primary reports, which then
    /// covers every write acknowledged without that copy (docs/write-path.md, part 3).
    pub(crate) fn partition_seqs(&self) -> Vec<(PartitionId, Option<u64>)> {
        let mut out: Vec<(PartitionId, Option<u64>)> = self
            .nodes()
            .iter()
            .map(|n| {
                // Members first, then the batch: a write acknowledged while a copy was
                // joining was committed before it became a member, so at or below this.
                if !n.replicator.all_members() {
                    return (n.me, None);
                }
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
            batches_received: self.counters.batches_received.load(Ordering::Relaxed),
            syncs: self.syncer.stats.syncs.load(Ordering::Relaxed),
            synced_mutations: self.syncer.stats.synced_mutations.load(Ordering::Relaxed),
            serving: self.authority.lease_error().is_none(),
            raft_leader: self
                .authority
                .leader()
                .and_then(|l| u32::try_from(l).ok())
                .map_or(NodeId(0), NodeId),
            primaries: read(&self.partitions).len() as u64,
            backups: read(&self.backups).len() as u64,
            zone: st.map.zone_of(self.id).to_string(),
            zone_traffic: self.counters.zone_traffic(),
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
            snap.popular
                .extend(n.replicas.popular_paths(limits::POPULAR_LISTED_MAX));
        }
        snap.popular.sort();
        snap.popular.dedup();
        snap.popular.truncate(limits::POPULAR_LISTED_MAX);
        snap
    }

    /// The server's metrics, as one OpenMetrics text scrape (`--metrics`).
    pub(crate) fn metrics_text(&self) -> String {
        let state = self.state();
        let snap = self.counter_snapshot(&state);
        let leads_map = snap.raft_leader == self.id;
        let health = crate::health::health(&state.map, self.id, leads_map);
        let (behind, refusing) = {
            let parts = read(&self.partitions);
            // A copy still joining its stream, or one the map lists as lacking writes.
            let behind_in_map = |pid: &PartitionId| {
                state
                    .map
                    .partition(*pid)
                    .is_some_and(|p| p.replicas.iter().any(|&r| p.is_behind(r)))
            };
            (
                parts
                    .iter()
                    .filter(|(pid, n)| !n.replicator.all_members() || behind_in_map(pid))
                    .count() as u64,
                parts
                    .values()
                    .filter(|n| n.replicator.short_of_copies().is_some())
                    .count() as u64,
            )
        };
        let extras = crate::metrics::StateExtras {
            partitions_with_copies_behind: behind,
            splits: self.counters.splits.load(Ordering::Relaxed),
            partitions_refusing_changes: refusing,
            servers_marked_down: self.authority.marked_down(),
            health,
            copy_lag: self.nodes().iter().map(|n| n.replicator.copy_lag()).sum(),
            recalls: self.recalls.counts(),
            reserve_bytes: self.space.reserve_bytes(),
            quotas: crate::host_quotas::metric_parts(&state, &self.nodes()),
        };
        crate::metrics::render(&self.request_metrics, &snap, &self.statfs(), extras)
    }

    fn statfs(&self) -> StatFs {
        let tiers = self
            .tiers
            .as_deref()
            .zip(crate::tiers::tier_config(&self.config));
        crate::tiers::statfs(&self.data_dir, self.kv.as_ref(), tiers)
    }
}

impl Handler for Host {
    fn identity(&self) -> (NodeId, u64) {
        (self.id, self.state().map.epoch)
    }

    fn protocol_floor(&self) -> u16 {
        self.state().map.ext.protocol_floor
    }

    fn traffic(&self, peer: &Peer, kind: TrafficKind, bytes_in: usize, bytes_out: usize) {
        self.counters.traffic(&peer.zone, kind, bytes_in, bytes_out);
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
            let (op, started) = (frame.body.op_name(), std::time::Instant::now());
            if !frame.body.is_admin() {
                host.counters.count(frame.body.op_name(), from_server);
            }
            let batches = match &frame.body {
                Request::Replica(ReplicaRequest::Replicate { .. }) => 1,
                Request::Replica(ReplicaRequest::Bundle(items)) => items.len() as u64,
                _ => 0,
            };
            host.counters
                .batches_received
                .fetch_add(batches, Ordering::Relaxed);
            let result = match frame.ends.target {
                _ if matches!(frame.body, Request::Replica(ReplicaRequest::Bundle(_))) => {
                    match (peer.kind, frame.body) {
                        (
                            PeerKind::Server { node_id },
                            Request::Replica(ReplicaRequest::Bundle(items)),
                        ) => Ok(
                            crate::replication::bundle::receive(items, &host.syncer, |pid| {
                                host.backup_for(pid, node_id, frame.epoch)
                            })
                            .await,
                        ),
                        _ => Err(WireError::PermissionDenied),
                    }
                }
                PartitionId::SERVER => {
                    host.dispatch_server(&peer, &frame.caller, frame.epoch, frame.body)
                        .await
                }
                _ if is_server_request(&frame.body) => {
                    host.dispatch_server(&peer, &frame.caller, frame.epoch, frame.body)
                        .await
                }
                pid if matches!(frame.body, Request::Admin(AdminRequest::FsckReplica)) => {
                    if frame.caller.uid != 0 {
                        Err(WireError::PermissionDenied)
                    } else if let Some(node) = host.partition(pid) {
                        replica_digest(&node.committed)
                    } else if let Some(b) = host.backup(pid) {
                        replica_digest(b.store())
                    } else {
                        Err(WireError::NotFound)
                    }
                }
                pid if matches!(frame.body, Request::Peer(PeerRequest::LendReads)) => {
                    host.lend_reads(pid, &peer, frame.epoch)
                }
                // A read a copy kept here may answer (nearest-copy reads, docs/zones.md).
                pid if crate::host_copy_reads::copy_readable(&frame.body)
                    && host.partition(pid).is_none()
                    && host.backup(pid).is_some() =>
                {
                    host.read_at_copy(pid, frame.epoch, &frame.caller, frame.body)
                        .await
                }
                pid if matches!(frame.body, Request::Replica(_)) => match peer.kind {
                    PeerKind::Server { node_id } => {
                        match host.backup_for(pid, node_id, frame.epoch) {
                            Ok(b) => b.handle(&host.syncer, frame.body).await,
                            Err(e) => Err(e),
                        }
                    }
                    PeerKind::Client => Err(WireError::PermissionDenied),
                },
                pid => {
                    host.wait_for_handover(pid).await;
                    match host.serving(pid, frame.epoch) {
                        // A partition's request from a server that is not its primary under
                        // this map (a deposed primary's task): refused with the map, which
                        // deposes it there.
                        Ok(_)
                            if frame.ends.source != PartitionId::SERVER
                                && frame.epoch <= host.state().map.epoch
                                && matches!(peer.kind, PeerKind::Server { node_id }
                                    if host.state().map.primary_of(frame.ends.source) != Some(node_id)) =>
                        {
                            Err(WireError::Redirect(Box::new(host.state().map.clone())))
                        }
                        Ok(node) => {
                            let from = from_server.then_some(frame.ends.source);
                            node.dispatch(from, frame.epoch, frame.caller, frame.body)
                                .await
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            host.request_metrics
                .observe(op, from_server, &result, started.elapsed());
            ResponseFrame { id, result }
        })
    }
}

/// Requests about the server as a whole, answered by it whatever partition they name.
fn is_server_request(body: &Request) -> bool {
    matches!(
        body,
        Request::Server(_)
            | Request::Admin(AdminRequest::ResetCounters | AdminRequest::FsckFragments { .. })
    )
}

/// Corrupt blocks one copy lists in its fsck digest (the rest are found once these are fixed).
const CORRUPT_LISTED_MAX: usize = 64;

fn replica_digest(store: &myriad_storage::Store) -> Result<Response, WireError> {
    let (seq, keys, digest) = digest(store)?;
    let corrupt = store
        .corrupt_blocks(CORRUPT_LISTED_MAX)
        .map_err(crate::state::mutation::storage_err)?;
    let corrupt_records = store
        .corrupt_records(CORRUPT_LISTED_MAX)
        .map_err(crate::state::mutation::storage_err)?
        .into_iter()
        .map(|(space, key)| (space.code(), serde_bytes::ByteBuf::from(key)))
        .collect();
    Ok(Response::ReplicaDigest {
        seq,
        keys,
        digest,
        corrupt,
        corrupt_records,
    })
}
