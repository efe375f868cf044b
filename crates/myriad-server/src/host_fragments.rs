//! The erasure-coded fragments this server keeps (docs/redundancy.md): stored for the
//! partition coding a file (`PeerRequest::PutFragments`, durable before the answer), read
//! by clients with a capability for the file (`ServerRequest::ReadFragment`), dropped
//! (`PeerRequest::DropFragments`). One copy each, in the server's own records
//! (`myriad_storage::FragmentStore`): the code is their redundancy.

use myriad_placement::PartitionId;
use myriad_proto::auth::Capability;
use myriad_proto::{InodeId, PeerRequest, Request, Response, WireError};
use myriad_storage::{Fragment, FragmentId, FragmentStore, StorageError};

use crate::host::Host;

/// A fragment read, as `ServerRequest::ReadFragment` asks for it.
pub(crate) struct FragmentRead {
    pub(crate) id: FragmentId,
    pub(crate) generation: u32,
    pub(crate) offset: u32,
    pub(crate) len: u32,
    pub(crate) cap: Capability,
}

fn storage(e: StorageError) -> WireError {
    match e {
        StorageError::NoSpace => WireError::NoSpace,
        other => WireError::Io(other.to_string()),
    }
}

impl Host {
    fn fragment_store(&self) -> FragmentStore {
        FragmentStore::new(self.kv.clone())
    }

    /// Keeps `fragments` of chunk `chunk` of `ino`, durable before it answers (a full
    /// disk refused it before: `dispatch_server` admits it as partitions admit writes).
    pub(crate) async fn put_fragments(
        &self,
        ino: InodeId,
        chunk: u64,
        generation: u32,
        fragments: Vec<(u8, serde_bytes::ByteBuf)>,
    ) -> Result<Response, WireError> {
        let store = self.fragment_store();
        for (index, data) in fragments {
            let id = FragmentId {
                ino,
                chunk,
                index,
                generation,
            };
            let f = Fragment {
                generation,
                data: data.into_vec(),
            };
            store.put(id, &f).map_err(storage)?;
        }
        // Its own fsync, outside the group commit of the partitions' batches: fragments
        // are written in background work (coding a settled file), megabytes at a time.
        // On a thread of its own in the process; inline where the loops run as tasks (a
        // simulation: its disk's sync is instant, and a thread would make runs differ).
        let kv = self.kv.clone();
        match self.runner {
            crate::commit::Runner::Threads => tokio::task::spawn_blocking(move || kv.sync())
                .await
                .map_err(|e| WireError::Io(format!("fragment sync: {e}")))?
                .map_err(storage)?,
            crate::commit::Runner::Tasks { .. } => kv.sync().map_err(storage)?,
        }
        Ok(Response::Unit)
    }

    /// Bytes of one fragment, for a client holding a capability to read its file.
    pub(crate) fn read_fragment(&self, r: &FragmentRead) -> Result<Response, WireError> {
        let key = self
            .config
            .keys
            .capability_key()
            .ok_or_else(|| WireError::Io("this server holds no cluster key".into()))?;
        let now_ns = self.clock.now_ns();
        if !key.admits(&r.cap, r.id.ino, false, now_ns) {
            return Err(WireError::PermissionDenied);
        }
        let f = self
            .fragment_store()
            .get(r.id)
            .map_err(storage)?
            .ok_or(WireError::NotFound)?;
        if f.generation != r.generation {
            return Err(WireError::Stale);
        }
        let start = usize::try_from(r.offset)
            .unwrap_or(usize::MAX)
            .min(f.data.len());
        let end = start
            .saturating_add(usize::try_from(r.len).unwrap_or(usize::MAX))
            .min(f.data.len());
        Ok(Response::Data {
            inode: None,
            data: f.data[start..end].to_vec(),
        })
    }

    /// Drops the fragments of chunk `chunk` of `ino` of generation `generation` kept here.
    pub(crate) fn drop_fragments(
        &self,
        ino: InodeId,
        chunk: u64,
        generation: u32,
    ) -> Result<Response, WireError> {
        self.fragment_store()
            .drop_chunk(ino, chunk, generation)
            .map_err(storage)?;
        Ok(Response::Unit)
    }

    /// Whether this server keeps any fragment (a leaving server stays in the map until it
    /// keeps none).
    pub(crate) fn keeps_fragments(&self) -> Result<bool, WireError> {
        Ok(!self
            .fragment_store()
            .list(None, 1)
            .map_err(storage)?
            .is_empty())
    }

    /// One round of a leaving server's sweep (docs/redundancy.md, "Leaving"): every
    /// fragment kept here that its chunk's record no longer names here (rebuilt elsewhere
    /// meanwhile, or an orphan) is dropped; the others wait for their partition to rebuild
    /// them elsewhere. Returns how many were dropped.
    pub(crate) async fn sweep_leaving_fragments(&self) -> Result<usize, WireError> {
        let store = self.fragment_store();
        let mut after = None;
        let mut dropped = 0;
        loop {
            let page = store.list(after, 256).map_err(storage)?;
            let Some(&(last, _)) = page.last() else {
                return Ok(dropped);
            };
            after = Some(last);
            for (id, intact) in page {
                let named = match intact {
                    None => false, // damaged: its partition rebuilds it from the others
                    Some(_) => {
                        let generation = id.generation;
                        let owner = self.state().ring.owner_of_chunk(id.ino, id.chunk);
                        let ask = Request::Peer(PeerRequest::FragmentNamed {
                            ino: id.ino,
                            chunk: id.chunk,
                            index: id.index,
                            generation,
                            server: self.id,
                        });
                        let still = || true;
                        match crate::host_env::call_partition(
                            self,
                            PartitionId::SERVER,
                            owner,
                            ask,
                            &still,
                        )
                        .await?
                        {
                            Response::Bool(named) => named,
                            _ => true,
                        }
                    }
                };
                if !named {
                    store.drop_one(id).map_err(storage)?;
                    dropped += 1;
                }
            }
        }
    }

    /// The fragments kept here after `after` (fsck), each with its generation if intact.
    pub(crate) fn list_fragments(
        &self,
        after: Option<(InodeId, u64, u8, u32)>,
        limit: u32,
    ) -> Result<Response, WireError> {
        let after = after.map(|(ino, chunk, index, generation)| FragmentId {
            ino,
            chunk,
            index,
            generation,
        });
        let limit = usize::try_from(limit.clamp(1, 4096)).unwrap_or(4096);
        let list = self.fragment_store().list(after, limit).map_err(storage)?;
        Ok(Response::Fragments(
            list.into_iter()
                .map(|(id, intact)| (id.ino, id.chunk, id.index, id.generation, intact.is_some()))
                .collect(),
        ))
    }
}
