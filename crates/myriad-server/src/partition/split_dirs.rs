//! Which node holds an entry once directories split, and the requests that span a split
//! directory's shards: listing pages, pre-split creation, removal (docs/huge-dirs.md).

use std::sync::Arc;
use std::time::Duration;

use myriad_placement::{PartitionId, Shard, ShardMap, name_hash, split_parent};
use myriad_proto::ask;
use myriad_proto::{DirAction, DirEntry, Request, Response, WireError, limits};
use myriad_storage::DirRecord;

use crate::cluster::MapState;
use crate::commit::Context;
use crate::partition::core::Partition;
use crate::state::mutation::{Mutation, ShardMutation, storage_err, wrong_shard};
use myriad_proto::InodeId;
use myriad_proto::{ClientRequest, PeerRequest};

/// Attempts of a server-to-server request whose target shard moved under it.
/// The wait before the n-th retry of a request that met a moved shard is n times this.
const SHARD_RETRY_STEP: Duration = Duration::from_millis(1);
const SHARD_RETRIES_MAX: u32 = 8;

/// The freeze id of removing split directory `ino`: derived from the inode, so a repeated
/// removal (recovery of the rmdir) finds its own freeze. Txids and inode ids are
/// `node_id << 40 | counter` with node ids below 2^23, so bit 63 is never set in either.
fn removal_freeze_id(ino: InodeId) -> u64 {
    ino.0 | (1 << 63)
}

impl Partition {
    /// Checks this node holds the entry of `path`: a shard of its parent covering the name.
    pub(crate) fn own_entry(&self, st: &MapState, path: &str) -> Result<(), WireError> {
        if path == "/" {
            return self.own_dir(st, "/");
        }
        let (dir, name) = split_parent(path);
        match self.store.dir(dir).map_err(storage_err)? {
            Some(rec) if rec.shard_for(name_hash(name)).is_some() => Ok(()),
            Some(rec) => Err(wrong_shard(dir, &rec)),
            None => self.own_dir(st, dir),
        }
    }

    /// Checks this node is the home of directory `dir` (holds its directory object).
    pub(crate) fn own_dir(&self, st: &MapState, dir: &str) -> Result<(), WireError> {
        if st.ring.owner_of_dir(dir) == self.me {
            Ok(())
        } else {
            Err(WireError::Redirect(Box::new(st.map.clone())))
        }
    }

    /// Checks this node holds some part of directory `dir` (for requests addressed to every
    /// node of a split directory: freeze, export, finish).
    pub(crate) fn own_dir_part(&self, st: &MapState, dir: &str) -> Result<(), WireError> {
        if self.store.dir(dir).map_err(storage_err)?.is_some() {
            return Ok(());
        }
        self.own_dir(st, dir)
    }

    /// After finding no entry `dir/name` here: if a split took the name's shard away in the
    /// meantime, the absence means nothing and the sender must ask the shard's new node.
    pub(crate) fn recheck_shard(&self, dir: &str, name: &str) -> Result<(), WireError> {
        match self.store.dir(dir).map_err(storage_err)? {
            Some(rec) => match rec.shard_for(name_hash(name)) {
                None => Err(wrong_shard(dir, &rec)),
                // Being copied here by a split: the name's fate is not known yet.
                Some(s) if s.hidden.is_some() => Err(WireError::Busy),
                Some(_) => Ok(()),
            },
            // The part went away (an undone split): ask the home where the name is.
            None if self.state().ring.owner_of_dir(dir) != self.me => Err(WireError::WrongShard {
                dir: dir.to_string(),
                map: None,
            }),
            None => Ok(()),
        }
    }

    /// The node holding the entry of `path` as far as this node's cache of its parent's shard
    /// map knows (unsplit if unknown). A stale answer costs a `WrongShard` and a retry:
    /// `call_entry` learns the map then; local lookups answer `WrongShard` themselves.
    pub(crate) fn entry_node(&self, path: &str) -> PartitionId {
        let st = self.state();
        if path == "/" {
            return st.ring.owner_of_dir("/");
        }
        let (dir, name) = split_parent(path);
        st.ring
            .owner_of_shard(dir, self.shard_maps.leaf_for(dir, name_hash(name)))
    }

    /// Sends a request addressed to the entry `path` to the node holding it, learning the
    /// parent's shard map from the directory's home when a split moved the entry.
    pub(crate) async fn call_entry(
        self: &Arc<Self>,
        path: &str,
        body: Request,
    ) -> Result<Response, WireError> {
        let mut tries = 0;
        loop {
            match self.call_node(self.entry_node(path), body.clone()).await {
                Err(WireError::WrongShard { dir, map }) if tries < SHARD_RETRIES_MAX => {
                    tries += 1;
                    self.learn_shard_map(&dir, map.map(|m| *m)).await;
                    // A millisecond more each time: a split's last steps take a moment.
                    tokio::time::sleep(SHARD_RETRY_STEP * tries).await;
                }
                // A node without the directory under the same cluster map: our shard map of
                // the parent is stale (the directory was removed and made again).
                Err(WireError::Redirect(m))
                    if tries < SHARD_RETRIES_MAX && m.epoch <= self.state().map.epoch =>
                {
                    tries += 1;
                    self.learn_shard_map(myriad_placement::parent_of(path), None)
                        .await;
                }
                other => return other,
            }
        }
    }

    /// `call_entry` of an ask (`myriad_proto::ask`): the reply it asked for.
    pub(crate) async fn ask_entry<R: myriad_proto::reply::Reply, Q: Into<Request>>(
        self: &Arc<Self>,
        path: &str,
        ask: myriad_proto::reply::Ask<R, Q>,
    ) -> Result<R, WireError> {
        let r = self.call_entry(path, ask.request.into()).await?;
        ask.answer.of(r)
    }

    /// Adopts `map` (the home's word) or asks the home of `dir` for it.
    pub(crate) async fn learn_shard_map(self: &Arc<Self>, dir: &str, map: Option<ShardMap>) {
        let map = match map {
            Some(m) => Some(m),
            None => {
                let home = self.state().ring.owner_of_dir(dir);
                let req = ClientRequest::GetShardMap {
                    dir: dir.to_string(),
                };
                match self.call_node(home, Request::from(req)).await {
                    Ok(Response::ShardMap(m)) => Some(*m),
                    _ => None,
                }
            }
        };
        match map {
            Some(m) => self.shard_maps.adopt(dir, m, true),
            None => self.shard_maps.forget(dir),
        }
    }

    /// The home's map of `dir` (unsplit when it is not split or does not exist).
    pub(crate) fn shard_map_of(&self, st: &MapState, dir: &str) -> Result<ShardMap, WireError> {
        self.own_dir(st, dir)?;
        Ok(self
            .store
            .dir(dir)
            .map_err(storage_err)?
            .and_then(|r| r.map)
            .unwrap_or_default())
    }

    /// A listing page of directory `path` from the local shard holding the position
    /// (`from`, or name `after`), cut where that shard ends (docs/huge-dirs.md "Listings").
    pub(crate) fn readdir_shard(
        &self,
        path: &str,
        from: u64,
        after: Option<String>,
        limit: u32,
    ) -> Result<Response, WireError> {
        readdir_page(&self.store, path, from, after, limit)
    }

    /// Home of a new directory: create its directory object split into 2^`depth` shards,
    /// the shards on other nodes first (each idempotent, so recovery can repeat this);
    /// `undecided`: for a mkdir not decided yet (`undecided_dirs.rs`).
    pub(crate) async fn create_dir_object(
        self: &Arc<Self>,
        path: &str,
        ino: InodeId,
        (depth, undecided): (u8, bool),
        for_client: Option<u64>,
    ) -> Result<(), WireError> {
        let st = self.state();
        let map = (depth > 0).then(|| ShardMap::presplit(depth));
        let mut by_node: std::collections::BTreeMap<PartitionId, Vec<Shard>> = Default::default();
        for s in map.as_ref().map_or(&[Shard::ALL][..], |m| &m.leaves[..]) {
            by_node
                .entry(st.ring.owner_of_shard(path, *s))
                .or_default()
                .push(*s);
        }
        // The home first: it holds the map, so an abandoned mkdir's removal finds every part.
        // Made for a client holding it from its birth (`DirObjectBorn`): not recalled.
        let ctx = crate::commit::Context::for_client(for_client);
        let make = Mutation::DirObjectCreate {
            path: path.to_string(),
            ino,
            shards: by_node.remove(&self.me).unwrap_or_default(),
            map,
            undecided,
        };
        self.applier.run_in(&ctx, make).await?;
        for (node, shards) in by_node {
            let req = PeerRequest::ShardCreate {
                dir: path.to_string(),
                ino,
                shards,
            };
            self.call_node(node, Request::Peer(req)).await?;
        }
        Ok(())
    }

    /// The partitions holding the shards of split directory `path` by `map`, once each.
    pub(crate) fn part_nodes(&self, path: &str, map: &ShardMap) -> Vec<PartitionId> {
        let st = self.state();
        let mut nodes: Vec<PartitionId> = map
            .leaves
            .iter()
            .map(|s| st.ring.owner_of_shard(path, *s))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// Home of directory `path`: remove its directory object, and if it is split, every
    /// other node's part: all are frozen and checked empty first, else thawed (`NotEmpty`).
    pub(crate) async fn remove_dir_object(
        self: &Arc<Self>,
        path: &str,
        ino: InodeId,
        ctx: &Context,
    ) -> Result<(), WireError> {
        let rec = self.store.dir(path).map_err(storage_err)?;
        // A frozen tree's root: refused before any part is frozen for the removal.
        if rec
            .as_ref()
            .is_some_and(|r| r.ino == ino && r.read_only.is_some())
        {
            return Err(WireError::ReadOnly);
        }
        let Some(map) = rec
            .as_ref()
            .filter(|r| r.ino == ino)
            .and_then(|r| r.map.clone())
        else {
            let remove = Mutation::DirObjectRemove {
                path: path.to_string(),
                ino,
            };
            return self.applier.run_in(ctx, remove).await.map(|_| ());
        };
        let freeze = removal_freeze_id(ino);
        let nodes = self.part_nodes(path, &map);
        let mut frozen = Vec::new();
        let mut verdict = Ok(());
        for &node in &nodes {
            let p = path.to_string();
            let step = async {
                let freeze_req = PeerRequest::DirFreeze {
                    path: p.clone(),
                    txid: freeze,
                };
                match self.call_node(node, Request::Peer(freeze_req)).await {
                    Ok(_) => {}
                    // No part there (dropped by an earlier attempt of this removal).
                    Err(WireError::Redirect(_) | WireError::NotFound) if node != self.me => {
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
                frozen.push(node);
                let export = ask::dir_export(&p, freeze, None);
                if self.ask_node(node, export).await?.entries.is_empty() {
                    Ok(())
                } else {
                    Err(WireError::NotEmpty)
                }
            };
            if let Err(e) = step.await {
                verdict = Err(e);
                break;
            }
        }
        let action = if verdict.is_ok() {
            DirAction::Drop {
                keep_blocks_of: None,
            }
        } else {
            DirAction::Thaw
        };
        // The home goes last: while it stands, a repeated removal finds the map again.
        for &node in nodes.iter().filter(|n| **n != self.me) {
            if frozen.contains(&node) {
                let req = PeerRequest::DirFinish {
                    path: path.to_string(),
                    txid: freeze,
                    action: action.clone(),
                };
                self.call_node(node, Request::Peer(req)).await?;
            }
        }
        if frozen.contains(&self.me) {
            let finish = Mutation::DirFinish {
                path: path.to_string(),
                txid: freeze,
                action: action.clone(),
            };
            self.applier.run_in(ctx, finish).await?;
        }
        verdict
    }

    /// Stages a page of a splitting shard's entries at the child's node.
    pub(crate) async fn shard_import(
        self: &Arc<Self>,
        st: &MapState,
        dir: String,
        ino: InodeId,
        txid: u64,
        child: Shard,
        entries: Vec<myriad_proto::ExportedEntry>,
    ) -> Result<Response, WireError> {
        if !child.is_valid() || st.ring.owner_of_shard(&dir, child) != self.me {
            return Err(WireError::InvalidArgument(format!(
                "shard {} of {dir} does not belong on node {}",
                child.label(),
                self.me
            )));
        }
        self.applier
            .run(Mutation::Shard(ShardMutation::Import {
                dir,
                ino,
                txid,
                child,
                entries,
            }))
            .await?;
        Ok(Response::Unit)
    }
}

/// A listing page of directory `path` from the part of it `store` holds at the position
/// (`from`, or name `after`), cut where that shard ends (docs/huge-dirs.md "Listings"):
/// a primary's, or a copy's answering a nearest read (docs/zones.md).
pub(crate) fn readdir_page(
    store: &myriad_storage::Store,
    path: &str,
    from: u64,
    after: Option<String>,
    limit: u32,
) -> Result<Response, WireError> {
    let rec = store
        .dir(path)
        .map_err(storage_err)?
        .ok_or(WireError::NotFound)?;
    // Being moved here by a directory rename: not listable until revealed.
    if rec.hidden.is_some() {
        return Err(WireError::Busy);
    }
    let position = after.as_deref().map_or(from, name_hash).max(from);
    let shard = shard_at(path, &rec, position)?;
    let limit = limit.clamp(1, limits::READDIR_PAGE_MAX) as usize;
    let mut page = store
        .entries_in(
            path,
            shard.start().max(from),
            after.as_deref(),
            shard.end(),
            limit,
        )
        .map_err(storage_err)?;
    let mut full = page.len() == limit;
    // A split may have taken the upper part of the shard while we read: keep only what
    // the shard still holds now; the rest is listed from its new node.
    let now = store.dir(path).map_err(storage_err)?;
    let end = match now.as_ref().map(|r| shard_at(path, r, position)) {
        Some(Ok(s)) if s == shard => shard.end(),
        Some(Ok(s)) => {
            let before = page.len();
            page.retain(|(h, _, _)| s.contains(*h));
            // Entries dropped: the page reached the new end, so everything below it was
            // read. Nothing dropped: the page ended inside the shard and goes on there.
            if page.len() < before {
                full = false;
            }
            s.end()
        }
        _ => return Err(WireError::Busy),
    };
    let next = if full {
        page.last().map(|(_, n, _)| n.clone())
    } else {
        None
    };
    // Entries being created by a pending operation are not listed yet; entries being
    // removed or renamed away are listed until the operation commits.
    let hidden = page.iter().any(|(_, _, rec)| rec.inode.is_none());
    let entries = page
        .into_iter()
        .filter_map(|(_, name, rec)| rec.inode.map(|inode| DirEntry { name, inode }))
        .collect();
    // The home always holds the shard at hash 0 and speaks for the directory's map, also
    // when it is unsplit (a client holding a stale split map then drops it).
    let is_home = rec.shards.iter().any(|s| s.shard.start() == 0);
    let map = rec
        .map
        .or_else(|| is_home.then(ShardMap::unsplit))
        .map(Box::new);
    Ok(Response::DirPage {
        entries,
        next,
        shard_end: end,
        hidden,
        map,
    })
}

/// The local shard of `dir` holding `hash`, or the redirect to where it is.
fn shard_at(dir: &str, rec: &DirRecord, hash: u64) -> Result<Shard, WireError> {
    match rec.shard_for(hash) {
        Some(s) if s.hidden.is_some() => Err(WireError::Busy),
        Some(s) => Ok(s.shard),
        None => Err(wrong_shard(dir, rec)),
    }
}
