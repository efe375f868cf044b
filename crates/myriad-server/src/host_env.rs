//! The server as its partitions and replication see it: `Env` and `Peers` implemented by the
//! process, and calls from one partition to another wherever it is served.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::{Caller, ClientRequest, Request, Response, WireError};

use crate::cluster::MapState;
use crate::config::ServerConfig;
use crate::host::Host;
use crate::partition::env::Env;
use crate::replication::peers::Peers;

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
    ) -> BoxFuture<'a, Result<Response, WireError>> {
        Box::pin(async move {
            let addr = self
                .state()
                .map
                .node(to)
                .map(|n| n.addr.clone())
                .ok_or_else(|| WireError::Unavailable(format!("server {to} is not in the map")))?;
            self.transport
                .call_with_timeout(
                    &addr,
                    epoch,
                    ends,
                    &Caller::root(),
                    req,
                    self.config.request_timeout,
                )
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

    fn bundler(&self) -> &dyn crate::replication::peers::Bundles {
        &self.bundler
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

    fn count_split(&self) {
        self.counters
            .splits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn admit(&self, req: &Request<ClientRequest>) -> Result<(), WireError> {
        self.space.admit(req)
    }

    fn serves(&self, pid: PartitionId) -> bool {
        self.serving(pid, 0).is_ok()
    }

    fn protocol_of(&self, pid: PartitionId) -> u16 {
        let st = self.state();
        if st.map.primary_of(pid) == Some(self.id) {
            return myriad_proto::PROTOCOL_VERSION;
        }
        st.map
            .partition_addr(pid)
            .map_or(0, |addr| self.transport.link(addr).version)
    }

    fn commit_map(&self, map: ClusterMap) -> BoxFuture<'_, Result<ClusterMap, WireError>> {
        Box::pin(async move {
            let epoch = map.epoch;
            self.authority.propose_map(map).await?;
            self.follow(epoch).await;
            let now = self.state().map.clone();
            if now.epoch < epoch {
                return Err(WireError::Unavailable(format!(
                    "the cluster map of epoch {epoch} did not reach this server"
                )));
            }
            Ok(now)
        })
    }

    fn call_partition<'a>(
        &'a self,
        source: PartitionId,
        pid: PartitionId,
        body: Request,
        still_serving: &'a (dyn Fn() -> bool + Send + Sync),
    ) -> BoxFuture<'a, Result<Response, WireError>> {
        Box::pin(call_partition(self, source, pid, body, still_serving))
    }
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
    still_serving: &(dyn Fn() -> bool + Send + Sync),
) -> Result<Response, WireError> {
    let deadline = tokio::time::Instant::now() + NESTED_RETRY;
    let mut backoff = crate::backoff::NESTED_CALL;
    loop {
        if !still_serving() {
            return Err(WireError::Unavailable(format!(
                "partition {source} is no longer served by this server"
            )));
        }
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
                    .call_with_timeout(
                        addr,
                        st.map.epoch,
                        ends,
                        &Caller::root(),
                        &body,
                        host.config.request_timeout,
                    )
                    .await
            }
            None => Err(WireError::Unavailable(format!(
                "partition {pid} has no copy up"
            ))),
        };
        match result {
            Err(WireError::Unavailable(_))
                if crate::cluster::failover_possible(&st.map, pid)
                    && tokio::time::Instant::now() + backoff.peek() < deadline =>
            {
                backoff.wait().await;
            }
            other => return other,
        }
    }
}

/// How long a server-to-partition call is retried while its target cannot answer.
const NESTED_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// How a partition's applier unregisters automatic indexes: by asking the partition of
/// each registry entry, wherever it is served (`PeerRequest::UnregisterIndex`).
impl crate::commit::AutoIndexes for Host {
    fn unregister(
        &self,
        source: PartitionId,
        mark: myriad_proto::ReadOnlyMark,
    ) -> BoxFuture<'_, Result<(), WireError>> {
        Box::pin(async move {
            let file = myriad_proto::tree_index::index_file_name(mark.root, mark.version);
            // The pending entry first: a build's rename of it to the live name is then
            // either before (the live entry is unlinked next) or refused (NotFound).
            let pending = format!("{}{file}", myriad_proto::tree_index::PENDING_PREFIX);
            for name in [pending, file] {
                unregister_entry(self, source, name).await?;
            }
            Ok(())
        })
    }
}

/// Asks the partition holding registry entry `name` to unlink it, following the
/// registry's shard map if it was ever split.
async fn unregister_entry(host: &Host, source: PartitionId, name: String) -> Result<(), WireError> {
    use myriad_proto::tree_index::TREES_DIR;
    let hash = myriad_proto::name_hash(&name);
    let mut shards: Option<myriad_proto::ShardMap> = None;
    for _ in 0..4 {
        let st = host.state();
        let pid = match &shards {
            None => st.ring.owner_of_dir(TREES_DIR),
            Some(m) => st.ring.owner_of_shard(TREES_DIR, m.leaf_for(hash)),
        };
        let req = Request::Peer(myriad_proto::PeerRequest::UnregisterIndex { name: name.clone() });
        match call_partition(host, source, pid, req, &|| true).await {
            Ok(_) => return Ok(()),
            Err(WireError::WrongShard { map: Some(m), .. }) => shards = Some(*m),
            Err(e) => return Err(e),
        }
    }
    Err(WireError::Busy)
}
