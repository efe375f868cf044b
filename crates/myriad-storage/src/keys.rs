//! Key encodings. Entry keys are `dir \0 hash(name) name`: NUL cannot occur in a path, so the
//! entries of "/a" (prefix "/a\0") never mix with those of "/ab"; the 8-byte big-endian name
//! hash orders a directory's entries by hash, so a shard of a huge directory (a hash range,
//! docs/huge-dirs.md) is one contiguous key range and a listing cursor is a hash position.

use myriad_proto::InodeId;
use myriad_proto::name_hash;

/// Bytes of the name hash between the directory prefix and the name.
pub const HASH_BYTES: usize = 8;

#[must_use]
pub fn entry_key(dir: &str, name: &str) -> Vec<u8> {
    let mut k = hash_position_key(dir, name_hash(name));
    k.extend_from_slice(name.as_bytes());
    k
}

/// The key just before every entry of `dir` whose name hash is at least `hash` (names are
/// never empty, so a real key is always longer).
#[must_use]
pub fn hash_position_key(dir: &str, hash: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(dir.len() + 1 + HASH_BYTES + 16);
    k.extend_from_slice(dir.as_bytes());
    k.push(0);
    k.extend_from_slice(&hash.to_be_bytes());
    k
}

#[must_use]
pub fn entry_prefix(dir: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(dir.len() + 1);
    k.extend_from_slice(dir.as_bytes());
    k.push(0);
    k
}

/// (hash, name) of an entry key with prefix length `prefix_len`.
#[must_use]
pub fn split_entry_key(key: &[u8], prefix_len: usize) -> Option<(u64, String)> {
    let rest = key.get(prefix_len..)?;
    let hash = u64::from_be_bytes(rest.get(..HASH_BYTES)?.try_into().ok()?);
    let name = String::from_utf8_lossy(rest.get(HASH_BYTES..)?).into_owned();
    Some((hash, name))
}

#[must_use]
pub fn block_key(ino: InodeId, block: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&ino.0.to_be_bytes());
    k.extend_from_slice(&block.to_be_bytes());
    k
}

#[must_use]
pub fn u64_key(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

pub fn decode_u64_key(k: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(k.get(..8)?.try_into().ok()?))
}
