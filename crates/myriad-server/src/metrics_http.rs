//! The metrics endpoint (`--metrics ADDR`, docs/metrics.md): `GET /metrics` answers the
//! server's metrics as OpenMetrics text (`metrics.rs`), anything else 404; served by
//! `myriad_net::http` on a listener of its own, apart from the cluster protocol, so a
//! scraper never competes with file system traffic for a connection. It holds the server
//! weakly: a stopped server is not kept alive by a scrape.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use myriad_net::http::{Reply, Route};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::ServerError;
use crate::host::Host;

/// The content type Prometheus asks for and this endpoint answers.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Where the address bound last is kept, in the data directory.
const ADDR_FILE: &str = "metrics.addr";

/// A listener for `addr`. With port 0 (any free port), the address this server bound last
/// time (`metrics.addr`) is taken again when it is free, so a restarted server is scraped
/// where it was and Prometheus's configuration never changes; else any free port.
async fn bind(addr: SocketAddr, data_dir: &Path) -> std::io::Result<TcpListener> {
    if addr.port() == 0 {
        let last = std::fs::read_to_string(data_dir.join(ADDR_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<SocketAddr>().ok())
            .filter(|last| last.ip() == addr.ip() && last.port() != 0);
        if let Some(last) = last {
            match TcpListener::bind(last).await {
                Ok(l) => return Ok(l),
                Err(e) => tracing::warn!(
                    "metrics: the address of the last run, {last}, is taken ({e}): serving on another port"
                ),
            }
        }
    }
    TcpListener::bind(addr).await
}

/// Binds `addr`, writes the address bound to `metrics.addr` in `data_dir`, and serves.
pub(crate) async fn start(
    addr: SocketAddr,
    host: &Arc<Host>,
    data_dir: &Path,
) -> Result<JoinHandle<()>, ServerError> {
    let listener = bind(addr, data_dir)
        .await
        .map_err(|e| ServerError::Config(format!("cannot listen for metrics on {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    std::fs::write(data_dir.join(ADDR_FILE), format!("{bound}\n"))?;
    tracing::info!("metrics on http://{bound}/metrics");
    let host = Arc::downgrade(host);
    let route: Route = Arc::new(move |path| match (path, host.upgrade()) {
        ("/metrics", Some(h)) => Reply::ok(OPENMETRICS, h.metrics_text()),
        ("/metrics", None) => Reply::text(503, "the server is stopping"),
        _ => Reply::text(404, "Myriad server metrics: GET /metrics"),
    });
    Ok(tokio::spawn(myriad_net::http::serve(listener, route)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn any_free_port_is_the_last_one_again_when_it_is_free() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
        let first = bind(any, dir.path())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let at = first.local_addr().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join(ADDR_FILE), format!("{at}\n"))
            .unwrap_or_else(|e| panic!("{e}"));
        drop(first);
        let again = bind(any, dir.path())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.local_addr().ok(), Some(at));
        // Taken by someone else: another free port, not a failure.
        let other = bind(any, dir.path())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(other.local_addr().ok(), Some(at));
        // A fixed port is never replaced.
        let fixed: SocketAddr = format!("127.0.0.1:{}", at.port())
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            bind(fixed, dir.path()).await.is_err(),
            "the port is still held by `again`"
        );
    }
}
