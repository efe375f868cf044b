//! Blocks that fail their checksum (myriad-storage blocks.rs): found where they are read (or
//! by fsck on any copy), reported, and replaced from an intact copy.
//!
//! The primary repairs. First a barrier: every batch it applied before is then on every live
//! backup, so a backup's copy of the block is at least as new as any acknowledged write of
//! it. Then the intact copy (its own, or the first backup's that is intact) is written with
//! `Mutation::RepairBlock` as an ordinary replicated batch, so every copy ends up with it. The
//! mutation checks that the block is still what repair saw, so a write racing the repair
//! wins.

use myriad_proto::{Endpoints, NodeId, Request, Response, WireError};
use myriad_storage::{Space, StorageError};

use crate::partition::core::Partition;
use crate::state::mutation::{Mutation, storage_err};
use myriad_proto::InodeId;
use myriad_proto::ReplicaRequest;

/// Blocks one read may repair before giving up (a 4 MiB read spans 64 blocks).
const REPAIRS_PER_READ_MAX: usize = 64;

impl Partition {
    /// `Store::read_range`, repairing blocks that fail their checksum from another copy.
    pub(crate) async fn read_range_repairing(
        &self,
        ino: InodeId,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Result<Vec<u8>, WireError> {
        let (data, _) = self.read_range_whole(ino, offset, len, size).await?;
        Ok(data)
    }

    /// `read_range_repairing`, and whether every byte came from a block
    /// (`Store::read_range_whole`).
    pub(crate) async fn read_range_whole(
        &self,
        ino: InodeId,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Result<(Vec<u8>, bool), WireError> {
        for _ in 0..REPAIRS_PER_READ_MAX {
            match self.store.read_range_whole(ino, offset, len, size) {
                Err(StorageError::Checksum { ino, block }) => self.repair_block(ino, block).await?,
                r => return r.map_err(storage_err),
            }
        }
        Err(WireError::Io(format!(
            "inode {ino}: more than {REPAIRS_PER_READ_MAX} corrupt blocks in one read"
        )))
    }

    /// Makes every copy of block `block` of `ino` intact again, from one that is.
    pub(crate) async fn repair_block(&self, ino: InodeId, block: u64) -> Result<(), WireError> {
        self.env.count("block_checksum_failures");
        self.applier.run(Mutation::Barrier).await?;
        let (data, from) = match self.store.block(ino, block) {
            Ok(Some(d)) => (d, self.env.server_id()),
            Ok(None) => return Ok(()),
            Err(StorageError::Checksum { .. }) => {
                tracing::error!(
                    partition = %self.me,
                    ino = %ino,
                    block,
                    "block failed its checksum here; repairing it from a backup"
                );
                self.intact_copy_on_a_backup(ino, block).await?
            }
            Err(e) => return Err(storage_err(e)),
        };
        self.applier
            .run(Mutation::RepairBlock { ino, block, data })
            .await?;
        self.env.count("blocks_repaired");
        tracing::warn!(
            partition = %self.me,
            ino = %ino,
            block,
            from_server = %from,
            "block repaired on every copy"
        );
        Ok(())
    }

    async fn intact_copy_on_a_backup(
        &self,
        ino: InodeId,
        block: u64,
    ) -> Result<(Vec<u8>, NodeId), WireError> {
        let req = ReplicaRequest::ReplicaBlock { ino, block };
        self.intact_on_a_backup(req, &format!("block {block} of inode {ino}"))
            .await
            .ok_or(WireError::Corrupt { ino, block })
    }

    /// The first intact copy a backup answers `req` (`ReplicaBlock`, `ReplicaRecord`)
    /// with, and which backup; `None` (logged) if none has one.
    async fn intact_on_a_backup(
        &self,
        req: ReplicaRequest,
        what: &str,
    ) -> Option<(Vec<u8>, NodeId)> {
        let st = self.env.map();
        let ends = Endpoints {
            target: self.me,
            source: self.me,
        };
        let req = Request::Replica(req);
        for server in st.map.backups_of(self.me) {
            match self.env.send(server, st.map.epoch, ends, &req).await {
                Ok(Response::BlockCopy(Some(d)) | Response::RecordCopy(Some(d))) => {
                    return Some((d.into_vec(), server));
                }
                Ok(other) => {
                    tracing::warn!(server = %server, "no intact copy of {what} on this backup: {other:?}");
                }
                Err(e) => {
                    tracing::warn!(server = %server, "no intact copy of {what} on this backup: {e}");
                }
            }
        }
        tracing::error!(
            partition = %self.me,
            "{what} is damaged and no backup has an intact copy"
        );
        None
    }

    /// Makes every copy of the metadata record at (`space`, `key`) intact again, from one
    /// that is (as `repair_block`: a barrier, then an intact copy, here or on a backup,
    /// written as an ordinary replicated batch).
    pub(crate) async fn repair_record(&self, space: Space, key: Vec<u8>) -> Result<(), WireError> {
        self.env.count("record_checksum_failures");
        self.applier.run(Mutation::Barrier).await?;
        let here = self.store.raw_record(space, &key).map_err(storage_err)?;
        let (value, from) = match here {
            None => return Ok(()),
            Some(v) if myriad_storage::record_intact(&v) => (v, self.env.server_id()),
            Some(_) => {
                tracing::error!(
                    partition = %self.me,
                    space = space.name(),
                    "record failed its checksum here; repairing it from a backup"
                );
                let req = ReplicaRequest::ReplicaRecord {
                    space: space.code(),
                    key: key.clone(),
                };
                let what = format!("a {} record", space.name());
                self.intact_on_a_backup(req, &what)
                    .await
                    .ok_or_else(|| WireError::Io(format!("{what} is damaged on every copy")))?
            }
        };
        self.applier
            .run(Mutation::RepairRecord { space, key, value })
            .await?;
        self.env.count("records_repaired");
        tracing::warn!(
            partition = %self.me,
            space = space.name(),
            from_server = %from,
            "record repaired on every copy"
        );
        Ok(())
    }
}
