//! A primary catching up before it serves, against real copies reached in memory: it takes
//! the newest history by (term, batch), never more batches of an older term (simulation
//! seed 60151: a copy that was down while a newer primary wrote had one more batch of its
//! own old term, and taking it lost an acknowledged write).

use std::collections::BTreeMap;
use std::time::Duration;

use myriad_placement::ClusterMap;
use myriad_storage::{Batch, Kv, MemKv};

use super::*;
use crate::cluster::MapState;
use crate::commit::{CHAIN_KEY, Runner, Syncer};
use crate::replication::copy_side::Backup;
use crate::replication::wire::partition_store;

const PID: PartitionId = PartitionId(1);

/// Copies of partition 1 on servers 2 and 3.
struct Copies {
    backups: BTreeMap<NodeId, (Arc<Backup>, Syncer)>,
    map: Arc<MapState>,
    bundler: crate::replication::bundle::Bundler,
}

impl Peers for Copies {
    fn map(&self) -> Arc<MapState> {
        self.map.clone()
    }
    fn send<'a>(
        &'a self,
        to: NodeId,
        _epoch: u64,
        _ends: myriad_proto::Endpoints,
        req: &'a Request,
    ) -> futures::future::BoxFuture<'a, Result<Response, WireError>> {
        Box::pin(async move {
            let (b, syncer) = self
                .backups
                .get(&to)
                .ok_or_else(|| WireError::Unavailable(format!("{to}: down")))?;
            b.handle(syncer, req.clone()).await
        })
    }
    fn newer_map(&self, _map: ClusterMap) {}
    fn request_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn bundler(&self) -> &dyn crate::replication::peers::Bundles {
        &self.bundler
    }
}

/// A store of partition 1 whose last batch is `seq` of term `term`, holding one entry
/// named after `who` (to tell which history a copy holds).
fn history(who: &str, term: u64, seq: u64) -> Arc<dyn Kv> {
    let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
    let store = partition_store(kv.clone(), PID).unwrap_or_else(|e| panic!("{e}"));
    let mut b = Batch::new();
    store.put_meta_u64(&mut b, SEQ_KEY, seq);
    store.put_meta_u64(&mut b, TERM_KEY, term);
    store.put_meta_u64(&mut b, CHAIN_KEY, term * 1000 + seq);
    b.put(Space::Entries, who.as_bytes().to_vec(), vec![1]);
    store.commit(b).unwrap_or_else(|e| panic!("{e}"));
    kv
}

fn holds(store: &Store, who: &str) -> bool {
    store
        .kv()
        .get(Space::Entries, who.as_bytes())
        .ok()
        .flatten()
        .is_some()
}

/// The primary at (`mine`), its copies on servers 2 and 3 at the given histories; returns
/// the primary's store after catching up.
async fn catch_up(mine: (u64, u64), two: (u64, u64), three: (u64, u64)) -> Store {
    let store =
        partition_store(history("one", mine.0, mine.1), PID).unwrap_or_else(|e| panic!("{e}"));
    catch_up_into(
        &store,
        &[(NodeId(2), "two", two), (NodeId(3), "three", three)],
    )
    .await
    .unwrap_or_else(|e| panic!("catch-up: {e}"));
    store
}

/// `store` catching up from copies on the given servers (`who`: the entry naming each
/// copy's history).
async fn catch_up_into(
    store: &Store,
    copies: &[(NodeId, &str, (u64, u64))],
) -> Result<(), WireError> {
    let runner = Runner::Tasks {
        fsync: Duration::ZERO,
    };
    let mut backups = BTreeMap::new();
    for &(id, who, (term, seq)) in copies {
        let kv = history(who, term, seq);
        let syncer = Syncer::start(kv.clone(), runner).unwrap_or_else(|e| panic!("{e}"));
        let b = Arc::new(Backup::open(kv, PID).unwrap_or_else(|e| panic!("{e}")));
        backups.insert(id, (b, syncer));
    }
    let map = ClusterMap::build(1, &["a:1".into(), "b:1".into(), "c:1".into()], 1, 3);
    let peers: Arc<dyn Peers> = Arc::new(Copies {
        backups,
        map: Arc::new(MapState::new(map)),
        bundler: crate::replication::bundle::Bundler::default(),
    });
    let ids: Vec<NodeId> = copies.iter().map(|c| c.0).collect();
    catch_up_from_backups(&peers, PID, store, &ids).await
}

#[tokio::test(start_paused = true)]
async fn more_batches_of_an_older_term_are_not_newer() {
    // Server 2 was primary at term 9 and wrote batch 394 nobody acknowledged; this primary
    // (term 10) wrote up to 393, all acknowledged by server 3.
    let store = catch_up((10, 393), (9, 394), (10, 393)).await;
    assert!(
        holds(&store, "one"),
        "an older term's longer history replaced this one"
    );
    assert!(!holds(&store, "two"));
}

#[tokio::test(start_paused = true)]
async fn a_newer_term_wins_over_more_batches() {
    // This server lost its disk or was deposed long ago: server 3 holds a newer term.
    let store = catch_up((5, 900), (9, 394), (11, 12)).await;
    assert!(holds(&store, "three"));
    assert!(!holds(&store, "one") && !holds(&store, "two"));
    assert_eq!(store.meta_u64(TERM_KEY).ok().flatten(), Some(11));
}

#[tokio::test(start_paused = true)]
async fn the_same_term_with_more_batches_is_taken_and_an_equal_history_kept() {
    // Batches this primary lost in a crash before its fsync reached server 2.
    let store = catch_up((10, 393), (10, 395), (10, 393)).await;
    assert!(holds(&store, "two"));
    let store = catch_up((10, 393), (10, 393), (10, 393)).await;
    assert!(holds(&store, "one"), "nothing newer: this copy stays");
}

/// A copy into this store that was cut short left it marked incomplete: whatever its
/// numbers say it holds no history, so it takes a copy's even when that one looks older,
/// and without any copy it is not served (simulation seed 80083).
#[tokio::test(start_paused = true)]
async fn a_store_marked_incomplete_is_copied_whole_or_not_served() {
    let marked = || {
        let store =
            partition_store(history("half", 10, 500), PID).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        store.put_meta_u64(&mut b, COPYING_KEY, 1);
        store.commit(b).unwrap_or_else(|e| panic!("{e}"));
        store
    };
    let store = marked();
    catch_up_into(&store, &[(NodeId(2), "two", (10, 393))])
        .await
        .unwrap_or_else(|e| panic!("catch-up: {e}"));
    assert!(holds(&store, "two") && !holds(&store, "half"));
    assert_eq!(store.meta_u64(SEQ_KEY).ok().flatten(), Some(393));
    assert_eq!(
        store.meta_u64(COPYING_KEY).ok().flatten(),
        None,
        "whole again: the mark is gone"
    );
    let alone = marked();
    assert!(
        catch_up_into(&alone, &[]).await.is_err(),
        "an incomplete copy with nobody to copy from was served"
    );
}
