use crate::codec::{decode, encode};
use crate::{ClientRequest, Envelope, FromClient, OnceId, Request, SentOnce};

const ID: OnceId = OnceId {
    client: 5,
    seq: 300,
    low: 2,
};

fn once(id: OnceId, request: ClientRequest, visible: bool) -> SentOnce {
    SentOnce {
        id,
        request,
        visible,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or_default())
        .collect()
}

/// Envelopes and the requests numbered after them, with the bytes protocol 33's build
/// (where the envelopes were `ClientRequest` variants) encoded for them.
fn golden() -> Vec<(Envelope, &'static str)> {
    let path = |p: &str| p.to_string();
    vec![
        (
            Envelope::Once(once(ID, ClientRequest::Unlink { path: path("/u") }, true)),
            "001b05ac02020a022f7501",
        ),
        (
            Envelope::Leased {
                holder: 77,
                request: ClientRequest::Stat { path: path("/a") },
                exclusive: true,
            },
            "001d4d01022f6101",
        ),
        (
            Envelope::ReadAs {
                holder: 77,
                request: ClientRequest::ReadDir {
                    path: path("/d"),
                    from: 3,
                    after: Some(path("x")),
                    limit: 10,
                },
            },
            "001e4d05022f64030101780a",
        ),
        (
            Envelope::Batch {
                ops: vec![
                    once(ID, ClientRequest::Rmdir { path: path("/r") }, false),
                    once(
                        OnceId { seq: 301, ..ID },
                        ClientRequest::Symlink {
                            path: path("/s"),
                            target: path("t"),
                        },
                        true,
                    ),
                ],
                times: vec![1, -2],
            },
            "001f021b05ac020209022f72001b05ad02020b022f73017401020203",
        ),
        (
            Envelope::Resend {
                id: ID,
                request: ClientRequest::Link {
                    from: path("/f"),
                    to: path("/g"),
                },
            },
            "002505ac020218022f66022f67",
        ),
        (
            Envelope::Recorded {
                id: ID,
                request: ClientRequest::Unlink { path: path("/v") },
            },
            "002605ac02020a022f76",
        ),
        (
            Envelope::Alone(ClientRequest::IndexReaders {
                min_reads: 3,
                quiet_ms: 1000,
            }),
            "002703e807",
        ),
        (
            Envelope::Alone(ClientRequest::SyncPartition { incarnation: 9 }),
            "001c09",
        ),
        (
            Envelope::Alone(ClientRequest::ReserveIds { count: 4 }),
            "002004",
        ),
    ]
}

#[test]
fn envelopes_keep_the_bytes_they_had_as_requests() {
    for (envelope, want) in golden() {
        let req = Request::Client(envelope);
        let bytes = encode(&req).unwrap_or_default();
        assert_eq!(hex(&bytes), want, "{req:?} encodes differently");
        let back: Request = decode(&unhex(want)).unwrap_or_else(|e| panic!("{want}: {e}"));
        assert_eq!(back, req);
        // A client-key connection reads the same bytes as `FromClient`.
        let Request::Client(envelope) = req else {
            panic!("a client request");
        };
        let from: FromClient = decode(&unhex(want)).unwrap_or_else(|e| panic!("{want}: {e}"));
        assert_eq!(from, FromClient::Client(envelope));
    }
}

#[test]
fn an_envelope_inside_an_envelope_does_not_decode() {
    // Protocol 33 could say `Once(Once(unlink))`: its bytes are the once's header twice.
    let nested = "001b05ac02021b05ac02020a022f750101";
    let got = decode::<Request>(&unhex(nested));
    assert!(got.is_err(), "decoded {got:?}");
    // Nor does a batch holding a change that is not sent once: `Batch([Unlink])`.
    let batch = "001f010a022f750100";
    let got = decode::<Request>(&unhex(batch));
    assert!(got.is_err(), "decoded {got:?}");
    // The same batch with its change sent once decodes.
    let good = "001f011b05ac02020a022f750100";
    assert!(decode::<Request>(&unhex(good)).is_ok());
}

#[test]
fn a_truncated_envelope_is_an_error_not_a_panic() {
    for (envelope, _) in golden() {
        let bytes = encode(&Request::Client(envelope)).unwrap_or_default();
        for cut in 0..bytes.len() {
            assert!(decode::<Request>(&bytes[..cut]).is_err(), "{cut} bytes");
        }
    }
}

#[test]
fn an_envelope_is_named_for_its_request() {
    let (once, _) = &golden()[0];
    assert_eq!(once.op_name(), "unlink");
    let (batch, _) = &golden()[3];
    assert_eq!(batch.op_name(), "batch");
    let (recorded, _) = &golden()[5];
    assert_eq!(recorded.op_name(), "recorded");
    assert_eq!(Request::Client(once.clone()).op_name(), "unlink");
}

/// A hostile frame nesting batches a million deep (two bytes a level) is refused at the
/// second level, not decoded level by level until the stack runs out (which would end the
/// server's process, not only the connection).
#[test]
fn a_deeply_nested_batch_is_refused_at_once() {
    let mut bytes = vec![0x00];
    for _ in 0..1_000_000 {
        bytes.extend([0x1f, 0x01]);
    }
    bytes.extend(unhex("0a022f7500"));
    let got = decode::<Request>(&bytes);
    assert!(got.is_err(), "decoded {got:?}");
    // The same through a once: its request is a plain request, which has no envelope.
    let mut bytes = vec![0x00];
    for _ in 0..1_000_000 {
        bytes.extend(unhex("1b05ac0202"));
    }
    bytes.extend(unhex("0a022f75"));
    assert!(decode::<Request>(&bytes).is_err());
}
