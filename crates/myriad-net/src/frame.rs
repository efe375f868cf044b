use myriad_proto::limits::FRAME_BYTES_MAX;
use tokio_util::codec::LengthDelimitedCodec;

/// A 4-byte big-endian length prefix, then the body. Frames over `FRAME_BYTES_MAX` are refused
/// on read (the connection is closed) and never produced on write.
#[must_use]
pub fn frame_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(FRAME_BYTES_MAX)
        .new_codec()
}

/// Bytes a writer may buffer before it must flush. The default (8 KiB) would flush every two
/// 4 KiB replies; a larger bound lets one syscall carry a whole batch of replies.
pub const WRITE_BATCH_BYTES: usize = 256 * 1024;
