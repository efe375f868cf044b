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

fn publish(latest: &RwLock<Option<String>>, view: &crate::cluster_view::ClusterView) {
    if let (Ok(json), Ok(mut g)) = (serde_json::to_string(view), latest.write()) {
        *g = Some(json);
    }
}

fn respond(path: &str, latest: &RwLock<Option<String>>) -> Reply {
    match path {
        "/" | "/index.html" => Reply::ok("text/html; charset=utf-8", PAGE.into()),
        "/api/status" => match latest.read().ok().and_then(|g| g.clone()) {
            Some(json) => Reply::ok("application/json", json),
            None => Reply::text(503, "no view of the cluster yet"),
        },
        _ => Reply::text(404, "not found"),
    }
}
