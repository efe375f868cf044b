//! A request that names a path below a directory whose object is not here (docs/fuse.md
//! "mkdir behind", a path named below a new directory). A mount walks paths through their
//! parents, whose leases send a mkdir answered behind before anyone looks at its name;
//! a client that names `a/new/x` directly (the native API, Python, S3) comes straight to
//! the partition of `a/new`'s names, which has no object for it while the maker's
//! journal still holds the mkdir. Answering `NotFound` then would break read-after-write
//! for what the maker was told is made. So before a `NotFound` for want of the object,
//! the partition asks the partition of the directory's entry to look for it as a read
//! does: that read recalls other clients' exclusive leases on the parent (whose journal
//! holds the mkdir, sent before the lease comes back), one level up again if the parent's
//! object is missing too (at most `SOUGHT_HOPS_MAX` levels). Only once the map's floor is 42 (no mkdir is answered behind
//! before); it costs a request only for paths below directories that do not exist.

use std::sync::Arc;

use myriad_placement::split_parent;
use myriad_proto::{
    ClientRequest, FileKind, MKDIR_BEHIND_SINCE, PeerRequest, Request, Response, WireError,
    validate_path,
};

use crate::cluster::MapState;
use crate::partition::core::Partition;

/// How many directories up one request's asks go (each made behind, none sent yet): a
/// path below more missing directories than that answers `NotFound` at once, so that one
/// request naming a deep missing path costs a bounded number of asks.
const SOUGHT_HOPS_MAX: u8 = 8;

impl Partition {
    /// The directory a request that answered `NotFound` is served from, if it may have
    /// been made behind by a client whose journal holds what the request looks for:
    /// `(dir, true)` if this partition (where its names would be) holds no object for
    /// it; `(dir, false)` if it does now, made meanwhile and held exclusively by another
    /// client than `reader` (the request ran before the object, and its lease, were
    /// there: the maker's journal in it may hold the name). `None`: the answer stands.
    pub(crate) fn maybe_made_behind(
        &self,
        body: &Request<ClientRequest>,
        reader: Option<u64>,
    ) -> Option<(String, bool)> {
        let Request::Client(r) = body else {
            return None;
        };
        let dir = r.served_dir()?;
        let st = self.state();
        if dir == "/"
            || st.map.ext.protocol_floor < MKDIR_BEHIND_SINCE
            || st.ring.owner_of_dir(dir) != self.me
        {
            return None;
        }
        if self.store.dir(dir).ok()?.is_none() {
            return Some((dir.to_string(), true));
        }
        let held = self
            .leases()
            .is_some_and(|t| t.held_by_another(dir, reader));
        held.then(|| (dir.to_string(), false))
    }

    /// Asks the partition of directory `dir`'s entry to look for it as a read by `reader`
    /// would (`DirSought`): whether it is a directory there now (the request is then
    /// served again).
    pub(crate) async fn seek_dir(
        self: &Arc<Self>,
        dir: &str,
        (reader, hops): (Option<u64>, u8),
    ) -> Result<bool, WireError> {
        if hops >= SOUGHT_HOPS_MAX {
            return Ok(false);
        }
        let ask = Request::Peer(PeerRequest::DirSought {
            path: dir.to_string(),
            reader,
            hops,
        });
        match self.call_entry(dir, ask).await {
            Ok(_) => Ok(true),
            Err(WireError::NotFound | WireError::NotADirectory) => Ok(false),
            Err(e) if e.is_routing() => Err(WireError::Busy),
            Err(e) => Err(e),
        }
    }

    /// `PeerRequest::DirSought`: after other clients' exclusive leases on `path`'s
    /// directory are given back (their journals sent), whether `path` is a directory.
    pub(crate) async fn peer_dir_sought(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        path: String,
        (reader, hops): (Option<u64>, u8),
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        if path == "/" {
            return Ok(Response::Unit);
        }
        self.own_entry(st, &path)?;
        let (parent, _) = split_parent(&path);
        let mut sought_above = false;
        loop {
            // Again after the parent was found above: the maker's birth lease on it may
            // hold this mkdir.
            if let Some(t) = self.leases() {
                t.before_read(parent, reader).await;
                self.not_deposed()?;
            }
            match self.lookup(&path).await {
                Ok(i) if i.kind == FileKind::Directory => return Ok(Response::Unit),
                Ok(_) => return Err(WireError::NotADirectory),
                // The parent itself may be made behind too: one level up, once. Or made
                // meanwhile (its object and its maker's lease came after the gate above
                // found neither): through the gate again.
                Err(WireError::NotFound)
                    if !sought_above
                        && parent != "/"
                        && st.map.ext.protocol_floor >= MKDIR_BEHIND_SINCE =>
                {
                    sought_above = true;
                    if self.store.dir(parent).ok().flatten().is_none() {
                        let up = (reader, hops.saturating_add(1));
                        if !Box::pin(self.seek_dir(parent, up)).await? {
                            return Err(WireError::NotFound);
                        }
                    } else if !self
                        .leases()
                        .is_some_and(|t| t.held_by_another(parent, reader))
                    {
                        return Err(WireError::NotFound);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}
