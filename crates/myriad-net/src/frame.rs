//! Frames: a 4-byte big-endian length, the body, and, once a connection is authenticated,
//! the body encrypted and followed by a 16-byte tag (AES-256-GCM, myriad_proto::auth) that
//! the reader checks, and decrypts with, before anything decodes the body. Frames over `FRAME_BYTES_MAX` (tag excluded) are refused on read (the connection is
//! closed) and never produced on write.

use bytes::{BufMut, Bytes, BytesMut};
use myriad_proto::auth::{FrameSeal, TAG_BYTES};
use myriad_proto::limits::FRAME_BYTES_MAX;
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

/// Bytes a writer may buffer before it must flush. The default (8 KiB) would flush every two
/// 4 KiB replies; a larger bound lets one syscall carry a whole batch of replies.
pub const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// The frame codec of one direction of a connection; plain until `seal`/`open` is set.
#[derive(Debug)]
pub struct FrameCodec {
    inner: LengthDelimitedCodec,
    /// Seals frames written (set on the writing half after the handshake).
    seal: Option<FrameSeal>,
    /// Opens frames read (set on the reading half after the handshake).
    open: Option<FrameSeal>,
}

/// A frame codec with no tags yet (the handshake runs plain).
#[must_use]
pub fn frame_codec() -> FrameCodec {
    FrameCodec {
        inner: LengthDelimitedCodec::builder()
            .length_field_length(4)
            .max_frame_length(FRAME_BYTES_MAX + TAG_BYTES)
            .new_codec(),
        seal: None,
        open: None,
    }
}

impl FrameCodec {
    /// From now on, every frame written is sealed.
    pub fn seal_with(&mut self, seal: FrameSeal) {
        self.seal = Some(seal);
    }

    /// From now on, every frame read must open (a good tag) under `open`.
    pub fn open_with(&mut self, open: FrameSeal) {
        self.open = Some(open);
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, std::io::Error> {
        let Some(mut frame) = self.inner.decode(src)? else {
            return Ok(None);
        };
        let Some(open) = self.open.as_mut() else {
            if frame.len() > FRAME_BYTES_MAX {
                return Err(too_big(frame.len()));
            }
            return Ok(Some(frame));
        };
        if frame.len() < TAG_BYTES {
            return Err(bad_tag());
        }
        let Some(len) = open.open_in_place(&mut frame) else {
            return Err(bad_tag());
        };
        frame.truncate(len);
        Ok(Some(frame))
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = std::io::Error;

    fn encode(&mut self, body: Bytes, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        if body.len() > FRAME_BYTES_MAX {
            return Err(too_big(body.len()));
        }
        let Some(seal) = self.seal.as_mut() else {
            return self.inner.encode(body, dst);
        };
        let len = body.len() + TAG_BYTES;
        dst.reserve(4 + len);
        // Fits: FRAME_BYTES_MAX + TAG_BYTES is far below u32::MAX.
        dst.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
        let start = dst.len();
        dst.put_slice(&body);
        let tag = seal.seal_in_place(&mut dst[start..]);
        dst.put_slice(&tag);
        Ok(())
    }
}

fn too_big(len: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("frame of {len} bytes is over the limit of {FRAME_BYTES_MAX}"),
    )
}

fn bad_tag() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "frame failed its authentication tag (changed, replayed, reordered or forged)",
    )
}

#[cfg(test)]
mod tests {
    use myriad_proto::auth::Keyring;

    use super::*;

    fn pair() -> (FrameCodec, FrameCodec) {
        let ring = Keyring::from_secret(&[3; 32]);
        let key = ring
            .connect_key()
            .cloned()
            .unwrap_or_else(|| panic!("no key"));
        let (a, _) = key.session(&[1; 32], &[2; 32]);
        let mut w = frame_codec();
        let mut r = frame_codec();
        w.seal_with(a.clone());
        r.open_with(a);
        (w, r)
    }

    #[test]
    fn sealed_frames_round_trip_and_a_flipped_bit_is_refused() {
        let (mut w, mut r) = pair();
        let mut wire = BytesMut::new();
        for body in [&b"one"[..], b"", &[9u8; 5000]] {
            w.encode(Bytes::copy_from_slice(body), &mut wire)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        for body in [&b"one"[..], b"", &[9u8; 5000]] {
            let got = r.decode(&mut wire).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got.as_deref(), Some(body));
        }
        // Every bit of a sealed frame matters (length excluded: a changed length breaks the
        // framing, which fails too).
        let mut one = BytesMut::new();
        let (mut w, r) = pair();
        w.encode(Bytes::from_static(b"payload"), &mut one)
            .unwrap_or_else(|e| panic!("{e}"));
        for i in 4..one.len() {
            let mut bad = one.clone();
            bad[i] ^= 1;
            let mut r = r.clone_fresh();
            assert!(r.decode(&mut bad).is_err(), "flip at {i} not caught");
        }
    }

    #[test]
    fn sealed_frames_do_not_show_their_contents() {
        let (mut w, mut r) = pair();
        let secret = b"the contents of a file nobody else may read".repeat(4);
        let mut wire = BytesMut::new();
        for _ in 0..2 {
            w.encode(Bytes::from(secret.clone()), &mut wire)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let shown = |needle: &[u8]| wire.windows(needle.len()).any(|win| win == needle);
        assert!(!shown(&secret[..8]), "plain bytes on the wire");
        // The same body twice is sealed differently (the frame number is the nonce).
        let one = secret.len() + TAG_BYTES + 4;
        assert_ne!(wire[4..one], wire[one + 4..]);
        for _ in 0..2 {
            let got = r.decode(&mut wire).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got.as_deref(), Some(&secret[..]));
        }
        // Before the handshake (no seal), bytes go as they are: the check above can fail.
        let mut plain = frame_codec();
        let mut wire = BytesMut::new();
        plain
            .encode(Bytes::from(secret.clone()), &mut wire)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(wire.windows(8).any(|win| win == &secret[..8]));
    }

    #[test]
    fn oversized_frames_are_refused_both_ways() {
        let mut c = frame_codec();
        let mut dst = BytesMut::new();
        assert!(
            c.encode(Bytes::from(vec![0; FRAME_BYTES_MAX + 1]), &mut dst)
                .is_err()
        );
        let mut src = BytesMut::new();
        src.put_u32(u32::try_from(FRAME_BYTES_MAX + TAG_BYTES + 1).unwrap_or(0));
        assert!(c.decode(&mut src).is_err());
    }

    impl FrameCodec {
        fn clone_fresh(&self) -> FrameCodec {
            FrameCodec {
                inner: frame_codec().inner,
                seal: self.seal.clone(),
                open: self.open.clone(),
            }
        }
    }
}
