//! A request frame as a server reads it from any peer (`myriad-net` serve.rs): decoding
//! must never panic, and a decoded frame re-encodes to an equal one. The borrowed form
//! (`RequestFrameRef`, used by writers) must encode byte for byte like the owned one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myriad_fuzz::roundtrip;
use myriad_proto::codec::encode;
use myriad_proto::{RequestFrame, RequestFrameRef};

fuzz_target!(|data: &[u8]| {
    let Some(frame) = roundtrip::<RequestFrame>(data) else {
        return;
    };
    let by_ref = RequestFrameRef {
        id: frame.id,
        epoch: frame.epoch,
        ends: frame.ends,
        caller: &frame.caller,
        body: &frame.body,
    };
    assert_eq!(
        encode(&by_ref).ok(),
        encode(&frame).ok(),
        "RequestFrameRef encodes differently"
    );
    // What every server asks of a request before acting on it; none of it may panic.
    let _ = frame.body.op_name();
    let _ = frame.body.is_server_only();
    let _ = frame.body.is_admin();
    let _ = frame.body.link_resolved_path();
    let _ = frame.body.into_inode_op();
});
