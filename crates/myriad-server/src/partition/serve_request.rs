//! One request to a partition, checked and handed to the family that serves it: who may
//! send it, the disk reserve, chunk capabilities, enough copies for a change, the map
//! epoch, a hard-link name's operation forwarded to its inode's home. Below `dispatch.rs`
//! (which unwraps envelopes) and `exactly_once.rs` (which runs a change once), above the
//! families' routing tables (`client_ops.rs`, `peer_ops.rs`, fsck).

use std::sync::Arc;

use myriad_placement::PartitionId;
use myriad_proto::{
    AdminRequest, Caller, ClientRequest, PeerRequest, Request, Response, WireError,
};

use crate::partition::core::Partition;
use crate::partition::made::Made;

impl Partition {
    /// `NotFound` for a request sent under map `epoch` may only mean that directory `dir`
    /// left this partition while the request ran (its tree moved between zones,
    /// docs/zones.md section 3: the object is dropped here once the newer map places it
    /// elsewhere). Then the newer map, to try there (simulation seed 34 with --leases
    /// --tree-moves: an rmdir that met the drop answered `NotFound`, and the client took
    /// the directory for removed while it lived on in its new place).
    fn moved_away(&self, epoch: u64, dir: &str) -> Option<WireError> {
        let now = self.state();
        let gone = epoch < now.map.epoch
            && now.ring.owner_of_dir(dir) != self.me
            && self.store.dir(dir).ok()?.is_none();
        gone.then(|| WireError::Redirect(Box::new(now.map.clone())))
    }

    /// `NotFound` for the entry `path` may also mean that the shard of its directory that
    /// held it left this partition while the request ran, under the same map: an undone
    /// split dropped the copy here, or a split moved it on (`recheck_shard`). Then the
    /// answer sends the client to the directory's home for its shard map (simulation seed
    /// 93019: an unlink checked its shard here, then the split's undo dropped the shard
    /// and the unlink answered `NotFound` for a name that lived on at the split's source).
    fn shard_gone(&self, path: &str) -> Option<WireError> {
        if path == "/" {
            return None;
        }
        let (dir, name) = myriad_placement::split_parent(path);
        self.recheck_shard(dir, name).err()
    }

    /// One request (a change sent once is unwrapped by `serve_once` first). A change that
    /// would pass this partition's allowance of a quota was not applied: the partition
    /// gets more from the quota's home and serves the request again (docs/quotas.md "The
    /// ledger's protocol"), or answers `QuotaExceeded`; one that met a directory whose
    /// mkdir is undecided is served again once the mkdir is found committed
    /// (`undecided_dirs.rs`).
    pub(crate) async fn dispatch_request(
        self: &Arc<Self>,
        from: Option<PartitionId>,
        epoch: u64,
        caller: Caller,
        body: Request<ClientRequest>,
        made: &Made,
    ) -> Result<Response, WireError> {
        use crate::partition::quota_grants::{SHORT_RETRIES_MAX, SHORT_WAITS_MAX};
        let (mut asked, mut waited, mut settled, mut sought) = (0, 0, 0, false);
        let began = made.arrived.unwrap_or_else(tokio::time::Instant::now);
        loop {
            let again = body.clone();
            match self
                .dispatch_request_once(from, epoch, caller.clone(), again, made)
                .await
            {
                Err(WireError::QuotaShort {
                    quota,
                    files,
                    bytes,
                }) if asked < SHORT_RETRIES_MAX && waited < SHORT_WAITS_MAX => {
                    match self.get_allowance(quota, (files, bytes)).await? {
                        true => asked += 1,
                        false => waited += 1,
                    }
                }
                // It met a directory whose mkdir is not known to be committed: asked, and
                // served again once it is (ARCHITECTURE.md "Undecided directory objects").
                Err(WireError::DirUndecided { dir, ino }) => {
                    if settled >= crate::partition::undecided_dirs::SETTLES_MAX {
                        return Err(WireError::Busy);
                    }
                    settled += 1;
                    self.settle_undecided_dir(&dir, ino).await?;
                }
                // No object here for the directory it names, or one made while it ran:
                // it may have been made behind by a client whose journal holds the mkdir,
                // or the name (`absent_dirs.rs`). Asked if absent, and served again once
                // after that client's lease is recalled.
                Err(WireError::NotFound) if !sought => {
                    let Some((dir, absent)) = self.maybe_made_behind(&body, made.client()) else {
                        return Err(WireError::NotFound);
                    };
                    sought = true;
                    if absent && !self.seek_dir(&dir, (made.client(), 0)).await? {
                        return Err(WireError::NotFound);
                    }
                    // Its maker holds it from its birth: a read gives way to that lease
                    // (its journal there) as it would have had the object been here.
                    if let Some(t) = self.leases() {
                        t.before_read(&dir, made.client()).await;
                        self.not_deposed()?;
                    }
                }
                other => return other,
            }
            // Its client may have given up on it by now and gone on (the ask for allowance
            // or the entry's answer may have waited seconds): not applied this late.
            crate::partition::made::in_time(began)?;
        }
    }

    async fn dispatch_request_once(
        self: &Arc<Self>,
        from: Option<PartitionId>,
        epoch: u64,
        caller: Caller,
        body: Request<ClientRequest>,
        made: &Made,
    ) -> Result<Response, WireError> {
        // From a client (not another server): its own requests only, by type. (A client
        // key cannot even send the others: its frames decode to `FromClient`.)
        if from.is_none() && !matches!(body, Request::Client(_) | Request::Admin(_)) {
            return Err(WireError::PermissionDenied);
        }
        // Client requests, and clients' hard-link operations forwarded by another server.
        if from.is_none() || matches!(body, Request::Peer(PeerRequest::AtInode { .. })) {
            self.env.admit(&body)?;
        }
        // A client's chunk request carries its capability (grants.rs).
        if from.is_none()
            && let Request::Client(c) = &body
        {
            self.check_capability(c)?;
            // Too few copies up to acknowledge a change (`--min-copies`): refused before it
            // is applied; the client retries until a copy is back or its deadline passes.
            if c.is_change()
                && let Some((have, need)) = self.replicator.short_of_copies()
            {
                return Err(WireError::Unavailable(format!(
                    "partition {}: {have} of its copies can take writes, fewer than the {need} \
                     that must hold each change (--min-copies); changes wait for a copy to return",
                    self.me
                )));
            }
        }
        let st = self.state();
        if !body.is_admin() && epoch > st.map.epoch {
            return Err(WireError::MapTooOld(st.map.epoch));
        }
        // A request naming a hard link is applied at the inode's home.
        if let Request::Client(client) = &body
            && let Some(path) = client.link_resolved_path()
            && let Some((home, ino)) = self.link_target(path)?
        {
            let path = path.to_string();
            let Request::Client(client) = body else {
                return Err(WireError::Io("not an inode operation".into()));
            };
            let op = client
                .into_inode_op()
                .ok_or_else(|| WireError::Io("not an inode operation".into()))?;
            return self.forward_to_home(caller, &path, home, ino, op).await;
        }
        // Reads of a directory's names or listing, for finding read-mostly trees.
        if let Request::Client(r) = &body
            && let Some(dir) = r.read_dir()
        {
            self.read_mostly.read(dir);
        }
        match body {
            Request::Client(r) => {
                let dir = r.served_dir().map(str::to_string);
                let entry = r.served_entry().map(str::to_string);
                match self.serve_client(&st, (caller, made), r).await {
                    Err(WireError::NotFound) => Err(dir
                        .and_then(|d| self.moved_away(epoch, &d))
                        .or_else(|| self.shard_gone(entry.as_deref()?))
                        .unwrap_or(WireError::NotFound)),
                    other => other,
                }
            }
            // A peer request for a client's change (a rename's target side, a link's
            // name, an rmdir's object) names the client; its handler passes it on
            // (`leases::Exempt::client`).
            Request::Peer(r) => self.serve_peer(&st, from, caller, r).await,
            Request::Admin(AdminRequest::FsckReplica) | Request::Replica(_) => {
                Err(WireError::InvalidArgument(
                    "replication requests go to a backup, not the primary".into(),
                ))
            }
            Request::Admin(r) => self.fsck(&caller, r).await,
            // The server answers these (Host::handle) before any partition sees them.
            Request::Server(_) => Err(WireError::InvalidArgument(
                "a request for the server, not for a partition".into(),
            )),
        }
    }
}
