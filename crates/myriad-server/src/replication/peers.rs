//! How replication reaches other servers (`Peers`, implemented by the server process or a
//! simulation) and one partition's link to its copy on one server (`Link`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::{Endpoints, FsError, Request, Response};

use crate::cluster::MapState;
use myriad_proto::ServerRequest;

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
    ) -> BoxFuture<'a, Result<Response, FsError>>;
    /// A peer holds a newer map: adopt it without waiting (the caller may be running inside
    /// the reconcile that would apply it).
    fn newer_map(&self, map: ClusterMap);
    /// How long a request may wait for its answer.
    fn request_timeout(&self) -> Duration;
}

/// Where a stream sends: partition `pid`'s copy on server `backup`.
pub(crate) struct Link {
    pub(crate) peers: Arc<dyn Peers>,
    pub(crate) pid: PartitionId,
    pub(crate) backup: NodeId,
}

impl Link {
    pub(crate) async fn call(&self, req: &Request) -> Result<Response, FsError> {
        let st = self.peers.map();
        let ends = Endpoints {
            target: self.pid,
            source: self.pid,
        };
        let result = self.peers.send(self.backup, st.map.epoch, ends, req).await;
        match result {
            Err(FsError::Redirect(map)) => {
                // The backup has a newer map: adopt it (it may end this stream). Not
                // awaited: this may run inside the reconcile that would apply it.
                self.peers.newer_map(*map);
                Err(FsError::Busy)
            }
            Err(FsError::MapTooOld(_)) => {
                let push = ServerRequest::InstallMap(Box::new(st.map.clone()));
                let _ = self
                    .peers
                    .send(
                        self.backup,
                        st.map.epoch,
                        Endpoints::SERVER,
                        &Request::Server(push),
                    )
                    .await;
                Err(FsError::Busy)
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
