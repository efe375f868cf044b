//! Hard links. A file's inode is embedded in its entry until the file gets a second name;
//! then the inode moves into an inode object on the node that holds it (its home, which also
//! keeps its chunk-0 data where it already is), and every name becomes a reference entry
//! (`FileKind::HardLink`, `link_home`). A request naming a reference is applied at the home
//! (`AtInode`) after the entry's node checked the path's ancestors. Listings and stats
//! resolve references, so clients only ever see the real inode.
//!
//! Link order (no dangling reference, ever): first the home adds a link (LinkSource or
//! AdjustLinks +1), then the new name is created; if that fails the link is taken back.
//! Unlink: the name goes first, then the home drops a link. A crash between the two steps
//! leaves a link count one too high (the data is kept, never lost); fsck (issue 5) is where
//! such counts get repaired.
//!
//! A link is a client's change sent once, but its work spans the home and the new name's
//! partition, and its outcome is recorded after both. A retry after its coordinator died
//! between the name and the record used to find the name made and answer `AlreadyExists`.
//! So the new name is made once per change (`PutLinkRefOnce`, protocol 32): its partition
//! records the change's name mark (`name_mark`) in the batch that makes the name, and a
//! retry told the name is its own takes back the link it added and answers as the first
//! try did.

use std::sync::Arc;

use myriad_placement::{PartitionId, split_parent};
use myriad_proto::ask;
use myriad_proto::{
    Caller, FileKind, Inode, InodeOp, OnceId, QUOTA_ANCHORS_SINCE, Request, Response, WireError,
    limits, validate_path,
};

use crate::commit::Context;
use crate::partition::core::{Partition, split_owned};
use crate::state::mutation::{INODE_DIR, InodeChange, Mutation, inode_name, storage_err};
use crate::state::outcome_kinds::{InodeOrFreed, Trimmed};
use crate::state::perm;
use myriad_proto::InodeId;
use myriad_proto::PeerRequest;

/// Distinguishes a link's name mark from the outcomes of its client's changes (a name
/// partition may also be the link's coordinator, which records the change's own outcome
/// under its id): the mark is kept under the client id with these bits flipped.
const NAME_MARK: u64 = 0x6c69_6e6b_6e61_6d65;
/// The first protocol with `PutLinkRefOnce`.
const LINK_ONCE_PROTOCOL: u16 = 32;

/// The key a hard link's new name is recorded under, for the client's change `id`.
pub(crate) fn name_mark(id: OnceId) -> OnceId {
    OnceId {
        client: id.client ^ NAME_MARK,
        ..id
    }
}

impl Partition {
    /// A write, size change or truncation of the linked file `inode` at its home, by
    /// `caller` through a descriptor (`opened`): allowed, and its set-id bits taken off at
    /// `now` as such a change by `caller` takes them off.
    async fn may_write_at_home(
        &self,
        (name, inode): (&str, &Inode),
        (caller, opened): (&Caller, bool),
        now: i64,
    ) -> Result<(), WireError> {
        perm::require_write(inode, caller, opened)?;
        let ctx = Context::background();
        self.kill_setid(INODE_DIR, name, Some(inode), (caller, now, &ctx))
            .await
    }

    /// The inode a client should see for entry inode `i`: itself, or for a hard-link name
    /// the inode object at its home.
    pub(crate) async fn resolve(self: &Arc<Self>, i: Inode) -> Result<Inode, WireError> {
        if i.kind != FileKind::HardLink {
            return Ok(i);
        }
        let home = i
            .link_home
            .ok_or_else(|| WireError::Io("link without a home".into()))?;
        self.ask_node(home, ask::stat_inode(i.ino, Caller::root()))
            .await
    }

    /// If `path` (owned here) names a hard link, the home and inode id to send `req` to.
    /// A link name in the middle of a multi-node operation answers `Busy` (the client
    /// retries) rather than being taken for a regular file.
    pub(crate) fn link_target(
        &self,
        path: &str,
    ) -> Result<Option<(PartitionId, InodeId)>, WireError> {
        if path == "/" || validate_path(path).is_err() {
            return Ok(None);
        }
        let (dir, name) = split_parent(path);
        let Some(rec) = self.store.entry(dir, name).map_err(storage_err)? else {
            return Ok(None);
        };
        let is_link = |i: &Option<Inode>| i.as_ref().is_some_and(|i| i.kind == FileKind::HardLink);
        if let Some(p) = &rec.pending {
            return if is_link(&rec.inode) || is_link(&p.after) {
                Err(WireError::Busy)
            } else {
                Ok(None)
            };
        }
        Ok(rec
            .inode
            .filter(|i| i.kind == FileKind::HardLink)
            .and_then(|i| Some((i.link_home?, i.ino))))
    }

    /// Sends a path request for a hard-link name to the inode's home, after the ancestor
    /// checks that belong to the path.
    pub(crate) async fn forward_to_home(
        self: &Arc<Self>,
        caller: Caller,
        path: &str,
        home: PartitionId,
        ino: InodeId,
        op: InodeOp,
    ) -> Result<Response, WireError> {
        self.search(&caller, path).await?;
        self.call_node(
            home,
            Request::Peer(PeerRequest::AtInode { ino, caller, op }),
        )
        .await
    }

    /// At the home: `op` applied to inode object `ino`.
    pub(crate) async fn at_inode(
        self: &Arc<Self>,
        ino: InodeId,
        caller: Caller,
        op: InodeOp,
        chunk_size: u64,
    ) -> Result<Response, WireError> {
        let name = inode_name(ino);
        let mut inode = self.lookup_in(INODE_DIR, &name).await?;
        let stored = inode.clone();
        // Objects linked before LinkSource recorded their home.
        inode.link_home.get_or_insert(self.me);
        let dir = INODE_DIR.to_string();
        let now = self.env.now_ns();
        // A handle's request names the inode it was opened on: if the name now refers to
        // another inode (replaced meanwhile), it must not touch this one.
        if let InodeOp::Read { ino: want, .. }
        | InodeOp::Write { ino: want, .. }
        | InodeOp::ExtendSize { ino: want, .. }
        | InodeOp::Truncate { ino: want, .. } = &op
            && *want != ino
        {
            return Err(WireError::Stale);
        }
        match op {
            InodeOp::Stat => Ok(Response::Attr(inode)),
            InodeOp::ClaimRemoval => self.claim_removal(ino).await,
            InodeOp::DropClaimed => self.drop_claimed(ino).await,
            InodeOp::Fetch { max_bytes } => {
                perm::require(&inode, &caller, perm::READ)?;
                let n = max_bytes.min(chunk_size).min(limits::IO_BYTES_MAX);
                let (data, whole) = self
                    .read_range_whole(ino, 0, n, inode.size.min(chunk_size))
                    .await?;
                // As `client_fetch`: the object and its bytes, one pair the store held.
                if !whole && !self.still_holds_at((INODE_DIR, &name), &stored)? {
                    return Err(WireError::Busy);
                }
                Ok(Response::Fetched { inode, data })
            }
            InodeOp::Read { offset, len, .. } => {
                perm::require(&inode, &caller, perm::READ)?;
                let (data, whole) = self
                    .read_range_whole(
                        ino,
                        offset,
                        len.min(limits::IO_BYTES_MAX),
                        inode.size.min(chunk_size),
                    )
                    .await?;
                if !whole && !self.still_holds_at((INODE_DIR, &name), &stored)? {
                    return Err(WireError::Busy);
                }
                Ok(Response::Data {
                    inode: Some(inode),
                    data,
                })
            }
            InodeOp::Write {
                offset,
                data,
                opened,
                ..
            } => {
                self.may_write_at_home((&name, &inode), (&caller, opened), now)
                    .await?;
                self.mutate(Mutation::Write {
                    dir,
                    name,
                    ino,
                    offset,
                    data,
                    now,
                })
                .await
            }
            InodeOp::ExtendSize { size, opened, .. } => {
                self.may_write_at_home((&name, &inode), (&caller, opened), now)
                    .await?;
                self.mutate(Mutation::ExtendSize {
                    dir,
                    name,
                    ino,
                    size,
                    now,
                })
                .await
            }
            InodeOp::Truncate { size, opened, .. } => {
                self.may_write_at_home((&name, &inode), (&caller, opened), now)
                    .await?;
                let m = Mutation::Truncate {
                    dir,
                    name,
                    ino,
                    size,
                    now,
                };
                let Trimmed { inode, trim } = self.applier.run_for(m).await?;
                if let Some(txid) = trim
                    && let Err(e) = self.run_gc(txid).await
                {
                    tracing::warn!("truncate of ino {ino}: trim deferred: {e}");
                }
                Ok(Response::Attr(inode))
            }
            InodeOp::SetAttr { set } => {
                let set = perm::check_setattr(&inode, &caller, &set)?;
                self.mutate(Mutation::SetAttr {
                    dir,
                    name,
                    change: InodeChange::Attr(set),
                    now,
                })
                .await
            }
            InodeOp::SetXattr {
                name: xname,
                value,
                mode,
            } => {
                crate::partition::core::check_xattr_name(&xname)?;
                perm::require(&inode, &caller, perm::WRITE)?;
                self.mutate(Mutation::SetAttr {
                    dir,
                    name,
                    change: InodeChange::Xattr {
                        name: xname,
                        value: value.map(serde_bytes::ByteBuf::into_vec),
                        mode,
                    },
                    now,
                })
                .await
            }
        }
    }

    pub(super) async fn mutate(self: &Arc<Self>, m: Mutation) -> Result<Response, WireError> {
        match self.applier.run_for(m).await? {
            InodeOrFreed::Inode(i) => Ok(Response::Attr(i)),
            InodeOrFreed::Freed(trim) => {
                if let Some(txid) = trim {
                    self.spawn_gc(txid);
                }
                Ok(Response::Unit)
            }
        }
    }

    /// At the home, a removal of a name of `ino` with the trash on (`removal_claims.rs`):
    /// the links it may count on, the count read under the lock `drop_claimed` takes, so
    /// no drop falls between the read and the claim.
    async fn claim_removal(self: &Arc<Self>, ino: InodeId) -> Result<Response, WireError> {
        let _order = self.removal_claims.order().await;
        let mut inode = self.lookup_in(INODE_DIR, &inode_name(ino)).await?;
        inode.link_home.get_or_insert(self.me);
        let now = tokio::time::Instant::now();
        inode.nlink = self.removal_claims.claim(ino, inode.nlink, now);
        Ok(Response::Attr(inode))
    }

    /// At the home, a removal that claimed drops its link of `ino` and ends its claim.
    async fn drop_claimed(self: &Arc<Self>, ino: InodeId) -> Result<Response, WireError> {
        let _order = self.removal_claims.order().await;
        let changed = self.adjust_links(ino, -1).await;
        if changed.is_ok() {
            self.removal_claims
                .dropped(ino, tokio::time::Instant::now());
        }
        changed
    }

    /// Home side of AdjustLinks.
    pub(crate) async fn adjust_links(
        self: &Arc<Self>,
        ino: InodeId,
        delta: i64,
    ) -> Result<Response, WireError> {
        self.mutate(Mutation::AdjustLinks {
            ino,
            delta,
            now: self.env.now_ns(),
        })
        .await
    }

    /// `link(from, to)`, run by the owner of `from`'s entry.
    pub(crate) async fn link(
        self: &Arc<Self>,
        (caller, ctx): (&Caller, &Context),
        from: &str,
        to: &str,
    ) -> Result<Response, WireError> {
        validate_path(to)?;
        if to == "/" {
            return Err(WireError::AlreadyExists);
        }
        self.search(caller, from).await?;
        self.may_modify_dir(caller, to).await?;
        let src = self.lookup(from).await?;
        perm::may_link(&self.resolve(src.clone()).await?, caller)?;
        let (home, inode) = match src.kind {
            FileKind::Directory => return Err(WireError::NotPermitted),
            FileKind::HardLink => {
                let home = src
                    .link_home
                    .ok_or_else(|| WireError::Io("link without a home".into()))?;
                let more = ask::adjust_links(src.ino, 1);
                (home, self.ask_node(home, more).await?)
            }
            // Regular files, symlinks, FIFOs, sockets and devices.
            _ => {
                let (dir, name) = split_owned(from);
                let floor = self.state().map.ext.protocol_floor;
                let m = Mutation::LinkSource {
                    dir,
                    name,
                    me: self.me,
                    now: self.env.now_ns(),
                    anchored: floor >= QUOTA_ANCHORS_SINCE,
                };
                (self.me, self.applier.run_for_in::<Inode>(ctx, m).await?)
            }
        };
        let put = self.link_name_request(ctx, to, inode.ino, home);
        match self.call_entry(to, Request::Peer(put)).await {
            Ok(Response::Recorded(Some(_))) => {
                // An earlier try of this change made the name (its coordinator died before
                // the outcome was recorded): the link this try added goes back, and the
                // answer is the file as it is now. The link exists either way: if taking
                // the extra count back fails, the count stays one too high (no loss) and
                // the link is still answered done.
                match self.ask_node(home, ask::adjust_links(inode.ino, -1)).await {
                    Ok(i) => Ok(Response::Attr(i)),
                    Err(e) => {
                        tracing::warn!(
                            "retried link of ino {}: extra link not taken back: {e}",
                            inode.ino
                        );
                        Ok(Response::Attr(inode))
                    }
                }
            }
            Ok(_) => Ok(Response::Attr(inode)),
            Err(e) if !definitely_not_created(&e) => {
                // The name may exist (a timeout or a lost reply): keep the count one too
                // high rather than risk one too low, which would free data still named.
                Err(e)
            }
            Err(e) => {
                // Take the link back; if even that fails the count stays one too high.
                if let Err(u) = self.ask_node(home, ask::adjust_links(inode.ino, -1)).await {
                    tracing::warn!("link of ino {}: undo failed: {u}", inode.ino);
                }
                Err(e)
            }
        }
    }

    /// The request that makes hard link `to` to inode `ino` (homed at `home`): made once
    /// for the client's change where the name's partition speaks protocol 32.
    fn link_name_request(
        &self,
        ctx: &Context,
        to: &str,
        ino: InodeId,
        home: PartitionId,
    ) -> PeerRequest {
        let change = ctx.awaited();
        match change {
            Some(c) if self.env.protocol_of(self.entry_node(to)) >= LINK_ONCE_PROTOCOL => {
                PeerRequest::PutLinkRefOnce {
                    path: to.to_string(),
                    ino,
                    home,
                    id: c.id,
                }
            }
            _ => PeerRequest::PutLinkRef {
                path: to.to_string(),
                ino,
                home,
                client: ctx.client(),
            },
        }
    }

    /// A hard-link name of inode `link` was renamed: the inode's ctime changes at its home
    /// (a change of zero links stamps it). A failure leaves the ctime behind, logged.
    pub(crate) async fn touch_link_home(self: &Arc<Self>, link: &Inode) {
        let (FileKind::HardLink, Some(home)) = (link.kind, link.link_home) else {
            return;
        };
        let req = PeerRequest::AdjustLinks {
            ino: link.ino,
            delta: 0,
        };
        if let Err(e) = self.call_node(home, Request::Peer(req)).await {
            tracing::warn!(
                "rename of a name of ino {}: ctime not updated: {e}",
                link.ino
            );
        }
    }

    /// After a hard-link name was removed: one link fewer at the home.
    pub(crate) async fn drop_link(self: &Arc<Self>, removed: &Inode) {
        let (FileKind::HardLink, Some(home)) = (removed.kind, removed.link_home) else {
            return;
        };
        // A removal that claimed ends its claim with its drop (`removal_claims.rs`).
        let now = tokio::time::Instant::now();
        let req = if self.removal_claims.take_claimed_here(removed.ino, now) {
            PeerRequest::AtInode {
                ino: removed.ino,
                caller: Caller::root(),
                op: InodeOp::DropClaimed,
            }
        } else {
            PeerRequest::AdjustLinks {
                ino: removed.ino,
                delta: -1,
            }
        };
        if let Err(e) = self.call_node(home, Request::Peer(req)).await {
            tracing::warn!(
                "unlink of a name of ino {}: link count not lowered at node {home}: {e}",
                removed.ino
            );
        }
    }
}

/// Errors after which the new name surely does not exist.
fn definitely_not_created(e: &WireError) -> bool {
    matches!(
        e,
        WireError::AlreadyExists
            | WireError::NotFound
            | WireError::NotADirectory
            | WireError::NameTooLong
            | WireError::InvalidArgument(_)
            | WireError::PermissionDenied
            | WireError::Busy
            | WireError::NoSpace
            | WireError::Redirect(_)
            | WireError::MapTooOld(_)
    )
}
