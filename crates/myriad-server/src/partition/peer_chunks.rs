//! A partition's answers to other servers about chunks: cuts after a truncate, coded
//! chunks' fragments. Routed here by `peer_ops::serve_peer`.

use std::sync::Arc;

use myriad_placement::NodeId;
use myriad_proto::{InodeId, Response, WireError};

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::state::mutation::Mutation;

impl Partition {
    /// Whether a coded chunk's record names `server` for fragment `index` of `generation`.
    pub(super) fn peer_fragment_named(
        &self,
        st: &Arc<MapState>,
        ino: InodeId,
        chunk: u64,
        slot: (u8, u32),
        server: NodeId,
    ) -> Result<Response, WireError> {
        let (index, generation) = slot;
        self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
        let named = self
            .store
            .coded(ino, chunk)
            .map_err(crate::state::mutation::storage_err)?
            .is_some_and(|c| {
                c.generation == generation && c.servers.get(usize::from(index)) == Some(&server)
            });
        Ok(Response::Bool(named))
    }

    /// Cuts a chunk to its first `keep_bytes` (a truncate).
    pub(super) async fn peer_chunk_trim(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        ino: InodeId,
        chunk: u64,
        keep_bytes: u64,
    ) -> Result<Response, WireError> {
        self.own(st, st.ring.owner_of_chunk(ino, chunk))?;
        self.cut(ino, chunk, || Mutation::ChunkTrim {
            ino,
            chunk,
            keep_bytes,
        })
        .await?;
        Ok(Response::Unit)
    }

    /// Cuts the chunk holding byte `from_bytes` of a file there.
    pub(super) async fn peer_chunk_trim_from(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        ino: InodeId,
        from_bytes: u64,
    ) -> Result<Response, WireError> {
        let inside = from_bytes / st.map.chunk_size_bytes.max(1);
        self.cut(ino, inside, || Mutation::ChunkTrimFrom { ino, from_bytes })
            .await?;
        Ok(Response::Unit)
    }
}
