//! `myriad dashboard`: the status page (`dashboard/page.html`) and the JSON it polls
//! (`GET api/status`, a `cluster_view::ClusterView`), over HTTP/1.1. One task refreshes
//! the view every `REFRESH`; every browser tab reads that same view, so ten open tabs
//! cost the cluster no more than one.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use myriad_client::Client;
use myriad_net::http::{Reply, Route};

use crate::cluster_view::Watcher;

const PAGE: &str = include_str!("dashboard/page.html");
const REFRESH: Duration = Duration::from_secs(2);

#[derive(clap::Args)]
pub struct DashboardArgs {
    /// Address to serve the page on (port 0: any free port). The URL is printed once it
    /// listens. The page shows whoever can reach this address the cluster's servers,
    /// addresses and load: keep it on loopback or a trusted network.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn run(args: DashboardArgs, client: Client, cluster: String) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let latest: Arc<Latest> = Arc::default();
    let mut watcher = Watcher::new(client, cluster);
    // The first view before the first visitor, so the page never starts empty.
    refresh(&latest, &mut watcher).await;
    let refresher = {
        let latest = latest.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                refresh(&latest, &mut watcher).await;
            }
        })
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "dashboard: http://{}/", listener.local_addr()?)?;
        out.flush()?;
    }
    let route: Route = {
        let latest = latest.clone();
        Arc::new(move |path| respond(path, &latest))
    };
    let server = tokio::spawn(myriad_net::http::serve(listener, route));
    crate::signals::shutdown_signal().await;
    server.abort();
    refresher.abort();
    Ok(())
}

/// The view the page polls, and what the dashboard's own `/metrics` tells of itself.
#[derive(Default)]
struct Latest {
    json: RwLock<Option<String>>,
    stats: RwLock<Stats>,
}

#[derive(Clone, Default)]
struct Stats {
    refreshes: u64,
    refresh_seconds: f64,
    servers: u64,
    unreachable: u64,
    health: &'static str,
    under_replicated: u64,
    unavailable: u64,
    /// Requests answered, by path kind: page, api, metrics, other.
    served: [u64; 4],
}

async fn refresh(latest: &Latest, watcher: &mut Watcher) {
    let began = std::time::Instant::now();
    let view = watcher.refresh().await;
    // The metrics first: whoever saw the page change finds them changed too.
    if let Ok(mut s) = latest.stats.write() {
        s.refreshes += 1;
        s.refresh_seconds = began.elapsed().as_secs_f64();
        s.servers = view.servers.len() as u64;
        s.unreachable = view.servers.iter().filter(|v| !v.reachable).count() as u64;
        s.health = view.health.state;
        s.under_replicated = view.health.under_replicated.len() as u64;
        s.unavailable = view.health.unavailable.len() as u64;
    }
    if let (Ok(json), Ok(mut g)) = (serde_json::to_string(&view), latest.json.write()) {
        *g = Some(json);
    }
}

fn respond(path: &str, latest: &Latest) -> Reply {
    let kind = match path {
        "/" | "/index.html" => 0,
        "/api/status" => 1,
        "/metrics" => 2,
        _ => 3,
    };
    if let Ok(mut s) = latest.stats.write() {
        s.served[kind] += 1;
    }
    match kind {
        0 => Reply::ok("text/html; charset=utf-8", PAGE.into()),
        1 => match latest.json.read().ok().and_then(|g| g.clone()) {
            Some(json) => Reply::ok("application/json", json),
            None => Reply::text(503, "no view of the cluster yet"),
        },
        2 => {
            let stats = latest.stats.read().map(|g| g.clone()).unwrap_or_default();
            Reply::ok(
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                metrics_text(&stats),
            )
        }
        _ => Reply::text(404, "not found"),
    }
}

/// The dashboard's own metrics, OpenMetrics text: its rounds of asking the servers, and
/// the cluster as its last round saw it (one scrape target for the cluster's health).
fn metrics_text(s: &Stats) -> String {
    use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
    let mut r = prometheus_client::registry::Registry::with_prefix("myriad_dashboard");
    let gauge = |r: &mut prometheus_client::registry::Registry, name: &str, help: &str, v: u64| {
        let g = Gauge::<i64>::default();
        g.set(i64::try_from(v).unwrap_or(i64::MAX));
        r.register(name, help, g);
    };
    let refreshes = Counter::<u64>::default();
    refreshes.inc_by(s.refreshes);
    r.register(
        "refreshes",
        "Rounds in which the dashboard asked every server for its counters",
        refreshes,
    );
    let took = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    took.set(s.refresh_seconds);
    r.register(
        "refresh_duration_seconds",
        "How long the last round took (each server has 3 s to answer)",
        took,
    );
    gauge(
        &mut r,
        "servers",
        "Servers in the map, as the last round saw them",
        s.servers,
    );
    gauge(
        &mut r,
        "servers_unreachable",
        "Servers that did not answer the last round",
        s.unreachable,
    );
    let health = Family::<StateLabel, Gauge>::default();
    for state in ["healthy", "degraded", "unavailable"] {
        health
            .get_or_create(&StateLabel { state })
            .set(i64::from(s.health == state));
    }
    r.register(
        "cluster_health",
        "1 for the cluster's health as the map says in the last round (healthy, degraded, unavailable)",
        health,
    );
    gauge(
        &mut r,
        "partitions_under_replicated",
        "Partitions with copies down or behind, in the last round's map",
        s.under_replicated,
    );
    gauge(
        &mut r,
        "partitions_unavailable",
        "Partitions no up server serves, in the last round's map",
        s.unavailable,
    );
    let served = Family::<PathLabel, Counter>::default();
    for (path, n) in ["page", "api", "metrics", "other"]
        .into_iter()
        .zip(s.served)
    {
        served.get_or_create(&PathLabel { path }).inc_by(n);
    }
    r.register(
        "http_requests",
        "Requests the dashboard answered, by what they asked for",
        served,
    );
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &r);
    out
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct PathLabel {
    path: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dashboards_metrics_are_openmetrics_with_the_health_of_its_last_round() {
        let s = Stats {
            refreshes: 3,
            servers: 4,
            unreachable: 1,
            health: "degraded",
            under_replicated: 6,
            served: [2, 5, 1, 0],
            ..Stats::default()
        };
        let text = metrics_text(&s);
        assert!(text.ends_with("# EOF\n"), "{text}");
        for line in [
            "myriad_dashboard_refreshes_total 3",
            "myriad_dashboard_servers_unreachable 1",
            r#"myriad_dashboard_cluster_health{state="degraded"} 1"#,
            r#"myriad_dashboard_cluster_health{state="healthy"} 0"#,
            "myriad_dashboard_partitions_under_replicated 6",
            r#"myriad_dashboard_http_requests_total{path="api"} 5"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE ").count(), 8, "{text}");
    }
}
