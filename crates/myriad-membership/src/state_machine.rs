//! The state machine: the cluster map, the last applied log id and the membership, kept as
//! one record in `RaftState` and written (fsynced) with every apply, so a restarted node has
//! it without replaying the log. A snapshot is that same record; the last one is kept too.

use std::io::Cursor;
use std::sync::Arc;

use myriad_placement::ClusterMap;
use myriad_storage::{Batch, Kv, Space};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::codec::{What, decode, encode, store_err};
use crate::map_bytes::{from_bytes_with_ext, to_bytes_with_ext};
use crate::{MapReply, NodeId, StorageError, TypeConfig};

const STATE: &[u8] = b"sm";
const SNAPSHOT: &[u8] = b"snapshot";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, openraft::BasicNode>,
    map: Option<ClusterMap>,
}

impl State {
    /// As protocol 34 wrote it, then the map's extension (`map_bytes.rs`).
    fn encode(&self) -> Result<Vec<u8>, StorageError> {
        let ext = self.map.as_ref().map(|m| m.ext.clone()).unwrap_or_default();
        to_bytes_with_ext(self, &ext).map_err(|e| storage(false, &e))
    }

    fn decode(bytes: &[u8]) -> Result<State, StorageError> {
        let (mut state, ext) =
            from_bytes_with_ext::<State>(bytes).map_err(|e| storage(true, &e))?;
        if let (Some(map), Some(ext)) = (state.map.as_mut(), ext) {
            map.ext = ext;
        }
        Ok(state)
    }
}

fn storage(read: bool, e: &postcard::Error) -> StorageError {
    let io = if read {
        openraft::StorageIOError::read_state_machine(e)
    } else {
        openraft::StorageIOError::write_state_machine(e)
    };
    io.into()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    data: Vec<u8>,
}

#[derive(Clone)]
pub struct MapStateMachine {
    kv: Arc<dyn Kv>,
    on_map: Option<crate::group::OnMap>,
}

impl MapStateMachine {
    #[must_use]
    pub fn new(kv: Arc<dyn Kv>) -> MapStateMachine {
        MapStateMachine { kv, on_map: None }
    }

    /// Calls `f` with the map after every apply or snapshot install that changed it (once
    /// it is durable).
    #[must_use]
    pub fn with_on_map(mut self, f: crate::group::OnMap) -> MapStateMachine {
        self.on_map = Some(f);
        self
    }

    fn announce(&self, map: Option<&ClusterMap>) {
        if let (Some(f), Some(m)) = (&self.on_map, map) {
            f(m.clone());
        }
    }

    /// The map as last applied (`None` before the first `Install`).
    pub fn map(&self) -> Result<Option<ClusterMap>, StorageError> {
        Ok(self.state()?.map)
    }

    fn state(&self) -> Result<State, StorageError> {
        match self
            .kv
            .get(Space::RaftState, STATE)
            .map_err(|e| store_err(What::StateMachine, true, &e))?
        {
            Some(v) => State::decode(&v),
            None => Ok(State::default()),
        }
    }

    fn put(&self, b: &mut Batch, key: &[u8], bytes: Vec<u8>) {
        b.put(Space::RaftState, key.to_vec(), bytes);
    }

    fn write(&self, b: Batch) -> Result<(), StorageError> {
        self.kv
            .commit(b)
            .and_then(|()| self.kv.sync())
            .map_err(|e| store_err(What::StateMachine, false, &e))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for MapStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let state = self.state()?;
        let data = state.encode()?;
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.membership.clone(),
            snapshot_id: format!(
                "{}-{}",
                state.last_applied.map_or(0, |l| l.leader_id.term),
                state.last_applied.map_or(0, |l| l.index)
            ),
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        let mut b = Batch::new();
        self.put(&mut b, SNAPSHOT, encode(What::StateMachine, &stored)?);
        self.write(b)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for MapStateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<NodeId>>,
            StoredMembership<NodeId, openraft::BasicNode>,
        ),
        StorageError,
    > {
        let s = self.state()?;
        Ok((s.last_applied, s.membership))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<MapReply>, StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = self.state()?;
        let before = state.map.as_ref().map(|m| m.epoch);
        // One reply per entry, blank and membership entries included.
        let mut replies = Vec::new();
        for e in entries {
            state.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(cmd) => {
                    let mut map = cmd.into_map();
                    // The cluster's protocol floor never goes down (a map built from an
                    // older file, or written as 34 wrote it, has none).
                    if let Some(cur) = &state.map {
                        map.ext.protocol_floor = map.ext.protocol_floor.max(cur.ext.protocol_floor);
                    }
                    if state.map.as_ref().is_none_or(|m| map.epoch > m.epoch) {
                        state.map = Some(map);
                    }
                }
                EntryPayload::Membership(m) => {
                    state.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            replies.push(MapReply {
                epoch: state.map.as_ref().map_or(0, |m| m.epoch),
            });
        }
        let mut b = Batch::new();
        self.put(&mut b, STATE, state.encode()?);
        self.write(b)?;
        if state.map.as_ref().map(|m| m.epoch) != before {
            self.announce(state.map.as_ref());
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let mut state = State::decode(&data)?;
        state.last_applied = meta.last_log_id;
        state.membership = meta.last_membership.clone();
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        let mut b = Batch::new();
        self.put(&mut b, STATE, state.encode()?);
        self.put(&mut b, SNAPSHOT, encode(What::StateMachine, &stored)?);
        self.write(b)?;
        self.announce(state.map.as_ref());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        match self
            .kv
            .get(Space::RaftState, SNAPSHOT)
            .map_err(|e| store_err(What::StateMachine, true, &e))?
        {
            Some(v) => {
                let s: StoredSnapshot = decode(What::StateMachine, &v)?;
                Ok(Some(Snapshot {
                    meta: s.meta,
                    snapshot: Box::new(Cursor::new(s.data)),
                }))
            }
            None => Ok(None),
        }
    }
}
