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

use crate::map_bytes::{from_bytes_with_ext, to_bytes_with_ext};
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

    /// Leader only: makes the group's members the servers of `map`, one change per call
    /// (`next_member_change`).
    pub async fn sync_members(&self, map: &ClusterMap, timeout: Duration) {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let known: BTreeMap<NodeId, String> = membership
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let Some(next) = next_member_change(&known, &voters, map) else {
            return;
        };
        tracing::info!(change = ?next, "changing the Raft group's members");
        let change = async {
            let members = match next {
                MemberChange::AddLearner(id, addr) => {
                    return self
                        .raft
                        .add_learner(id, BasicNode::new(&addr), true)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string());
                }
                MemberChange::Promote(id) => ChangeMembers::AddVoterIds(BTreeSet::from([id])),
                MemberChange::RemoveVoter(id) => ChangeMembers::RemoveVoters(BTreeSet::from([id])),
                MemberChange::RemoveNode(id) => ChangeMembers::RemoveNodes(BTreeSet::from([id])),
            };
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
        let map = self.floor_kept(map);
        let write = async {
            match self
                .raft
                .client_write(MapCommand::install(map.clone()))
                .await
            {
                Ok(r) => Ok(r.data.epoch),
                Err(e) => match e.forward_to_leader() {
                    Some(f) => match &f.leader_node {
                        Some(node) => {
                            // A leader of 34 reads the map and ignores its extension.
                            let payload = to_bytes_with_ext(&map, &map.ext)
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

    /// `map` with the cluster's protocol floor as it stands if that is higher: the floor
    /// never goes down, and a map built from an older file has none (so it is written to
    /// the log with its extension whenever the floor allows: `MapCommand::install`).
    fn floor_kept(&self, mut map: ClusterMap) -> ClusterMap {
        if let Some(cur) = self.map() {
            map.ext.protocol_floor = map.ext.protocol_floor.max(cur.ext.protocol_floor);
        }
        map
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
                let (mut map, ext) = from_bytes_with_ext::<ClusterMap>(payload)
                    .map_err(|e| format!("bad raft message: {e}"))?;
                if let Some(ext) = ext {
                    map.ext = ext;
                }
                let map = self.floor_kept(map);
                let r = match self.raft.client_write(MapCommand::install(map)).await {
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

/// One change of the Raft group's members towards the servers of the map.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MemberChange {
    AddLearner(NodeId, String),
    Promote(NodeId),
    RemoveVoter(NodeId),
    RemoveNode(NodeId),
}

/// The next change that brings the group's members (`known`: id -> address, `voters`)
/// closer to the servers of `map`, in this order:
/// 1. a member listed at another address than the map gives its id (a server that left
///    and whose id a new server was given: ids are reused, docs/deploy.md) leaves the
///    group (as a voter first), so that Raft never sends the new server's traffic to the
///    old one, nor counts a fresh server with an empty log as the old voter;
/// 2. a server of the map not in the group joins it as a learner;
/// 3. a learner is promoted while there are fewer than `VOTERS_MAX` voters;
/// 4. a member the map dropped is removed, voters first (after 3, so a learner replaces
///    a voter first).
pub(crate) fn next_member_change(
    known: &BTreeMap<NodeId, String>,
    voters: &BTreeSet<NodeId>,
    map: &ClusterMap,
) -> Option<MemberChange> {
    let wanted: BTreeMap<NodeId, &str> = map
        .nodes
        .iter()
        .map(|n| (NodeId::from(n.id), n.addr.as_str()))
        .collect();
    let remove = |id: NodeId| {
        if voters.contains(&id) {
            MemberChange::RemoveVoter(id)
        } else {
            MemberChange::RemoveNode(id)
        }
    };
    if let Some((&id, _)) = known
        .iter()
        .find(|(id, addr)| wanted.get(id).is_some_and(|w| w != addr))
    {
        return Some(remove(id));
    }
    if let Some((&id, addr)) = wanted.iter().find(|(id, _)| !known.contains_key(id)) {
        return Some(MemberChange::AddLearner(id, (*addr).to_string()));
    }
    let learner = known
        .keys()
        .find(|id| !voters.contains(id) && wanted.contains_key(id));
    if let (true, Some(&l)) = (voters.len() < VOTERS_MAX, learner) {
        return Some(MemberChange::Promote(l));
    }
    voters
        .iter()
        .chain(known.keys())
        .find(|id| !wanted.contains_key(id))
        .map(|&gone| remove(gone))
}

#[cfg(test)]
mod member_change_tests {
    use super::*;

    fn map(addrs: &[&str]) -> ClusterMap {
        let addrs: Vec<String> = addrs.iter().map(|a| (*a).to_string()).collect();
        ClusterMap::build(1, &addrs, 8, 3)
    }

    fn known(pairs: &[(u64, &str)]) -> BTreeMap<NodeId, String> {
        pairs.iter().map(|(i, a)| (*i, (*a).to_string())).collect()
    }

    #[test]
    fn members_follow_the_map_and_a_reused_id_leaves_before_it_returns() {
        let m = map(&["h1:1", "h2:1", "h3:1", "h5:1"]);
        let all = BTreeSet::from([1, 2, 3, 4]);
        // The group as the map says: nothing to do.
        let k = known(&[(1, "h1:1"), (2, "h2:1"), (3, "h3:1"), (4, "h5:1")]);
        assert_eq!(next_member_change(&k, &all, &m), None);
        // Id 4 was a server on h4 that left; the map gave it to the server on h5: the old
        // voter goes first, then the new server joins as a learner, then votes.
        let k = known(&[(1, "h1:1"), (2, "h2:1"), (3, "h3:1"), (4, "h4:1")]);
        assert_eq!(
            next_member_change(&k, &all, &m),
            Some(MemberChange::RemoveVoter(4))
        );
        let three = BTreeSet::from([1, 2, 3]);
        assert_eq!(
            next_member_change(&k, &three, &m),
            Some(MemberChange::RemoveNode(4)),
            "as a learner, removed from the group"
        );
        let k = known(&[(1, "h1:1"), (2, "h2:1"), (3, "h3:1")]);
        assert_eq!(
            next_member_change(&k, &three, &m),
            Some(MemberChange::AddLearner(4, "h5:1".into()))
        );
        let k = known(&[(1, "h1:1"), (2, "h2:1"), (3, "h3:1"), (4, "h5:1")]);
        assert_eq!(
            next_member_change(&k, &three, &m),
            Some(MemberChange::Promote(4))
        );
        // A server the map dropped: a voter, then a learner.
        let m = map(&["h1:1", "h2:1"]);
        let k = known(&[(1, "h1:1"), (2, "h2:1"), (3, "h3:1")]);
        assert_eq!(
            next_member_change(&k, &three, &m),
            Some(MemberChange::RemoveVoter(3))
        );
        assert_eq!(
            next_member_change(&k, &BTreeSet::from([1, 2]), &m),
            Some(MemberChange::RemoveNode(3))
        );
    }
}
