//! Where a client's request goes (`Client::route`): an entry, a shard, a chunk, a
//! partition, a server or one copy.

use myriad_placement::{NodeId, PartitionId};
use myriad_proto::InodeId;

/// Where a request must go.
#[derive(Clone, Debug)]
pub(crate) enum Route {
    /// The partition holding the entry of this path (its parent's directory object).
    Entry(String),
    /// The partition holding the shard of directory `.0` with name hash `.1`.
    Shard(String, u64),
    /// The partition holding chunk `.1` (>= 1) of inode `.0`.
    Chunk(InodeId, u64),
    /// The partition keeping the file locks of inode `.0`.
    Locks(InodeId),
    Partition(PartitionId),
    /// The server itself (counters, map, statfs), not one of its partitions.
    Server(NodeId),
    /// The copy of partition `.1` on server `.0` (primary or backup).
    Copy(NodeId, PartitionId),
}
