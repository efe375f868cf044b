//! A request frame as a server reads it from any peer (`myriad-net` serve.rs): decoding
//! must never panic, and a decoded frame re-encodes to an equal one. The borrowed form
//! (`RequestFrameRef`, used by writers) must encode byte for byte like the owned one. What
//! a client-key connection decodes (`ClientFrame`) must be the same frame a peer's
//! connection decodes from the same bytes, and never a peer, replica or admin request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myriad_fuzz::roundtrip;
use myriad_proto::codec::decode;
use myriad_proto::codec::encode;
use myriad_proto::{ClientFrame, Request, RequestFrame, RequestFrameRef};

fuzz_target!(|data: &[u8]| {
    if let Ok(as_client) = decode::<ClientFrame>(data) {
        let as_client = RequestFrame::from(as_client);
        assert!(
            matches!(as_client.body, Request::Client(_) | Request::Server(_)),
            "a client frame carried {:?}",
            as_client.body.op_name()
        );
        assert_eq!(
            decode::<RequestFrame>(data).ok(),
            Some(as_client),
            "a client frame decodes differently as a peer's frame"
        );
    }
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
    let _ = frame.body.is_admin();
    let _ = frame.body.writes_storage();
    if let Request::Client(envelope) = frame.body
        && let Some(c) = envelope.request()
    {
        let _ = c.link_resolved_path();
        let _ = c.clone().into_inode_op();
    }
});
