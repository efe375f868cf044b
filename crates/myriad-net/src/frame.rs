use myriad_proto::limits::FRAME_BYTES_MAX;
use tokio_util::codec::LengthDelimitedCodec;

/// A 4-byte big-endian length prefix, then the body. Frames over `FRAME_BYTES_MAX` are refused
/// on read (the connection is closed) and never produced on write.
#[must_use]
pub fn frame_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().length_field_length(4).max_frame_length(FRAME_BYTES_MAX).new_codec()
}
