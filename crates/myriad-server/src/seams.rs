//! What a server needs from outside the process core: the network (`myriad_net::Transport`:
//! the connection pool, or a simulated network) and the cluster-map authority (`Authority`:
//! this server's member of the Raft group, or a simulation's authority).

use futures::future::BoxFuture;
use myriad_placement::{ClusterMap, NodeId};
use myriad_proto::{Response, WireError};

use crate::membership::Membership;
use myriad_proto::RaftRpc;

/// What a server needs from the cluster-map authority: its member of the Raft group in the
/// process (`Membership`), the simulation's authority in a simulation.
pub trait Authority: Send + Sync {
    /// Why this server may not serve partition requests now (no lease), if it may not.
    fn lease_error(&self) -> Option<WireError>;
    /// Leader side of `PeerRequest::Lease` from server `from` at map `epoch`, over a
    /// connection of protocol `version`.
    fn grant_lease(&self, from: NodeId, epoch: u64, version: u16) -> Response;
    /// A map change, committed through the authority.
    fn propose_map(&self, map: ClusterMap) -> BoxFuture<'_, Result<(), WireError>>;
    /// The newest map the authority committed, if any.
    fn committed_map(&self) -> Option<ClusterMap>;
    /// The current leader's server id, if known.
    fn leader(&self) -> Option<u64>;
    /// Servers this server marked down (committed) while it led the group: a mark-down is
    /// a failover of every partition the server led (issue 49: an operator alerts on it).
    fn marked_down(&self) -> u64 {
        0
    }
    /// A Raft message from a peer.
    fn serve_raft(
        &self,
        rpc: RaftRpc,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<Response, WireError>>;
}

impl Authority for Membership {
    fn lease_error(&self) -> Option<WireError> {
        Membership::lease_error(self)
    }
    fn grant_lease(&self, from: NodeId, epoch: u64, version: u16) -> Response {
        Membership::grant_lease(self, from, epoch, version)
    }
    fn propose_map(&self, map: ClusterMap) -> BoxFuture<'_, Result<(), WireError>> {
        Box::pin(Membership::propose_map(self, map))
    }
    fn committed_map(&self) -> Option<ClusterMap> {
        self.group.map()
    }
    fn leader(&self) -> Option<u64> {
        self.group.leader()
    }
    fn marked_down(&self) -> u64 {
        Membership::marked_down(self)
    }
    fn serve_raft(
        &self,
        rpc: RaftRpc,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<Response, WireError>> {
        Box::pin(async move {
            self.group
                .serve(rpc, &payload)
                .await
                .map(Response::Raft)
                .map_err(WireError::Protocol)
        })
    }
}
