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

/// The data of a stored block value (without copying it), if its checksum holds.
#[must_use]
pub fn block_data(value: &[u8]) -> Option<&[u8]> {
    let (data, trailer) = value.split_at_checked(value.len().checked_sub(CHECKSUM_BYTES)?)?;
    let stored = u32::from_le_bytes(trailer.try_into().ok()?);
    (crc32c::crc32c(data) == stored).then_some(data)
}

/// The data of a stored block value, if its checksum holds (the value's buffer, truncated).
pub fn open_block(mut value: Vec<u8>) -> Option<Vec<u8>> {
    let len = block_data(&value)?.len();
    value.truncate(len);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_block_opens_and_any_flipped_bit_is_caught() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let sealed = seal_block(data.clone());
        assert_eq!(block_data(&sealed), Some(&data[..]));
        assert_eq!(open_block(sealed.clone()), Some(data));
        for i in 0..sealed.len() {
            for bit in 0..8 {
                let mut bad = sealed.clone();
                bad[i] ^= 1 << bit;
                assert!(block_data(&bad).is_none() && open_block(bad).is_none());
            }
        }
        assert_eq!(open_block(seal_block(Vec::new())), Some(Vec::new()));
        assert!(open_block(vec![1, 2, 3]).is_none());
    }
}
