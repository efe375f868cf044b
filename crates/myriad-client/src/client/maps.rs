//! Keeping the client's cluster map current: asking the servers for a newer one when a
//! partition's primary stops answering or redirects without one, and learning directories'
//! shard maps from the servers' answers.

use myriad_placement::{ClusterMap, PartitionId, ShardMap};
use std::time::Duration;

use myriad_proto::{Endpoints, FsError, Response, ServerRequest, WireError};

use super::pacing::Pacing;
use super::{Client, MAP_ASK_TIMEOUT, Route, STALL_ASK_AFTER};

impl Client {
    /// The server at `addr` answered a request to partition `pid` with `MapTooOld` (the
    /// `tries`-th time): our map `map` is pushed to it. The server answers the push once
    /// it follows the map, but its partitions take the map up a moment later (a
    /// reconcile, slow on a loaded host): after the first push, retried like `Busy` until
    /// the deadline (five retries at once once ran out on a loaded machine).
    pub(super) async fn map_too_old(
        &self,
        (addr, pid): (&str, PartitionId),
        map: &ClusterMap,
        tries: u32,
        pace: &mut Pacing,
    ) -> Result<(), WireError> {
        if !pace.busy_fits() {
            return Err(WireError::Protocol(format!(
                "partition {pid} keeps an old cluster map"
            )));
        }
        if tries > 1 {
            pace.busy_pause(Duration::ZERO).await;
        }
        self.push_map(addr, map).await.map(|_| ())
    }

    /// Asks every server of our map for its map, adopts the newest, and returns it (the map
    /// a tool started with may be behind failovers).
    pub async fn newest_map(&self) -> ClusterMap {
        for n in self.map().nodes {
            if let Ok(m) = self.get_map(n.id).await {
                self.adopt(m);
            }
        }
        self.map()
    }

    /// Asks one server of our map for its map and adopts it if newer: what changes in a map
    /// without any request being redirected (the cluster's protocol floor) is learned so.
    pub async fn check_map(&self) {
        self.refresh_map(PartitionId(u32::MAX)).await;
    }

    /// Returns once partition `pid` has a primary other than `addr` in the map another
    /// server has: one other server asked after `STALL_ASK_AFTER` of waiting, then the
    /// next one every as long. Never returns while the primary stays there.
    pub(super) async fn primary_moved(&self, pid: PartitionId, addr: &str) {
        for turn in 0usize.. {
            tokio::time::sleep(STALL_ASK_AFTER).await;
            let st = self.st();
            let others: Vec<&str> = Self::map_askers(&st.map)
                .into_iter()
                .filter(|a| *a != addr)
                .collect();
            let Some(&asked) = others.get(turn % others.len().max(1)) else {
                continue;
            };
            if let Some(m) = self.ask_map(asked, st.map.epoch).await {
                self.adopt(m);
            }
            // Another primary (not none: a partition with no copy up waits for its
            // server, and its request for its deadline, as before).
            if self.st().map.partition_addr(pid).is_some_and(|a| a != addr) {
                return;
            }
        }
    }

    /// Server `addr`'s cluster map (we hold `epoch`), if it answers within `MAP_ASK_TIMEOUT`,
    /// connecting included (a host gone answers no SYN: the connect alone took the whole
    /// connect timeout, and a write after a failover waited 4 s on it).
    pub(super) async fn ask_map(&self, addr: &str, epoch: u64) -> Option<ClusterMap> {
        let req = myriad_proto::Request::Server(ServerRequest::GetMap);
        let call = self.transport.call_with_timeout(
            addr,
            epoch,
            Endpoints::SERVER,
            &self.config.caller,
            &req,
            MAP_ASK_TIMEOUT,
        );
        match tokio::time::timeout(MAP_ASK_TIMEOUT, call).await {
            Ok(Ok(Response::Map(m))) => Some(*m),
            _ => None,
        }
    }

    /// The addresses of `map`'s servers to ask for a newer map: those up first, then those
    /// down (a server marked down is likely gone: asked last).
    pub(super) fn map_askers(map: &ClusterMap) -> Vec<&str> {
        let (up, down): (Vec<_>, Vec<_>) = map.nodes.iter().partition(|n| map.is_up(n.id));
        up.iter().chain(&down).map(|n| n.addr.as_str()).collect()
    }

    /// Asks the servers of our map (but `skip`, unreachable) for theirs and adopts the newest.
    pub(super) async fn refresh_map(&self, skip: PartitionId) {
        let st = self.st();
        let avoid = st
            .map
            .primary_of(skip)
            .and_then(|id| st.map.node(id))
            .map(|n| n.addr.as_str());
        for addr in Self::map_askers(&st.map) {
            if Some(addr) == avoid {
                continue;
            }
            if let Some(m) = self.ask_map(addr, st.map.epoch).await {
                if m.epoch > st.map.epoch {
                    self.adopt(m);
                }
                return;
            }
        }
    }

    /// Adopts `map` (only a directory's home sends one) or asks the home of `dir` for it.
    pub(crate) async fn learn_shard_map(&self, dir: &str, map: Option<ShardMap>) {
        self.learn_shard_map_with(dir, map, true).await;
    }

    /// `learn_shard_map`, asking the home as `route_with` asks (`check_held` false: the
    /// shard map is asked by the recovery of held changes, which it must not wait for).
    pub(super) async fn learn_shard_map_with(
        &self,
        dir: &str,
        map: Option<ShardMap>,
        check_held: bool,
    ) {
        let map = match map {
            Some(m) => Some(m),
            None => {
                let home = Route::Partition(self.st().ring.owner_of_dir(dir));
                let ask = myriad_proto::ask::get_shard_map(dir);
                let req = myriad_proto::Request::from(ask.request);
                let answer = if check_held {
                    Box::pin(self.call(home, req)).await
                } else {
                    self.route_unheld(home, req).await.map_err(FsError::from)
                };
                answer.and_then(|r| ask.answer.of(r)).ok().map(|m| *m)
            }
        };
        match map {
            Some(m) => self.shards.adopt(dir, m, true),
            None => self.shards.forget(dir),
        }
    }
}
