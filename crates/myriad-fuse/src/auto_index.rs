//! Automatic indexes from a mount (docs/metadata-index.md "Automatic indexes"): every few
//! seconds the mount asks the servers which directories are read far more than changed
//! and builds an automatic index of each such tree nobody indexed yet. Builds run with a
//! client of their own (root, no write-behind: every change of the registry reaches its
//! servers before the build goes on), so the mount's own client learns of each index as
//! any other client does, by the recall of its registry lease.

use std::time::Duration;

use myriad_client::{AutoIndexPolicy, AutoIndexer, Client, ClientConfig};
use myriad_placement::ClusterMap;
use myriad_proto::Caller;

/// How a mount indexes trees by itself.
#[derive(Clone, Copy, Debug)]
pub struct AutoIndexing {
    /// How often it asks the servers for hot, quiet trees.
    pub every: Duration,
    pub policy: AutoIndexPolicy,
}

/// Starts the mount's automatic indexing on `rt`.
pub(crate) fn start(
    rt: &tokio::runtime::Handle,
    map: ClusterMap,
    keys: myriad_client::Keyring,
    request_timeout: Duration,
    auto: AutoIndexing,
) -> Result<(), String> {
    let mut cfg = ClientConfig::new(map, Caller::root(), keys);
    cfg.request_timeout = request_timeout;
    let builder = Client::new(cfg).map_err(|e| format!("bad cluster map: {e}"))?;
    rt.spawn(async move {
        let mut state = AutoIndexer::default();
        let mut tick = tokio::time::interval(auto.every);
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
    });
    Ok(())
}
