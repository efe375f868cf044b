//! A primary catching up before it serves: copying back from a copy that holds batches it
//! lacks (it lost its disk, or crashed before its fsync while the batches reached the copies).

use std::sync::Arc;

use myriad_placement::{NodeId, PartitionId};
use myriad_proto::ask;
use myriad_proto::reply::ReplicaPage;
use myriad_proto::{Request, Response, WireError};
use myriad_storage::{Space, Store};

use crate::commit::{SEQ_KEY, TERM_KEY};
use crate::replication::peers::{Link, Peers};
use crate::replication::wire::{COPYING_KEY, empty_marked, from_wire};
use crate::state::mutation::storage_err;
use myriad_proto::ReplicaRequest;

/// Before a primary serves: if a backup has applied batches this copy lacks (this server
/// lost its disk, or crashed before its fsync while the batches reached the backups), copy
/// the partition back from the most advanced backup. A backup that cannot be reached is
/// not waited for (docs/replication.md: with the Raft map, only up replicas count).
pub(crate) async fn catch_up_from_backups(
    peers: &Arc<dyn Peers>,
    pid: PartitionId,
    store: &Store,
    backups: &[NodeId],
) -> Result<(), WireError> {
    // A store still marked incomplete (a copy into it was cut short: a catch-up that
    // failed part-way, a backup promoted mid-copy) holds no history at all, whatever its
    // numbers say: any copy's is newer, and without one it must not be served.
    let incomplete = store.meta_u64(COPYING_KEY).map_err(storage_err)?.is_some();
    let (mine, my_term) = if incomplete {
        (0, 0)
    } else {
        (
            store.meta_u64(SEQ_KEY).map_err(storage_err)?.unwrap_or(0),
            store.meta_u64(TERM_KEY).map_err(storage_err)?.unwrap_or(0),
        )
    };
    let mut best: Option<(NodeId, (u64, u64))> = None;
    for &b in backups {
        let link = Link {
            peers: peers.clone(),
            pid,
            backup: b,
        };
        // A backup still opening answers Busy: ask again until it answers or the deadline.
        let asked = tokio::time::timeout(peers.request_timeout(), async {
            loop {
                match link
                    .call(&Request::Replica(ReplicaRequest::ReplicaSeq))
                    .await
                {
                    Err(WireError::Busy) => {
                        tokio::time::sleep(crate::backoff::BUSY_COPY_RETRY).await;
                    }
                    other => return other,
                }
            }
        })
        .await;
        // A backup whose history is newer: its last batch has a newer term (a primary
        // opened under a later map wrote it, after catching up itself), or the same term
        // and more batches (ones this copy lost in a crash before its fsync; never
        // acknowledged, harmless to take). More batches of an older term say nothing: a
        // copy that was down while a newer primary wrote keeps its old tail (seed 60151:
        // taking it lost an acknowledged write).
        if let Ok(Ok(Response::ReplicaState {
            seq: Some(s), term, ..
        })) = asked
            && (term, s) > (my_term, mine)
            && best.is_none_or(|(_, newest)| (term, s) > newest)
        {
            best = Some((b, (term, s)));
        }
    }
    let Some((from, (term, seq))) = best else {
        if incomplete {
            return Err(WireError::Unavailable(format!(
                "partition {pid}: this copy is incomplete (a copy into it was cut short) and no other copy can give it whole"
            )));
        }
        return Ok(());
    };
    tracing::warn!(
        partition = %pid,
        from = %from,
        seq,
        term,
        mine,
        my_term,
        "a backup holds a newer history than this primary: copying the partition from it before serving"
    );
    let link = Link {
        peers: peers.clone(),
        pid,
        backup: from,
    };
    // Mark this copy incomplete and empty it, take every page of the backup's, then drop
    // the mark: cut short anywhere (an error, a crash whose pages another partition's fsync
    // made durable), the store says it is incomplete instead of passing for the history
    // its old numbers name (simulation seed 80083, with batches served concurrently: a
    // catch-up that failed part-way left the other copy's entries under this copy's
    // batch number, and the next open served them).
    empty_marked(store)?;
    for space in Space::PARTITION {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let read = ask::replica_read(space.code(), after.clone());
            let ReplicaPage(ops) = read
                .answer
                .of::<WireError>(link.call(&read.request).await?)?;
            let Some(last) = ops.last() else {
                break;
            };
            after = Some(last.key.clone());
            let batch = from_wire(ops)?;
            // A source marked incomplete itself (a copy into it began while it was read)
            // holds no history either: this catch-up fails, and this store stays marked.
            if batch
                .ops
                .iter()
                .any(|(space, key, _)| *space == Space::Meta && key == COPYING_KEY.as_bytes())
            {
                return Err(WireError::Unavailable(format!(
                    "partition {pid}: the copy on server {from} became incomplete while it was copied"
                )));
            }
            store.commit(batch).map_err(storage_err)?;
        }
    }
    // Whole now: the mark goes last (a crash keeps a prefix of the commits, so the mark
    // gone means every page is there), then one fsync.
    let mut done = myriad_storage::Batch::new();
    done.delete(Space::Meta, COPYING_KEY.as_bytes().to_vec());
    store.commit(done).map_err(storage_err)?;
    store.sync().map_err(storage_err)?;
    Ok(())
}

#[cfg(test)]
mod tests;
