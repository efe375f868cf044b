//! The cluster-map authority of the simulation, in place of the Raft group: it grants each
//! server its serving lease (renewed while the server is up and reachable, as the Raft
//! leader does), and the driver commits map changes (failover, return) through it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use myriad_placement::{ClusterMap, NodeId};
use myriad_proto::{RaftRpc, Response, WireError};
use myriad_server::embed::Authority;
use tokio::time::Instant;

#[derive(Default)]
pub struct Leases {
    until: Mutex<BTreeMap<NodeId, Instant>>,
}

impl Leases {
    pub fn grant(&self, id: NodeId, until: Instant) {
        if let Ok(mut g) = self.until.lock() {
            let t = g.entry(id).or_insert(until);
            *t = (*t).max(until);
        }
    }

    /// A crashed server's lease is gone with it.
    pub fn revoke(&self, id: NodeId) {
        if let Ok(mut g) = self.until.lock() {
            g.remove(&id);
        }
    }

    fn valid(&self, id: NodeId) -> bool {
        self.until
            .lock()
            .ok()
            .and_then(|g| g.get(&id).copied())
            .is_some_and(|u| Instant::now() < u)
    }
}

/// Map changes servers proposed (a partition settling or abandoning a tree move,
/// docs/zones.md section 3), with their proposer, for the driver's next round: it commits
/// one only if the proposer reaches it and its epoch follows the current map's directly
/// (as the Raft group applies a map only above the current epoch).
#[derive(Default)]
pub struct Proposals {
    queue: Mutex<Vec<(NodeId, ClusterMap)>>,
}

impl Proposals {
    pub fn take(&self) -> Vec<(NodeId, ClusterMap)> {
        self.queue
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default()
    }
}

/// Server `me`'s view of the authority.
pub struct SimAuthority {
    pub me: NodeId,
    pub leases: Arc<Leases>,
    pub proposals: Arc<Proposals>,
}

impl Authority for SimAuthority {
    fn lease_error(&self) -> Option<WireError> {
        (!self.leases.valid(self.me)).then_some(WireError::Busy)
    }

    fn grant_lease(&self, _from: NodeId, _epoch: u64, _version: u16) -> Response {
        Response::Lease {
            granted: false,
            epoch: 0,
        }
    }

    fn propose_map(&self, map: ClusterMap) -> BoxFuture<'_, Result<(), WireError>> {
        if let Ok(mut q) = self.proposals.queue.lock() {
            q.push((self.me, map));
        }
        // The proposer then waits to follow the epoch (the driver sends maps out).
        Box::pin(async { Ok(()) })
    }

    fn committed_map(&self) -> Option<ClusterMap> {
        None
    }

    fn leader(&self) -> Option<u64> {
        None
    }

    fn serve_raft(
        &self,
        _rpc: RaftRpc,
        _payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<Response, WireError>> {
        Box::pin(async {
            Err(WireError::Protocol(
                "no Raft group in the simulation".into(),
            ))
        })
    }
}
