//! The handshake: the first frames of a connection (`Hello`, `HelloReply`, `Auth`,
//! `AuthReply`: myriad_proto::auth), read by the server and by the client before anything is
//! authenticated. Every handshake message type is decoded from the same input; each must
//! never panic and must round-trip. The input is also read as a key file
//! (`Keyring::parse`, lossy UTF-8): a key file is hostile input too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myriad_fuzz::roundtrip;
use myriad_proto::auth::{Keyring, proofs_equal};
use myriad_proto::{Auth, AuthReply, Hello, HelloReply};

fuzz_target!(|data: &[u8]| {
    // Add new handshake messages here, one line each.
    let _ = roundtrip::<Hello>(data);
    let _ = roundtrip::<HelloReply>(data);
    let _ = roundtrip::<Auth>(data);
    let _ = roundtrip::<AuthReply>(data);
    // What a server and a client actually read: this version's layout, else protocol 29's
    // (docs/upgrades.md). Never a panic; what decodes encodes as this version again.
    if let Ok(h) = Hello::decode_any(data) {
        let again = myriad_proto::codec::encode(&h).unwrap_or_default();
        assert_eq!(Hello::decode_any(&again).ok(), Some(h));
    }
    if let Ok(r) = HelloReply::decode_any(data) {
        let again = myriad_proto::codec::encode(&r).unwrap_or_default();
        assert_eq!(HelloReply::decode_any(&again).ok(), Some(r));
    }

    // A key file: refused or a keyring; an accepted keyring is usable and knows its own keys.
    if let Ok(ring) = Keyring::parse(&String::from_utf8_lossy(data)) {
        let Some(key) = ring.connect_key() else {
            panic!("an accepted key file has no key to connect with");
        };
        assert!(
            ring.find(&key.id()).is_some(),
            "a keyring refuses its own key"
        );
        let proof = key.client_proof(data, b"reply");
        assert!(proofs_equal(&proof, &key.client_proof(data, b"reply")));
        let _ = ring.has_cluster_secret();
    }
});
