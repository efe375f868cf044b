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

use crate::mount::Mount;

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
    inner: &Arc<Mount>,
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
        rt.spawn(index_rounds(Arc::downgrade(inner), service, auto));
    }
    Ok(())
}

/// An idle mount asks once every this many rounds.
const IDLE_ROUNDS: u32 = 6;

/// When a mount asks the servers for hot trees: every round while it sends reads to the
/// servers itself, and for a while after (a tree is indexed only once quiet, after its
/// reads); otherwise (idle, or answered by its kernel, its leases and its indexes) every
/// `IDLE_ROUNDS` rounds, for trees others read (a mount's rounds cost each partition a
/// request: a cluster's idle mounts should not add up to a load).
#[derive(Debug)]
struct Activity {
    /// The mount client's reads sent, at the last round.
    sent: u64,
    /// The last round that found at least `min_reads` new ones.
    busy_at: Option<tokio::time::Instant>,
    /// The last round that asked (at first: the mount's start).
    asked_at: tokio::time::Instant,
}

impl Activity {
    fn new(sent: u64, now: tokio::time::Instant) -> Activity {
        Activity {
            sent,
            busy_at: None,
            asked_at: now,
        }
    }

    /// Whether this round asks, given the reads sent so far.
    fn ask(&mut self, auto: &AutoIndexing, sent: u64, now: tokio::time::Instant) -> bool {
        if sent.saturating_sub(self.sent) >= auto.policy.min_reads {
            self.busy_at = Some(now);
        }
        self.sent = sent;
        let keep_asking = auto.policy.quiet + 2 * auto.every;
        let busy = self.busy_at.is_some_and(|t| now - t <= keep_asking);
        let ask = busy || now - self.asked_at >= IDLE_ROUNDS * auto.every;
        if ask {
            self.asked_at = now;
        }
        ask
    }
}

async fn index_rounds(mount: Weak<Mount>, builder: Arc<Client>, auto: AutoIndexing) {
    let mut state = AutoIndexer::default();
    let sent = |m: &Weak<Mount>| m.upgrade().map(|i| i.client.server_reads());
    let Some(start) = sent(&mount) else {
        return;
    };
    let mut activity = Activity::new(start, tokio::time::Instant::now());
    let mut tick = after_one(auto.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(now_sent) = sent(&mount) else {
            return;
        };
        if !activity.ask(&auto, now_sent, tokio::time::Instant::now()) {
            continue;
        }
        // Trees this mount writes in itself are not quiet, whatever the servers saw yet.
        let busy = {
            let mount = mount.clone();
            // Its own changes keep a tree out for longer than the servers' quiet period.
            let horizon = auto.policy.own_changes_horizon();
            move |root: &str| {
                mount
                    .upgrade()
                    .is_some_and(|i| i.client.changed_lately(root, horizon))
            }
        };
        match builder
            .auto_index_round(&auto.policy, &mut state, &busy)
            .await
        {
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
async fn report_hits(inner: Weak<Mount>, writer: Arc<Client>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn a_mount_asks_every_round_while_it_reads_from_the_servers_else_now_and_then() {
        let auto = AutoIndexing {
            every: Duration::from_secs(10),
            policy: AutoIndexPolicy::default(),
        };
        let min = auto.policy.min_reads;
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut a = Activity::new(100, t0);
        assert!(!a.ask(&auto, 100, at(10)), "idle from the start");
        assert!(!a.ask(&auto, 100 + min - 1, at(20)), "too few reads");
        assert!(a.ask(&auto, 100 + 2 * min, at(30)), "busy");
        // Quiet afterwards: asks every round until quiet + two periods past the last
        // busy round...
        let keep = (auto.policy.quiet + 2 * auto.every).as_secs();
        for s in (40..=30 + keep).step_by(10) {
            assert!(a.ask(&auto, 100 + 2 * min, at(s)), "{s}");
        }
        // ...then once every IDLE_ROUNDS rounds.
        let idle = u64::from(IDLE_ROUNDS) * 10;
        for s in (40 + keep..30 + keep + idle).step_by(10) {
            assert!(!a.ask(&auto, 100 + 2 * min + 1, at(s)), "{s}");
        }
        assert!(a.ask(&auto, 100 + 2 * min + 1, at(30 + keep + idle)));
        assert!(!a.ask(&auto, 100 + 2 * min + 1, at(40 + keep + idle)));
        // Busy again: every round again.
        assert!(a.ask(&auto, 100 + 4 * min, at(50 + keep + idle)));
        assert!(a.ask(&auto, 100 + 4 * min, at(60 + keep + idle)));
    }
}
