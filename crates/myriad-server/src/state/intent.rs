//! Intents: durable records of multi-node operations in flight, written in the same atomic
//! batch as the first local step and deleted in the same batch as the last. At start (and
//! periodically) the recovery task finishes or undoes every intent no live operation owns.
//! See ARCHITECTURE.md "Two-node operations".

use myriad_proto::InodeId;
use myriad_proto::{PartitionId, codec};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    Undecided,
    Commit,
    Abort,
}

/// One directory object moved by a directory rename.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirMove {
    pub old: String,
    pub new: String,
    /// Partitions holding a part of the old directory (its home, and its shards' partitions
    /// if split).
    pub old_nodes: Vec<PartitionId>,
    /// The directory's shard map (`None`: unsplit); the new path gets the same shards, each
    /// on the node placement gives it under the new path.
    pub map: Option<myriad_proto::ShardMap>,
}

impl DirMove {
    /// `old_nodes`, or the home if the list is empty.
    #[must_use]
    pub fn nodes(&self, home: PartitionId) -> Vec<PartitionId> {
        if self.old_nodes.is_empty() {
            vec![home]
        } else {
            self.old_nodes.clone()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Intent {
    /// Coordinator of mkdir `dir/name`: the entry is pending; the directory object `path` is
    /// being created on its owner. Undecided rolls forward (the client saw no answer).
    Mkdir {
        dir: String,
        name: String,
        ino: InodeId,
        /// Pre-split into 2^depth shards.
        depth: u8,
        decision: Decision,
    },
    /// Coordinator of rmdir: the entry is pending; the directory object is being removed.
    Rmdir {
        dir: String,
        name: String,
        ino: InodeId,
        decision: Decision,
    },
    /// Coordinator (source side) of a cross-node rename of `from_dir/from_name` to `to`.
    /// Undecided rolls back.
    RenameOut {
        from_dir: String,
        from_name: String,
        to: String,
        /// The node holding the destination entry (chosen by the coordinator's shard map at
        /// the start; recovery must talk to that node, not guess again).
        dst_node: PartitionId,
        ino: InodeId,
        decision: Decision,
        /// For a directory: every directory object of the subtree (old -> new path),
        /// recorded with the commit decision.
        moves: Vec<DirMove>,
    },
    /// Coordinator (the partition holding the tree root's entry) of a tree moving between
    /// placements because its policy changed (docs/zones.md section 3): `group`'s policy
    /// is `Arriving` (or `Leaving`, `arriving` false). The map's settling of that policy
    /// is the decision; `moves` (every directory object of the tree, old and new places
    /// under one path) is recorded before it is asked for.
    TreeMove {
        path: String,
        group: u32,
        arriving: bool,
        moves: Vec<DirMove>,
    },
    /// Destination side of a cross-node rename: `dir/name` holds a staged entry for `ino`
    /// until the coordinator commits or aborts.
    RenameIn {
        coordinator: PartitionId,
        dir: String,
        name: String,
        ino: InodeId,
    },
    /// Partition of a splitting shard of `dir`: its upper half is being copied to the child's
    /// node (docs/huge-dirs.md). Undecided rolls back; Commit repeats the reveal.
    SplitOut {
        dir: String,
        shard: myriad_proto::Shard,
        ino: InodeId,
        decision: Decision,
    },
    /// Chunks >= 1 of `ino` hold bytes at or beyond `keep_bytes` (up to `old_size`) that must be
    /// dropped on their owners (after unlink, replace, or truncate down).
    ChunkGc {
        ino: InodeId,
        keep_bytes: u64,
        old_size: u64,
    },
    /// Destination side of a cross-node rename that was aborted here (at `at_ns`): a
    /// prepare for it that arrives late (sent before the abort, or resent by a task of a
    /// coordinator deposed meanwhile) is refused instead of staging an entry nobody will
    /// ever resolve (simulation seed 80090). Dropped by recovery after `ABORTED_KEPT`.
    RenameAborted { at_ns: i64 },
    /// Destination of an exchange (`RenameFlags::exchange`): as `RenameIn`, but the entry
    /// it replaces goes to the source instead of away (appended: stored intents keep
    /// their encoding).
    ExchangeIn {
        coordinator: PartitionId,
        dir: String,
        name: String,
        ino: InodeId,
    },
    /// Owner of directory object `path`: a directory rename's copy took over the empty
    /// directory `ino` that lived there (stored under `replace_key(txid)`). Revealing the
    /// copy forgets it; dropping the copy puts `ino`'s empty object back. The coordinator
    /// drives both (appended: stored intents keep their encoding).
    DirReplaced { path: String, ino: InodeId },
    /// As `RenameIn`, with the trash on (docs/trash.md): the file the staged entry replaces
    /// (`kept_ino`) goes to the trash's name `kept` (on this partition) when the rename
    /// commits, instead of being freed. Written only once the cluster's floor is
    /// `TRASH_KEEPS_ACROSS_SINCE` (appended: stored intents keep their encoding).
    RenameInKeeping {
        coordinator: PartitionId,
        dir: String,
        name: String,
        ino: InodeId,
        kept: String,
        kept_ino: InodeId,
    },
}

impl Intent {
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self).unwrap_or_default()
    }

    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<Intent> {
        codec::decode(bytes).ok()
    }
}
