//! `myriad s3`: the S3 gateway (crates/myriad-s3, docs/s3.md). Binds, prints
//! `s3: http://HOST:PORT` once listening, serves until SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use myriad_client::Client;
use myriad_client::setup::current_caller;
use myriad_s3::Credentials;

#[derive(clap::Args)]
#[command(after_help = "\
Buckets are the cluster's top-level directories (names starting with '.' are not buckets);
objects are regular files; a key with slashes is a path below its bucket, its directories
made by PUT and removed by DELETE once empty. Keys that cannot be paths (empty parts, '.',
'..', NUL, a part over 255 bytes) are refused. ETags are the MD5s of objects as the gateway
wrote them; headers and x-amz-meta-* are kept with each file. A bucket belongs to the key
that made it and is private unless a canned ACL says otherwise. See docs/s3.md.")]
pub struct S3Args {
    /// Address to serve S3 on, plain HTTP (port 0: any free port; the address is printed
    /// as `s3: http://HOST:PORT`). Put TLS in front of it beyond a trusted network.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// SigV4 keys: one `ACCESS_KEY SECRET_KEY [UID:GID]` a line, `#` comments; the file
    /// must not be readable by group or others (0600). Requests signed with a key act on
    /// the cluster as its UID:GID, by default as the user running the gateway.
    #[arg(long)]
    pub credentials: PathBuf,
    /// Serve the gateway's metrics over HTTP at this address (`GET /metrics`, OpenMetrics:
    /// requests by operation and outcome, latency, body bytes; docs/metrics.md). Default:
    /// none.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
}

pub async fn run(args: S3Args, client: Client) -> anyhow::Result<()> {
    let credentials = Credentials::load(&args.credentials, &current_caller())?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let client = Arc::new(client);
    myriad_s3::prepare(&client).await;
    let service = myriad_s3::service(client, credentials);
    if let Some(at) = args.metrics {
        let listener = tokio::net::TcpListener::bind(at)
            .await
            .with_context(|| format!("cannot listen for metrics on {at}"))?;
        let metrics = service.metrics.clone();
        let route: myriad_net::http::Route = Arc::new(move |path| match path {
            "/metrics" => myriad_net::http::Reply::ok(
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                metrics.render(),
            ),
            _ => myriad_net::http::Reply::text(404, "Myriad S3 gateway metrics: GET /metrics"),
        });
        tokio::spawn(myriad_net::http::serve(listener, route));
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "s3: http://{addr}")?;
        out.flush()?;
    }
    myriad_s3::serve(listener, service, crate::signals::shutdown_signal()).await?;
    Ok(())
}
