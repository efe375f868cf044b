//! A partition's answers to other servers about names: reserved inode numbers, hard-link
//! names, the target side of renames, directory times. Routed here by
//! `peer_ops::serve_peer`.

use std::sync::Arc;

use myriad_placement::PartitionId;
use myriad_proto::{
    CLAIMS_MOVE_SINCE, Inode, InodeId, PeerRequest, Request, Response, TRASH_KEEPS_ACROSS_SINCE,
    WireError, validate_path,
};

use crate::cluster::MapState;
use crate::commit::Context;
use crate::partition::core::{Partition, attrs_key, inode_response};
use crate::partition::made::Made;
use crate::state::mutation::{Awaited, DirTouchOne, Mutation, Outcome, RenamePrepare};
use crate::state::outcome_kinds::{self, Touched};

/// A peer request handed to a handler of another request (a routing bug in `peer_ops.rs`).
fn routed_wrongly(req: &PeerRequest) -> WireError {
    WireError::Io(format!(
        "internal: peer request routed to the wrong handler: {}",
        req.op_name()
    ))
}

impl Partition {
    /// Marks an inode number this partition reserved used by partition `by` (a create a split moved).
    /// Claimed already for another partition (a split moved the name there, and another
    /// split moved it on before the create was applied there): that partition gives it up,
    /// unless its create used it, and the claim moves to `by` (before, the create was
    /// refused and the name answered behind lost: `it::hugedirs`).
    pub(super) async fn peer_claim_reserved(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        client: u64,
        ino: InodeId,
        by: PartitionId,
    ) -> Result<Response, WireError> {
        let claimant = crate::state::ids::IdAlloc::claimant(&self.store, ino.0)?;
        if let Some(from) = claimant.filter(|c| *c != by)
            && st.map.ext.protocol_floor >= CLAIMS_MOVE_SINCE
        {
            let give_up = Request::Peer(PeerRequest::GiveUpClaimed { ino });
            match self.call_node(from, give_up).await {
                Ok(_) => {}
                Err(WireError::AlreadyExists) => {
                    return Err(WireError::InvalidArgument(format!(
                        "inode number {ino} was used by partition {from}"
                    )));
                }
                // Asked again once that partition answers.
                Err(_) => return Err(WireError::Busy),
            }
            self.applier
                .run(Mutation::MoveClaim {
                    client,
                    ino: ino.0,
                    from,
                    to: by,
                })
                .await?;
            return Ok(Response::Unit);
        }
        self.applier
            .run(Mutation::ClaimReserved {
                client,
                ino: ino.0,
                by,
            })
            .await?;
        Ok(Response::Unit)
    }

    /// Another partition's number `ino`, claimed for this one, is never used here (the
    /// name its create was for moved on): `AlreadyExists` if a create here used it.
    pub(super) async fn peer_give_up_claimed(
        self: &Arc<Self>,
        ino: InodeId,
    ) -> Result<Response, WireError> {
        self.applier
            .run(Mutation::GiveUpClaimed { ino: ino.0 })
            .await?;
        Ok(Response::Unit)
    }

    /// A name that refers to a hard-linked inode kept at its home; with `id`, made once
    /// for that client change (`PeerRequest::PutLinkRefOnce`): a name its earlier try made
    /// answers `Recorded(Some(Unit))`.
    pub(super) async fn peer_put_link_ref(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        req: PeerRequest,
    ) -> Result<Response, WireError> {
        let (path, ino, home, id, client) = match req {
            PeerRequest::PutLinkRef {
                path,
                ino,
                home,
                client,
            } => (path, ino, home, None, client),
            PeerRequest::PutLinkRefOnce {
                path,
                ino,
                home,
                id,
            } => (path, ino, home, Some(id), Some(id.client)),
            other => return Err(routed_wrongly(&other)),
        };
        let (dir, name) = self.entry_target(st, &path)?;
        let mark = id.map(crate::partition::hard_links::name_mark);
        // A try of the same change making the name here is waited for.
        let _running = match mark {
            Some(m) => Some(self.changes.run((m.client, m.seq)).await),
            None => None,
        };
        if let Some(m) = mark
            && crate::state::outcomes::recorded(&self.store, m.client, m.seq)?.is_some()
        {
            return Ok(Response::Recorded(Some(Box::new(Response::Unit))));
        }
        let m = Mutation::PutLinkRef {
            dir: dir.clone(),
            name,
            ino,
            home,
            made_for: mark.map(|id| Awaited {
                id,
                at_ns: self.env.now_ns(),
            }),
        };
        // Part of `client`'s link: its leases are not recalled for it, and the touch of
        // `dir` reports its change.
        let made = Made {
            for_client: client,
            ..Made::now()
        };
        let (out, _) = self.run_touching((m, &made), &dir, true, |_| true).await?;
        inode_response(out)
    }

    /// The target side of a rename between partitions (`PeerRequest::RenamePrepare`): its
    /// name prepared under `txid`.
    pub(super) async fn peer_rename_prepare(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        req: PeerRequest,
    ) -> Result<Response, WireError> {
        let PeerRequest::RenamePrepare {
            txid,
            coordinator,
            to,
            inode,
            flags,
            blocks,
            replaces,
            client,
        } = req
        else {
            return Err(routed_wrongly(&req));
        };
        let prepare = RenamePrepare {
            txid,
            coordinator,
            to,
            inode,
            flags,
            blocks: blocks.into_iter().map(|(b, d)| (b, d.into_vec())).collect(),
            replaces,
            keep: None,
        };
        validate_path(&prepare.to)?;
        self.own_entry(st, &prepare.to)?;
        // The target side of `client`'s rename: its leases are not recalled for it.
        let exempt = Context::for_client(client);
        // With the trash on, the file the name holds is kept when the rename commits
        // (docs/trash.md), once every server can read the intent that says so. Only then
        // is the prepare copied for its tries (its chunk-0 blocks with it).
        let spot = match st.map.ext.protocol_floor >= TRASH_KEEPS_ACROSS_SINCE {
            true => self.spot_for_replaced(&prepare.to, flags).await?,
            false => None,
        };
        let outcome = match spot {
            Some(spot) => {
                self.at_spot(spot, |keep| {
                    let keeping = RenamePrepare {
                        keep: Some(keep),
                        ..prepare.clone()
                    };
                    self.applier
                        .run_in(&exempt, Mutation::RenamePrepare(keeping))
                })
                .await?
            }
            None => {
                self.applier
                    .run_in(&exempt, Mutation::RenamePrepare(prepare))
                    .await?
            }
        };
        Ok(match outcome {
            Outcome::Exchanged(inode, blocks) => Response::Exchanged {
                inode,
                blocks: blocks
                    .into_iter()
                    .map(|(b, d)| (b, serde_bytes::ByteBuf::from(d)))
                    .collect(),
            },
            _ => Response::Unit,
        })
    }

    /// A directory's times (and link count) after a change in it made elsewhere.
    pub(super) async fn peer_dir_touch(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        path: String,
        ino: InodeId,
        now_ns: i64,
        nlink: Option<u32>,
        client: Option<u64>,
    ) -> Result<Response, WireError> {
        validate_path(&path)?;
        if path == "/" {
            self.own(st, st.ring.owner_of_dir("/"))?;
        } else {
            self.own_entry(st, &path)?;
        }
        let (dir, name) = attrs_key(&path);
        let exempt = crate::commit::leases::Exempt::of([(dir.clone(), client)]);
        // Visible is enough: a lost touch costs a stale time, never data, and the
        // change it reports is already durable on its own partition.
        let touch = Mutation::DirTouch {
            dir,
            name,
            ino,
            now: now_ns,
            nlink,
        };
        match self
            .applier
            .run_visible_in(&Context::exempting(exempt), touch)
            .await?
        {
            Outcome::Inode(i) => Ok(Response::Attr(i)),
            _ => Ok(Response::Unit),
        }
    }

    /// `DirTouches`: every touch of a path this partition holds, in one batch; the others
    /// answer their own routing error (the sender sends those alone, learning the shard).
    pub(super) async fn serve_dir_touches(
        self: &Arc<Self>,
        st: &Arc<MapState>,
        touches: Vec<myriad_proto::DirTouchItem>,
    ) -> Result<Response, WireError> {
        if touches.len() > myriad_proto::limits::DIR_TOUCHES_MAX {
            return Err(WireError::InvalidArgument(format!(
                "at most {} directory touches per request",
                myriad_proto::limits::DIR_TOUCHES_MAX
            )));
        }
        let mut results: Vec<Result<Inode, WireError>> = Vec::with_capacity(touches.len());
        let mut mine = Vec::new();
        let mut clients: Vec<(String, Option<u64>)> = Vec::new();
        for t in touches {
            let owned = validate_path(&t.path)
                .map_err(WireError::from)
                .and_then(|()| {
                    if t.path == "/" {
                        self.own(st, st.ring.owner_of_dir("/"))
                    } else {
                        self.own_entry(st, &t.path)
                    }
                });
            match owned {
                Ok(()) => {
                    let (dir, name) = attrs_key(&t.path);
                    clients.push((dir.clone(), t.client));
                    mine.push((
                        results.len(),
                        DirTouchOne {
                            dir,
                            name,
                            ino: t.ino,
                            now: t.now_ns,
                            nlink: t.nlink,
                        },
                    ));
                    results.push(Err(WireError::NotFound));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if mine.is_empty() {
            return Ok(Response::Attrs(results));
        }
        let (at, batch): (Vec<usize>, Vec<DirTouchOne>) = mine.into_iter().unzip();
        // Visible is enough, as for one touch (`DirTouch`).
        let exempt = crate::commit::leases::Exempt::of(clients);
        let touch = Mutation::DirTouches(batch);
        let out = self
            .applier
            .run_visible_in(&Context::exempting(exempt), touch)
            .await?;
        let Touched(touched) = outcome_kinds::expect(out)?;
        for (i, inode) in at.into_iter().zip(touched) {
            results[i] = inode.ok_or(WireError::NotFound);
        }
        Ok(Response::Attrs(results))
    }
}
