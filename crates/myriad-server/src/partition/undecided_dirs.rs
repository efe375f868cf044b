//! Directory objects made by a mkdir not yet known to be committed (ARCHITECTURE.md
//! "Undecided directory objects"): marked when made, they take no entries until the
//! partition of their entry says the mkdir committed, so an undone mkdir's object is
//! always empty when it is removed. Before the mark, a create racing the mkdir could land
//! in the object, and if the mkdir was then undone, its removal was refused `NotEmpty`
//! forever (the name pending, the file unreachable: simulation seed 186 with `--trash`).
//!
//! Three parts: the mark, set only once the map's floor knows it; the coordinator's
//! confirm, sent without waiting once the mkdir can no longer be undone; and the settle,
//! run by a partition whose change met a mark (`WireError::DirUndecided`), which asks the
//! entry and serves the change again (`serve_request::dispatch_request`).

use std::sync::Arc;

use myriad_proto::{
    DIR_UNDECIDED_SINCE, InodeId, PartitionId, PeerRequest, Request, Response, WireError,
    validate_path,
};

use crate::cluster::MapState;
use crate::commit::Context;
use crate::partition::core::Partition;
use crate::state::mutation::Mutation;

/// How many marks one request may settle before it is answered `Busy` (a create meets
/// one; a rename may meet its target's, then another after a move).
pub(crate) const SETTLES_MAX: u32 = 4;

impl Partition {
    /// Whether a directory object made now for a mkdir is marked undecided: only once
    /// every member of the cluster reads the mark (record version 5) and answers the
    /// requests that clear it.
    pub(crate) fn marks_undecided(st: &MapState) -> bool {
        st.map.ext.protocol_floor >= DIR_UNDECIDED_SINCE
    }

    /// The coordinator of the mkdir of `path` (inode `ino`), past the point where it could
    /// undo it: tells the object's home, without waiting (a lost confirm costs the first
    /// change in the directory one question to the entry).
    pub(crate) fn confirm_dir_object(
        self: &Arc<Self>,
        owner: PartitionId,
        path: &str,
        ino: InodeId,
    ) {
        if !Self::marks_undecided(&self.state()) {
            return;
        }
        let me = self.clone();
        let body = Request::Peer(PeerRequest::DirObjectConfirm {
            path: path.to_string(),
            ino,
        });
        tokio::spawn(async move {
            if let Err(e) = me.call_node(owner, body).await {
                tracing::debug!(partition = %me.me, "a directory's confirm was not delivered: {e}");
            }
        });
    }

    /// `PeerRequest::DirObjectConfirm`: noted (`confirmed_dirs.rs`); the mark is cleared
    /// by the directory's first change, in its round.
    pub(super) fn peer_dir_object_confirm(
        &self,
        path: &str,
        ino: InodeId,
    ) -> Result<Response, WireError> {
        validate_path(path)?;
        self.confirmed_dirs.add(path, ino);
        Ok(Response::Unit)
    }

    /// Clears this part's mark, applied without waiting for durability (lost in a crash,
    /// the mark only sends the next change to ask again; every change admitted after it is
    /// later in the log).
    async fn clear_undecided(&self, path: String, ino: InodeId) -> Result<(), WireError> {
        let confirm = Mutation::DirObjectConfirm { path, ino };
        self.applier
            .run_visible_in(&Context::background(), confirm)
            .await
            .map(|_| ())
    }

    /// `PeerRequest::MkdirDecided`: whether the entry `path` here holds directory `ino`,
    /// committed (`Unit`), holds no such directory (`NotFound`), or is still pending after
    /// a reader's wait (`Busy`).
    pub(super) async fn peer_mkdir_decided(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        path: String,
        ino: InodeId,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_entry(st, &path)?;
        match self.lookup(&path).await {
            Ok(inode) if inode.ino == ino => Ok(Response::Unit),
            Ok(_) => Err(WireError::NotFound),
            Err(e) => Err(e),
        }
    }

    /// A change met the mark of directory `dir`'s part here (inode `ino`): asks the
    /// partition of its entry; committed, clears the mark (the caller serves the change
    /// again). `NotFound` if the directory does not exist (its mkdir undone), `Busy` while
    /// the mkdir is undecided.
    pub(crate) async fn settle_undecided_dir(
        self: &Arc<Self>,
        dir: &str,
        ino: InodeId,
    ) -> Result<(), WireError> {
        if self.confirmed_dirs.take(dir, ino) {
            return self.clear_undecided(dir.to_string(), ino).await;
        }
        let ask = Request::Peer(PeerRequest::MkdirDecided {
            path: dir.to_string(),
            ino,
        });
        match self.call_entry(dir, ask).await {
            Ok(_) => {}
            Err(WireError::NotFound) => return Err(WireError::NotFound),
            // A question about another partition's entry: whatever kept it from an answer
            // (a failover, a routing change) is for the client to wait out.
            Err(e) if e.is_routing() => return Err(WireError::Busy),
            Err(e) => return Err(e),
        }
        self.clear_undecided(dir.to_string(), ino).await
    }
}
