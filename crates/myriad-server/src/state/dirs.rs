//! Directory creation and removal (two-partition protocols: the entry side and the directory object side), and the decisions of intents.

use crate::state::failure::StateError;
use myriad_proto::{FileKind, Response, Shard, ShardMap, WireError};
use myriad_storage::{Batch, DirRecord, EntryRecord, LocalShard, Pending};

use crate::state::intent::{Decision, Intent};
use crate::state::ops::{Awaited, Ctx, Mutation, Outcome, not_routed};
use crate::state::outcomes;
use crate::state::records::{
    adjust_subdirs, dir_here, is_dir, new_inode, not_auto_indexed, put_visible, require_free_name,
    require_writable, visible,
};
use myriad_proto::InodeId;

/// Executes one mutation of this family into `b`.
pub(super) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    let out = match m {
        Mutation::MkdirBegin {
            dir,
            name,
            mode,
            depth,
            uid,
            gid,
            now,
            once,
            ino: reserved,
        } => {
            require_free_name(ctx.store, &dir, &name)?;
            let ino = ctx.ids.take(ctx.store, b, reserved)?;
            let txid = ctx.ids.next(ctx.store, b)?;
            let mut inode = new_inode(
                InodeId(ino),
                FileKind::Directory,
                mode & 0o7777,
                uid,
                gid,
                now,
            );
            inode.nlink = 2;
            let rec = EntryRecord {
                inode: None,
                pending: Some(Pending {
                    txid,
                    after: Some(inode.clone()),
                }),
            };
            ctx.store.put_entry(b, &dir, &name, &rec);
            let intent = Intent::Mkdir {
                dir,
                name,
                ino: InodeId(ino),
                depth,
                decision: Decision::Undecided,
            };
            ctx.store.put_intent(b, txid, intent.encode());
            outcomes::await_outcome(ctx.store, b, txid, once);
            Outcome::Begun { txid, inode }
        }
        Mutation::RmdirBegin { dir, name, once } => rmdir_begin(ctx, b, (dir, name), once)?,
        Mutation::ResolveEntry {
            dir,
            name,
            txid,
            commit,
        } => resolve_entry(ctx, b, dir, name, txid, commit)?,
        Mutation::Decide { txid, decision } => decide(ctx, b, txid, decision)?,
        Mutation::DeleteIntent { txid } => {
            ctx.store.delete_intent(b, txid);
            Outcome::Unit
        }
        Mutation::TreeMoveBegin {
            path,
            group,
            arriving,
        } => {
            let txid = ctx.ids.next(ctx.store, b)?;
            let intent = Intent::TreeMove {
                path,
                group,
                arriving,
                moves: Vec::new(),
            };
            ctx.store.put_intent(b, txid, intent.encode());
            Outcome::TreeMoveBegun { txid }
        }
        Mutation::TreeMoveRecord { txid, moves } => tree_move_record(ctx, b, txid, moves)?,
        Mutation::DirObjectCreate {
            path,
            ino,
            shards,
            map,
            undecided,
        } => dir_object_create(ctx, b, (path, ino), (shards, map), undecided)?,
        Mutation::DirObjectConfirm { path, ino } => dir_object_confirm(ctx, b, &path, ino)?,
        Mutation::DirObjectRemove { path, ino } => {
            match ctx.store.dir(&path)? {
                // A rename's copy is taking this directory's place: it decides first.
                Some(rec) if rec.hidden.is_some() && rec.ino != ino => {
                    return Err(WireError::Busy.into());
                }
                // Frozen by a rename or a tree move: exported, maybe copied already. Removed
                // now, its copy would outlive it, hidden where the tree was headed, and the
                // undo (which finds copies by walking the originals) would miss it (simulation
                // seed 60158 with --tree-moves: an undo thawed the parent and failed before
                // the child; an rmdir then removed the frozen child, and its copy held the
                // name against every later mkdir with `Busy`).
                Some(rec) if rec.ino == ino && rec.frozen.is_some() => {
                    return Err(WireError::Busy.into());
                }
                Some(rec) if rec.ino == ino => {
                    if rec.read_only.is_some() {
                        return Err(WireError::ReadOnly.into());
                    }
                    not_auto_indexed(&path, &rec)?;
                    if ctx.store.has_entries(&path)? {
                        return Err(WireError::NotEmpty.into());
                    }
                    ctx.store.delete_dir(b, &path);
                }
                // Already gone, or a different directory now lives there: nothing of ours to remove.
                _ => {}
            }
            Outcome::Unit
        }
        Mutation::MarkReadOnly { path, mark, auto } => {
            let mut rec = dir_here(ctx.store, &path)?;
            // A part on its way elsewhere (a rename's copy, a split) would lose the mark or
            // miss it: the caller marks again once it has settled.
            if rec.is_moving() {
                return Err(WireError::Busy.into());
            }
            let field = if auto {
                &mut rec.auto_index
            } else {
                &mut rec.read_only
            };
            if *field != mark {
                *field = mark;
                ctx.store.put_dir(b, &path, &rec);
            }
            Outcome::Unit
        }
        Mutation::ClearAutoIndex { path, mark } => {
            if let Some(mut rec) = ctx.store.dir(&path)?
                && rec.auto_index == Some(mark)
            {
                rec.auto_index = None;
                ctx.store.put_dir(b, &path, &rec);
            }
            Outcome::Unit
        }
        other => return Err(not_routed(&other).into()),
    };
    Ok(out)
}

/// The entry side of an rmdir: the directory's entry marked pending, with its intent.
fn rmdir_begin(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    (dir, name): (String, String),
    once: Option<Awaited>,
) -> Result<Outcome, StateError> {
    require_writable(ctx.store, &dir, &name)?;
    let inode = visible(ctx.store, &dir, &name)?;
    if inode.kind != FileKind::Directory {
        return Err(WireError::NotADirectory.into());
    }
    let txid = ctx.ids.next(ctx.store, b)?;
    let rec = EntryRecord {
        inode: Some(inode.clone()),
        pending: Some(Pending { txid, after: None }),
    };
    ctx.store.put_entry(b, &dir, &name, &rec);
    let intent = Intent::Rmdir {
        dir,
        name,
        ino: inode.ino,
        decision: Decision::Undecided,
    };
    ctx.store.put_intent(b, txid, intent.encode());
    outcomes::await_outcome(ctx.store, b, txid, once);
    Ok(Outcome::Begun { txid, inode })
}

/// A mkdir's or rmdir's pending entry resolved (made or removed for good, or restored), and its
/// intent deleted; a change made so gets its outcome recorded in the same batch, whoever
/// resolves it (a retry after a crash of the coordinator finds it: chaos_long met an rmdir
/// finished by recovery whose retry answered `NotFound`, simulation seed 12).
fn resolve_entry(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    dir: String,
    name: String,
    txid: u64,
    commit: bool,
) -> Result<Outcome, StateError> {
    let mut answer = None;
    if let Some(rec) = ctx.store.entry(&dir, &name)?
        && let Some(p) = rec.pending.filter(|p| p.txid == txid)
    {
        let before = is_dir(rec.inode.as_ref());
        // An undone mkdir answered behind gives its client's reserved number back: nothing
        // holds it now (its object is removed before its entry is resolved), and the
        // mkdir sent again takes the number its client answered with. (A number from the
        // client's ranges only: another mkdir's is in none.)
        if !commit
            && let Some(made) = p.after.as_ref().filter(|i| i.kind == FileKind::Directory)
            && let Some(once) = outcomes::awaited(ctx.store, txid)?
        {
            ctx.ids
                .release_reserved(ctx.store, b, once.id.client, made.ino.0)?;
        }
        let result = if commit { p.after } else { rec.inode };
        adjust_subdirs(ctx.store, b, &dir, is_dir(result.as_ref()) - before)?;
        match &result {
            Some(i) => put_visible(ctx.store, b, &dir, &name, i),
            None => ctx.store.delete_entry(b, &dir, &name),
        }
        // What the change answers, as `client_mkdir` and `client_rmdir` do (the parent's
        // attributes are not kept: the client fetches them).
        answer = commit.then_some(Response::Changed {
            inode: result,
            parent: None,
        });
    }
    outcomes::resolve_awaited(ctx, b, txid, answer)?;
    ctx.store.delete_intent(b, txid);
    Ok(Outcome::Unit)
}

/// Records the decision of intent `txid` (recovery follows it).
fn decide(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    txid: u64,
    decision: Decision,
) -> Result<Outcome, StateError> {
    if let Some(bytes) = ctx.store.intent(txid)? {
        let updated = match Intent::decode(&bytes) {
            Some(Intent::Mkdir {
                dir,
                name,
                ino,
                depth,
                ..
            }) => Some(Intent::Mkdir {
                dir,
                name,
                ino,
                depth,
                decision,
            }),
            Some(Intent::Rmdir { dir, name, ino, .. }) => Some(Intent::Rmdir {
                dir,
                name,
                ino,
                decision,
            }),
            Some(Intent::RenameOut {
                from_dir,
                from_name,
                to,
                dst_node,
                ino,
                moves,
                ..
            }) => Some(Intent::RenameOut {
                from_dir,
                from_name,
                to,
                dst_node,
                ino,
                decision,
                moves,
            }),
            _ => None,
        };
        if let Some(i) = updated {
            ctx.store.put_intent(b, txid, i.encode());
        }
    }
    Ok(Outcome::Unit)
}

/// Records the directory parts a tree move copied (to undo or finish it).
fn tree_move_record(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    txid: u64,
    moves: Vec<crate::state::intent::DirMove>,
) -> Result<Outcome, StateError> {
    let Some(Intent::TreeMove {
        path,
        group,
        arriving,
        ..
    }) = ctx
        .store
        .intent(txid)?
        .and_then(|bytes| Intent::decode(&bytes))
    else {
        return Err(WireError::Io(format!("no tree move {txid} to record")).into());
    };
    let intent = Intent::TreeMove {
        path,
        group,
        arriving,
        moves,
    };
    ctx.store.put_intent(b, txid, intent.encode());
    Ok(Outcome::Unit)
}

/// The directory object side of a mkdir (idempotent; refused over another directory's).
fn dir_object_create(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    (path, ino): (String, InodeId),
    (shards, map): (Vec<Shard>, Option<ShardMap>),
    undecided: bool,
) -> Result<Outcome, StateError> {
    match ctx.store.dir(&path)? {
        // Made already (a repeat by recovery): as it is, confirmed or not.
        Some(rec) if rec.ino == ino => {}
        // The object of a directory renamed away (frozen, dropped once its rename
        // finishes) or of one moving in: the name is free or about to be taken,
        // not taken by this object (simulation seeds 116 with --behind and 5007,
        // --dir-moves: a mkdir of a moved directory's old name answered
        // `AlreadyExists` for a name that did not exist).
        Some(rec) if rec.frozen.is_some() || rec.hidden.is_some() => {
            return Err(WireError::Busy.into());
        }
        Some(_) => return Err(WireError::AlreadyExists.into()),
        None => ctx.store.put_dir(
            b,
            &path,
            &DirRecord {
                shards: shards.into_iter().map(LocalShard::new).collect(),
                map,
                undecided,
                ..DirRecord::new(ino)
            },
        ),
    }
    Ok(Outcome::Unit)
}

/// Clears the `undecided` mark of this node's part of directory `path` if it is still
/// directory `ino`'s (a confirm arriving after an rmdir and a new mkdir changes nothing).
fn dir_object_confirm(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    path: &str,
    ino: InodeId,
) -> Result<Outcome, StateError> {
    if let Some(mut rec) = ctx.store.dir(path)?
        && rec.ino == ino
        && rec.undecided
    {
        rec.undecided = false;
        ctx.store.put_dir(b, path, &rec);
    }
    Ok(Outcome::Unit)
}
