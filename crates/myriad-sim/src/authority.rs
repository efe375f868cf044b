//! The cluster-map authority of the simulation, in place of the Raft group: it grants each
//! server its serving lease (renewed while the server is up and reachable, as the Raft
//! leader does), and the driver commits map changes (failover, return) through it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use myriad_placement::{ClusterMap, NodeId};
use myriad_proto::{FsError, RaftRpc, Response};
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

/// Server `me`'s view of the authority.
pub struct SimAuthority {
    pub me: NodeId,
    pub leases: Arc<Leases>,
}

impl Authority for SimAuthority {
    fn lease_error(&self) -> Option<FsError> {
        (!self.leases.valid(self.me)).then_some(FsError::Busy)
    }

    fn grant_lease(&self, _from: NodeId, _epoch: u64) -> Response {
        Response::Lease {
            granted: false,
            epoch: 0,
        }
    }

    fn propose_map(&self, _map: ClusterMap) -> BoxFuture<'_, Result<(), FsError>> {
        Box::pin(async {
            Err(FsError::Unavailable(
                "the simulation commits maps itself".into(),
            ))
        })
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
    ) -> BoxFuture<'_, Result<Response, FsError>> {
        Box::pin(async { Err(FsError::Protocol("no Raft group in the simulation".into())) })
    }
}
