//! The erasure-coded fragments this server keeps (docs/redundancy.md): stored for the
//! partition coding a file (`PeerRequest::PutFragments`, durable before the answer), read
//! by clients with a capability for the file (`ServerRequest::ReadFragment`), dropped
//! (`PeerRequest::DropFragments`). One copy each, in the server's own records
//! (`myriad_storage::FragmentStore`): the code is their redundancy.

use myriad_proto::auth::Capability;
use myriad_proto::{FsError, InodeId, Response};
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

fn storage(e: StorageError) -> FsError {
    match e {
        StorageError::NoSpace => FsError::NoSpace,
        other => FsError::Io(other.to_string()),
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
    ) -> Result<Response, FsError> {
        let store = self.fragment_store();
        for (index, data) in fragments {
            let id = FragmentId { ino, chunk, index };
            let f = Fragment {
                generation,
                data: data.into_vec(),
            };
            store.put(id, &f).map_err(storage)?;
        }
        // Its own fsync, outside the group commit of the partitions' batches: fragments
        // are written in background work (coding a settled file), megabytes at a time.
        let kv = self.kv.clone();
        tokio::task::spawn_blocking(move || kv.sync())
            .await
            .map_err(|e| FsError::Io(format!("fragment sync: {e}")))?
            .map_err(storage)?;
        Ok(Response::Unit)
    }

    /// Bytes of one fragment, for a client holding a capability to read its file.
    pub(crate) fn read_fragment(&self, r: &FragmentRead) -> Result<Response, FsError> {
        let key = self
            .config
            .keys
            .capability_key()
            .ok_or_else(|| FsError::Io("this server holds no cluster key".into()))?;
        let now_ns = self.clock.now_ns();
        if !key.admits(&r.cap, r.id.ino, false, now_ns) {
            return Err(FsError::PermissionDenied);
        }
        let f = self
            .fragment_store()
            .get(r.id)
            .map_err(storage)?
            .ok_or(FsError::NotFound)?;
        if f.generation != r.generation {
            return Err(FsError::Stale);
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
    ) -> Result<Response, FsError> {
        self.fragment_store()
            .drop_chunk(ino, chunk, generation)
            .map_err(storage)?;
        Ok(Response::Unit)
    }

    /// The fragments kept here after `after` (fsck), each with its generation if intact.
    pub(crate) fn list_fragments(
        &self,
        after: Option<(InodeId, u64, u8)>,
        limit: u32,
    ) -> Result<Response, FsError> {
        let after = after.map(|(ino, chunk, index)| FragmentId { ino, chunk, index });
        let limit = usize::try_from(limit.clamp(1, 4096)).unwrap_or(4096);
        let list = self.fragment_store().list(after, limit).map_err(storage)?;
        Ok(Response::Fragments(
            list.into_iter()
                .map(|(id, generation)| (id.ino, id.chunk, id.index, generation))
                .collect(),
        ))
    }
}
