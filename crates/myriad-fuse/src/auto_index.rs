//! A mount's index upkeep (docs/metadata-index.md "Automatic indexes"): every few seconds
//! it asks the servers which directories are read far more than changed and builds an
//! automatic index of each such tree nobody indexed yet; and now and then it writes the
//! answers it gave from each index where `myriad index status` adds them up. Both run
//! with a client of their own (root, no write-behind: every change of the registry
//! reaches its servers before a build goes on), so the mount's own client learns of each
//! index as any other client does, by the recall of its registry lease.

use std::sync::{Arc, Weak};
use std::time::Duration;

use myriad_client::{AutoIndexPolicy, AutoIndexer, Client, ClientConfig};
use myriad_placement::ClusterMap;
use myriad_proto::Caller;

use crate::ops::Inner;

/// How often a mount writes its hit counts, when they changed.
const HITS_EVERY: Duration = Duration::from_secs(30);

/// How a mount indexes trees by itself.
#[derive(Clone, Copy, Debug)]
pub struct AutoIndexing {
    /// How often it asks the servers for hot, quiet trees.
    pub every: Duration,
    pub policy: AutoIndexPolicy,
}

/// Starts the mount's index upkeep on `rt`: hit reports always, automatic indexing
/// with `auto`.
pub(crate) fn start(
    inner: &Arc<Inner>,
    rt: &tokio::runtime::Handle,
    (map, keys): (ClusterMap, myriad_client::Keyring),
    request_timeout: Duration,
    auto: Option<AutoIndexing>,
) -> Result<(), String> {
    let mut cfg = ClientConfig::new(map, Caller::root(), keys);
    cfg.request_timeout = request_timeout;
    let service = Arc::new(Client::new(cfg).map_err(|e| format!("bad cluster map: {e}"))?);
    rt.spawn(report_hits(Arc::downgrade(inner), service.clone()));
    if let Some(auto) = auto {
        rt.spawn(index_rounds(service, auto));
    }
    Ok(())
}

async fn index_rounds(builder: Arc<Client>, auto: AutoIndexing) {
    let mut state = AutoIndexer::default();
    let mut tick = after_one(auto.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match builder.auto_index_round(&auto.policy, &mut state).await {
            Ok(tried) => {
                for (root, built) in tried {
                    match built {
                        Ok(r) => tracing::info!(
                            root,
                            version = r.tree.version,
                            dirs = r.tree.dirs,
                            names = r.tree.entries,
                            bytes = r.tree.bytes,
                            "automatic index built"
                        ),
                        Err(e) => tracing::info!(root, "no automatic index this time: {e}"),
                    }
                }
            }
            Err(e) => tracing::debug!("automatic indexing: cannot ask the servers: {e}"),
        }
    }
}

/// Writes the mount's answers from each index every `HITS_EVERY` when they changed (and
/// nothing while no index answered anything).
async fn report_hits(inner: Weak<Inner>, writer: Arc<Client>) {
    // This mount's own file: its process and start, unique enough among mounts.
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let id = (u64::from(std::process::id()) << 40) ^ started;
    let mut sent = std::collections::BTreeMap::new();
    let mut tick = after_one(HITS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let hits = inner.client.index_hits();
        drop(inner);
        if hits.is_empty() || hits == sent {
            continue;
        }
        match writer.report_index_hits(id, &hits).await {
            Ok(()) => sent = hits,
            Err(e) => tracing::debug!("index hit counts not written: {e}"),
        }
    }
}

/// Ticks every `period`, the first one period from now (a fresh mount has read nothing).
fn after_one(period: Duration) -> tokio::time::Interval {
    tokio::time::interval_at(tokio::time::Instant::now() + period, period)
}
