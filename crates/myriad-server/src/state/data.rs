//! Mutations of a file's contents and size: writes, extensions, truncates, chunks beyond chunk 0, their garbage collection, and block repair.

use crate::state::failure::StateError;
use myriad_proto::{InodeId, WireError, limits};
use myriad_storage::{BLOCK_BYTES, Batch, Space};

use crate::state::coded;
use crate::state::intent::Intent;
use crate::state::ops::{Ctx, Mutation, Outcome, chunk0_blocks, not_routed};
use crate::state::records::{modified, put_visible, visible_file};

/// Executes one mutation of this family into `b`.
pub(super) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    let out = match m {
        Mutation::Write {
            dir,
            name,
            ino,
            offset,
            data,
            now,
        } => {
            let mut inode = visible_file(ctx.store, &dir, &name, ino)?;
            let end = offset
                .checked_add(data.len() as u64)
                .ok_or(WireError::TooLarge)?;
            if end > ctx.layout.chunk_size_bytes {
                return Err(
                    WireError::InvalidArgument("write crosses the end of chunk 0".into()).into(),
                );
            }
            ctx.store.write_range(b, ino, offset, &data)?;
            let size = inode.size.max(end);
            modified(&mut inode, size, now);
            put_visible(ctx.store, b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::ExtendSize {
            dir,
            name,
            ino,
            size,
            now,
        } => {
            if size > limits::FILE_BYTES_MAX {
                return Err(WireError::TooLarge.into());
            }
            let mut inode = visible_file(ctx.store, &dir, &name, ino)?;
            let size = inode.size.max(size);
            modified(&mut inode, size, now);
            put_visible(ctx.store, b, &dir, &name, &inode);
            Outcome::Inode(inode)
        }
        Mutation::Truncate {
            dir,
            name,
            ino,
            size,
            now,
        } => truncate(ctx, b, dir, name, ino, size, now)?,
        Mutation::WriteChunk {
            ino,
            chunk,
            offset,
            data,
        } => write_chunk(ctx, b, ino, chunk, offset, data)?,
        Mutation::ChunkTrim {
            ino,
            chunk,
            keep_bytes,
        } => chunk_trim(ctx, b, ino, chunk, keep_bytes)?,
        Mutation::ChunkTrimFrom { ino, from_bytes } => {
            let c0 = chunk0_blocks(ctx.layout);
            let from = from_bytes.max(ctx.layout.chunk_size_bytes);
            let dropped = match coded::cut_coded(ctx, b, ino, from)? {
                Ok(d) => d,
                Err(c) => return Ok(Outcome::Coded(c)),
            };
            ctx.store.trim_blocks(b, ino, from, c0, u64::MAX)?;
            Outcome::DroppedCoded(dropped)
        }
        Mutation::RepairBlock { ino, block, data } => {
            let now = ctx.store.block_value(ino, block)?;
            let still = match now.as_deref() {
                None => false,
                Some(v) => myriad_storage::block_data(v).is_none_or(|d| d == data.as_slice()),
            };
            if still {
                ctx.store.put_block(b, ino, block, data);
            }
            Outcome::Unit
        }
        Mutation::RepairRecord { space, key, value } => {
            let now = ctx.store.raw_record(space, &key)?;
            let still = now
                .as_deref()
                .is_some_and(|v| v == value.as_slice() || !myriad_storage::record_intact(v));
            if still {
                ctx.store.put_raw_record(b, space, key, value);
            }
            Outcome::Unit
        }
        Mutation::Resync { keys } => resync(ctx, b, keys)?,
        Mutation::DropBlocks { ino, from_block } => drop_blocks(ctx, b, ino, from_block)?,
        other => return Err(not_routed(&other).into()),
    };
    Ok(out)
}

/// Sets a file's size; the chunks past it are left to a GC intent (answered with it).
fn truncate(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    dir: String,
    name: String,
    ino: InodeId,
    size: u64,
    now: i64,
) -> Result<Outcome, StateError> {
    if size > limits::FILE_BYTES_MAX {
        return Err(WireError::TooLarge.into());
    }
    let mut inode = visible_file(ctx.store, &dir, &name, ino)?;
    let old = inode.size;
    let mut gc = None;
    if size < old {
        let c0 = chunk0_blocks(ctx.layout);
        ctx.store.trim_blocks(b, ino, size, 0, c0)?;
        if old > ctx.layout.chunk_size_bytes {
            let txid = ctx.ids.next(ctx.store, b)?;
            let intent = Intent::ChunkGc {
                ino,
                keep_bytes: size,
                old_size: old,
            };
            ctx.store.put_intent(b, txid, intent.encode());
            gc = Some(txid);
        }
    }
    modified(&mut inode, size, now);
    put_visible(ctx.store, b, &dir, &name, &inode);
    Ok(Outcome::InodeGc(inode, gc))
}

/// Writes into a chunk past the first (refused, `Coded`, if it was coded meanwhile).
fn write_chunk(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    ino: InodeId,
    chunk: u64,
    offset: u64,
    data: Vec<u8>,
) -> Result<Outcome, StateError> {
    let cs = ctx.layout.chunk_size_bytes;
    if chunk == 0 || offset.saturating_add(data.len() as u64) > cs {
        return Err(WireError::InvalidArgument("chunk write out of bounds".into()).into());
    }
    let abs = chunk
        .checked_mul(cs)
        .and_then(|x| x.checked_add(offset))
        .filter(|a| a.saturating_add(data.len() as u64) <= limits::FILE_BYTES_MAX)
        .ok_or(WireError::TooLarge)?;
    if let Some(c) = ctx.store.coded(ino, chunk)? {
        return Ok(Outcome::Coded(Box::new(c)));
    }
    ctx.store.write_range(b, ino, abs, &data)?;
    Ok(Outcome::Unit)
}

/// Cuts a chunk to its first `keep_bytes` (a coded one's record too).
fn chunk_trim(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    ino: InodeId,
    chunk: u64,
    keep_bytes: u64,
) -> Result<Outcome, StateError> {
    let c0 = chunk0_blocks(ctx.layout);
    let cs = ctx.layout.chunk_size_bytes;
    if let Some(c) = ctx.store.coded(ino, chunk)? {
        if keep_bytes == 0 {
            ctx.store.delete_coded(b, ino, chunk);
            return Ok(Outcome::DroppedCoded(vec![(chunk, c)]));
        }
        if keep_bytes < c.data_bytes {
            return Ok(Outcome::Coded(Box::new(c)));
        }
        return Ok(Outcome::Unit);
    }
    // Chunk indexes come off the wire: no arithmetic here may overflow.
    let (Some(start), Some(first_block)) = (chunk.checked_mul(cs), chunk.checked_mul(c0)) else {
        return Err(WireError::TooLarge.into());
    };
    ctx.store.trim_blocks(
        b,
        ino,
        start.saturating_add(keep_bytes.min(cs)),
        first_block,
        first_block.saturating_add(c0),
    )?;
    Ok(Outcome::Unit)
}

/// Rewrites damaged records from their intact copies' values (anti-entropy, fsck).
fn resync(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    keys: Vec<(Space, Vec<u8>)>,
) -> Result<Outcome, StateError> {
    let mut written = 0u64;
    for (space, key) in keys {
        match ctx.store.raw_record(space, &key)? {
            Some(v) if intact(space, &v) => {
                ctx.store.put_raw_record(b, space, key, v);
                written += 1;
            }
            Some(_) => {}
            None => {
                b.delete(space, key);
                written += 1;
            }
        }
    }
    Ok(Outcome::Resynced(written))
}

/// fsck repair: drops every block of `ino` from `from_block` on.
fn drop_blocks(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    ino: InodeId,
    from_block: u64,
) -> Result<Outcome, StateError> {
    let from = from_block.saturating_mul(BLOCK_BYTES);
    let dropped = match coded::cut_coded(ctx, b, ino, from)? {
        Ok(d) => d,
        Err(c) => return Ok(Outcome::Coded(c)),
    };
    ctx.store.trim_blocks(
        b,
        ino,
        from_block.saturating_mul(BLOCK_BYTES),
        from_block,
        u64::MAX,
    )?;
    Ok(Outcome::DroppedCoded(dropped))
}

/// Whether a stored value passes its checksum, where its space has one (blocks, entry and
/// directory records).
fn intact(space: Space, value: &[u8]) -> bool {
    match space {
        Space::Blocks => myriad_storage::block_data(value).is_some(),
        s if myriad_storage::RECORD_SPACES.contains(&s) => myriad_storage::record_intact(value),
        _ => true,
    }
}
