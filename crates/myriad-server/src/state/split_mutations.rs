//! Mutations of the split protocol (docs/huge-dirs.md): each is one atomic batch on one node.

use crate::state::failure::StateError;
use myriad_proto::{ExportedEntry, FileKind, Shard, ShardMap, WireError};
use myriad_storage::{Batch, DirRecord, EntryRecord, LocalShard, Pending};

use crate::state::intent::{Decision, Intent};
use crate::state::ops::{Ctx, Outcome, ShardMutation, chunk0_blocks};
use crate::state::records::{dir_here, put_visible};
use myriad_proto::InodeId;

pub fn execute(ctx: &mut Ctx<'_>, b: &mut Batch, m: ShardMutation) -> Result<Outcome, StateError> {
    match m {
        ShardMutation::SplitBegin { dir, shard } => {
            let mut rec = dir_here(ctx.store, &dir)?;
            if rec.frozen.is_some() || rec.hidden.is_some() {
                return Err(WireError::Busy.into());
            }
            let local = rec
                .shards
                .iter_mut()
                .find(|s| s.shard == shard)
                .ok_or(WireError::NotFound)?;
            if local.splitting.is_some() || local.hidden.is_some() {
                return Err(WireError::Busy.into());
            }
            // An earlier split of this shard that is still being undone (its home's map
            // and its child's node not yet cleaned): its remaining steps name the shard, not
            // the split, and would undo this one (found by the simulation, seed 1031).
            if split_of_shard_pending(ctx, &dir, shard)? {
                return Err(WireError::Busy.into());
            }
            // The id only after every check: an id range opened in a batch that is then
            // thrown away would not have its high-water mark persisted.
            let txid = ctx.ids.next(ctx.store, b)?;
            local.splitting = Some(txid);
            let ino = rec.ino;
            ctx.store.put_dir(b, &dir, &rec);
            put_split_intent(ctx, b, txid, dir, shard, ino, Decision::Undecided);
            Ok(Outcome::SplitBegun { txid, ino })
        }
        ShardMutation::SplitCommit { txid } => split_commit(ctx, b, txid),
        ShardMutation::SplitAbort { txid } => {
            let Some(Intent::SplitOut {
                dir, shard, ino, ..
            }) = read_intent(ctx, txid)?
            else {
                return Ok(Outcome::Unit);
            };
            if let Some(mut rec) = ctx.store.dir(&dir)? {
                for s in &mut rec.shards {
                    if s.shard == shard && s.splitting == Some(txid) {
                        s.splitting = None;
                    }
                }
                ctx.store.put_dir(b, &dir, &rec);
            }
            put_split_intent(ctx, b, txid, dir, shard, ino, Decision::Abort);
            Ok(Outcome::Unit)
        }
        ShardMutation::Import {
            dir,
            ino,
            txid,
            child,
            entries,
        } => import(ctx, b, dir, ino, txid, child, entries),
        ShardMutation::Finish {
            dir,
            txid,
            child,
            reveal,
        } => finish(ctx, b, dir, txid, child, reveal),
        ShardMutation::MapChange {
            dir,
            ino,
            shard,
            split,
        } => map_change(ctx, b, dir, ino, shard, split),
        ShardMutation::Create {
            dir,
            ino,
            shards,
            undecided,
        } => {
            let mut rec = match ctx.store.dir(&dir)? {
                Some(r) if r.ino == ino => r,
                Some(_) => return Err(WireError::AlreadyExists.into()),
                None => DirRecord {
                    shards: Vec::new(),
                    undecided,
                    ..DirRecord::new(ino)
                },
            };
            for s in shards {
                if !s.is_valid() {
                    return Err(WireError::InvalidArgument("bad shard".into()).into());
                }
                if !rec.shards.iter().any(|l| l.shard == s) {
                    rec.shards.push(LocalShard::new(s));
                }
            }
            rec.shards.sort_by_key(|s| s.shard.start());
            ctx.store.put_dir(b, &dir, &rec);
            Ok(Outcome::Unit)
        }
    }
}

/// The splitting shard's commit: its moved half handed over, the shard map split.
fn split_commit(ctx: &mut Ctx<'_>, b: &mut Batch, txid: u64) -> Result<Outcome, StateError> {
    let (dir, shard, ino) = match read_intent(ctx, txid)? {
        Some(Intent::SplitOut {
            dir,
            shard,
            ino,
            decision: Decision::Undecided,
        }) => (dir, shard, ino),
        // A repeated step.
        Some(Intent::SplitOut {
            decision: Decision::Commit,
            ..
        }) => return Ok(Outcome::Unit),
        // Undone (by recovery) or over: the split must not go on to reveal its
        // child, which would then overlap the shard that stayed whole here.
        _ => {
            return Err(
                WireError::Io(format!("split {txid} was abandoned; it cannot commit")).into(),
            );
        }
    };
    let mut rec = dir_here(ctx.store, &dir)?;
    let Some(local) = rec
        .shards
        .iter_mut()
        .find(|s| s.shard == shard && s.splitting == Some(txid))
    else {
        return Err(WireError::Io(format!(
            "split {txid}: shard {} of {dir} is not splitting",
            shard.label()
        ))
        .into());
    };
    let (lower, upper) = shard.halves();
    *local = LocalShard::new(lower);
    ctx.store.put_dir(b, &dir, &rec);
    drop_range(ctx, b, &dir, upper)?;
    put_split_intent(ctx, b, txid, dir, shard, ino, Decision::Commit);
    Ok(Outcome::Unit)
}

/// The new shard's side: the moved entries staged, hidden until the split finishes.
fn import(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    dir: String,
    ino: InodeId,
    txid: u64,
    child: Shard,
    entries: Vec<ExportedEntry>,
) -> Result<Outcome, StateError> {
    crate::state::renames::refuse_entries_leaving_here(ctx.store, &entries)?;
    let mut rec = match ctx.store.dir(&dir)? {
        Some(r) if r.ino == ino => r,
        Some(_) => return Err(WireError::AlreadyExists.into()),
        None => DirRecord {
            shards: Vec::new(),
            ..DirRecord::new(ino)
        },
    };
    match rec
        .shards
        .iter()
        .find(|s| s.shard.covers(&child) || child.covers(&s.shard))
    {
        Some(s) if s.shard == child && s.hidden == Some(txid) => {}
        Some(_) => {
            return Err(WireError::Io(format!(
                "split {txid}: {dir} already holds a shard overlapping {}",
                child.label()
            ))
            .into());
        }
        None => {
            rec.shards.push(LocalShard {
                hidden: Some(txid),
                ..LocalShard::new(child)
            });
            rec.shards.sort_by_key(|s| s.shard.start());
            ctx.store.put_dir(b, &dir, &rec);
        }
    }
    for e in entries {
        if !child.contains(myriad_proto::name_hash(&e.name)) {
            return Err(WireError::InvalidArgument(format!(
                "{}: not in shard {}",
                e.name,
                child.label()
            ))
            .into());
        }
        for (block, data) in e.blocks {
            ctx.store.put_block(b, e.inode.ino, block, data.into_vec());
        }
        let staged = EntryRecord {
            inode: None,
            pending: Some(Pending {
                txid,
                after: Some(e.inode),
            }),
        };
        ctx.store.put_entry(b, &dir, &e.name, &staged);
    }
    Ok(Outcome::Unit)
}

/// Ends a split on the new shard: its entries revealed, or dropped.
fn finish(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    dir: String,
    txid: u64,
    child: Shard,
    reveal: bool,
) -> Result<Outcome, StateError> {
    let Some(mut rec) = ctx.store.dir(&dir)? else {
        return Ok(Outcome::Unit);
    };
    let Some(i) = rec
        .shards
        .iter()
        .position(|s| s.shard == child && s.hidden == Some(txid))
    else {
        return Ok(Outcome::Unit); // Already finished.
    };
    if reveal {
        rec.shards[i].hidden = None;
        ctx.store.put_dir(b, &dir, &rec);
        for (_, name, e) in
            ctx.store
                .entries_in(&dir, child.start(), None, child.end(), usize::MAX)?
        {
            if let Some(inode) = e.pending.filter(|p| p.txid == txid).and_then(|p| p.after) {
                put_visible(ctx.store, b, &dir, &name, &inode);
            }
        }
    } else {
        rec.shards.remove(i);
        if rec.shards.is_empty() && rec.map.is_none() {
            ctx.store.delete_dir(b, &dir);
        } else {
            ctx.store.put_dir(b, &dir, &rec);
        }
        drop_range(ctx, b, &dir, child)?;
    }
    Ok(Outcome::Unit)
}

/// Records a split (or its undo) in the directory's shard map.
fn map_change(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    dir: String,
    ino: InodeId,
    shard: Shard,
    split: bool,
) -> Result<Outcome, StateError> {
    let mut rec = ctx
        .store
        .dir(&dir)?
        .filter(|r| r.ino == ino)
        .ok_or(WireError::NotFound)?;
    // A directory rename read this map when it froze the home: no new shard may
    // appear behind its back (undoing one is always allowed).
    if split && rec.frozen.is_some() {
        return Err(WireError::Busy.into());
    }
    let mut map = rec.map.take().unwrap_or_else(ShardMap::unsplit);
    let (lower, upper) = shard.halves();
    let has = |m: &ShardMap, s: &Shard| m.leaves.contains(s);
    if split && !(has(&map, &lower) && has(&map, &upper)) && !map.split(shard) {
        return Err(WireError::Io(format!(
            "{dir}: shard {} is not a leaf of the map",
            shard.label()
        ))
        .into());
    }
    if !split && has(&map, &lower) && has(&map, &upper) {
        map.unsplit_leaf(shard);
    }
    rec.map = map.is_split().then_some(map);
    ctx.store.put_dir(b, &dir, &rec);
    Ok(Outcome::Unit)
}

fn put_split_intent(
    ctx: &Ctx<'_>,
    b: &mut Batch,
    txid: u64,
    dir: String,
    shard: Shard,
    ino: InodeId,
    decision: Decision,
) {
    let intent = Intent::SplitOut {
        dir,
        shard,
        ino,
        decision,
    };
    ctx.store.put_intent(b, txid, intent.encode());
}

/// Whether a split of `dir`'s `shard` (or of a shard overlapping it) has an intent here.
fn split_of_shard_pending(ctx: &Ctx<'_>, dir: &str, shard: Shard) -> Result<bool, StateError> {
    for (_, bytes) in ctx.store.intents()? {
        if let Some(Intent::SplitOut {
            dir: d, shard: s, ..
        }) = Intent::decode(&bytes)
            && d == dir
            && (s.covers(&shard) || shard.covers(&s))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

fn read_intent(ctx: &Ctx<'_>, txid: u64) -> Result<Option<Intent>, StateError> {
    Ok(ctx.store.intent(txid)?.and_then(|b| Intent::decode(&b)))
}

/// Deletes every entry of `dir` in `range` and the chunk-0 blocks of its regular files (a
/// hard-link name has no blocks here: they live with its inode object).
fn drop_range(ctx: &Ctx<'_>, b: &mut Batch, dir: &str, range: Shard) -> Result<(), StateError> {
    let c0 = chunk0_blocks(ctx.layout);
    for (_, name, e) in ctx
        .store
        .entries_in(dir, range.start(), None, range.end(), usize::MAX)?
    {
        ctx.store.delete_entry(b, dir, &name);
        let inode = e.inode.or_else(|| e.pending.and_then(|p| p.after));
        if let Some(i) = inode.filter(|i| i.kind == FileKind::File) {
            ctx.store.trim_blocks(b, i.ino, 0, 0, c0)?;
        }
    }
    Ok(())
}
