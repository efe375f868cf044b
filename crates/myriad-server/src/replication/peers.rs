//! How replication reaches other servers (`Peers`, implemented by the server process or a
//! simulation) and one partition's link to its copy on one server (`Link`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::{Endpoints, Request, Response, WireError};

use crate::cluster::MapState;
use myriad_proto::{ReplicaRequest, ServerRequest};

/// How replication reaches the other servers: the server process implements it over its
/// connection pool, a simulation in memory. Replication never names the process.
pub(crate) trait Peers: Send + Sync {
    /// The map this server serves under now.
    fn map(&self) -> Arc<MapState>;
    /// Sends `req` to server `to` (its endpoint `ends`), stamped with map `epoch`.
    fn send<'a>(
        &'a self,
        to: NodeId,
        epoch: u64,
        ends: Endpoints,
        req: &'a Request,
    ) -> BoxFuture<'a, Result<Response, WireError>>;
    /// A peer holds a newer map: adopt it without waiting (the caller may be running inside
    /// the reconcile that would apply it).
    fn newer_map(&self, map: ClusterMap);
    /// How long a request may wait for its answer.
    fn request_timeout(&self) -> Duration;
    /// The server's one bundler (batches to a peer share frames).
    fn bundler(&self) -> &dyn Bundles;
}

/// Sends a copy's request to server `to` in a bundle with others (`bundle.rs` implements
/// it: a trait here, so that this module names nothing above it).
pub(crate) trait Bundles: Send + Sync {
    fn call<'a>(
        &'a self,
        peers: &'a Arc<dyn Peers>,
        to: NodeId,
        partition: PartitionId,
        request: ReplicaRequest,
    ) -> BoxFuture<'a, Result<Response, WireError>>;
}

/// Sends server `to` our map (it answered that its map is newer than the request's...
/// older: `MapTooOld`); the answer does not matter, the caller tries again.
pub(crate) async fn push_map(peers: &dyn Peers, to: NodeId, map: &ClusterMap) {
    let push = ServerRequest::InstallMap(Box::new(map.clone()));
    let _ = peers
        .send(to, map.epoch, Endpoints::SERVER, &Request::Server(push))
        .await;
}

/// Where a stream sends: partition `pid`'s copy on server `backup`.
pub(crate) struct Link {
    pub(crate) peers: Arc<dyn Peers>,
    pub(crate) pid: PartitionId,
    pub(crate) backup: NodeId,
}

impl Link {
    pub(crate) async fn call(&self, req: &Request) -> Result<Response, WireError> {
        let st = self.peers.map();
        let ends = Endpoints {
            target: self.pid,
            source: self.pid,
        };
        let result = self.peers.send(self.backup, st.map.epoch, ends, req).await;
        self.map_news(&st, result).await
    }

    /// Like `call`, but a batch (`Replicate`) travels in a bundle with other batches for
    /// the same server (`bundle.rs`).
    pub(crate) async fn call_bundled(&self, req: &Request) -> Result<Response, WireError> {
        let Request::Replica(r @ ReplicaRequest::Replicate { .. }) = req else {
            return self.call(req).await;
        };
        let st = self.peers.map();
        let result = self
            .peers
            .bundler()
            .call(&self.peers, self.backup, self.pid, r.clone())
            .await;
        self.map_news(&st, result).await
    }

    /// A backup with a newer map: adopt it (it may end this stream), not awaited: this may
    /// run inside the reconcile that would apply it. A backup with an older one: push ours.
    /// Either way the caller tries again (`Busy`).
    async fn map_news(
        &self,
        st: &MapState,
        result: Result<Response, WireError>,
    ) -> Result<Response, WireError> {
        match result {
            Err(WireError::Redirect(map)) => {
                self.peers.newer_map(*map);
                Err(WireError::Busy)
            }
            Err(WireError::MapTooOld(_)) => {
                push_map(self.peers.as_ref(), self.backup, &st.map).await;
                Err(WireError::Busy)
            }
            other => other,
        }
    }

    /// Sends `req` until the backup acknowledges it.
    pub(crate) async fn call_until_ok(&self, req: &Request) -> Response {
        let mut backoff = crate::backoff::UNTIL_OK;
        let mut failures = 0u32;
        loop {
            match self.call(req).await {
                Ok(r) => return r,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!(
                            partition = %self.pid,
                            backup = %self.backup,
                            "replication to backup failing ({failures} tries): {e}"
                        );
                    }
                    backoff.wait().await;
                }
            }
        }
    }
}
