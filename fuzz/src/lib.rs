//! Helpers shared by the fuzz targets (`fuzz_targets/`) and the seed generator
//! (`examples/make_seeds.rs`): the round-trip property, and the small input formats the
//! targets that need several byte strings (a selector, keys, values) read.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

use myriad_proto::auth::{FrameSeal, Keyring};
use myriad_proto::codec::{decode, encode};

/// The frame sealer of the sealed-frame fuzzing (fuzz_targets/frame_stream.rs) and its seeds:
/// the client-to-server direction of a session of a fixed key and fixed nonces, at seq 0.
#[must_use]
pub fn fixed_frame_seal() -> FrameSeal {
    let ring = Keyring::from_secret(&[7; 32]);
    let Some(key) = ring.connect_key() else {
        panic!("a keyring from a secret has a key to connect with");
    };
    key.session(&[1; 32], &[2; 32]).0
}

/// Decodes `bytes` as a `T` (which must never panic); if that succeeds, checks that encoding
/// the value and decoding it again gives an equal value. Returns the decoded value.
///
/// Values are compared, not bytes: postcard accepts a few encodings that it does not
/// produce (e.g. trailing bytes after a message), so `encode(decode(b)) == b` is not a rule.
pub fn roundtrip<T>(bytes: &[u8]) -> Option<T>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let value: T = decode(bytes).ok()?;
    assert_reencodes(&value);
    Some(value)
}

/// Encoding `value` succeeds and decodes back to an equal value.
pub fn assert_reencodes<T>(value: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let again = match encode(value) {
        Ok(b) => b,
        Err(e) => panic!("a decoded value does not encode: {e}: {value:?}"),
    };
    match decode::<T>(&again) {
        Ok(back) => assert_eq!(&back, value, "re-encoded value decodes differently"),
        Err(e) => panic!("a re-encoded value does not decode: {e}: {value:?}"),
    }
}

/// Splits fuzz input into byte strings, each a little-endian u16 length then that many
/// bytes; a short last string takes what is left. The inverse of `join_chunks`.
#[must_use]
pub fn split_chunks(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([data[0], data[1]]));
        let rest = &data[2..];
        let take = len.min(rest.len());
        out.push(&rest[..take]);
        data = &rest[take..];
    }
    out
}

/// Joins byte strings in the format `split_chunks` reads (each at most 65,535 bytes).
#[must_use]
pub fn join_chunks(chunks: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        let len = u16::try_from(c.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&c[..usize::from(len)]);
    }
    out
}

/// A u64 from up to 8 bytes of `b` (little-endian, zero-padded): fuzz-chosen numbers.
#[must_use]
pub fn u64_of(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(a)
}

/// Runs a future that never waits (the store-backed Raft storage methods do all their work
/// synchronously), without a runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}
