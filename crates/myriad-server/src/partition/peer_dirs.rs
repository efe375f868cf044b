//! A partition's answers to other servers about directories: shards and splits, directory
//! objects, parts moving between partitions. Routed here by `peer_ops::serve_peer`.

use std::sync::Arc;

use myriad_placement::Shard;
use myriad_proto::{InodeId, PeerRequest, Response, WireError, validate_path};

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::state::mutation::{DirImport, Mutation};

impl Partition {
    /// A directory's first shard record (a sharded mkdir: marked undecided as its home is,
    /// `undecided_dirs.rs`).
    pub(super) async fn peer_shard_create(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        dir: String,
        ino: InodeId,
        shards: Vec<Shard>,
    ) -> Result<Response, WireError> {
        validate_path(&dir)?;
        let undecided = Self::marks_undecided(st);
        self.applier
            .run(Mutation::Shard(
                crate::state::mutation::ShardMutation::Create {
                    dir,
                    ino,
                    shards,
                    undecided,
                },
            ))
            .await?;
        Ok(Response::Unit)
    }

    /// Ends a split's import into a new shard, revealing it or dropping it.
    pub(super) async fn peer_shard_finish(
        self: &Arc<Self>,
        dir: String,
        txid: u64,
        child: Shard,
        reveal: bool,
    ) -> Result<Response, WireError> {
        validate_path(&dir)?;
        self.applier
            .run(Mutation::Shard(
                crate::state::mutation::ShardMutation::Finish {
                    dir: dir.clone(),
                    txid,
                    child,
                    reveal,
                },
            ))
            .await?;
        if reveal {
            // A huge directory's new shard may split on (split_trigger).
            self.check_splits(&dir);
        }
        Ok(Response::Unit)
    }

    /// Records a shard split (or its undo) in the directory's shard map.
    pub(super) async fn peer_shard_map_change(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        dir: String,
        ino: InodeId,
        shard: Shard,
        split: bool,
    ) -> Result<Response, WireError> {
        validate_path(&dir)?;
        self.own_dir(st, &dir)?;
        if !shard.is_valid() {
            return Err(WireError::InvalidArgument("bad shard".into()));
        }
        self.applier
            .run(Mutation::Shard(
                crate::state::mutation::ShardMutation::MapChange {
                    dir,
                    ino,
                    shard,
                    split,
                },
            ))
            .await?;
        Ok(Response::Unit)
    }

    /// A directory object made at the partition its path hashes to (a mkdir from elsewhere).
    async fn peer_dir_object_create(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        path: String,
        ino: InodeId,
        depth: u8,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_dir(st, &path)?;
        let depth = depth.min(myriad_placement::SHARD_DEPTH_MAX);
        self.create_dir_object(&path, ino, (depth, Self::marks_undecided(st)), None)
            .await?;
        Ok(Response::Unit)
    }

    /// The requests that make, remove or look for a directory object.
    pub(super) async fn peer_dir_object(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        req: PeerRequest,
    ) -> Result<Response, WireError> {
        match req {
            PeerRequest::DirObjectCreate { path, ino, depth } => {
                self.peer_dir_object_create(st, path, ino, depth).await
            }
            PeerRequest::DirObjectBorn {
                path,
                ino,
                holder,
                attrs,
            } => {
                self.peer_dir_object_born(st, (path, ino), holder, attrs)
                    .await
            }
            PeerRequest::DirObjectRemove { path, ino, client } => {
                self.peer_dir_object_remove(st, (path, ino), client).await
            }
            PeerRequest::DirSought { path, reader, hops } => {
                self.peer_dir_sought(st, path, (reader, hops)).await
            }
            other => Err(WireError::InvalidArgument(format!(
                "not a directory object's request: {}",
                other.op_name()
            ))),
        }
    }

    /// `DirObjectBorn`: the object of a directory whose mkdir client `holder` answered
    /// behind, made with that client's exclusive lease on it (its birth lease, granted
    /// first: docs/fuse.md "mkdir behind"). `Busy` if the lease cannot be granted now.
    async fn peer_dir_object_born(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (path, ino): (String, InodeId),
        holder: u64,
        attrs: myriad_proto::Inode,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_dir(st, &path)?;
        if attrs.ino != ino || attrs.kind != myriad_proto::FileKind::Directory {
            return Err(WireError::InvalidArgument(
                "a directory's birth lease names another inode".into(),
            ));
        }
        // A change of the path by `holder`: other clients' leases on it (an earlier
        // directory's, or a missing name's they keep asking about) are recalled and
        // waited for, and none is granted until the object is made.
        let _gate = match self.leases() {
            Some(t) => {
                let changed = crate::state::changed_dirs::ChangedDirs::Dirs(vec![path.clone()]);
                let exempt = crate::commit::leases::Exempt::default();
                let gate = t.before(changed, Some(holder), &exempt).await;
                self.not_deposed()?;
                if !t.grant_born(&path, holder, attrs) {
                    tracing::debug!(partition = %self.me, path, holder, "no birth lease now: the mkdir is tried again");
                    return Err(WireError::Busy);
                }
                Some(gate)
            }
            None => None,
        };
        let undecided = Self::marks_undecided(st);
        self.create_dir_object(&path, ino, (0, undecided), Some(holder))
            .await?;
        Ok(Response::Unit)
    }

    /// Removes a directory object (an rmdir from elsewhere, for `client`'s change).
    async fn peer_dir_object_remove(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        (path, ino): (String, InodeId),
        client: Option<u64>,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_dir(st, &path)?;
        let ctx = crate::commit::Context::for_client(client);
        self.remove_dir_object(&path, ino, &ctx).await?;
        Ok(Response::Unit)
    }

    /// `DirExport`: a page of a frozen directory part's entries (`dir_export`).
    pub(super) fn peer_dir_export(
        &self,
        st: &Arc<MapState>,
        path: &str,
        (txid, after): (u64, Option<String>),
    ) -> Result<Response, WireError> {
        validate_path(path)?;
        self.own_dir_part(st, path)?;
        self.dir_export(path, txid, after)
    }

    /// Freezes a directory part being moved (a rename of a directory, a tree moving between zones).
    pub(super) async fn peer_dir_freeze(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        path: String,
        txid: u64,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        self.own_dir_part(st, &path)?;
        self.applier.run(Mutation::DirFreeze { path, txid }).await?;
        Ok(Response::Unit)
    }

    /// Takes a directory part moved here (placed here now, or where its tree's move heads).
    pub(super) async fn peer_dir_import(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        part: DirImport,
    ) -> Result<Response, WireError> {
        let path = part.path.as_str();
        validate_path(path)?;
        // Placed here now, or (a tree moving between zones) where its move heads.
        let here = |ring: &myriad_placement::Ring| match part.shards.first() {
            Some(s) => s.is_valid() && ring.owner_of_shard(path, *s) == self.me,
            None => ring.owner_of_dir(path) == self.me,
        };
        let moving_here = || st.map.moving_policy().is_some() && here(st.target_ring());
        if !here(&st.ring) && !moving_here() {
            return Err(WireError::Redirect(Box::new(st.map.clone())));
        }
        self.applier.run(Mutation::DirImport(part)).await?;
        Ok(Response::Unit)
    }

    /// Ends a directory move on this side: keeps or drops its part.
    pub(super) async fn peer_dir_finish(
        self: &Arc<Self>,
        path: String,
        txid: u64,
        action: myriad_proto::DirAction,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        // No ownership check: keyed by (path, txid) and idempotent, and a node without
        // a part of `path` (already dropped, or never made) has nothing to do.
        self.applier
            .run(Mutation::DirFinish { path, txid, action })
            .await?;
        Ok(Response::Unit)
    }
}
