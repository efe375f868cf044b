//! The metrics endpoint (`--metrics ADDR`, docs/metrics.md): `GET /metrics` answers the
//! server's metrics as OpenMetrics text (`metrics.rs`), anything else 404. HTTP/1.1 on a
//! listener of its own, apart from the cluster protocol, so a scraper never competes
//! with file system traffic for a connection. It holds the server weakly: a stopped
//! server is not kept alive by a scrape.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::ServerError;
use crate::host::Host;

/// A client that sends no complete request head within this long is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The content type Prometheus asks for and this endpoint answers.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
    Ok(tokio::spawn(serve(listener, Arc::downgrade(host))))
}

async fn serve(listener: TcpListener, host: Weak<Host>) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                tracing::warn!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let host = host.clone();
        tokio::spawn(async move {
            let answer = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let reply = respond(&req, &host);
                async move { Ok::<_, Infallible>(reply) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), answer)
                .await;
        });
    }
}

fn respond<B>(req: &Request<B>, host: &Weak<Host>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, kind: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(kind),
        );
        r
    };
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET\n".into(),
        );
    }
    match (req.uri().path(), host.upgrade()) {
        ("/metrics", Some(h)) => reply(StatusCode::OK, OPENMETRICS, h.metrics_text()),
        ("/metrics", None) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain; charset=utf-8",
            "the server is stopping\n".into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "Myriad server metrics: GET /metrics\n".into(),
        ),
    }
}
