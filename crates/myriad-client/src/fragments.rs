//! Reading erasure-coded fragments from the servers that keep them (docs/redundancy.md):
//! a fragment is asked of its server directly, with a capability to read its file.

use myriad_placement::NodeId;
use myriad_proto::auth::Capability;
use myriad_proto::{FsError, InodeId, Request, Response, ServerRequest};

use crate::client::{Client, Route, unexpected};
use crate::file::FileHandle;

/// Which fragment: of chunk `chunk` of file `ino`, number `index`, written for layout
/// generation `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentAt {
    pub ino: InodeId,
    pub chunk: u64,
    pub index: u8,
    pub generation: u32,
}

impl Client {
    /// A capability to read the chunks (and fragments) of `h`.
    pub async fn read_capability(&self, h: &FileHandle) -> Result<Capability, FsError> {
        self.capability(h, false).await
    }

    /// Bytes `offset .. offset + len` of fragment `at`, from server `node`.
    pub async fn read_fragment(
        &self,
        node: NodeId,
        at: FragmentAt,
        (offset, len): (u32, u32),
        cap: Capability,
    ) -> Result<Vec<u8>, FsError> {
        let req = ServerRequest::ReadFragment {
            ino: at.ino,
            chunk: at.chunk,
            index: at.index,
            generation: at.generation,
            offset,
            len,
            cap,
        };
        match self.call(Route::Server(node), Request::Server(req)).await? {
            Response::Data { data, .. } => Ok(data),
            other => Err(unexpected(&other)),
        }
    }
}
