//! The HTTP side: an accept loop serving the S3 service over HTTP/1.1 connections, bounded
//! in number and in how long a request's headers may take, until told to stop.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use myriad_client::{Client, FsError};
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::credentials::Credentials;
use crate::gateway::Gateway;
use crate::keys::UPLOADS_DIR;
use crate::metrics::GatewayMetrics;
use crate::multipart::UPLOADS_DIR_MODE;
use crate::precheck::Precheck;

/// Connections served at once; more wait in the kernel's backlog.
const CONNECTIONS_MAX: usize = 1024;

/// Time a client has to send a request's headers (a connection that trickles them is
/// dropped rather than held).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Time requests in flight get to finish once the gateway is told to stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The S3 service and the metrics it keeps.
pub struct GatewayService {
    service: S3Service,
    pub metrics: Arc<GatewayMetrics>,
}

/// The S3 service over `client`, accepting requests signed with `credentials`.
pub fn service(client: Arc<Client>, credentials: Credentials) -> GatewayService {
    let metrics = Arc::new(GatewayMetrics::default());
    let gateway = Gateway::new(client, credentials.clone(), metrics.clone());
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(credentials);
    GatewayService {
        service: builder.build(),
        metrics,
    }
}

/// Makes the directory multipart uploads keep their parts in, if it is missing (by the
/// user running the gateway; uploads need it writable by every key's user).
pub async fn prepare(client: &Client) {
    match client.mkdir(UPLOADS_DIR, UPLOADS_DIR_MODE).await {
        Ok(_) => {
            // The mode asked at mkdir may be narrowed; say it again.
            if let Err(e) = client.chmod(UPLOADS_DIR, UPLOADS_DIR_MODE).await {
                tracing::warn!("cannot open {UPLOADS_DIR} to every user: {e}");
            }
        }
        Err(FsError::AlreadyExists) => {}
        Err(e) => {
            tracing::warn!("cannot make {UPLOADS_DIR} (multipart uploads will try again): {e}")
        }
    }
}

/// Serves `service` on `listener` until `shutdown` completes, then lets requests in flight
/// finish for a while.
pub async fn serve(
    listener: TcpListener,
    service: GatewayService,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let service = Precheck {
        service: service.service,
        metrics: service.metrics,
    };
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
            () = shutdown.as_mut() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: wait rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.as_mut() => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = http.serve_connection(TokioIo::new(stream), service.clone());
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(slot);
        });
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!("requests still in flight after {DRAIN_TIMEOUT:?}: stopping anyway");
        }
    }
    Ok(())
}
