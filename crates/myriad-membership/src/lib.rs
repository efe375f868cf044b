//! The cluster map kept by consensus (issue 6, docs/replication.md): an openraft 0.9 group
//! among the servers whose state machine is the `ClusterMap`.
//!
//! This crate holds the durable parts: the Raft log and vote (`log_store.rs`) and the state
//! machine with its snapshots (`state_machine.rs`), both on a node's own store (`Kv`, the
//! `RaftLog` and `RaftState` spaces), checked by openraft's storage conformance suite; and
//! the running group (`group.rs`): openraft over a `Transport` the server supplies.
//!
//! Must not depend on: the network crate, server, client (it sees peers only through
//! `Transport`).

// openraft's `StorageError` (224 bytes) is the error its storage traits require; boxing it
// in our helpers would only add a conversion at every trait method.
#![allow(clippy::result_large_err)]

mod codec;
mod group;
mod log_store;
mod map_bytes;
mod state_machine;

use std::io::Cursor;

use myriad_placement::ClusterMap;
use serde::{Deserialize, Serialize};

pub use group::{BoxFuture, Group, LEADER_LEASE, OnMap, ProposeError, Transport, VOTERS_MAX};
pub use log_store::LogStore;
pub use state_machine::MapStateMachine;

/// Raft node ids are the cluster map's node ids.
pub type NodeId = u64;

/// A change of the cluster map, proposed to the group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapCommand {
    /// Replace the map; applied only if its epoch is above the current one. Written as
    /// protocol 34 wrote maps: without their extension (`MapExt`).
    Install(ClusterMap),
    /// `Install` of a map with its extension, written once the cluster's protocol floor
    /// is 35 or later, when every member reads it (`map_bytes.rs`).
    InstallExt(#[serde(with = "map_bytes::with_ext")] ClusterMap),
}

impl MapCommand {
    /// The entry that installs `map`: with its extension once its floor lets every
    /// member read one.
    #[must_use]
    pub fn install(map: ClusterMap) -> MapCommand {
        if map.ext.protocol_floor >= myriad_placement::map_wire::MAP_EXT_SINCE {
            MapCommand::InstallExt(map)
        } else {
            MapCommand::Install(map)
        }
    }

    /// The map it installs.
    #[must_use]
    pub fn into_map(self) -> ClusterMap {
        match self {
            MapCommand::Install(m) | MapCommand::InstallExt(m) => m,
        }
    }
}

/// What applying a log entry answered: the map's epoch after it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapReply {
    pub epoch: u64,
}

openraft::declare_raft_types!(
    /// The cluster-map group's types.
    pub TypeConfig:
        D = MapCommand,
        R = MapReply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type StorageError = openraft::StorageError<NodeId>;

#[cfg(test)]
mod tests;
