//! A response frame as a client (or a server calling a peer) reads it (`myriad-net`
//! conn.rs): decoding must never panic, and a decoded frame re-encodes to an equal one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myriad_fuzz::roundtrip;
use myriad_placement::ShardCache;
use myriad_proto::{Response, ResponseFrame, ShardMap, WireError};

fuzz_target!(|data: &[u8]| {
    let Some(frame) = roundtrip::<ResponseFrame>(data) else {
        return;
    };
    let shard_map: Option<&ShardMap> = match &frame.result {
        Ok(r) => {
            let _ = r.size_hint();
            match r {
                Response::ShardMap(m) => Some(m),
                Response::DirPage { map, .. } => map.as_deref(),
                _ => None,
            }
        }
        Err(e) => {
            let _ = (e.kind(), e.is_transient(), e.to_string());
            let _ = myriad_proto::FsError::from(e.clone()).errno();
            match e {
                WireError::WrongShard { map, .. } => map.as_deref(),
                _ => None,
            }
        }
    };
    // A client adopts the shard maps peers send (it checks them) and routes by them.
    if let Some(m) = shard_map {
        let cache = ShardCache::default();
        cache.adopt("/d", m.clone(), true);
        for hash in [0, 1 << 63, u64::MAX, frame.id] {
            let leaf = cache.leaf_for("/d", hash);
            assert!(
                leaf.contains(hash),
                "leaf {leaf:?} of an adopted map lacks hash {hash}"
            );
        }
    }
});
