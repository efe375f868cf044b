//! The quotas of the cluster map handed to the partitions this server serves (docs/quotas.md
//! "Usage: kept per partition"): each partition counts the quotas its store lists, and a
//! newer map changes that list through the partition's writer (`Mutation::SyncQuotas`),
//! which counts a new quota's tree from scratch in the same step.

use std::sync::Arc;

use myriad_placement::ClusterMap;
use myriad_proto::QUOTAS_LEAVE_TRASH_SINCE;
use myriad_storage::QuotaRoot;

use crate::cluster::MapState;
use crate::metrics::QuotaPart;
use crate::partition::core::Partition;
use crate::state::mutation::Mutation;

/// The quotas of `map` as partitions count them (the trash left out once the map's floor
/// says every server does so).
fn roots(map: &ClusterMap) -> Vec<QuotaRoot> {
    let trash_apart = map.ext.protocol_floor >= QUOTAS_LEAVE_TRASH_SINCE;
    map.ext
        .quotas
        .iter()
        .map(|q| QuotaRoot {
            id: q.id,
            path: q.path.clone(),
            max_files: q.max_files,
            max_bytes: q.max_bytes,
            trash_apart,
        })
        .collect()
}

/// Makes `node` count the quotas of `map` (in the background; a later map does it again).
pub(crate) fn sync(node: &Arc<Partition>, map: &ClusterMap) {
    let job = Mutation::SyncQuotas {
        epoch: map.epoch,
        roots: roots(map),
    };
    let run = node.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = run.applier.run(job).await {
            tracing::warn!(partition = %run.me, "counting the quotas' usage failed: {e}");
        }
    });
    if let Ok(mut t) = node.tasks.lock() {
        t.push(task);
    }
}

/// Each quota of the map as this server's scrape shows it: the usage its partitions `led`
/// here hold, and the limits where the quota's home is one of them.
pub(crate) fn metric_parts(state: &MapState, led: &[Arc<Partition>]) -> Vec<QuotaPart> {
    state
        .map
        .ext
        .quotas
        .iter()
        .map(|q| {
            let mut part = QuotaPart {
                path: q.path.clone(),
                ..QuotaPart::default()
            };
            for p in led {
                if let Ok(u) = p.store.quota_usage(q.id) {
                    part.files += u.files;
                    part.bytes += u.bytes;
                }
            }
            let home = state.ring.owner_of_dir(&q.path);
            if led.iter().any(|p| p.me == home) {
                part.limits = Some((q.max_files, q.max_bytes));
            }
            part
        })
        .collect()
}
