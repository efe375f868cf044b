//! What an operator watches: the cluster's health (healthy, degraded: partitions with copies
//! missing or catching up, unavailable: partitions no server serves), every server's
//! health, load and disk, the map epoch and its Raft leader, partitions moving, popular
//! directories and recent problems and recoveries. Gathered from
//! the servers through the client protocol (counters and statfs, each server asked in
//! parallel with a short deadline), so `myriad dashboard` and `myriad top` show the same
//! thing from any machine with a key.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use myriad_client::proto::LatencyHistogram;
use myriad_client::{Client, CounterSnapshot, FsError, NodeId, NodeState, StatFs};
use serde::Serialize;

/// A server that does not answer within this long counts as unreachable this round.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Recent errors kept (newest last).
const ERRORS_KEPT: usize = 50;

#[derive(Clone, Debug, Serialize)]
pub struct ServerView {
    pub id: u32,
    pub addr: String,
    pub zone: String,
    /// "up", "down" (marked down in the map), "leaving".
    pub state: &'static str,
    /// Answered this round.
    pub reachable: bool,
    /// Holds its lease from the Raft leader (serves only then).
    pub serving: bool,
    pub primaries: u64,
    pub backups: u64,
    /// Requests served since start (or the last counter reset), from clients and servers.
    pub requests_total: u64,
    /// Since the previous round; None on the first.
    pub requests_per_s: Option<f64>,
    pub syncs_per_s: Option<f64>,
    /// How long its answers to clients took since the previous round (long polls apart):
    /// the median and the 99th percentile, in milliseconds (None: no answers, the first
    /// round, or a server too old to say).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub disk_used_bytes: u64,
    pub disk_total_bytes: u64,
    /// Files stored, when the server counts them (None: it does not say).
    pub files: Option<u64>,
    pub replicas_held: u64,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MoveView {
    pub partition: u32,
    pub from: u32,
    pub to: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct PopularView {
    pub dir: String,
    pub server: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct ErrorView {
    pub time_ms: u64,
    /// "problem", or "recovery" (a server answering again, partitions served again).
    pub kind: &'static str,
    /// The server it concerns; None: the cluster as a whole.
    pub server: Option<u32>,
    pub message: String,
}

/// A partition short of copies in sync, and the servers of the copies it lacks.
#[derive(Clone, Debug, Serialize)]
pub struct ShortView {
    pub partition: u32,
    pub missing: Vec<u32>,
}

/// The cluster's health, from the map.
#[derive(Clone, Debug, Serialize)]
pub struct HealthView {
    /// "healthy", "degraded" (copies missing or catching up) or "unavailable" (partitions
    /// no up server serves).
    pub state: &'static str,
    pub under_replicated: Vec<ShortView>,
    /// Partitions without a serving primary.
    pub unavailable: Vec<u32>,
}

impl HealthView {
    fn of(map: &myriad_client::ClusterMap) -> HealthView {
        let under_replicated: Vec<ShortView> = map
            .partitions
            .iter()
            .filter(|p| map.is_under_replicated(p))
            .map(|p| ShortView {
                partition: p.id.0,
                missing: map.copies_not_in_sync(p).iter().map(|n| n.0).collect(),
            })
            .collect();
        let unavailable: Vec<u32> = map
            .partitions
            .iter()
            .filter(|p| map.primary_in(p).is_none())
            .map(|p| p.id.0)
            .collect();
        let state = if !unavailable.is_empty() {
            "unavailable"
        } else if !under_replicated.is_empty() {
            "degraded"
        } else {
            "healthy"
        };
        HealthView {
            state,
            under_replicated,
            unavailable,
        }
    }

    /// One line: "healthy", or what is wrong and where.
    pub fn line(&self) -> String {
        match self.state {
            "healthy" => "healthy: every partition has all its copies in sync".into(),
            _ => {
                let mut parts = Vec::new();
                if !self.unavailable.is_empty() {
                    parts.push(format!(
                        "{} partitions unavailable (no up server holds them in sync)",
                        self.unavailable.len()
                    ));
                }
                if !self.under_replicated.is_empty() {
                    let servers: std::collections::BTreeSet<u32> = self
                        .under_replicated
                        .iter()
                        .flat_map(|s| s.missing.iter().copied())
                        .collect();
                    let names: Vec<String> =
                        servers.iter().map(|s| format!("server {s}")).collect();
                    parts.push(format!(
                        "{} partitions under-replicated (copies down or behind: {})",
                        self.under_replicated.len(),
                        names.join(", ")
                    ));
                }
                format!("{}: {}", self.state, parts.join("; "))
            }
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ClusterView {
    pub time_ms: u64,
    /// The cluster map file watched.
    pub cluster: String,
    pub epoch: u64,
    /// The Raft leader most servers name; None while they name none.
    pub leader: Option<u32>,
    pub health: HealthView,
    pub servers: Vec<ServerView>,
    pub moving: Vec<MoveView>,
    pub popular: Vec<PopularView>,
    /// Newest first.
    pub errors: Vec<ErrorView>,
}

/// Watches a cluster round after round, keeping what rates and error history need.
pub struct Watcher {
    client: Client,
    cluster: String,
    /// Each server's (time, requests, fsyncs) at the previous round.
    last: BTreeMap<NodeId, (Instant, u64, u64)>,
    /// Each server's answers by how long they took, at the previous round.
    last_latency: BTreeMap<NodeId, LatencyHistogram>,
    /// Whether each server answered at the previous round (errors are logged on change).
    was_reachable: BTreeMap<NodeId, bool>,
    errors: VecDeque<ErrorView>,
    /// Partitions with no live in-sync copy at the previous round.
    waiting: usize,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn state_name(s: NodeState) -> &'static str {
    match s {
        NodeState::Up => "up",
        NodeState::Down => "down",
        NodeState::Leaving => "leaving",
    }
}

/// A server's counters, disks and (if it can say) latencies.
type Probed = (CounterSnapshot, StatFs, Option<LatencyHistogram>);

async fn probe(client: &Client, id: NodeId) -> Result<Probed, FsError> {
    // Counters and disks at once: a round waits for the slowest server's round trip. The
    // latencies after: asked only once the connection says the server knows the request.
    let asked = async {
        let (c, s) = tokio::try_join!(client.counters(id), client.server_statfs(id))?;
        Ok((c, s, client.latencies(id).await?))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, asked).await {
        Ok(r) => r,
        Err(_) => Err(FsError::TimedOut(format!(
            "no answer within {} s",
            PROBE_TIMEOUT.as_secs()
        ))),
    }
}

impl Watcher {
    pub fn new(client: Client, cluster: String) -> Watcher {
        Watcher {
            client,
            cluster,
            last: BTreeMap::new(),
            last_latency: BTreeMap::new(),
            was_reachable: BTreeMap::new(),
            errors: VecDeque::new(),
            waiting: 0,
        }
    }

    fn note_error(&mut self, kind: &'static str, server: Option<u32>, message: String) {
        self.errors.push_back(ErrorView {
            time_ms: now_ms(),
            kind,
            server,
            message,
        });
        while self.errors.len() > ERRORS_KEPT {
            self.errors.pop_front();
        }
    }

    /// One round: the newest map any server has, then every server asked at once.
    pub async fn refresh(&mut self) -> ClusterView {
        let map = self.client.newest_map().await;
        let client = &self.client;
        let probes = futures::future::join_all(
            map.nodes
                .iter()
                .map(|n| async move { (n.id, probe(client, n.id).await) }),
        )
        .await;
        let mut servers = Vec::new();
        let mut popular = Vec::new();
        let mut leaders: BTreeMap<u32, usize> = BTreeMap::new();
        for (id, result) in probes {
            let Some(node) = map.node(id) else { continue };
            let mut v = ServerView {
                id: id.0,
                addr: node.addr.clone(),
                zone: node.zone.clone(),
                state: state_name(node.state),
                reachable: false,
                serving: false,
                primaries: 0,
                backups: 0,
                requests_total: 0,
                requests_per_s: None,
                syncs_per_s: None,
                p50_ms: None,
                p99_ms: None,
                disk_used_bytes: 0,
                disk_total_bytes: 0,
                files: None,
                replicas_held: 0,
                error: None,
            };
            let reachable = result.is_ok();
            match result {
                Ok((c, s, latency)) => {
                    if let Some(now) = latency {
                        if let Some(then) = self.last_latency.get(&id) {
                            (v.p50_ms, v.p99_ms) = percentiles_between(then, &now);
                        }
                        self.last_latency.insert(id, now);
                    }
                    let total: u64 = c
                        .client_requests
                        .iter()
                        .chain(&c.server_requests)
                        .map(|o| o.count)
                        .sum();
                    let at = Instant::now();
                    if let Some((then, reqs, syncs)) = self.last.get(&id) {
                        let secs = at.duration_since(*then).as_secs_f64().max(1e-3);
                        v.requests_per_s = Some(total.saturating_sub(*reqs) as f64 / secs);
                        v.syncs_per_s = Some(c.syncs.saturating_sub(*syncs) as f64 / secs);
                    }
                    self.last.insert(id, (at, total, c.syncs));
                    if c.raft_leader.0 != 0 {
                        *leaders.entry(c.raft_leader.0).or_default() += 1;
                    }
                    popular.extend(c.popular.iter().map(|d| PopularView {
                        dir: d.clone(),
                        server: id.0,
                    }));
                    v.reachable = true;
                    v.serving = c.serving;
                    v.primaries = c.primaries;
                    v.backups = c.backups;
                    v.requests_total = total;
                    v.disk_used_bytes = s.used_bytes;
                    v.disk_total_bytes = s.total_bytes;
                    v.files = (s.files > 0).then_some(s.files);
                    v.replicas_held = c.replicas_held;
                }
                Err(e) => {
                    self.last.remove(&id);
                    self.last_latency.remove(&id);
                    v.error = Some(format!("{}: {e}", node.addr));
                }
            }
            // Errors are logged when a server's reachability changes, not every round.
            match (
                self.was_reachable.insert(id, reachable),
                reachable,
                &v.error,
            ) {
                (Some(true) | None, false, Some(e)) => {
                    self.note_error("problem", Some(id.0), format!("unreachable: {e}"));
                }
                (Some(false), true, _) => {
                    self.note_error("recovery", Some(id.0), "answers again".into());
                }
                _ => {}
            }
            servers.push(v);
        }
        let health = HealthView::of(&map);
        let waiting = health.unavailable.len();
        if waiting == 0 && self.waiting > 0 {
            self.note_error("recovery", None, "every partition is served again".into());
        }
        if waiting != self.waiting && waiting > 0 {
            self.note_error(
                "problem",
                None,
                format!(
                    "{waiting} partitions have no copy up and in sync (they wait for one; if \
                     those servers are lost for good: `myriad node lost ID`)"
                ),
            );
        }
        self.waiting = waiting;
        ClusterView {
            time_ms: now_ms(),
            cluster: self.cluster.clone(),
            epoch: map.epoch,
            leader: leaders.into_iter().max_by_key(|(_, n)| *n).map(|(l, _)| l),
            health,
            servers,
            moving: map
                .moves()
                .into_iter()
                .map(|(p, m)| MoveView {
                    partition: p.0,
                    from: m.from.0,
                    to: m.to.0,
                })
                .collect(),
            popular,
            errors: self.errors.iter().rev().cloned().collect(),
        }
    }
}

/// The median and 99th percentile (ms) of the answers counted between two histograms of
/// one server, interpolated within a bucket as Prometheus's `histogram_quantile` does;
/// answers slower than every bound count as the last bound. None without answers (or if
/// the server restarted: its counts went down).
fn percentiles_between(
    then: &LatencyHistogram,
    now: &LatencyHistogram,
) -> (Option<f64>, Option<f64>) {
    if then.bounds_us != now.bounds_us || then.counts.len() != now.counts.len() {
        return (None, None);
    }
    let Some(counts) = now
        .counts
        .iter()
        .zip(&then.counts)
        .map(|(n, t)| n.checked_sub(*t))
        .collect::<Option<Vec<u64>>>()
    else {
        return (None, None);
    };
    let q = |q: f64| quantile_ms(&now.bounds_us, &counts, q);
    (q(0.5), q(0.99))
}

fn quantile_ms(bounds_us: &[u64], counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 || bounds_us.is_empty() {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &n) in counts.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let lower = if i == 0 { 0 } else { bounds_us[i - 1] };
            let Some(&upper) = bounds_us.get(i) else {
                return Some(lower as f64 / 1000.0);
            };
            let within = (rank - below as f64) / n as f64;
            return Some((lower as f64 + (upper - lower) as f64 * within) / 1000.0);
        }
        below += n;
    }
    bounds_us.last().map(|&b| b as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(counts: &[u64]) -> LatencyHistogram {
        LatencyHistogram {
            bounds_us: vec![100, 200, 400, 800],
            counts: counts.to_vec(),
        }
    }

    #[test]
    fn percentiles_come_from_the_answers_between_two_rounds() {
        let then = hist(&[10, 0, 0, 0, 0]);
        // Since then: 98 answers within 100 us, 2 between 400 and 800 us.
        let now = hist(&[108, 0, 0, 2, 0]);
        let (p50, p99) = percentiles_between(&then, &now);
        let p50 = p50.unwrap_or_else(|| panic!("no median"));
        let p99 = p99.unwrap_or_else(|| panic!("no p99"));
        assert!((p50 - 0.051).abs() < 1e-3, "{p50}");
        assert!((0.4..=0.8).contains(&p99), "{p99}");
        // Nothing answered since: no figure; a restart (counts went down): none either.
        assert_eq!(percentiles_between(&now, &now), (None, None));
        assert_eq!(percentiles_between(&now, &then), (None, None));
        // Slower than every bound: the last bound.
        let slow = hist(&[108, 0, 0, 2, 100]);
        assert_eq!(percentiles_between(&now, &slow).1, Some(0.8));
    }
}
