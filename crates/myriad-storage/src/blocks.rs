//! File data as fixed 64 KiB blocks keyed by (inode, block number).
//!
//! Chunk 0 of a file (which includes every inline file) is stored on the node of its inode;
//! chunk k >= 1 on the node placement picks for (ino, k). Storage does not care which: it
//! keeps blocks. Missing blocks read as zeros, which gives sparse files for free; a write
//! rewrites only the blocks it touches (read-modify-write of at most two partial blocks).

/// Block size. Equal to the default inline limit so an inline file is exactly one block.
pub const BLOCK_BYTES: u64 = 64 * 1024;

/// Bytes of the checksum stored after each block's data.
pub const CHECKSUM_BYTES: usize = 4;

/// The stored value of a block: its data, then the crc32c of the data (little endian). The
/// engine checksums its own files too; this one travels with the block through replication
/// and whole-partition copies, so a block damaged anywhere on its way (or by a bug above
/// the engine) is caught where it is read, and named (ino, block).
#[must_use]
pub fn seal_block(mut data: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&data);
    data.extend_from_slice(&crc.to_le_bytes());
    data
}

/// The data of a stored block value, if its checksum holds.
pub fn open_block(mut value: Vec<u8>) -> Option<Vec<u8>> {
    let body_len = value.len().checked_sub(CHECKSUM_BYTES)?;
    let stored = u32::from_le_bytes(value.get(body_len..)?.try_into().ok()?);
    if crc32c::crc32c(&value[..body_len]) != stored {
        return None;
    }
    value.truncate(body_len);
    Some(value)
}

/// Whether a stored block value's checksum holds (without copying it).
#[must_use]
pub fn block_is_intact(value: &[u8]) -> bool {
    let Some(body_len) = value.len().checked_sub(CHECKSUM_BYTES) else {
        return false;
    };
    value
        .get(body_len..)
        .and_then(|t| t.try_into().ok())
        .map(u32::from_le_bytes)
        .is_some_and(|stored| crc32c::crc32c(&value[..body_len]) == stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_block_opens_and_any_flipped_bit_is_caught() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let sealed = seal_block(data.clone());
        assert!(block_is_intact(&sealed));
        assert_eq!(open_block(sealed.clone()), Some(data));
        for i in 0..sealed.len() {
            for bit in 0..8 {
                let mut bad = sealed.clone();
                bad[i] ^= 1 << bit;
                assert!(!block_is_intact(&bad) && open_block(bad).is_none());
            }
        }
        assert_eq!(open_block(seal_block(Vec::new())), Some(Vec::new()));
        assert!(open_block(vec![1, 2, 3]).is_none());
    }
}
