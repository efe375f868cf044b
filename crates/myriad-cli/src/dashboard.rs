//! `myriad dashboard`: the status page (`dashboard/page.html`) and the JSON it polls
//! (`GET api/status`, a `cluster_view::ClusterView`), over HTTP/1.1. One task refreshes
//! the view every `REFRESH`; every browser tab reads that same view, so ten open tabs
//! cost the cluster no more than one.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use myriad_client::Client;

use crate::cluster_view::Watcher;

const PAGE: &str = include_str!("dashboard/page.html");
const REFRESH: Duration = Duration::from_secs(2);
/// A browser that sends no complete request head within this long is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

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
    let latest: Arc<RwLock<Option<String>>> = Arc::default();
    let mut watcher = Watcher::new(client, cluster);
    // The first view before the first visitor, so the page never starts empty.
    publish(&latest, &watcher.refresh().await);
    let refresher = {
        let latest = latest.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                publish(&latest, &watcher.refresh().await);
            }
        })
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "dashboard: http://{}/", listener.local_addr()?)?;
        out.flush()?;
    }
    let accept = async {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("dashboard: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let latest = latest.clone();
            tokio::spawn(async move {
                let answer = hyper::service::service_fn(move |req: Request<_>| {
                    let reply = respond(&req, &latest);
                    async move { Ok::<_, Infallible>(reply) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), answer)
                    .await;
            });
        }
    };
    tokio::select! {
        () = accept => {}
        () = crate::signals::shutdown_signal() => {}
    }
    refresher.abort();
    Ok(())
}

fn publish(latest: &RwLock<Option<String>>, view: &crate::cluster_view::ClusterView) {
    if let (Ok(json), Ok(mut g)) = (serde_json::to_string(view), latest.write()) {
        *g = Some(json);
    }
}

fn respond<B>(req: &Request<B>, latest: &RwLock<Option<String>>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, kind: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        let h = r.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(kind),
        );
        h.insert(
            hyper::header::CACHE_CONTROL,
            hyper::header::HeaderValue::from_static("no-store"),
        );
        r
    };
    if req.method() != hyper::Method::GET {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET\n".into(),
        );
    }
    match req.uri().path() {
        "/" | "/index.html" => reply(StatusCode::OK, "text/html; charset=utf-8", PAGE.into()),
        "/api/status" => match latest.read().ok().and_then(|g| g.clone()) {
            Some(json) => reply(StatusCode::OK, "application/json", json),
            None => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "no view of the cluster yet\n".into(),
            ),
        },
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n".into(),
        ),
    }
}
