//! Mutations of coded chunks (docs/redundancy.md): a chunk's blocks giving way to its coded
//! record, the record giving way to blocks again, the record after a rebuild, and what a
//! cut does to coded chunks. Each is checked against what the store holds when it runs,
//! in the applier's order, so a write between the coder's read and its switch is never lost.

use crate::state::failure::StateError;
use myriad_proto::ec_layout::CodedChunk;
use myriad_proto::{InodeId, WireError};
use myriad_storage::{BLOCK_BYTES, Batch};

use crate::state::ops::{Ctx, Mutation, Outcome, chunk0_blocks, not_routed};

/// Executes one mutation of this family into `b`.
pub(super) fn execute(
    ctx: &mut Ctx<'_>,
    b: &mut Batch,
    m: Mutation,
) -> Result<Outcome, StateError> {
    let cs = ctx.layout.chunk_size_bytes;
    let c0 = chunk0_blocks(ctx.layout);
    match m {
        Mutation::CodeChunk {
            ino,
            chunk,
            coded,
            crc,
        } => {
            if chunk == 0 || ctx.store.coded(ino, chunk)?.is_some() {
                return Ok(Outcome::Switched(false));
            }
            let start = chunk.checked_mul(cs).ok_or(WireError::TooLarge)?;
            let first = chunk.saturating_mul(c0);
            let blocks = ctx.store.blocks(ino, first, first.saturating_add(c0))?;
            let extent = blocks
                .last()
                .map_or(0, |(block, d)| block * BLOCK_BYTES + d.len() as u64 - start);
            if extent != coded.data_bytes || extent == 0 {
                return Ok(Outcome::Switched(false));
            }
            let now = ctx.store.read_range(ino, start, extent, start + extent)?;
            if crc32c::crc32c(&now) != crc {
                return Ok(Outcome::Switched(false));
            }
            ctx.store
                .trim_blocks(b, ino, start, first, first.saturating_add(c0))?;
            ctx.store.put_coded(b, ino, chunk, &coded);
            Ok(Outcome::Switched(true))
        }
        Mutation::UncodeChunk {
            ino,
            chunk,
            generation,
            data,
        } => {
            let now = ctx.store.coded(ino, chunk)?;
            if now.is_some_and(|c| c.generation == generation) {
                let start = chunk.checked_mul(cs).ok_or(WireError::TooLarge)?;
                ctx.store.delete_coded(b, ino, chunk);
                ctx.store.write_range(b, ino, start, &data)?;
            }
            Ok(Outcome::Unit)
        }
        Mutation::RecodeChunk {
            ino,
            chunk,
            was,
            now,
        } => {
            let held = ctx.store.coded(ino, chunk)?;
            if held.as_ref() != Some(&was) {
                return Ok(Outcome::Switched(false));
            }
            ctx.store.put_coded(b, ino, chunk, &now);
            Ok(Outcome::Switched(true))
        }
        other => Err(not_routed(&other).into()),
    }
}

/// The coded chunks a cut dropped (chunk, record), or the coded chunk it falls inside.
type Cut = Result<Vec<(u64, CodedChunk)>, Box<CodedChunk>>;

/// What a cut of `ino` at `from_bytes` (chunks 1 and up) does to its coded chunks: the
/// records of chunks wholly past the cut go (returned, for their fragments to be
/// dropped); a coded chunk the cut falls inside must be uncoded first (`Err` with it).
pub(super) fn cut_coded(
    ctx: &Ctx<'_>,
    b: &mut Batch,
    ino: InodeId,
    from_bytes: u64,
) -> Result<Cut, StateError> {
    let cs = ctx.layout.chunk_size_bytes;
    let first = (from_bytes / cs).max(1);
    let coded = ctx.store.coded_from(ino, first)?;
    let mut dropped = Vec::new();
    for (chunk, c) in coded {
        let start = chunk.saturating_mul(cs);
        if start >= from_bytes {
            dropped.push((chunk, c));
        } else if from_bytes < start.saturating_add(c.data_bytes) {
            return Ok(Err(Box::new(c)));
        }
    }
    for (chunk, _) in &dropped {
        ctx.store.delete_coded(b, ino, *chunk);
    }
    Ok(Ok(dropped))
}
