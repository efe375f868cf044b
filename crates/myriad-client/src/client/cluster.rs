//! The client's calls about the cluster rather than the file system: capacity, counters,
//! maps, raw requests to a partition or a server, echo.

use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::{
    AdminRequest, CounterSnapshot, Endpoints, FsError, InodeId, LatencyHistogram, Request,
    Response, ServerRequest, StatFs, WireError,
};

use super::{Client, Route};
use myriad_proto::ask;

/// The protocol that brought `ServerRequest::GetLatencies` (docs/upgrades.md).
const LATENCIES_PROTOCOL: u16 = 34;

/// What became of a cluster map proposed with `Client::install_map`.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Installed {
    /// The servers follow it (or a later map).
    Yes,
    /// Another change was committed at its epoch first: make it again on the newest map.
    LostRace,
}

impl Client {
    /// Capacity and usage summed over every server (tiers summed by name).
    pub async fn statfs(&self) -> Result<StatFs, FsError> {
        let mut total = StatFs::default();
        for n in self.st().map.nodes.clone() {
            let s = self.server_statfs(n.id).await?;
            total.total_bytes += s.total_bytes;
            total.free_bytes += s.free_bytes;
            total.used_bytes += s.used_bytes;
            total.files += s.files;
            for t in s.tiers {
                match total.tiers.iter_mut().find(|x| x.name == t.name) {
                    Some(x) => {
                        x.total_bytes += t.total_bytes;
                        x.free_bytes += t.free_bytes;
                        x.used_bytes += t.used_bytes;
                        x.overflowing |= t.overflowing;
                        x.overflowed_blocks += t.overflowed_blocks;
                        x.moved_back_blocks += t.moved_back_blocks;
                    }
                    None => total.tiers.push(t),
                }
            }
        }
        Ok(total)
    }

    /// One server's disks and tiers.
    pub async fn server_statfs(&self, node: NodeId) -> Result<StatFs, FsError> {
        self.ask(Route::Server(node), ask::server_statfs()).await
    }

    pub async fn counters(&self, node: NodeId) -> Result<CounterSnapshot, FsError> {
        self.ask(Route::Server(node), ask::counters()).await
    }

    /// Server `node`'s answers to clients by how long they took, since it started; `None`
    /// from a server that cannot say (protocol 33 or older), or before this client spoke
    /// to it (ask its counters first).
    pub async fn latencies(&self, node: NodeId) -> Result<Option<LatencyHistogram>, FsError> {
        let Some(addr) = self.st().map.node(node).map(|n| n.addr.clone()) else {
            return Ok(None);
        };
        if self.transport.link(&addr).version < LATENCIES_PROTOCOL {
            return Ok(None);
        }
        Ok(Some(self.ask(Route::Server(node), ask::latencies()).await?))
    }

    /// Counters of every node in the map, in map order.
    pub async fn all_counters(&self) -> Vec<(NodeId, Result<CounterSnapshot, FsError>)> {
        let nodes = self.st().map.nodes.clone();
        let futs = nodes
            .iter()
            .map(|n| async move { (n.id, self.counters(n.id).await) });
        futures::future::join_all(futs).await
    }

    /// Resets every server's counters but those the map marks down (they count nothing).
    pub async fn reset_counters(&self) -> Result<(), FsError> {
        for n in self.st().map.nodes.clone() {
            if n.state == myriad_placement::NodeState::Down {
                continue;
            }
            self.call(
                Route::Server(n.id),
                myriad_proto::Request::Admin(AdminRequest::ResetCounters),
            )
            .await?;
        }
        Ok(())
    }

    pub async fn get_map(&self, node: NodeId) -> Result<ClusterMap, FsError> {
        Ok(*self.ask(Route::Server(node), ask::get_map()).await?)
    }

    /// Proposes `map` (an administrator's change, committed through the cluster-map Raft
    /// group) or, from anyone else, waits until a server follows it. Answered once the
    /// server follows at least its epoch (`Installed::Yes`), or `Installed::LostRace` if
    /// another change was committed at that epoch first (read the newest map and make the
    /// change again). This client then adopts what that server follows, never the
    /// proposal itself: a proposal that lost is no map.
    pub async fn install_map(&self, map: ClusterMap) -> Result<Installed, FsError> {
        map.validate()
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
        let install =
            myriad_proto::Request::Server(ServerRequest::InstallMap(Box::new(map.clone())));
        // Any server of the current map commits it through the Raft group and answers once
        // it follows it; the others follow within moments.
        let current = self.map();
        let mut last = FsError::Unavailable("the map lists no server that is up".into());
        for n in current.nodes.iter().filter(|n| current.is_up(n.id)) {
            match self
                .transport
                .call_with_timeout(
                    &n.addr,
                    current.epoch,
                    Endpoints::SERVER,
                    &self.config.caller,
                    &install,
                    self.config.request_timeout,
                )
                .await
            {
                Ok(_) => {
                    if let Ok(now) = self.get_map(n.id).await {
                        self.adopt(now);
                    }
                    return Ok(Installed::Yes);
                }
                Err(WireError::MapTooOld(_)) => return Ok(Installed::LostRace),
                Err(e @ (WireError::PermissionDenied | WireError::InvalidArgument(_))) => {
                    return Err(e.into());
                }
                Err(e) => last = e.into(),
            }
        }
        Err(last)
    }

    /// Asks partition `pid` (admin tools such as fsck): the reply asked for.
    pub async fn ask_partition<R: myriad_proto::reply::Reply>(
        &self,
        pid: PartitionId,
        ask: myriad_proto::reply::Ask<R, Request>,
    ) -> Result<R, FsError> {
        self.ask(Route::Partition(pid), ask).await
    }

    /// Asks server `node` itself (not a partition of it): the reply asked for.
    pub async fn ask_server<R: myriad_proto::reply::Reply>(
        &self,
        node: NodeId,
        ask: myriad_proto::reply::Ask<R, Request>,
    ) -> Result<R, FsError> {
        self.ask(Route::Server(node), ask).await
    }

    /// Sends one request to partition `pid` as it is (admin tools such as fsck).
    pub async fn request(&self, pid: PartitionId, req: Request) -> Result<Response, FsError> {
        self.call(Route::Partition(pid), req).await
    }

    /// The copy of partition `pid` on server `node`: (last applied batch, keys, digest),
    /// the blocks and the metadata records (space code, key) that fail their checksum there;
    /// the batch is None while the copy is being filled. Needs the cluster secret (fsck).
    #[allow(clippy::type_complexity)]
    pub async fn replica_digest(
        &self,
        node: NodeId,
        pid: PartitionId,
    ) -> Result<
        (
            (Option<u64>, u64, u64),
            Vec<(InodeId, u64)>,
            Vec<(u8, Vec<u8>)>,
        ),
        FsError,
    > {
        let d = self
            .ask(Route::Copy(node, pid), ask::fsck_replica())
            .await?;
        Ok(((d.seq, d.keys, d.digest), d.corrupt, d.corrupt_records))
    }

    /// Raw round trip to server `node`: the transport floor for benchmarks.
    /// Sends `req` to server `node` itself (not to a partition): fsck's look at the
    /// fragments a server keeps.
    pub async fn server_request(&self, node: NodeId, req: Request) -> Result<Response, FsError> {
        self.call(Route::Server(node), req).await
    }

    /// The protocol this client and server `node` speak (the newer of the two's newest is
    /// not known: the lower one), asked with an echo; `None` if it does not answer.
    pub async fn server_protocol(&self, node: NodeId) -> Option<u16> {
        self.echo(node, Vec::new()).await.ok()?;
        let addr = self.st().map.node(node)?.addr.clone();
        Some(self.transport.link(&addr).version).filter(|v| *v > 0)
    }

    pub async fn echo(&self, node: NodeId, payload: Vec<u8>) -> Result<Vec<u8>, FsError> {
        Ok(self.ask(Route::Server(node), ask::echo(payload)).await?.0)
    }

    /// Which partition holds the entry of `path` (the ring's answer; `primary_of` in the map
    /// says which server serves it).
    #[must_use]
    pub fn owner_of_entry(&self, path: &str) -> PartitionId {
        self.st().ring.owner_of_entry(path)
    }

    pub fn chunk_size(&self) -> u64 {
        self.st().map.chunk_size_bytes
    }

    #[must_use]
    pub fn inline_max(&self) -> u64 {
        self.st().map.inline_max_bytes
    }
}
