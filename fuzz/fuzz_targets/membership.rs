//! The cluster-map Raft group's decoders (`myriad-membership`), chosen by the first byte.
//!
//! `codec.rs` (postcard behind openraft's error types) is private, and so are the stored
//! state-machine and snapshot records; they are reached through the public `LogStore` and
//! `MapStateMachine` over an in-memory `Kv` holding the raw fuzz bytes as log rows, vote,
//! committed and purged ids, state and snapshot, and through `install_snapshot`, which
//! decodes snapshot data a leader sent. The public payload types (log entries, map
//! commands, votes, log ids) and the Raft RPC messages `Group::serve` decodes from peers
//! are decoded directly and must round-trip.
//!
//! Input: `selector`, then for the store cases `split_chunks` byte strings.
#![no_main]

use std::io::Cursor;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use myriad_fuzz::{block_on, roundtrip, split_chunks};
use myriad_membership::{LogStore, MapCommand, MapReply, MapStateMachine, NodeId, TypeConfig};
use myriad_placement::ClusterMap;
use myriad_proto::codec::decode;
use myriad_storage::{Batch, Kv, MemKv, Space};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{
    BasicNode, Entry, LogId, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta, StoredMembership,
    Vote,
};

fn kv_with(plant: Batch) -> Option<Arc<dyn Kv>> {
    let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
    kv.commit(plant).ok()?;
    Some(kv)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 8 {
        // ---- stored and proposed values ----
        0 => {
            let _ = roundtrip::<Entry<TypeConfig>>(rest);
        }
        1 => {
            let _ = roundtrip::<MapCommand>(rest);
            let _ = roundtrip::<MapReply>(rest);
            // `RaftRpc::Propose` carries a bare map; its answer is a `Result<u64, String>`.
            let _ = roundtrip::<ClusterMap>(rest);
            let _ = roundtrip::<Result<u64, String>>(rest);
        }
        2 => {
            let _ = roundtrip::<Vote<NodeId>>(rest);
            let _ = roundtrip::<Option<LogId<NodeId>>>(rest);
            let _ = roundtrip::<StoredMembership<NodeId, BasicNode>>(rest);
        }
        // ---- Raft RPCs from peers (`Group::serve`) ----
        3 => {
            if let Ok(req) = decode::<AppendEntriesRequest<TypeConfig>>(rest) {
                // No `PartialEq` on the request: compare its parts.
                let bytes = myriad_proto::codec::encode(&req).unwrap_or_default();
                match decode::<AppendEntriesRequest<TypeConfig>>(&bytes) {
                    Ok(back) => {
                        assert_eq!(back.vote, req.vote);
                        assert_eq!(back.prev_log_id, req.prev_log_id);
                        assert_eq!(back.entries, req.entries);
                        assert_eq!(back.leader_commit, req.leader_commit);
                    }
                    Err(e) => panic!("a re-encoded AppendEntriesRequest does not decode: {e}"),
                }
            }
        }
        4 => {
            let _ = roundtrip::<VoteRequest<NodeId>>(rest);
            let _ = roundtrip::<InstallSnapshotRequest<TypeConfig>>(rest);
            let _ = roundtrip::<SnapshotMeta<NodeId, BasicNode>>(rest);
        }
        // ---- the log store over raw rows: chunk 0 vote, 1 committed, 2 purged, then
        //      pairs (index key, entry) ----
        5 => {
            let c = split_chunks(rest);
            let mut plant = Batch::new();
            for (name, v) in [&b"vote"[..], b"committed", b"purged"].into_iter().zip(&c) {
                plant.put(Space::RaftState, name.to_vec(), v.to_vec());
            }
            for kv in c.get(3..).unwrap_or_default().chunks(2) {
                plant.put(
                    Space::RaftLog,
                    kv[0].to_vec(),
                    kv.get(1).copied().unwrap_or_default().to_vec(),
                );
            }
            let Some(kv) = kv_with(plant) else { return };
            let mut log = LogStore::new(kv);
            block_on(async {
                let _ = log.read_vote().await;
                let _ = log.read_committed().await;
                let state = log.get_log_state().await;
                let _ = log.try_get_log_entries(..).await;
                let _ = log.try_get_log_entries(1..=3).await;
                if let Ok(Some(vote)) = log.read_vote().await {
                    // What the store decodes, it saves and reads back the same.
                    if log.save_vote(&vote).await.is_ok() {
                        assert_eq!(log.read_vote().await.ok().flatten(), Some(vote));
                    }
                }
                if let Ok(s) = state
                    && let Some(id) = s.last_log_id
                {
                    let _ = log.purge(id).await;
                    let _ = log.get_log_state().await;
                    let _ = log.truncate(id).await;
                }
            });
        }
        // ---- the state machine: chunk 0 its stored state, 1 its stored snapshot ----
        6 => {
            let c = split_chunks(rest);
            let mut plant = Batch::new();
            for (name, v) in [&b"sm"[..], b"snapshot"].into_iter().zip(&c) {
                plant.put(Space::RaftState, name.to_vec(), v.to_vec());
            }
            let Some(kv) = kv_with(plant) else { return };
            let mut sm = MapStateMachine::new(kv);
            let _ = sm.map();
            block_on(async {
                let _ = sm.applied_state().await;
                if let Ok(Some(snap)) = sm.get_current_snapshot().await {
                    // A stored snapshot installs again (its data is a state record).
                    let _ = sm.install_snapshot(&snap.meta, snap.snapshot).await;
                }
                let mut builder = sm.get_snapshot_builder().await;
                let _ = builder.build_snapshot().await;
            });
        }
        // ---- a snapshot sent by a leader: install it, then apply entries on top ----
        _ => {
            let c = split_chunks(rest);
            let Some(kv) = kv_with(Batch::new()) else {
                return;
            };
            let mut sm = MapStateMachine::new(kv);
            let meta = c
                .get(1)
                .and_then(|m| decode::<SnapshotMeta<NodeId, BasicNode>>(m).ok())
                .unwrap_or_default();
            let snapshot = Box::new(Cursor::new(c.first().copied().unwrap_or_default().to_vec()));
            block_on(async {
                if sm.install_snapshot(&meta, snapshot).await.is_ok() {
                    let installed = sm.map();
                    assert!(
                        installed.is_ok(),
                        "an installed snapshot does not read back"
                    );
                    let entries: Vec<Entry<TypeConfig>> = c
                        .get(2..)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|e| decode(e).ok())
                        .collect();
                    let n = entries.len();
                    if let Ok(replies) = sm.apply(entries).await {
                        assert_eq!(replies.len(), n, "one reply per applied entry");
                    }
                    let _ = sm.applied_state().await;
                }
            });
        }
    }
});
