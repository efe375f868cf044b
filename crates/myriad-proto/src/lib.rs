//! Myriad's wire protocol and the domain types it carries: inodes, errors, paths, limits.
//!
//! Sans-IO: this crate turns values into bytes and back and validates what it receives. It
//! frames nothing itself; `myriad-net` puts each encoded message in a length-delimited frame.
//!
//! Must not depend on: tokio or any I/O, storage, server, client.

pub mod access;
mod appended;
pub mod ask;
pub mod audience;
pub mod auth;
pub mod codec;
pub mod describe;
pub mod ec_layout;
mod envelope;
pub mod erasure;
mod error;
pub mod fsstats;
pub mod limits;
pub mod locks;
mod message;
mod path;
mod peer_request;
pub mod reply;
mod request;
mod request_parts;
pub mod requests;
mod server_request;
pub mod trash;
pub mod tree_index;

/// The protocol version messages are encoded for on this thread: a connection sets its
/// own around each frame (docs/upgrades.md "New fields in the cluster map").
pub mod versioned {
    pub use crate::appended::APPENDED_36;
    pub use myriad_placement::map_wire::{MAP_EXT_SINCE, scope, version};
}
mod types;

pub use audience::{ClientPart, FromClient, Request};
pub use envelope::{Envelope, SentOnce};
pub use error::{ErrorKind, FsError, WireError};
pub use message::{
    Auth, AuthReply, CLAIMS_MOVE_SINCE, ClientFrame, DIR_UNDECIDED_SINCE, Endpoints, Hello,
    HelloReply, HotDir, LatencyHistogram, LeaseGrant, MAGIC, MKDIR_BEHIND_SINCE, PROTOCOL_MIN,
    PROTOCOL_VERSION, PeerKind, QUOTA_ANCHORS_SINCE, QUOTAS_LEAVE_TRASH_SINCE,
    REMOVAL_CLAIMS_SINCE, RequestFrame, RequestFrameRef, Response, ResponseFrame,
    SETATTR_IN_CREATE_SINCE, TRASH_KEEPS_ACROSS_SINCE, negotiate,
};
/// Shard types are part of the protocol (maps travel in replies and redirects).
pub use myriad_placement::{NodeId, PartitionId, Shard, ShardMap, name_hash, zone_name_ok};
pub use path::{validate_name, validate_path};
pub use peer_request::{
    BundleItem, DirAction, DirTouchItem, ExportedEntry, InodeOp, PeerRequest, RaftRpc, ReplOp,
    ReplicaRequest,
};
pub use request::{ClientRequest, CopyRange, OnceId, ReadOf, Slot};
pub use request_parts::{LeaseKey, RenameFlags, SetAttr, XattrMode};
pub use server_request::{
    AdminRequest, FsckDir, FsckEntry, FsckRepair, LONG_POLL_OPS, ServerRequest,
};
pub use types::{
    Caller, CounterSnapshot, DirEntry, FileKind, Inode, InodeId, OpCount, ROOT_INO, ReadOnlyMark,
    StatFs, TierStat, TrafficKind, Xattr, ZoneTraffic,
};
