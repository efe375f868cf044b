//! File data as fixed 64 KiB blocks keyed by (inode, block number).
//!
//! Chunk 0 of a file (which includes every inline file) is stored on the node of its inode;
//! chunk k >= 1 on the node placement picks for (ino, k). Storage does not care which: it
//! keeps blocks. Missing blocks read as zeros, which gives sparse files for free; a write
//! rewrites only the blocks it touches (read-modify-write of at most two partial blocks).

/// Block size. Equal to the default inline limit so an inline file is exactly one block.
pub const BLOCK_BYTES: u64 = 64 * 1024;
