//! A primary catching up before it serves: copying back from a copy that holds batches it
//! lacks (it lost its disk, or crashed before its fsync while the batches reached the copies).

use std::sync::Arc;

use myriad_placement::{NodeId, PartitionId};
use myriad_proto::{FsError, Request, Response};
use myriad_storage::{Space, Store};

use crate::commit::{CHAIN_KEY, SEQ_KEY};
use crate::replication::peers::{Link, Peers};
use crate::replication::wire::{clear_space, from_wire};
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
) -> Result<(), FsError> {
    let mine = store.meta_u64(SEQ_KEY).map_err(storage_err)?.unwrap_or(0);
    let my_chain = store.meta_u64(CHAIN_KEY).map_err(storage_err)?.unwrap_or(0);
    let mut best: Option<(NodeId, u64)> = None;
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
                    Err(FsError::Busy) => {
                        tokio::time::sleep(crate::backoff::BUSY_COPY_RETRY).await;
                    }
                    other => return other,
                }
            }
        })
        .await;
        // A backup ahead, or at our number over another history: a primary acknowledges a
        // batch only once every copy has it, so batches that only this copy holds (it was
        // deposed, or crashed before shipping them) were never acknowledged, and the
        // backups' history is the one to keep.
        if let Ok(Ok(Response::ReplicaState {
            seq: Some(s),
            chain,
        })) = asked
            && (s > mine || (s == mine && chain != my_chain))
            && best.is_none_or(|(_, bs)| s > bs)
        {
            best = Some((b, s));
        }
    }
    let Some((from, seq)) = best else {
        return Ok(());
    };
    tracing::warn!(
        partition = %pid,
        from = %from,
        seq,
        mine,
        "a backup is ahead of this primary: copying the partition from it before serving"
    );
    let link = Link {
        peers: peers.clone(),
        pid,
        backup: from,
    };
    // Empty this copy, then take every page of the backup's.
    for space in Space::PARTITION {
        clear_space(store.kv().as_ref(), space, None)?;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let req = ReplicaRequest::ReplicaRead {
                space: space.code(),
                after: after.clone().map(serde_bytes::ByteBuf::from),
            };
            let Response::ReplicaPage(ops) = link.call(&Request::Replica(req)).await? else {
                return Err(FsError::Protocol("unexpected reply to replica_read".into()));
            };
            let Some(last) = ops.last() else {
                break;
            };
            after = Some(last.key.clone());
            store.commit(from_wire(ops)?).map_err(storage_err)?;
        }
    }
    store.sync().map_err(storage_err)?;
    Ok(())
}
