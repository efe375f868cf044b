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

/// Binds `addr`, writes the address bound to `metrics.addr` in `data_dir`, and serves.
pub(crate) async fn start(
    addr: SocketAddr,
    host: &Arc<Host>,
    data_dir: &Path,
) -> Result<JoinHandle<()>, ServerError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| ServerError::Config(format!("cannot listen for metrics on {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    std::fs::write(data_dir.join("metrics.addr"), format!("{bound}\n"))?;
    tracing::info!("metrics on http://{bound}/metrics");
    let host = Arc::downgrade(host);
    let route: Route = Arc::new(move |path| match (path, host.upgrade()) {
        ("/metrics", Some(h)) => Reply::ok(OPENMETRICS, h.metrics_text()),
        ("/metrics", None) => Reply::text(503, "the server is stopping"),
        _ => Reply::text(404, "Myriad server metrics: GET /metrics"),
    });
    Ok(tokio::spawn(myriad_net::http::serve(listener, route)))
}
