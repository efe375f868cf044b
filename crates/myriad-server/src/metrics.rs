//! A server's metrics in the OpenMetrics text format (what Prometheus scrapes), served on
//! `--metrics ADDR` by `metrics_http.rs`; docs/metrics.md lists every family. Requests are
//! counted and timed as they are served (`RequestMetrics`); everything else is read from
//! the server's state at each scrape (`ServerGauges`), so no number is kept twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use myriad_proto::{CounterSnapshot, LONG_POLL_OPS, LatencyHistogram, Response, StatFs, WireError};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    op: &'static str,
    /// "client" or "server": who sent it.
    from: &'static str,
    /// "ok", or the error's name (`outcome`).
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
    from: &'static str,
}

type LatencyFamily = Family<OpLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 us to 3.3 s: a cached stat on loopback to a request that waited out a failover.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

fn long_poll_histogram() -> Histogram {
    // 1 ms to about 65 s: an answer at once (recalls waiting) to a poll that waited it out.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// A histogram of mutations per group commit (one fsync each), 1 to 2,048.
#[must_use]
pub fn batch_size_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

/// The metrics kept as requests are served.
pub struct RequestMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
    /// Long polls (`LONG_POLL_OPS`), kept out of `latency`.
    long_polls: LatencyFamily,
    /// Clients' requests (long polls apart) by how long they took, every operation in one
    /// histogram: what `ServerRequest::GetLatencies` answers (the status page's p50, p99).
    client_latency: [AtomicU64; CLIENT_LATENCY_BUCKETS + 1],
}

/// Buckets of `RequestMetrics::client_latency`: 100 us doubling to 3.3 s, as
/// `request_duration_seconds`, and one for slower answers.
const CLIENT_LATENCY_BUCKETS: usize = 16;

/// The upper bound of `client_latency`'s bucket `i`, in microseconds.
fn client_latency_bound_us(i: usize) -> u64 {
    100u64 << i
}

impl RequestMetrics {
    /// `batch_sizes` is the commit loop's histogram of mutations per fsync (it observes it;
    /// this registers it).
    pub fn new(batch_sizes: Histogram) -> RequestMetrics {
        let mut registry = Registry::with_prefix("myriad");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests served, by operation, sender kind and outcome",
            requests.clone(),
        );
        let latency = LatencyFamily::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its answer, by operation and sender kind",
            latency.clone(),
        );
        let long_polls = LatencyFamily::new_with_constructor(long_poll_histogram);
        registry.register(
            "long_poll_duration_seconds",
            "Time long polls (lease_poll) waited before their answer; not in request_duration_seconds",
            long_polls.clone(),
        );
        registry.register(
            "fsync_batch_mutations",
            "Mutations made durable by each group commit (one fsync)",
            batch_sizes,
        );
        RequestMetrics {
            registry,
            requests,
            latency,
            long_polls,
            client_latency: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// A request of `op` from a server or a client was answered with `result` after `took`.
    pub fn observe(
        &self,
        op: &'static str,
        from_server: bool,
        result: &Result<Response, WireError>,
        took: Duration,
    ) {
        let from = if from_server { "server" } else { "client" };
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => outcome(e),
        };
        self.requests
            .get_or_create(&RequestLabels { op, from, outcome })
            .inc();
        let long_poll = LONG_POLL_OPS.contains(&op);
        let timed = if long_poll {
            &self.long_polls
        } else {
            &self.latency
        };
        if !from_server && !long_poll {
            let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            let bucket = (0..CLIENT_LATENCY_BUCKETS)
                .find(|&i| us <= client_latency_bound_us(i))
                .unwrap_or(CLIENT_LATENCY_BUCKETS);
            self.client_latency[bucket].fetch_add(1, Ordering::Relaxed);
        }
        timed
            .get_or_create(&OpLabels { op, from })
            .observe(took.as_secs_f64());
    }

    /// Clients' requests by how long they took, since the server started.
    #[must_use]
    pub fn client_latencies(&self) -> LatencyHistogram {
        LatencyHistogram {
            bounds_us: (0..CLIENT_LATENCY_BUCKETS)
                .map(client_latency_bound_us)
                .collect(),
            counts: self
                .client_latency
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// Appends these families (no end marker) to `out`.
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::text::encode_registry(out, &self.registry)
    }
}

/// The short name of an error, for the `outcome` label.
#[must_use]
pub fn outcome(e: &WireError) -> &'static str {
    match e {
        WireError::NotFound => "not_found",
        WireError::AlreadyExists => "already_exists",
        WireError::NotADirectory => "not_a_directory",
        WireError::IsADirectory => "is_a_directory",
        WireError::NotEmpty => "not_empty",
        WireError::InvalidArgument(_) => "invalid_argument",
        WireError::NameTooLong => "name_too_long",
        WireError::PermissionDenied => "permission_denied",
        WireError::NotPermitted => "not_permitted",
        WireError::Stale => "stale",
        WireError::Busy
        | WireError::AutoIndexed { .. }
        | WireError::QuotaShort { .. }
        | WireError::DirUndecided { .. } => "busy",
        WireError::AskPrimary
        | WireError::Redirect(_)
        | WireError::MapTooOld(_)
        | WireError::WrongShard { .. } => "redirected",
        WireError::NoSpace => "no_space",
        WireError::TooLarge => "too_large",
        WireError::TimedOut(_) => "timed_out",
        WireError::NotSupported(_) => "not_supported",
        WireError::NoData => "no_data",
        WireError::NoSuchOffset => "no_such_offset",
        WireError::ReadOnly => "read_only",
        WireError::TooManyLinks => "too_many_links",
        WireError::Unavailable(_) => "unavailable",
        WireError::Corrupt { .. } => "corrupt",
        WireError::Io(_) => "io_error",
        WireError::Protocol(_) => "protocol_error",
        // (WireError is non-exhaustive: a variant added later is counted, not lost.)
        _ => "other",
    }
}

/// How far a partition's copies are behind it, summed over its copies: batches shipped and
/// not acknowledged (a copy being made whole counts every batch until its first ack),
/// the bytes of those still in the log, and copies too far behind for the log, which are
/// made whole instead (`Replicator::copy_lag`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyLag {
    pub batches: u64,
    pub bytes: u64,
    pub whole: u64,
}

impl std::iter::Sum for CopyLag {
    fn sum<I: Iterator<Item = CopyLag>>(lags: I) -> CopyLag {
        lags.fold(CopyLag::default(), |a, l| CopyLag {
            batches: a.batches + l.batches,
            bytes: a.bytes + l.bytes,
            whole: a.whole + l.whole,
        })
    }
}

/// One directory quota as a server's scrape shows it (docs/quotas.md "What clients see").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaPart {
    /// The quota's root.
    pub path: String,
    /// The names and bytes of its tree held by the partitions led here: summed by path
    /// over the servers, the quota's usage.
    pub files: u64,
    pub bytes: u64,
    /// Its limits (max files, max bytes; 0: none), shown by the server leading the
    /// quota's home partition only, so that a sum over servers counts each once.
    pub limits: Option<(u64, u64)>,
}

/// What a scrape reads from the server's state besides its counter snapshot and disk.
#[derive(Clone, Debug, Default)]
pub struct StateExtras {
    /// Partitions led here with a copy still catching up (not yet a member).
    pub partitions_with_copies_behind: u64,
    /// Directory shards split off by this server since it started.
    pub splits: u64,
    /// Partitions led here with fewer copies up than `--min-copies`: refusing changes.
    pub partitions_refusing_changes: u64,
    /// Servers this server marked down while it led the cluster-map group.
    pub servers_marked_down: u64,
    /// Replication health from the map (`health.rs`).
    pub health: crate::health::Health,
    /// How far copies of partitions led here are behind them, summed over partitions.
    pub copy_lag: CopyLag,
    /// Directory-lease recalls queued for a polling holder, and those waited out.
    pub recalls: (u64, u64),
    /// The free space below which writes are refused (`--reserve`).
    pub reserve_bytes: u64,
    /// The map's quotas, each with the part of its usage held here.
    pub quotas: Vec<QuotaPart>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabel {
    path: String,
}

/// The quota families: usage held here, and limits where the quota's home is led.
fn encode_quotas(r: &mut Registry, quotas: &[QuotaPart]) {
    let held = |what: fn(&QuotaPart) -> Option<u64>| {
        let family = Family::<PathLabel, Gauge>::default();
        for q in quotas {
            if let Some(v) = what(q) {
                let label = PathLabel {
                    path: q.path.clone(),
                };
                family
                    .get_or_create(&label)
                    .set(i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
        family
    };
    r.register(
        "quota_files",
        "Names under each directory quota held by the partitions led here (sum by path: the usage)",
        held(|q| Some(q.files)),
    );
    r.register(
        "quota_bytes",
        "Bytes of files under each directory quota held by the partitions led here (sum by path: the usage)",
        held(|q| Some(q.bytes)),
    );
    r.register(
        "quota_limit_files",
        "Each directory quota's limit of names (0: none), from the server leading its home",
        held(|q| q.limits.map(|l| l.0)),
    );
    r.register(
        "quota_limit_bytes",
        "Each directory quota's limit of bytes (0: none), from the server leading its home",
        held(|q| q.limits.map(|l| l.1)),
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabel {
    delivery: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhereLabel {
    r#where: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneKindLabels {
    /// The zone of the peer that sent the requests.
    zone: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneBytesLabels {
    zone: String,
    kind: &'static str,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabels {
    tier: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    node: String,
    zone: String,
}

fn gauge(registry: &mut Registry, name: &str, help: &str, v: u64) {
    let g = Gauge::<i64>::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    registry.register(name, help, g);
}

fn counter(registry: &mut Registry, name: &str, help: &str, v: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(v);
    registry.register(name, help, c);
}

/// Appends the families read from the server's state (no end marker) to `out`.
pub fn encode_state(
    out: &mut String,
    snap: &CounterSnapshot,
    disk: &StatFs,
    extras: StateExtras,
) -> std::fmt::Result {
    let mut r = Registry::with_prefix("myriad");
    let info = Family::<InfoLabels, Gauge>::default();
    info.get_or_create(&InfoLabels {
        node: snap.node_id.0.to_string(),
        zone: snap.zone.clone(),
    })
    .set(1);
    r.register("server_info", "This server's id and zone (always 1)", info);
    gauge(
        &mut r,
        "map_epoch",
        "The cluster map epoch this server follows",
        snap.epoch,
    );
    gauge(
        &mut r,
        "raft_leader",
        "The cluster-map Raft leader as this server knows it (0: none)",
        u64::from(snap.raft_leader.0),
    );
    gauge(
        &mut r,
        "serving",
        "1 while the server holds its lease from the Raft leader (it serves only then)",
        u64::from(snap.serving),
    );
    let parts = Family::<RoleLabel, Gauge>::default();
    parts
        .get_or_create(&RoleLabel { role: "primary" })
        .set(i64::try_from(snap.primaries).unwrap_or(i64::MAX));
    parts
        .get_or_create(&RoleLabel { role: "copy" })
        .set(i64::try_from(snap.backups).unwrap_or(i64::MAX));
    r.register("partitions", "Partitions held here, by role", parts);
    encode_health(&mut r, &extras);
    counter(
        &mut r,
        "servers_marked_down",
        "Servers this server marked down (each a failover of the partitions they led) while it led the cluster-map group",
        extras.servers_marked_down,
    );
    counter(
        &mut r,
        "directory_splits",
        "Directory shards split off here",
        extras.splits,
    );
    counter(
        &mut r,
        "fsyncs",
        "Group commits (one fsync each)",
        snap.syncs,
    );
    counter(
        &mut r,
        "synced_mutations",
        "Mutations made durable by group commits",
        snap.synced_mutations,
    );
    counter(
        &mut r,
        "replicated_batches_received",
        "Replicated batches this server's copies received",
        snap.batches_received,
    );
    counter(
        &mut r,
        "server_requests_sent",
        "Requests this server sent to other servers",
        snap.server_requests_sent,
    );
    gauge(
        &mut r,
        "popularity_replicas",
        "Replicas of popular directories' permissions held here (TyrFS)",
        snap.replicas_held,
    );
    gauge(
        &mut r,
        "popularity_subscribers",
        "Subscriptions to this server's directories that it pushes changes to",
        snap.subscriptions_served,
    );
    let checks = Family::<WhereLabel, Counter>::default();
    checks
        .get_or_create(&WhereLabel { r#where: "local" })
        .inc_by(snap.ancestor_checks_local);
    checks
        .get_or_create(&WhereLabel { r#where: "remote" })
        .inc_by(snap.ancestor_checks_remote);
    r.register(
        "ancestor_checks",
        "Ancestor permission checks, answered here or by a remote server",
        checks,
    );
    encode_traffic(&mut r, snap);
    encode_disk(&mut r, disk);
    encode_quotas(&mut r, &extras.quotas);
    prometheus_client::encoding::text::encode_registry(out, &r)
}

/// Replication health, copies catching up, lease recalls and the disk reserve.
fn encode_health(r: &mut Registry, extras: &StateExtras) {
    gauge(
        r,
        "partitions_with_copies_behind",
        "Partitions led here with a copy still catching up",
        extras.partitions_with_copies_behind,
    );
    gauge(
        r,
        "partitions_refusing_changes",
        "Partitions led here with fewer copies up than --min-copies: changes to them are refused until a copy returns",
        extras.partitions_refusing_changes,
    );
    gauge(
        r,
        "partitions_under_replicated",
        "Partitions led here with fewer copies in sync on up servers than they should have",
        extras.health.under_replicated,
    );
    gauge(
        r,
        "copies_catching_up",
        "Copies of partitions led here that may lack writes (back from down, or being made)",
        extras.health.copies_catching_up,
    );
    gauge(
        r,
        "copy_batches_behind",
        "Batches partitions led here shipped that their copies have not acknowledged yet (a copy being made counts every batch until its first)",
        extras.copy_lag.batches,
    );
    gauge(
        r,
        "copy_bytes_behind",
        "Bytes of the batches copies of partitions led here still lack, of those still in the primaries' logs",
        extras.copy_lag.bytes,
    );
    gauge(
        r,
        "copies_being_made_whole",
        "Copies of partitions led here too far behind for the log: they are copied whole",
        extras.copy_lag.whole,
    );
    let recalls = Family::<DeliveryLabel, Counter>::default();
    recalls
        .get_or_create(&DeliveryLabel { delivery: "queued" })
        .inc_by(extras.recalls.0);
    recalls
        .get_or_create(&DeliveryLabel {
            delivery: "waited_out",
        })
        .inc_by(extras.recalls.1);
    r.register(
        "lease_recalls",
        "Directory-lease recalls: queued for the holder's poll, or waited out (no poller: the change waits until the lease ends)",
        recalls,
    );
    gauge(
        r,
        "disk_reserve_bytes",
        "Free space below which client requests that may grow the store are refused (NoSpace)",
        extras.reserve_bytes,
    );
    if let Some(c) = extras.health.cluster {
        // Only the cluster-map group's leader gives these, so a sum over servers is right.
        gauge(
            r,
            "cluster_servers_down",
            "Servers the map marks down (given by the cluster-map group's leader only)",
            c.servers_down,
        );
        gauge(
            r,
            "cluster_partitions_unavailable",
            "Partitions no up server serves (given by the cluster-map group's leader only)",
            c.partitions_unavailable,
        );
        gauge(
            r,
            "cluster_partitions_under_replicated",
            "Partitions with fewer copies in sync on up servers than they should have (given by the cluster-map group's leader only)",
            c.partitions_under_replicated,
        );
    }
}

/// Requests and bytes served by the sender's zone; bytes from other zones also summed.
fn encode_traffic(r: &mut Registry, snap: &CounterSnapshot) {
    let requests = Family::<ZoneKindLabels, Counter>::default();
    let bytes = Family::<ZoneBytesLabels, Counter>::default();
    let mut cross_zone = 0u64;
    for t in &snap.zone_traffic {
        let kind = t.kind.name();
        requests
            .get_or_create(&ZoneKindLabels {
                zone: t.zone.clone(),
                kind,
            })
            .inc_by(t.requests);
        for (direction, n) in [("in", t.bytes_in), ("out", t.bytes_out)] {
            bytes
                .get_or_create(&ZoneBytesLabels {
                    zone: t.zone.clone(),
                    kind,
                    direction,
                })
                .inc_by(n);
        }
        if t.zone != snap.zone {
            cross_zone += t.bytes_in + t.bytes_out;
        }
    }
    r.register(
        "zone_requests",
        "Requests served, by the zone of their sender and their kind",
        requests,
    );
    r.register(
        "zone_bytes",
        "Bytes of requests served (in) and their answers (out), by sender zone and kind",
        bytes,
    );
    counter(
        r,
        "cross_zone_bytes",
        "Bytes exchanged with peers of other zones than this server's",
        cross_zone,
    );
}

/// Disk use: the whole store, and each tier when the server has a fast tier.
fn encode_disk(r: &mut Registry, disk: &StatFs) {
    let family = Family::<TierLabels, Gauge>::default();
    let put = |tier: &str, state: &'static str, v: u64| {
        family
            .get_or_create(&TierLabels {
                tier: tier.to_string(),
                state,
            })
            .set(i64::try_from(v).unwrap_or(i64::MAX));
    };
    put("all", "used", disk.used_bytes);
    put("all", "free", disk.free_bytes);
    put("all", "total", disk.total_bytes);
    for t in &disk.tiers {
        put(&t.name, "used", t.used_bytes);
        put(&t.name, "free", t.free_bytes);
        put(&t.name, "total", t.total_bytes);
    }
    r.register(
        "disk_bytes",
        "Bytes of the store (used) and of the disks holding it (free, total), by tier",
        family,
    );
}

/// A whole scrape: request families, then state families, then the end marker.
pub fn render(
    requests: &RequestMetrics,
    snap: &CounterSnapshot,
    disk: &StatFs,
    extras: StateExtras,
) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = requests.encode(&mut out);
    let _ = encode_state(&mut out, snap, disk, extras);
    let _ = prometheus_client::encoding::text::encode_eof(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_has_every_family_once_and_ends_with_eof() {
        let m = RequestMetrics::new(batch_size_histogram());
        m.observe(
            "fetch",
            false,
            &Ok(Response::Unit),
            Duration::from_micros(300),
        );
        m.observe(
            "fetch",
            false,
            &Err(WireError::NotFound),
            Duration::from_micros(90),
        );
        let snap = CounterSnapshot {
            zone: "a".into(),
            zone_traffic: vec![
                myriad_proto::ZoneTraffic {
                    zone: "a".into(),
                    kind: myriad_proto::TrafficKind::File,
                    requests: 3,
                    bytes_in: 10,
                    bytes_out: 20,
                },
                myriad_proto::ZoneTraffic {
                    zone: "b".into(),
                    kind: myriad_proto::TrafficKind::File,
                    requests: 1,
                    bytes_in: 5,
                    bytes_out: 7,
                },
            ],
            ..CounterSnapshot::default()
        };
        let extras = StateExtras {
            copy_lag: CopyLag {
                batches: 17,
                bytes: 4096,
                whole: 1,
            },
            recalls: (5, 2),
            reserve_bytes: 1 << 30,
            quotas: vec![
                QuotaPart {
                    path: "/lab".into(),
                    files: 12,
                    bytes: 4096,
                    limits: Some((100, 0)),
                },
                QuotaPart {
                    path: "/home/ann".into(),
                    files: 3,
                    bytes: 9,
                    limits: None,
                },
            ],
            ..StateExtras::default()
        };
        let text = render(&m, &snap, &StatFs::default(), extras);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
        for family in [
            "myriad_requests",
            "myriad_request_duration_seconds",
            "myriad_fsync_batch_mutations",
            "myriad_partitions",
            "myriad_disk_bytes",
            "myriad_zone_bytes",
            "myriad_cross_zone_bytes",
            "myriad_quota_files",
            "myriad_quota_limit_bytes",
        ] {
            assert_eq!(
                text.matches(&format!("# TYPE {family} ")).count(),
                1,
                "{family} in\n{text}"
            );
        }
        assert!(
            text.contains(
                r#"myriad_requests_total{op="fetch",from="client",outcome="not_found"} 1"#
            )
        );
        assert!(text.contains(r#"myriad_requests_total{op="fetch",from="client",outcome="ok"} 1"#));
        // Only zone b's bytes crossed zones.
        assert!(text.contains("myriad_cross_zone_bytes_total 12"), "{text}");
        for line in [
            "myriad_copy_batches_behind 17",
            "myriad_copy_bytes_behind 4096",
            "myriad_copies_being_made_whole 1",
            r#"myriad_lease_recalls_total{delivery="queued"} 5"#,
            r#"myriad_lease_recalls_total{delivery="waited_out"} 2"#,
            "myriad_disk_reserve_bytes 1073741824",
            r#"myriad_quota_files{path="/lab"} 12"#,
            r#"myriad_quota_bytes{path="/home/ann"} 9"#,
            r#"myriad_quota_limit_files{path="/lab"} 100"#,
            r#"myriad_quota_limit_bytes{path="/lab"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // A quota's limits come from its home's server only.
        assert!(
            !text.contains(r#"myriad_quota_limit_files{path="/home/ann"}"#),
            "{text}"
        );
    }

    #[test]
    fn clients_answers_are_bucketed_by_time_and_servers_and_long_polls_are_not() {
        let m = RequestMetrics::new(batch_size_histogram());
        let ok = Ok(Response::Unit);
        for (op, from_server, us) in [
            ("fetch", false, 50),
            ("fetch", false, 100),
            ("create", false, 150),
            ("create", false, 5_000_000),
            ("fetch", true, 150),
            ("lease_poll", false, 150),
        ] {
            m.observe(op, from_server, &ok, Duration::from_micros(us));
        }
        let h = m.client_latencies();
        assert_eq!(h.bounds_us.len() + 1, h.counts.len());
        assert_eq!(h.bounds_us[..3], [100, 200, 400]);
        // 50 and 100 us within the first bound, 150 us in the second, 5 s past the last.
        assert_eq!(h.counts[0], 2);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts.last().copied(), Some(1));
        assert_eq!(h.counts.iter().sum::<u64>(), 4);
    }

    #[test]
    fn long_polls_are_timed_apart_from_requests() {
        let m = RequestMetrics::new(batch_size_histogram());
        m.observe(
            "fetch",
            false,
            &Ok(Response::Unit),
            Duration::from_micros(300),
        );
        m.observe(
            "lease_poll",
            false,
            &Ok(Response::Unit),
            Duration::from_secs(20),
        );
        let text = render(
            &m,
            &CounterSnapshot::default(),
            &StatFs::default(),
            StateExtras::default(),
        );
        assert!(
            text.contains(
                r#"myriad_long_poll_duration_seconds_count{op="lease_poll",from="client"} 1"#
            ),
            "{text}"
        );
        assert!(
            !text.contains(r#"myriad_request_duration_seconds_count{op="lease_poll""#),
            "{text}"
        );
        assert!(
            text.contains(r#"myriad_request_duration_seconds_count{op="fetch",from="client"} 1"#)
        );
        // Still counted as a request.
        assert!(
            text.contains(r#"myriad_requests_total{op="lease_poll",from="client",outcome="ok"} 1"#)
        );
    }
}
