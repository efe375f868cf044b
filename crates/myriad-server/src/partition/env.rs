//! The partition's window on the world: what it needs from the server process that runs it.

use myriad_placement::{NodeId, PartitionId};
use myriad_proto::{ClientRequest, Request, Response, WireError};

use crate::config::ServerConfig;
use crate::replication::peers::Peers;

/// What a partition needs from the server process that runs it: the map and the other
/// servers (replication's `Peers`), its configuration, counters, the free-space rule, and
/// calls to other partitions. The process implements it; a partition never names the process.
pub(crate) trait Env: Peers {
    /// The wall clock, in nanoseconds since the epoch (file times). The process reads the
    /// system clock; a simulation its own.
    fn now_ns(&self) -> i64;
    /// The id of the server running this partition.
    fn server_id(&self) -> NodeId;
    fn config(&self) -> &ServerConfig;
    /// Counts one event of kind `what` (server counters).
    fn count(&self, what: &'static str);
    /// Counts a directory shard split off here (the `myriad_directory_splits` metric).
    fn count_split(&self);
    /// Refuses a request that would fill the disk (space.rs).
    fn admit(&self, req: &Request<ClientRequest>) -> Result<(), WireError>;
    /// Whether this server serves partition `pid` as its primary now (the map says so,
    /// its run as primary is unbroken, its serving lease is valid): background work that
    /// commits (a sweep) checks it first, as requests are checked on arrival, so that a
    /// primary cut off from the others adds no batch of its own.
    fn serves(&self, pid: PartitionId) -> bool;
    /// The protocol version partition `pid`'s primary speaks with this server: this
    /// build's own if it is here, the connection's if one was made, else 0 (not known).
    /// A request newer than a peer's protocol is not sent to it (docs/upgrades.md).
    fn protocol_of(&self, pid: PartitionId) -> u16;
    /// Commits `map` (the next epoch) through the cluster-map authority and waits until
    /// this server follows that epoch; returns the map followed then (another change may
    /// have taken the epoch first: the caller checks what landed). A partition changes the
    /// map only to settle or abandon a tree move it coordinates (tree_move.rs).
    fn commit_map(
        &self,
        map: myriad_placement::ClusterMap,
    ) -> futures::future::BoxFuture<'_, Result<myriad_placement::ClusterMap, WireError>>;
    /// Calls partition `pid` wherever it is served, as partition `source`, asking again
    /// while it is unavailable (a failover) and `still_serving` says the caller may still
    /// act for `source` (checked before every attempt: a deposed partition's task must not
    /// resend a step that the partition's next primary has undone meanwhile).
    fn call_partition<'a>(
        &'a self,
        source: PartitionId,
        pid: PartitionId,
        body: Request,
        still_serving: &'a (dyn Fn() -> bool + Send + Sync),
    ) -> futures::future::BoxFuture<'a, Result<Response, WireError>>;
}
