//! Renames: on one partition, across two (source and target sides), and of whole directories (freeze, export/import, finish).

use std::collections::HashSet;

use crate::state::failure::StateError;
use myriad_placement::split_parent;
use myriad_proto::{DirAction, FileKind, Inode, Shard, WireError};
use myriad_storage::{Batch, DirRecord, EntryRecord, LocalShard, Pending};

use crate::state::intent::{Decision, DirMove, Intent};
use crate::state::ops::{
    Blocks, Ctx, DirImport, Mutation, Outcome, RenamePrepare, chunk0_blocks, not_routed,
    prepare_key, replace_key,
};
use crate::state::records::{
    adjust_subdirs, check_exchange_target, check_rename_target, dir_here, drop_file_data, is_dir,
    not_auto_indexed, put_visible, require_dir, require_free_name, require_writable, visible,
};

/// Executes one mutation of this family into `b`.
pub(super) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    let out = match m {
        Mutation::RenameLocal {
            from,
            to,
            flags,
            now,
            keep,
        } => {
            let (fdir, fname) = split_parent(&from);
            let (tdir, tname) = split_parent(&to);
            require_writable(ctx.store, fdir, fname)?;
            let mut inode = visible(ctx.store, fdir, fname)?;
            if inode.kind == FileKind::Directory {
                // Directories move their whole subtree: the node routes them through
                // `dir_rename`; getting here means the entry changed kind under us.
                return Err(WireError::Busy.into());
            }
            require_dir(ctx.store, tdir, tname)?;
            if flags.exchange {
                let mut other = check_exchange_target(ctx.store, tdir, tname, &inode)?;
                if other.ino != inode.ino {
                    inode.ctime_ns = now;
                    other.ctime_ns = now;
                    put_visible(ctx.store, b, tdir, tname, &inode);
                    put_visible(ctx.store, b, fdir, fname, &other);
                }
                return Ok(Outcome::Renamed(None, None));
            }
            let replaced = check_rename_target(ctx.store, tdir, tname, &inode, flags, None)?;
            let mut gc = None;
            let mut dropped_link = None;
            if let Some(old) = replaced {
                if old.ino == inode.ino {
                    return Ok(Outcome::Renamed(None, None));
                }
                match keep {
                    Some((kept, ino)) if ino == old.ino => keep_replaced(ctx, b, &kept, old, now)?,
                    // Replaced since the caller looked: it looks again.
                    Some(_) if old.kind != FileKind::HardLink => {
                        return Err(WireError::Busy.into());
                    }
                    _ => {
                        gc = drop_file_data(ctx, b, &old, now)?;
                        dropped_link = (old.kind == FileKind::HardLink).then_some(old);
                    }
                }
            }
            inode.ctime_ns = now;
            ctx.store.delete_entry(b, fdir, fname);
            put_visible(ctx.store, b, tdir, tname, &inode);
            Outcome::Renamed(gc, dropped_link)
        }
        Mutation::RenameSourceBegin {
            from,
            to,
            dst_node,
            now,
        } => {
            let (fdir, fname) = split_parent(&from);
            require_writable(ctx.store, fdir, fname)?;
            let mut inode = visible(ctx.store, fdir, fname)?;
            let txid = ctx.ids.next(ctx.store, b)?;
            let blocks = if inode.kind == FileKind::File {
                ctx.store.blocks(inode.ino, 0, chunk0_blocks(ctx.layout))?
            } else {
                Vec::new()
            };
            let rec = EntryRecord {
                inode: Some(inode.clone()),
                pending: Some(Pending { txid, after: None }),
            };
            ctx.store.put_entry(b, fdir, fname, &rec);
            let intent = Intent::RenameOut {
                from_dir: fdir.to_string(),
                from_name: fname.to_string(),
                to,
                dst_node,
                ino: inode.ino,
                decision: Decision::Undecided,
                moves: Vec::new(),
            };
            ctx.store.put_intent(b, txid, intent.encode());
            inode.ctime_ns = now;
            Outcome::RenameBegun {
                txid,
                inode,
                blocks,
            }
        }
        Mutation::RenameSourceDecide {
            txid,
            commit,
            moves,
            incoming,
        } => source_decide(ctx, b, txid, commit, moves, incoming)?,
        Mutation::RenamePrepare(p) => target_prepare(ctx, b, p)?,
        Mutation::RenameTargetResolve {
            txid,
            commit,
            now,
            staged,
            // Read from the same intent as `staged`, which is checked.
            kept: _,
        } => target_resolve(ctx, b, txid, (commit, now), staged.as_deref())?,
        Mutation::DirFreeze { path, txid } => {
            let mut rec = dir_here(ctx.store, &path)?;
            match rec.frozen {
                Some(t) if t == txid => {}
                Some(_) => return Err(WireError::Busy.into()),
                // A frozen tree's directories do not move (nor any above them): its index
                // and registry name it by path (docs/metadata-index.md).
                None if rec.read_only.is_some() => return Err(WireError::ReadOnly.into()),
                // A moved tree's index would name paths that are gone.
                None if rec.auto_index.is_some() => not_auto_indexed(&path, &rec)?,
                None => {
                    if rec.is_moving() {
                        return Err(WireError::Busy.into());
                    }
                    rec.frozen = Some(txid);
                    ctx.store.put_dir(b, &path, &rec);
                }
            }
            Outcome::Unit
        }
        Mutation::DirImport(d) => dir_import(ctx, b, d)?,
        Mutation::DirFinish { path, txid, action } => dir_finish(ctx, b, path, txid, action)?,
        other => return Err(not_routed(&other).into()),
    };
    Ok(out)
}

/// The coordinator's decision: a commit deletes the source entry and its chunk-0 blocks (an
/// exchange's puts the incoming entry in its place); an abort restores it.
fn source_decide(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    txid: u64,
    commit: bool,
    moves: Vec<DirMove>,
    incoming: Option<(Inode, Blocks)>,
) -> Result<Outcome, StateError> {
    let Some(Intent::RenameOut {
        from_dir,
        from_name,
        to,
        dst_node,
        ino,
        ..
    }) = ctx.store.intent(txid)?.and_then(|b| Intent::decode(&b))
    else {
        return Ok(Outcome::Unit);
    };
    if let Some(rec) = ctx.store.entry(&from_dir, &from_name)?
        && rec.pending.as_ref().is_some_and(|p| p.txid == txid)
    {
        if commit {
            ctx.store.delete_entry(b, &from_dir, &from_name);
            adjust_subdirs(ctx.store, b, &from_dir, -is_dir(rec.inode.as_ref()))?;
            if rec.inode.as_ref().is_some_and(|i| i.kind == FileKind::File) {
                let c0 = chunk0_blocks(ctx.layout);
                ctx.store.trim_blocks(b, ino, 0, 0, c0)?;
            }
            // An exchange: the destination's entry takes the source's name.
            if let Some((other, blocks)) = incoming {
                for (block, data) in blocks {
                    ctx.store.put_block(b, other.ino, block, data);
                }
                put_visible(ctx.store, b, &from_dir, &from_name, &other);
            }
        } else if let Some(i) = rec.inode {
            put_visible(ctx.store, b, &from_dir, &from_name, &i);
        }
    }
    let decision = if commit {
        Decision::Commit
    } else {
        Decision::Abort
    };
    let intent = Intent::RenameOut {
        from_dir,
        from_name,
        to,
        dst_node,
        ino,
        decision,
        moves,
    };
    ctx.store.put_intent(b, txid, intent.encode());
    Ok(Outcome::Unit)
}

/// The target side: the entry staged pending under `txid` (a retried prepare answers the
/// same; one aborted here already is refused).
fn target_prepare(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    p: RenamePrepare,
) -> Result<Outcome, StateError> {
    let RenamePrepare {
        txid,
        coordinator,
        to,
        inode,
        flags,
        blocks,
        replaces,
        keep,
    } = p;
    let (tdir, tname) = split_parent(&to);
    match ctx
        .store
        .intent(prepare_key(txid))?
        .and_then(|b| Intent::decode(&b))
    {
        Some(Intent::RenameAborted { .. }) => {
            return Err(WireError::Stale.into()); // Aborted here already: too late.
        }
        // Already prepared (a retried request): the same answer.
        Some(Intent::ExchangeIn { .. }) => {
            let other = ctx
                .store
                .entry(tdir, tname)?
                .and_then(|r| r.inode)
                .ok_or_else(|| WireError::Io("exchange staged without its entry".into()))?;
            let blocks = chunk0_of(ctx, &other)?;
            return Ok(Outcome::Exchanged(other, blocks));
        }
        Some(_) => return Ok(Outcome::Unit),
        None => {}
    }
    require_dir(ctx.store, tdir, tname)?;
    // The moved file there already, visible: this rename committed (a commit leaves no
    // intent) and this is a late copy of its prepare (sent twice by the network, this
    // copy held up choosing the trash's name: simulation seed 20038). Staged now, the
    // name would wait for good for a decision already made.
    if !flags.exchange && already_there(ctx, tdir, tname, &inode)? {
        return Ok(Outcome::Unit);
    }
    if inode.kind == FileKind::File && leaving_here(ctx.store, inode.ino)? {
        return Err(WireError::Busy.into());
    }
    // An exchange swaps with the entry there (and hands it back); a rename
    // replaces it, if any.
    let (replaced, given) = if flags.exchange {
        let other = check_exchange_target(ctx.store, tdir, tname, &inode)?;
        let given = chunk0_of(ctx, &other)?;
        (Some(other), Some(given))
    } else {
        let replaced = check_rename_target(ctx.store, tdir, tname, &inode, flags, replaces)?;
        if let Some((kept, kept_ino)) = &keep {
            // Replaced since the partition chose the trash's name for it: it looks again.
            if replaced.as_ref().map(|r| r.ino) != Some(*kept_ino) {
                return Err(WireError::Busy.into());
            }
            // The trash's directory made and writable, a name free in it: else the
            // partition makes them again or tries another name (`trash.rs` `next_spot`).
            kept_name(ctx, kept, *kept_ino)?;
        }
        (replaced, None)
    };
    for (block, data) in blocks {
        ctx.store.put_block(b, inode.ino, block, data);
    }
    let rec = EntryRecord {
        inode: replaced.clone(),
        pending: Some(Pending {
            txid,
            after: Some(inode.clone()),
        }),
    };
    ctx.store.put_entry(b, tdir, tname, &rec);
    let (dir, name, ino) = (tdir.to_string(), tname.to_string(), inode.ino);
    let intent = match keep {
        _ if flags.exchange => Intent::ExchangeIn {
            coordinator,
            dir,
            name,
            ino,
        },
        Some((kept, kept_ino)) => Intent::RenameInKeeping {
            coordinator,
            dir,
            name,
            ino,
            kept,
            kept_ino,
        },
        None => Intent::RenameIn {
            coordinator,
            dir,
            name,
            ino,
        },
    };
    ctx.store.put_intent(b, prepare_key(txid), intent.encode());
    Ok(match (replaced, given) {
        (Some(other), Some(given)) => Outcome::Exchanged(other, given),
        _ => Outcome::Unit,
    })
}

/// Whether `tdir/tname` holds `inode` itself, visible and idle: only once the rename that
/// brings it has committed (a file or link's one name is the source's until then; a hard
/// link's names share an inode and are left to `check_rename_target`).
fn already_there(
    ctx: &Ctx<'_>,
    tdir: &str,
    tname: &str,
    inode: &Inode,
) -> Result<bool, StateError> {
    if inode.kind == FileKind::HardLink {
        return Ok(false);
    }
    Ok(ctx.store.entry(tdir, tname)?.is_some_and(|r| {
        r.pending.is_none() && r.inode.as_ref().is_some_and(|i| i.ino == inode.ino)
    }))
}

/// The target side's end: the staged entry revealed (commit) or dropped, with a tombstone
/// after an abort.
fn target_resolve(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    txid: u64,
    (commit, now): (bool, i64),
    staged: Option<&str>,
) -> Result<Outcome, StateError> {
    // An abort leaves a tombstone, even of a prepare that never arrived.
    let tombstone = |b: &mut Batch| {
        if !commit {
            let t = Intent::RenameAborted { at_ns: now };
            ctx.store.put_intent(b, prepare_key(txid), t.encode());
        }
    };
    let (dir, name, ino, exchange, keep) = match ctx
        .store
        .intent(prepare_key(txid))?
        .and_then(|b| Intent::decode(&b))
    {
        Some(Intent::RenameIn { dir, name, ino, .. }) => (dir, name, ino, false, None),
        Some(Intent::ExchangeIn { dir, name, ino, .. }) => (dir, name, ino, true, None),
        Some(Intent::RenameInKeeping {
            dir,
            name,
            ino,
            kept,
            kept_ino,
            ..
        }) => (dir, name, ino, false, Some((kept, kept_ino))),
        _ if staged.is_some() => return Err(WireError::Busy.into()),
        _ => {
            tombstone(b);
            return Ok(Outcome::Renamed(None, None)); // Already resolved (or never came).
        }
    };
    // Its leases were recalled for the directory read before (`staged`): another one
    // staged since must be resolved again, with its own recalled.
    if staged != Some(dir.as_str()) {
        return Err(WireError::Busy.into());
    }
    let mut gc = None;
    let mut dropped_link = None;
    if let Some(rec) = ctx.store.entry(&dir, &name)?
        && let Some(p) = rec.pending.filter(|p| p.txid == txid)
    {
        if commit {
            match rec.inode.as_ref().filter(|o| o.ino != ino) {
                // Exchanged: the entry lives on under the source's name, which
                // has its chunk-0 blocks now.
                Some(old) if exchange && old.kind == FileKind::File => {
                    let c0 = chunk0_blocks(ctx.layout);
                    ctx.store.trim_blocks(b, old.ino, 0, 0, c0)?;
                }
                Some(_) if exchange => {}
                Some(old) => {
                    // With the trash on, kept (docs/trash.md); freed if it cannot be (its
                    // day purged since the prepare, both of its names taken).
                    let kept =
                        keep.as_ref()
                            .filter(|(_, i)| *i == old.ino)
                            .is_some_and(|(kept, _)| {
                                keep_replaced(ctx, b, kept, old.clone(), now).is_ok()
                            });
                    if !kept {
                        if keep.is_some() {
                            tracing::warn!(
                                ino = old.ino.0,
                                "the trash could not keep a file a rename replaced: freed"
                            );
                        }
                        gc = drop_file_data(ctx, b, old, now)?;
                        dropped_link = Some(old.clone()).filter(|o| o.kind == FileKind::HardLink);
                    }
                }
                None => {}
            }
            let delta = is_dir(p.after.as_ref()) - is_dir(rec.inode.as_ref());
            adjust_subdirs(ctx.store, b, &dir, delta)?;
            match p.after {
                Some(i) => put_visible(ctx.store, b, &dir, &name, &i),
                None => ctx.store.delete_entry(b, &dir, &name),
            }
        } else {
            match rec.inode {
                Some(i) => put_visible(ctx.store, b, &dir, &name, &i),
                None => ctx.store.delete_entry(b, &dir, &name),
            }
            // Staged chunk-0 blocks came only with a regular file: a hard-link name
            // brought none, and its inode's blocks may live on this very node.
            if p.after.as_ref().is_some_and(|i| i.kind == FileKind::File) {
                let c0 = chunk0_blocks(ctx.layout);
                ctx.store.trim_blocks(b, ino, 0, 0, c0)?;
            }
        }
    }
    ctx.store.delete_intent(b, prepare_key(txid));
    tombstone(b);
    Ok(Outcome::Renamed(gc, dropped_link))
}

/// A directory part moved here, hidden until revealed.
fn dir_import(ctx: &mut Ctx<'_>, b: &mut Batch, d: DirImport) -> Result<Outcome, StateError> {
    let DirImport {
        path,
        txid,
        ino,
        shards,
        map,
        entries,
        replaces,
    } = d;
    refuse_entries_leaving_here(ctx.store, &entries)?;
    let rec = match ctx.store.dir(&path)? {
        Some(rec) if rec.hidden == Some(txid) => rec,
        found => {
            if let Some(old) = found {
                let Some(expected) = replaces else {
                    return Err(WireError::AlreadyExists.into());
                };
                take_over(ctx, &path, &old, expected)?;
                let kept = Intent::DirReplaced {
                    path: path.clone(),
                    ino: old.ino,
                };
                ctx.store.put_intent(b, replace_key(txid), kept.encode());
            }
            let rec = hidden_copy(txid, ino, shards, map)?;
            ctx.store.put_dir(b, &path, &rec);
            rec
        }
    };
    for e in entries {
        if rec.shard_for(myriad_proto::name_hash(&e.name)).is_none() {
            return Err(WireError::InvalidArgument(format!(
                "{}: not in a shard of {path} held here",
                e.name
            ))
            .into());
        }
        for (block, data) in e.blocks {
            ctx.store.put_block(b, e.inode.ino, block, data.into_vec());
        }
        // Staged: readers of the new name wait until the rename is revealed.
        let rec = EntryRecord {
            inode: None,
            pending: Some(Pending {
                txid,
                after: Some(e.inode),
            }),
        };
        ctx.store.put_entry(b, &path, &e.name, &rec);
    }
    Ok(Outcome::Unit)
}

/// A directory part's end on this side: revealed, thawed or dropped.
fn dir_finish(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    path: String,
    txid: u64,
    action: DirAction,
) -> Result<Outcome, StateError> {
    let Some(mut rec) = ctx.store.dir(&path)? else {
        return Ok(Outcome::Unit);
    };
    let entries = ctx.store.entries(&path, None, usize::MAX)?;
    match action {
        DirAction::Reveal if rec.hidden == Some(txid) => {
            rec.hidden = None;
            // The directory this copy replaced, if any, is gone for good.
            ctx.store.delete_intent(b, replace_key(txid));
            let mut subdirs = 0;
            for (name, e) in entries {
                let shown = match e.pending.filter(|p| p.txid == txid) {
                    Some(p) => {
                        match &p.after {
                            Some(i) => put_visible(ctx.store, b, &path, &name, i),
                            None => ctx.store.delete_entry(b, &path, &name),
                        }
                        p.after
                    }
                    None => e.inode,
                };
                subdirs += is_dir(shown.as_ref());
            }
            // The copy arrived whole: count its subdirectories afresh.
            rec.subdirs = u32::try_from(subdirs.max(0)).unwrap_or(u32::MAX);
            ctx.store.put_dir(b, &path, &rec);
        }
        DirAction::Thaw if rec.frozen == Some(txid) => {
            rec.frozen = None;
            ctx.store.put_dir(b, &path, &rec);
        }
        DirAction::Drop { keep_blocks_of }
            if rec.frozen == Some(txid) || rec.hidden == Some(txid) =>
        {
            ctx.store.delete_dir(b, &path);
            let c0 = chunk0_blocks(ctx.layout);
            for (name, e) in entries {
                ctx.store.delete_entry(b, &path, &name);
                let inode = e.inode.or_else(|| e.pending.and_then(|p| p.after));
                let Some(i) = inode.filter(|i| i.kind == FileKind::File) else {
                    continue;
                };
                // The other copy of a rename, on this node, shares the blocks.
                let shared = match &keep_blocks_of {
                    Some(other) => ctx
                        .store
                        .entry(other, &name)?
                        .and_then(|o| o.inode.or_else(|| o.pending.and_then(|p| p.after)))
                        .is_some_and(|o| o.ino == i.ino),
                    None => false,
                };
                if !shared {
                    ctx.store.trim_blocks(b, i.ino, 0, 0, c0)?;
                }
            }
            // A copy that took over an empty directory gives its place back.
            if rec.hidden == Some(txid)
                && let Some(Intent::DirReplaced { path: p, ino }) = ctx
                    .store
                    .intent(replace_key(txid))?
                    .and_then(|b| Intent::decode(&b))
                && p == path
            {
                ctx.store.put_dir(b, &path, &DirRecord::new(ino));
                ctx.store.delete_intent(b, replace_key(txid));
            }
        }
        _ => {}
    }
    Ok(Outcome::Unit)
}

/// The record of a directory rename's copy of a directory object, hidden until revealed.
fn hidden_copy(
    txid: u64,
    ino: myriad_proto::InodeId,
    shards: Vec<Shard>,
    map: Option<myriad_proto::ShardMap>,
) -> Result<DirRecord, StateError> {
    if shards.iter().any(|s| !s.is_valid()) || map.as_ref().is_some_and(|m| !m.is_well_formed()) {
        return Err(WireError::InvalidArgument("bad shards".into()).into());
    }
    Ok(DirRecord {
        hidden: Some(txid),
        shards: if shards.is_empty() {
            vec![LocalShard::new(Shard::ALL)]
        } else {
            shards.into_iter().map(LocalShard::new).collect()
        },
        map,
        ..DirRecord::new(ino)
    })
}

/// Whether a rename's copy may take over directory object `old` at `path`, the empty
/// directory `expected` its coordinator found there: checked in the batch that takes it,
/// so no entry can arrive between the check and the take-over (creates into a hidden
/// object wait or get `Busy`).
fn take_over(
    ctx: &Ctx<'_>,
    path: &str,
    old: &DirRecord,
    expected: myriad_proto::InodeId,
) -> Result<(), StateError> {
    // Another directory lives there now, or another rename is moving it or into it.
    if old.ino != expected || old.frozen.is_some() || old.hidden.is_some() {
        return Err(WireError::Busy.into());
    }
    if old.read_only.is_some() {
        return Err(WireError::ReadOnly.into());
    }
    not_auto_indexed(path, old)?;
    // Its entries may live on other servers' shards; none can be checked from here.
    if !old.is_whole() {
        return Err(WireError::NotSupported(
            "renaming over a directory that was split into shards (remove it first)".into(),
        )
        .into());
    }
    if ctx.store.has_entries(path)? {
        return Err(WireError::NotEmpty.into());
    }
    Ok(())
}

/// The chunk-0 blocks an entry carries with it when it moves (a regular file's; other
/// kinds have none here).
/// Whether file `ino` is the entry an unresolved exchange into this partition is taking
/// away (an `ExchangeIn` whose staged entry still holds it): its commit drops `ino`'s
/// chunk-0 blocks here, so `ino` must not come back here with its blocks until then
/// (simulation seed 5211: an exchange's lost commit, resolved by recovery after a second
/// exchange had brought the file back, dropped the file's first chunk).
pub(crate) fn leaving_here(
    store: &myriad_storage::Store,
    ino: myriad_proto::InodeId,
) -> Result<bool, StateError> {
    Ok(leaving_inodes(store)?.contains(&ino))
}

/// The files unresolved exchanges into this partition are taking away (`leaving_here`).
fn leaving_inodes(
    store: &myriad_storage::Store,
) -> Result<HashSet<myriad_proto::InodeId>, StateError> {
    let mut out = HashSet::new();
    for (_, bytes) in store.intents()? {
        if let Some(Intent::ExchangeIn { dir, name, .. }) = Intent::decode(&bytes)
            && let Some(rec) = store.entry(&dir, &name)?
            && rec.pending.is_some()
            && let Some(i) = rec.inode
        {
            out.insert(i.ino);
        }
    }
    Ok(out)
}

/// Refuses (`Busy`) entries moved here by a split or a directory's rename that bring a
/// file's chunk-0 blocks an unresolved exchange into this partition is about to drop
/// (`leaving_here`): the split's copy waits for the exchange (simulation seed 3095: a
/// file exchanged away from here, then split back here with its directory's shard, read
/// empty once the exchange's commit dropped its blocks).
pub(crate) fn refuse_entries_leaving_here(
    store: &myriad_storage::Store,
    entries: &[myriad_proto::ExportedEntry],
) -> Result<(), StateError> {
    if !entries.iter().any(|e| e.inode.kind == FileKind::File) {
        return Ok(());
    }
    let leaving = leaving_inodes(store)?;
    if entries
        .iter()
        .any(|e| e.inode.kind == FileKind::File && leaving.contains(&e.inode.ino))
    {
        return Err(WireError::Busy.into());
    }
    Ok(())
}

fn chunk0_of(ctx: &Ctx<'_>, inode: &Inode) -> Result<Vec<(u64, Vec<u8>)>, StateError> {
    if inode.kind != FileKind::File {
        return Ok(Vec::new());
    }
    Ok(ctx.store.blocks(inode.ino, 0, chunk0_blocks(ctx.layout))?)
}

/// The trash keeps the file a rename replaces (docs/trash.md): its entry goes to `kept` (or,
/// if that name is taken, `<kept>.<inode>`) in the rename's batch, its data untouched.
fn keep_replaced(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    kept: &str,
    mut old: Inode,
    now: i64,
) -> Result<(), StateError> {
    let (kdir, name) = kept_name(ctx, kept, old.ino)?;
    old.ctime_ns = now;
    put_visible(ctx.store, b, kdir, &name, &old);
    Ok(())
}

/// The directory and the free name in it where the trash keeps inode `ino` at `kept`:
/// `kept`'s own name, or `<name>.<inode>` if that is taken.
fn kept_name<'k>(
    ctx: &Ctx<'_>,
    kept: &'k str,
    ino: myriad_proto::InodeId,
) -> Result<(&'k str, String), StateError> {
    let (kdir, kname) = split_parent(kept);
    match require_free_name(ctx.store, kdir, kname) {
        Ok(()) => Ok((kdir, kname.to_string())),
        Err(StateError::Fs(WireError::AlreadyExists)) => {
            let again = format!("{kname}.{}", ino.0);
            require_free_name(ctx.store, kdir, &again)?;
            Ok((kdir, again))
        }
        Err(e) => Err(e),
    }
}
