//! openraft's storage conformance suite against the log store and state machine, on the
//! in-memory engine and on fjall (a real database in a temporary directory).

use std::sync::Arc;

use myriad_storage::{FjallKv, Kv, MemKv};
use openraft::testing::{StoreBuilder, Suite};

use crate::{LogStore, MapStateMachine, StorageError, TypeConfig};

struct Mem;

impl StoreBuilder<TypeConfig, LogStore, MapStateMachine, ()> for Mem {
    async fn build(&self) -> Result<((), LogStore, MapStateMachine), StorageError> {
        let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
        Ok(((), LogStore::new(kv.clone()), MapStateMachine::new(kv)))
    }
}

struct Fjall;

impl StoreBuilder<TypeConfig, LogStore, MapStateMachine, tempfile::TempDir> for Fjall {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, MapStateMachine), StorageError> {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
        Ok((dir, LogStore::new(kv.clone()), MapStateMachine::new(kv)))
    }
}

#[test]
fn conformance_in_memory() {
    Suite::test_all(Mem).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn conformance_on_fjall() {
    Suite::test_all(Fjall).unwrap_or_else(|e| panic!("{e}"));
}

/// Vote, log and the applied map survive closing and reopening the database.
#[test]
fn everything_survives_a_reopen() {
    use openraft::storage::{RaftLogStorage, RaftStateMachine};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, Vote};

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let map = myriad_placement::ClusterMap::new(7, &["127.0.0.1:1".to_string()]);
    let log_id = |i| LogId::new(CommittedLeaderId::new(1, 1), i);
    rt.block_on(async {
        let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
        let (mut log, mut sm) = (LogStore::new(kv.clone()), MapStateMachine::new(kv));
        log.save_vote(&Vote::new(1, 1))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let entry = Entry::<TypeConfig> {
            log_id: log_id(1),
            payload: EntryPayload::Normal(crate::MapCommand::Install(map.clone())),
        };
        let reply = sm
            .apply(vec![entry])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply[0].epoch, 7);
        // An older map never replaces a newer one.
        let mut older = map.clone();
        older.epoch = 3;
        let stale = Entry::<TypeConfig> {
            log_id: log_id(2),
            payload: EntryPayload::Normal(crate::MapCommand::Install(older)),
        };
        assert_eq!(
            sm.apply(vec![stale]).await.map(|r| r[0].epoch).ok(),
            Some(7)
        );
    });
    rt.block_on(async {
        let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
        let (mut log, mut sm) = (LogStore::new(kv.clone()), MapStateMachine::new(kv));
        assert_eq!(log.read_vote().await.ok().flatten(), Some(Vote::new(1, 1)));
        let (applied, _) = sm.applied_state().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(applied, Some(log_id(2)));
        assert_eq!(sm.map().ok().flatten(), Some(map));
        assert!(log.try_get_log_entries(0..10).await.is_ok());
    });
}

/// A map with an extension (a protocol floor) applied, snapshotted and installed on
/// another member keeps its extension, in the state record across a reopen too; a later
/// map with no floor keeps the floor.
#[test]
fn a_map_s_extension_survives_apply_snapshot_and_install() {
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut map = myriad_placement::ClusterMap::new(7, &["127.0.0.1:1".to_string()]);
    map.ext.protocol_floor = 36;
    let log_id = LogId::new(CommittedLeaderId::new(1, 1), 1);
    let snapshot = rt.block_on(async {
        let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
        let mut sm = MapStateMachine::new(kv);
        let entry = Entry::<TypeConfig> {
            log_id,
            payload: EntryPayload::Normal(crate::MapCommand::install(map.clone())),
        };
        sm.apply(vec![entry])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sm.map().ok().flatten(), Some(map.clone()));
        // A later map without a floor (built from an older file) keeps the floor.
        let mut later = map.clone();
        later.epoch += 1;
        later.ext = myriad_placement::MapExt::default();
        let entry = Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 2),
            payload: EntryPayload::Normal(crate::MapCommand::install(later)),
        };
        sm.apply(vec![entry])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        map.epoch += 1;
        assert_eq!(
            sm.map().ok().flatten(),
            Some(map.clone()),
            "the floor stays"
        );
        let mut builder = sm.get_snapshot_builder().await;
        builder
            .build_snapshot()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
    rt.block_on(async {
        let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(
            MapStateMachine::new(kv).map().ok().flatten(),
            Some(map.clone()),
            "reopened"
        );
        let mut other = MapStateMachine::new(Arc::new(MemKv::new()));
        other
            .install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other.map().ok().flatten(), Some(map), "installed elsewhere");
    });
}
