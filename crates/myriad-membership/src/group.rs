//! The running Raft group: openraft over a `Transport` the server provides (its connection
//! pool), started on the server's store, with the operations the server needs: serve a peer's
//! RPC, bootstrap a new cluster, propose a map (forwarded to the leader), and tell whether
//! this server leads with a fresh quorum (the basis of serving leases, docs/replication.md).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use myriad_placement::ClusterMap;
use myriad_proto::RaftRpc;
use myriad_storage::Kv;
use openraft::error::{NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, ChangeMembers, Raft, ServerState};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{LogStore, MapCommand, MapStateMachine, NodeId, TypeConfig};

/// At most this many voters; further servers follow the group as learners.
pub const VOTERS_MAX: usize = 5;
/// Leader heartbeats and election timeouts. A follower that heard the leader stands for
/// election after `LEADER_LEASE` + 300..600 ms of silence (0.9-1.2 s): the election is
/// part of the failover when the leader itself dies (docs/write-path.md, part 6). A
/// healthy leader deposed by a loaded machine costs no failover: the new leader hears the
/// live servers' lease requests within a renewal period.
const HEARTBEAT_MS: u64 = 150;
const ELECTION_MIN_MS: u64 = 300;
const ELECTION_MAX_MS: u64 = 600;
/// openraft's leader lease (its `election_timeout_max`): a voter that heard a leader within
/// this refuses to vote for anyone else. So when a new leader is elected, every server of
/// its electing majority had not heard the old leader for this long, and the old leader got
/// no quorum acknowledgement after `election - LEADER_LEASE` (any quorum of it includes one
/// of them, and acknowledgements are timed when sent): the membership layer credits this
/// to the old leader's lease grants (`myriad_server::membership::detect`).
pub const LEADER_LEASE: Duration = Duration::from_millis(ELECTION_MAX_MS);
/// A new server waits this long for an existing leader to contact it before it bootstraps
/// a group (only the lowest id does; see `bootstrap`).
const BOOTSTRAP_WAIT: Duration = Duration::from_millis(750);

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How Raft messages reach other servers: the server's connection pool.
pub trait Transport: Send + Sync + 'static {
    /// Sends `payload` as a `rpc` to the server at `addr`; the answer's bytes, or why not.
    fn call(
        &self,
        addr: String,
        rpc: RaftRpc,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<Result<Vec<u8>, String>>;
}

/// Called with every map the state machine applies (on every server, leader or not).
pub type OnMap = Arc<dyn Fn(ClusterMap) + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("no Raft leader is known (no majority of servers reachable?)")]
    NoLeader,
    #[error("the map change was not committed within {0:?} (no majority reachable?)")]
    Timeout(Duration),
    #[error("{0}")]
    Failed(String),
}

#[derive(Clone)]
pub struct Group {
    id: NodeId,
    raft: Raft<TypeConfig>,
    sm: MapStateMachine,
    transport: Arc<dyn Transport>,
}

#[derive(Debug)]
struct Msg(String);
impl std::fmt::Display for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Msg {}

impl Group {
    /// Starts this server's Raft node on `kv` (its `RaftLog`/`RaftState` spaces).
    pub async fn start(
        id: NodeId,
        kv: Arc<dyn Kv>,
        transport: Arc<dyn Transport>,
        on_map: OnMap,
    ) -> Result<Group, String> {
        let config = openraft::Config {
            cluster_name: "myriad".into(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_MIN_MS,
            election_timeout_max: ELECTION_MAX_MS,
            // The map is small: a snapshot every 500 entries keeps the log short.
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(500),
            max_in_snapshot_log_to_keep: 100,
            ..Default::default()
        }
        .validate()
        .map_err(|e| format!("raft config: {e}"))?;
        let sm = MapStateMachine::new(kv.clone()).with_on_map(on_map);
        let network = Network {
            transport: transport.clone(),
        };
        let raft = Raft::new(id, Arc::new(config), network, LogStore::new(kv), sm.clone())
            .await
            .map_err(|e| format!("raft start: {e}"))?;
        Ok(Group {
            id,
            raft,
            sm,
            transport,
        })
    }

    /// The map as last applied here (`None` before the group committed one).
    #[must_use]
    pub fn map(&self) -> Option<ClusterMap> {
        self.sm.map().ok().flatten()
    }

    /// On a new cluster: the server with the lowest id initializes the group with up to
    /// `VOTERS_MAX` servers of `map` as voters, unless a leader contacts it first (it
    /// restarted without its disk into a running cluster). Initializing on one server only
    /// matters: a second initialize could depose the first leader (openraft notes).
    pub async fn bootstrap(&self, map: &ClusterMap) -> Result<(), String> {
        let lowest = map.nodes.iter().map(|n| n.id).min();
        if lowest.map(u64::from) != Some(self.id) {
            return Ok(());
        }
        if self
            .raft
            .is_initialized()
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(());
        }
        tokio::time::sleep(BOOTSTRAP_WAIT).await;
        if self.leader().is_some()
            || self
                .raft
                .is_initialized()
                .await
                .map_err(|e| e.to_string())?
        {
            return Ok(());
        }
        let mut ids: Vec<_> = map.nodes.iter().collect();
        ids.sort_by_key(|n| n.id);
        let voters: BTreeMap<NodeId, BasicNode> = ids
            .iter()
            .take(VOTERS_MAX)
            .map(|n| (NodeId::from(n.id), BasicNode::new(&n.addr)))
            .collect();
        tracing::info!(voters = ?voters.keys().collect::<Vec<_>>(), "initializing the cluster-map Raft group");
        match self.raft.initialize(voters).await {
            Ok(()) => Ok(()),
            // Someone else's log reached us meanwhile: the group exists.
            Err(e) if e.api_error().is_some() => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The leader's id, as this server knows it.
    #[must_use]
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// True if this server is the leader and a quorum acknowledged it within `fresh`: no
    /// other leader can have been elected before that acknowledgement (docs/replication.md,
    /// leases).
    #[must_use]
    pub fn leads_with_quorum(&self, fresh: Duration) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader
            && m.current_leader == Some(self.id)
            && m.millis_since_quorum_ack
                .is_some_and(|ms| u128::from(ms) <= fresh.as_millis())
    }

    #[must_use]
    pub fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.id)
    }

    /// Leader only: makes the group's members the servers of `map`: adds new ones (as
    /// learners, promoted to voters while there are fewer than `VOTERS_MAX`), removes those
    /// the map dropped (a learner is promoted first if a voter leaves). One change per call.
    pub async fn sync_members(&self, map: &ClusterMap, timeout: Duration) {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let known: BTreeSet<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let wanted: BTreeSet<NodeId> = map.nodes.iter().map(|n| NodeId::from(n.id)).collect();
        let learners: Vec<NodeId> = known
            .difference(&voters)
            .copied()
            .filter(|id| wanted.contains(id))
            .collect();
        let change = async {
            if let Some(n) = map
                .nodes
                .iter()
                .find(|n| !known.contains(&NodeId::from(n.id)))
            {
                tracing::info!(server = %n.id, "adding server to the Raft group");
                return self
                    .raft
                    .add_learner(NodeId::from(n.id), BasicNode::new(&n.addr), true)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
            }
            let (what, id, members) =
                if let (true, Some(&l)) = (voters.len() < VOTERS_MAX, learners.first()) {
                    (
                        "making server a Raft voter",
                        l,
                        ChangeMembers::AddVoterIds(BTreeSet::from([l])),
                    )
                } else if let Some(&gone) = voters.difference(&wanted).next() {
                    let ids = BTreeSet::from([gone]);
                    (
                        "removing server from the Raft voters",
                        gone,
                        ChangeMembers::RemoveVoters(ids),
                    )
                } else if let Some(&gone) = known.difference(&wanted).next() {
                    let ids = BTreeSet::from([gone]);
                    (
                        "removing server from the Raft group",
                        gone,
                        ChangeMembers::RemoveNodes(ids),
                    )
                } else {
                    return Ok(());
                };
            tracing::info!(server = id, "{what}");
            self.raft
                .change_membership(members, true)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(timeout, change).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("changing the Raft group's members failed: {e}"),
            Err(_) => tracing::warn!("changing the Raft group's members took over {timeout:?}"),
        }
    }

    /// Commits `map` through the group (forwarded to the leader if this server is not it);
    /// applied only if its epoch is above the current one. Returns the epoch after it.
    pub async fn propose(&self, map: ClusterMap, timeout: Duration) -> Result<u64, ProposeError> {
        let write = async {
            match self
                .raft
                .client_write(MapCommand::Install(map.clone()))
                .await
            {
                Ok(r) => Ok(r.data.epoch),
                Err(e) => match e.forward_to_leader() {
                    Some(f) => match &f.leader_node {
                        Some(node) => {
                            let payload = postcard::to_allocvec(&map)
                                .map_err(|e| ProposeError::Failed(e.to_string()))?;
                            let bytes = self
                                .transport
                                .call(node.addr.clone(), RaftRpc::Propose, payload, timeout)
                                .await
                                .map_err(ProposeError::Failed)?;
                            let r: Result<u64, String> = postcard::from_bytes(&bytes)
                                .map_err(|e| ProposeError::Failed(e.to_string()))?;
                            r.map_err(ProposeError::Failed)
                        }
                        None => Err(ProposeError::NoLeader),
                    },
                    None => Err(ProposeError::Failed(e.to_string())),
                },
            }
        };
        tokio::time::timeout(timeout, write)
            .await
            .map_err(|_| ProposeError::Timeout(timeout))?
    }

    /// Serves a peer's Raft message; the encoded answer.
    pub async fn serve(&self, rpc: RaftRpc, payload: &[u8]) -> Result<Vec<u8>, String> {
        fn de<T: DeserializeOwned>(b: &[u8]) -> Result<T, String> {
            postcard::from_bytes(b).map_err(|e| format!("bad raft message: {e}"))
        }
        fn en<T: Serialize>(v: &T) -> Result<Vec<u8>, String> {
            postcard::to_allocvec(v).map_err(|e| e.to_string())
        }
        match rpc {
            RaftRpc::AppendEntries => en(&self.raft.append_entries(de(payload)?).await),
            RaftRpc::Vote => en(&self.raft.vote(de(payload)?).await),
            RaftRpc::InstallSnapshot => en(&self.raft.install_snapshot(de(payload)?).await),
            RaftRpc::Propose => {
                let map: ClusterMap = de(payload)?;
                let r = match self.raft.client_write(MapCommand::Install(map)).await {
                    Ok(r) => Ok(r.data.epoch),
                    Err(e) => Err(e.to_string()),
                };
                en(&r)
            }
        }
    }

    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

struct Network {
    transport: Arc<dyn Transport>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: node.addr.clone(),
            transport: self.transport.clone(),
        }
    }
}

struct Peer {
    target: NodeId,
    addr: String,
    transport: Arc<dyn Transport>,
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl Peer {
    async fn send<Req, Resp, E>(
        &self,
        rpc: RaftRpc,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload =
            postcard::to_allocvec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let bytes = self
            .transport
            .call(self.addr.clone(), rpc, payload, option.hard_ttl())
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&Msg(e))))?;
        let answer: Result<Resp, RaftError<NodeId, E>> =
            postcard::from_bytes(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        self.send(RaftRpc::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, openraft::error::InstallSnapshotError> {
        self.send(RaftRpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        self.send(RaftRpc::Vote, &rpc, &option).await
    }
}
