//! Frozen trees (docs/metadata-index.md): marking a directory object, every part of a
//! split one included, as inside a tree whose entries may not change. The refusals
//! themselves are the state layer's (`writable_shard`, `DirFreeze`, `DirObjectRemove`).

use std::sync::Arc;

use myriad_proto::{PartitionId, PeerRequest, ReadOnlyMark, Request, Response, WireError};

use crate::cluster::MapState;
use crate::commit::Context;
use crate::partition::core::Partition;
use crate::state::mutation::{Mutation, storage_err};

/// How often the home marks its parts again when a split changed them meanwhile.
const MARK_ROUNDS: usize = 8;

impl Partition {
    /// Home of directory `path`: marks (or with `None` unmarks) its own record and every
    /// other part of it, until the shard map it started from is still the map after the
    /// last part (a split that finished meanwhile made parts this pass did not know).
    /// Once the home is marked no name can be created in any part, so no new split
    /// starts; one under way answers `Busy` until it ends.
    pub(crate) async fn mark_read_only(
        self: &Arc<Self>,
        path: &str,
        mark: Option<ReadOnlyMark>,
        auto: bool,
    ) -> Result<(), WireError> {
        for _ in 0..MARK_ROUNDS {
            let version = |p: &Self| -> Result<Option<u64>, WireError> {
                let rec = p.store.dir(path).map_err(storage_err)?;
                Ok(rec.and_then(|r| r.map).map(|m| m.version))
            };
            let before = version(self)?;
            self.mark_part(path, mark, auto).await?;
            for node in self.other_parts(path)? {
                let req = PeerRequest::DirMarkReadOnly {
                    path: path.to_string(),
                    mark,
                    auto,
                };
                self.call_node(node, Request::Peer(req)).await?;
            }
            if version(self)? == before {
                return Ok(());
            }
        }
        Err(WireError::Busy)
    }

    /// `ReadOnly` if this node's part of directory `dir` is in a frozen tree.
    pub(crate) fn require_not_frozen(&self, dir: &str) -> Result<(), WireError> {
        match self.store.dir(dir).map_err(storage_err)? {
            Some(rec) if rec.read_only.is_some() => Err(WireError::ReadOnly),
            _ => Ok(()),
        }
    }

    /// Whether this node's part of `dir` is in a tree with an index, frozen or automatic:
    /// no change there may be answered behind (no exclusive lease).
    pub(crate) fn indexed_here(&self, dir: &str) -> Result<bool, WireError> {
        Ok(self
            .store
            .dir(dir)
            .map_err(storage_err)?
            .is_some_and(|r| r.read_only.is_some() || r.auto_index.is_some()))
    }

    /// Before a change that passes no directory's gate (a write capability for chunks
    /// past the first): `ReadOnly` in a frozen tree, and an automatic index of `dir`'s
    /// tree unregistered first.
    pub(crate) async fn before_change_in(&self, dir: &str) -> Result<(), WireError> {
        let Some(rec) = self.store.dir(dir).map_err(storage_err)? else {
            return Ok(());
        };
        if rec.read_only.is_some() {
            return Err(WireError::ReadOnly);
        }
        match rec.auto_index {
            Some(mark) => {
                let ctx = Context::background();
                self.applier.unregister_auto_index(&ctx, dir, mark).await
            }
            None => Ok(()),
        }
    }

    /// `DirMarkReadOnly`: this partition's part of directory `path` marked or unmarked.
    pub(super) async fn peer_mark_read_only(
        &self,
        st: &MapState,
        path: String,
        (mark, auto): (Option<ReadOnlyMark>, bool),
    ) -> Result<Response, WireError> {
        myriad_proto::validate_path(&path)?;
        self.own_dir_part(st, &path)?;
        self.mark_part(&path, mark, auto).await?;
        Ok(Response::Unit)
    }

    /// This node's part of directory `path`, marked or unmarked (durable).
    pub(crate) async fn mark_part(
        &self,
        path: &str,
        mark: Option<ReadOnlyMark>,
        auto: bool,
    ) -> Result<(), WireError> {
        self.applier
            .run(Mutation::MarkReadOnly {
                path: path.to_string(),
                mark,
                auto,
            })
            .await
            .map(|_| ())
    }

    /// The partitions other than this one holding shards of split directory `path` (none
    /// for an unsplit one), by its home's map.
    fn other_parts(&self, path: &str) -> Result<Vec<PartitionId>, WireError> {
        let Some(map) = self
            .store
            .dir(path)
            .map_err(storage_err)?
            .and_then(|r| r.map)
        else {
            return Ok(Vec::new());
        };
        let mut nodes = self.part_nodes(path, &map);
        nodes.retain(|n| *n != self.me);
        Ok(nodes)
    }
}
