//! Key encodings. Entry keys put a NUL between directory and name: NUL cannot occur in a path,
//! so the entries of "/a" (prefix "/a\0") never mix with those of "/ab".

#[must_use]
pub fn entry_key(dir: &str, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(dir.len() + 1 + name.len());
    k.extend_from_slice(dir.as_bytes());
    k.push(0);
    k.extend_from_slice(name.as_bytes());
    k
}

#[must_use]
pub fn entry_prefix(dir: &str) -> Vec<u8> {
    entry_key(dir, "")
}

#[must_use]
pub fn block_key(ino: u64, block: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&ino.to_be_bytes());
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
