//! Encoding of message bodies: postcard, a compact, stable, non-self-describing format.
//! Decoding never panics: any malformed input is a `DecodeError`.

use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
#[error("malformed message: {0}")]
pub struct DecodeError(String);

#[derive(Debug, thiserror::Error)]
#[error("cannot encode message: {0}")]
pub struct EncodeError(String);

/// Encodes into a buffer of exactly the encoded size, measured first: growing by doubling
/// (`to_allocvec`) reallocates and copies a 200 KiB replication bundle a dozen times, and
/// the allocator then faults in fresh pages for most of those copies (perf: page zeroing
/// was ~10% of a create's CPU).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let size =
        postcard::experimental::serialized_size(value).map_err(|e| EncodeError(e.to_string()))?;
    postcard::to_extend(value, Vec::with_capacity(size)).map_err(|e| EncodeError(e.to_string()))
}

/// Like `encode`, into a buffer sized up front: `to_allocvec` grows by doubling, which for a
/// 4 KiB reply means several reallocations and copies.
pub fn encode_with_capacity<T: Serialize>(
    value: &T,
    capacity: usize,
) -> Result<Vec<u8>, EncodeError> {
    postcard::to_extend(value, Vec::with_capacity(capacity)).map_err(|e| EncodeError(e.to_string()))
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    postcard::from_bytes(bytes).map_err(|e| DecodeError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::InodeId;
    use crate::{
        Caller, ClientRequest, PeerRequest, Request, RequestFrame, Response, ResponseFrame,
    };
    use myriad_placement::PartitionId;

    #[test]
    fn a_link_request_becomes_a_flat_inode_operation() {
        let w = ClientRequest::Write(crate::requests::Write {
            path: "/l".into(),
            ino: InodeId(9),
            offset: 4,
            data: vec![1, 2],
            opened: true,
        });
        let op = w.into_inode_op();
        assert_eq!(
            op,
            Some(crate::InodeOp::Write {
                ino: InodeId(9),
                offset: 4,
                data: vec![1, 2],
                opened: true,
            })
        );
        let f = RequestFrame {
            id: 1,
            epoch: 1,
            ends: crate::Endpoints::to(PartitionId(3)),
            caller: Caller::root(),
            body: crate::Request::Peer(PeerRequest::AtInode {
                ino: InodeId(9),
                caller: Caller::root(),
                op: op.unwrap_or(crate::InodeOp::Stat),
            }),
        };
        let back: RequestFrame =
            decode(&encode(&f).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, f);
        assert_eq!(
            ClientRequest::Stat { path: "/l".into() }.into_inode_op(),
            None
        );
    }

    #[test]
    fn roundtrip_request() {
        let f = RequestFrame {
            id: 7,
            epoch: 3,
            ends: crate::Endpoints {
                target: PartitionId(2),
                source: PartitionId(9),
            },
            caller: Caller {
                uid: 1000,
                gid: 100,
                groups: vec![4, 5],
            },
            body: crate::Request::from(ClientRequest::Create(crate::requests::Create {
                path: "/a/b".into(),
                mode: 0o644,
                exclusive: true,
                data: vec![1, 2, 3],
                durable: true,
                ino: Some(crate::InodeId(7 << 40 | 9)),
                data_at: None,
                then: None,
            })),
        };
        let bytes = encode(&f).unwrap_or_default();
        let back: RequestFrame = decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, f);
    }

    #[test]
    fn borrowed_request_frames_encode_like_owned_ones() {
        let caller = Caller {
            uid: 5,
            gid: 6,
            groups: vec![7],
        };
        let body = Request::from(ClientRequest::Write(crate::requests::Write {
            path: "/f".into(),
            ino: InodeId(9),
            offset: 3,
            data: vec![1; 1000],
            opened: false,
        }));
        let owned = RequestFrame {
            id: 1,
            epoch: 2,
            ends: crate::Endpoints::to(PartitionId(4)),
            caller: caller.clone(),
            body: body.clone(),
        };
        let borrowed = crate::RequestFrameRef {
            id: 1,
            epoch: 2,
            ends: crate::Endpoints::to(PartitionId(4)),
            caller: &caller,
            body: &body,
        };
        assert_eq!(encode(&owned).ok(), encode(&borrowed).ok());
    }

    #[test]
    fn hard_link_writes_forwarded_between_servers_count_as_disk_writes() {
        let at = |op| {
            Request::<ClientRequest>::Peer(PeerRequest::AtInode {
                ino: InodeId(1),
                caller: Caller::root(),
                op,
            })
        };
        let write = at(crate::InodeOp::Write {
            ino: InodeId(1),
            offset: 0,
            data: vec![1],
            opened: false,
        });
        assert!(write.grows_storage() && write.writes_storage());
        let trunc = at(crate::InodeOp::Truncate {
            ino: InodeId(1),
            size: 0,
            opened: false,
        });
        assert!(!trunc.grows_storage() && trunc.writes_storage());
        let read = at(crate::InodeOp::Read {
            ino: InodeId(1),
            offset: 0,
            len: 1,
        });
        assert!(!read.writes_storage());
        let opened = |r: ClientRequest| Request::<ClientRequest>::Client(r);
        assert!(!opened(ClientRequest::Stat { path: "/a".into() }).writes_storage());
        assert!(opened(ClientRequest::Unlink { path: "/a".into() }).writes_storage());
    }

    /// A connection with a client key decodes `ClientFrame`: a client's and a server request
    /// come through unchanged, and no peer, replica or administration request can be said
    /// at all, whatever new variants those enums get.
    #[test]
    fn a_client_frame_carries_only_client_and_server_requests() {
        let frame = |body: Request| RequestFrame {
            id: 7,
            epoch: 1,
            ends: crate::Endpoints::to(PartitionId(3)),
            caller: Caller::root(),
            body,
        };
        let allowed = [
            Request::from(ClientRequest::Stat { path: "/a".into() }),
            Request::Server(crate::ServerRequest::GetMap),
        ];
        for body in allowed {
            let bytes = encode(&frame(body.clone())).unwrap_or_default();
            let as_client = decode::<crate::ClientFrame>(&bytes).map(RequestFrame::from);
            assert_eq!(as_client.ok(), Some(frame(body)));
        }
        let refused = [
            Request::Admin(crate::AdminRequest::ResetCounters),
            Request::Admin(crate::AdminRequest::FsckReplica),
            Request::Peer(PeerRequest::Lease),
            Request::Peer(PeerRequest::DirTouch {
                path: "/a".into(),
                ino: InodeId(2),
                now_ns: 1,
                nlink: None,
                client: None,
            }),
            Request::Peer(PeerRequest::DirTouches {
                touches: vec![crate::DirTouchItem {
                    path: "/a".into(),
                    ino: InodeId(2),
                    now_ns: 1,
                    nlink: Some(2),
                    client: Some(7),
                }],
            }),
            Request::Replica(crate::ReplicaRequest::ReplicaSeq),
            Request::Replica(crate::ReplicaRequest::ReplicaReset),
        ];
        for body in refused {
            let bytes = encode(&frame(body.clone())).unwrap_or_default();
            assert!(
                decode::<crate::ClientFrame>(&bytes).is_err(),
                "{body:?} decoded on a client connection"
            );
            // The same bytes are a valid frame for a peer.
            assert_eq!(decode::<RequestFrame>(&bytes).ok(), Some(frame(body)));
        }
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let f = ResponseFrame {
            id: 1,
            result: Ok(Response::Echo(vec![9; 100])),
        };
        let bytes = encode(&f).unwrap_or_default();
        for cut in 0..bytes.len() {
            assert!(decode::<ResponseFrame>(&bytes[..cut]).is_err());
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode::<RequestFrame>(&bytes);
            let _ = decode::<ResponseFrame>(&bytes);
        }
    }

    /// Requests moved into structs of their own (`requests.rs`) encode as they did as
    /// struct variants: these bytes were encoded by the build before the move.
    #[test]
    fn requests_moved_into_structs_keep_their_bytes() {
        use crate::requests;
        let golden = [
            (
                ClientRequest::Create(requests::Create {
                    path: "/a/b".into(),
                    mode: 0o644,
                    exclusive: true,
                    data: vec![1, 2, 3],
                    durable: false,
                    ino: Some(InodeId(7 << 40 | 9)),
                    data_at: None,
                    then: None,
                }),
                "0007042f612f62a403010301020300018980808080e001",
            ),
            (
                ClientRequest::Write(requests::Write {
                    path: "/f".into(),
                    ino: InodeId(9),
                    offset: 300,
                    data: vec![4, 5],
                    opened: true,
                }),
                "000f022f6609ac0202040501",
            ),
            (
                ClientRequest::ExtendSize(requests::ExtendSize {
                    path: "/f".into(),
                    ino: InodeId(9),
                    size: 70000,
                    opened: false,
                }),
                "0013022f6609f0a20400",
            ),
            (
                ClientRequest::Truncate(requests::Truncate {
                    path: "/g".into(),
                    ino: InodeId(1 << 33),
                    size: 5,
                    opened: true,
                }),
                "0012022f6780808080200501",
            ),
        ];
        let import = PeerRequest::DirImport(requests::DirImport {
            path: "/d".into(),
            txid: 77,
            ino: InodeId(5),
            shards: vec![myriad_placement::Shard {
                prefix: 3,
                depth: 2,
            }],
            map: None,
            entries: vec![],
            replaces: Some(InodeId(8)),
        });
        let golden = golden
            .into_iter()
            .map(|(r, hex)| (Request::from(r), hex))
            .chain([(Request::Peer(import), "0312022f644d0501030200000108")]);
        for (req, hex) in golden {
            let bytes = encode(&req).unwrap_or_default();
            let got: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex, "{req:?} encodes differently");
            let back: Request = decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, req);
        }
    }
}
