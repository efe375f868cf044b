//! The length-delimited frame layer (`myriad_net::frame_codec`) over a byte stream as it
//! arrives from a socket, in both modes of a connection.
//!
//! Plain (the handshake): split the input into frames until the codec needs more bytes or
//! refuses (a frame over `FRAME_BYTES_MAX`); the first frame is read as a handshake, every
//! frame as a request and as a response. Properties: no panic; the frames re-encoded with
//! the same codec split back into the same frames; every decoded message round-trips.
//!
//! Tagged (after the handshake; the reader has `open_with` a `FrameSeal` of a fixed key,
//! `myriad_fuzz::fixed_frame_seal`): the input gives frames or an error, never a panic, and
//! the frames it accepts, sealed again, are the bytes it started with. Then a few frames (the
//! plain frames of the input, the whole input, an empty one) are sealed (`seal_with`) and
//! must decode back to themselves; if the input's last byte is non-zero, it is XORed into
//! the sealed stream at the position named by the two bytes before it, and the reader must
//! then accept exactly the frames before the changed one, unchanged, and nothing after.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use myriad_fuzz::{fixed_frame_seal, roundtrip};
use myriad_proto::auth::TAG_BYTES;
use myriad_proto::limits::FRAME_BYTES_MAX;
use myriad_proto::{Hello, RequestFrame, ResponseFrame};
use tokio_util::codec::{Decoder, Encoder};

/// Frames sealed and checked per input, beyond the whole input and an empty frame.
const SEALED_FRAMES_MAX: usize = 6;

/// Frames of `buf` until the codec needs more bytes or refuses the stream.
fn split<D: Decoder<Item = BytesMut>>(codec: &mut D, buf: &mut BytesMut) -> Vec<Bytes> {
    let mut frames = Vec::new();
    // Until it needs more bytes, or refuses a frame (too long, or failing its tag).
    while let Ok(Some(frame)) = codec.decode(buf) {
        frames.push(frame.freeze());
    }
    frames
}

/// `frames` written by `codec`.
fn write_all(codec: &mut myriad_net::FrameCodec, frames: &[Bytes]) -> BytesMut {
    let mut out = BytesMut::new();
    for frame in frames {
        if let Err(e) = codec.encode(frame.clone(), &mut out) {
            panic!("a frame of {} bytes does not encode: {e}", frame.len());
        }
    }
    out
}

fn sealing() -> myriad_net::FrameCodec {
    let mut c = myriad_net::frame_codec();
    c.seal_with(fixed_frame_seal());
    c
}

fn opening() -> myriad_net::FrameCodec {
    let mut c = myriad_net::frame_codec();
    c.open_with(fixed_frame_seal());
    c
}

fn plain(data: &[u8]) -> Vec<Bytes> {
    let mut codec = myriad_net::frame_codec();
    let mut buf = BytesMut::from(data);
    let frames = split(&mut codec, &mut buf);
    // End of stream with a partial frame left is an error, never a panic.
    let _ = codec.decode_eof(&mut buf);

    for (i, frame) in frames.iter().enumerate() {
        if i == 0 {
            let _ = roundtrip::<Hello>(frame);
        }
        let _ = roundtrip::<RequestFrame>(frame);
        let _ = roundtrip::<ResponseFrame>(frame);
    }

    // The frames written back with a fresh codec read back as the same frames.
    let mut out = write_all(&mut myriad_net::frame_codec(), &frames);
    let again = split(&mut myriad_net::frame_codec(), &mut out);
    assert_eq!(again, frames, "frames differ after re-framing");
    assert!(
        out.is_empty(),
        "re-framed stream has {} stray bytes",
        out.len()
    );
    frames
}

/// The input as a tagged stream.
fn tagged(data: &[u8]) {
    let mut codec = opening();
    let mut buf = BytesMut::from(data);
    let frames = split(&mut codec, &mut buf);
    let _ = codec.decode_eof(&mut buf);
    for frame in &frames {
        let _ = roundtrip::<RequestFrame>(frame);
        let _ = roundtrip::<ResponseFrame>(frame);
    }
    // Tags are deterministic: the accepted frames sealed again are the input they came from.
    let resealed = write_all(&mut sealing(), &frames);
    assert!(
        data.starts_with(&resealed),
        "{} accepted tagged frames do not re-seal to the input",
        frames.len()
    );
}

/// Frames sealed and opened again, and one changed byte of the sealed stream.
fn sealed_round_trip(data: &[u8], frames: &[Bytes]) {
    let bodies: Vec<Bytes> = frames
        .iter()
        .take(SEALED_FRAMES_MAX)
        .cloned()
        .chain([
            Bytes::copy_from_slice(&data[..data.len().min(FRAME_BYTES_MAX)]),
            Bytes::new(),
        ])
        .collect();
    let wire = write_all(&mut sealing(), &bodies);
    let mut copy = wire.clone();
    let back = split(&mut opening(), &mut copy);
    assert_eq!(back, bodies, "sealed frames do not open to themselves");
    assert!(
        copy.is_empty(),
        "sealed stream has {} stray bytes",
        copy.len()
    );

    let [.., lo, hi, mask] = *data else { return };
    if mask == 0 || wire.is_empty() {
        return;
    }
    let pos = usize::from(u16::from_le_bytes([lo, hi])) % wire.len();
    // The frame holding byte `pos` (its length prefix, body or tag).
    let mut end = 0;
    let mut hit = bodies.len();
    for (i, b) in bodies.iter().enumerate() {
        end += 4 + b.len() + TAG_BYTES;
        if pos < end {
            hit = i;
            break;
        }
    }
    let mut bad = wire.clone();
    bad[pos] ^= mask;
    let mut reader = opening();
    let accepted = split(&mut reader, &mut bad);
    let _ = reader.decode_eof(&mut bad);
    assert_eq!(
        accepted,
        bodies[..hit],
        "byte {pos} of the sealed stream XOR {mask:#04x} (in frame {hit}) changed what is accepted"
    );
}

fuzz_target!(|data: &[u8]| {
    let frames = plain(data);
    tagged(data);
    sealed_round_trip(data, &frames);
});
