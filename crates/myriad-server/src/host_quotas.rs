//! The quotas of the cluster map handed to the partitions this server serves (docs/quotas.md
//! "Usage: kept per partition"): each partition counts the quotas its store lists, and a
//! newer map changes that list through the partition's writer (`Mutation::SyncQuotas`),
//! which counts a new quota's tree from scratch in the same step.

use std::sync::Arc;

use myriad_placement::ClusterMap;
use myriad_storage::QuotaRoot;

use crate::partition::core::Partition;
use crate::state::mutation::Mutation;

/// The quotas of `map` as partitions count them.
fn roots(map: &ClusterMap) -> Vec<QuotaRoot> {
    map.ext
        .quotas
        .iter()
        .map(|q| QuotaRoot {
            id: q.id,
            path: q.path.clone(),
            max_files: q.max_files,
            max_bytes: q.max_bytes,
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
