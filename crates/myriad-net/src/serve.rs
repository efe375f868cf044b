//! Server side of connections: accept (connections per address counted), authenticated
//! handshake, then read frames, run each request as its own task, and write replies through
//! one writer task that batches flushes.
//!
//! A malformed, oversized or badly tagged frame, a bad hello, a failed proof, a slow or
//! idle peer, or one that stops reading closes this connection only, with a logged reason.
//! Nothing a peer sends can panic the server.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use myriad_proto::auth::{Credential, Keyring};
use myriad_proto::codec::decode;
use myriad_proto::versioned::scope;
use myriad_proto::{Caller, ClientFrame, RequestFrame, ResponseFrame, TrafficKind, WireError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::frame::frame_codec;
pub use crate::handshake::Peer;
use crate::limits::ServeLimits;

/// uid and gid that `root_squash` maps root to (as NFS's default anonuid, "nobody").
pub const SQUASHED_ID: u32 = 65534;
/// After a failed accept (out of file descriptors, say): a pause before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);
/// The finest granularity of a connection's slow-loris and idle checks.
const CHECK_TICK_MIN: Duration = Duration::from_millis(50);

/// How a server accepts peers.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Keys peers may prove (a server holds the cluster secret).
    pub keys: Arc<Keyring>,
    /// Requests of uid 0 from client-key connections run as nobody (65534:65534).
    pub root_squash: bool,
    pub limits: ServeLimits,
}

pub trait Handler: Send + Sync + 'static {
    /// Identity for the hello reply: (node id, map epoch).
    fn identity(&self) -> (myriad_proto::NodeId, u64);
    /// The cluster's protocol floor (`MapExt::protocol_floor`): a server that speaks
    /// nothing as new is refused at its hello.
    fn protocol_floor(&self) -> u16 {
        0
    }
    fn handle(
        self: Arc<Self>,
        peer: Peer,
        frame: RequestFrame,
    ) -> BoxFuture<'static, ResponseFrame>;
    /// A request of `kind` from `peer` was served: `bytes_in` on the wire, `bytes_out` in
    /// its reply (frame bodies, without the length prefix and seal).
    fn traffic(&self, _peer: &Peer, _kind: TrafficKind, _bytes_in: usize, _bytes_out: usize) {}
}

/// Accepts connections forever, each served by `serve_connection` in its own task.
pub async fn accept_loop<H: Handler>(listener: TcpListener, handler: Arc<H>, config: ServeConfig) {
    let config = Arc::new(config);
    let counts = Arc::new(Mutex::new(HashMap::<IpAddr, usize>::new()));
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                let ip = addr.ip();
                let n = counts
                    .lock()
                    .map(|mut c| {
                        let n = c.entry(ip).or_insert(0);
                        *n += 1;
                        *n
                    })
                    .unwrap_or(0);
                let busy = (n > config.limits.conns_per_addr).then(|| {
                    format!(
                        "too many connections from {ip} (limit {}: --max-conns-per-addr)",
                        config.limits.conns_per_addr
                    )
                });
                let (handler, config, counts) = (handler.clone(), config.clone(), counts.clone());
                tokio::spawn(async move {
                    serve_connection(stream, handler, &config, busy).await;
                    if let Ok(mut c) = counts.lock()
                        && let Some(n) = c.get_mut(&ip)
                    {
                        *n -= 1;
                        if *n == 0 {
                            c.remove(&ip);
                        }
                    }
                });
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Serves one connection until it closes. `busy` refuses it (with that reason) after the
/// hello.
pub async fn serve_connection<H: Handler>(
    stream: TcpStream,
    handler: Arc<H>,
    config: &ServeConfig,
    busy: Option<String>,
) {
    let peer_addr = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let mut reader = FramedRead::new(rd, frame_codec());
    let mut writer = FramedWrite::new(wr, frame_codec());
    writer.set_backpressure_boundary(crate::frame::WRITE_BATCH_BYTES);
    let limits = &config.limits;

    let peer = match crate::handshake::server(
        &mut reader,
        &mut writer,
        &config.keys,
        handler.identity(),
        (busy, handler.protocol_floor()),
        limits.handshake_timeout,
    )
    .await
    {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!(peer = %peer_addr, "refused connection: {why}");
            return;
        }
    };
    let squash = config.root_squash && peer.credential == Credential::Client;

    let (tx, rx) = mpsc::channel::<Bytes>(limits.in_flight_per_conn);
    let (writer_task, mut stalled) = spawn_writer(writer, rx, limits.write_stall_timeout);

    let permits = Arc::new(Semaphore::new(limits.in_flight_per_conn));
    // Slow-loris and idle checks look at the connection every `tick`.
    let tick = (limits.frame_timeout / 4)
        .min(limits.idle_timeout / 4)
        .max(CHECK_TICK_MIN);
    let mut last_frame = Instant::now();
    let mut partial_since: Option<Instant> = None;
    let why: String = loop {
        let next = tokio::select! {
            why = &mut stalled => break why.unwrap_or_else(|_| "writer ended".into()),
            next = tokio::time::timeout(tick, reader.next()) => next,
        };
        let frame = match next {
            Ok(Some(Ok(f))) => f,
            Ok(Some(Err(e))) => break e.to_string(),
            Ok(None) => break String::new(),
            Err(_) => {
                let now = Instant::now();
                if reader.read_buffer().is_empty() {
                    partial_since = None;
                    let in_flight = permits.available_permits() < limits.in_flight_per_conn;
                    if !in_flight && now - last_frame >= limits.idle_timeout {
                        tracing::info!(peer = %peer_addr, "closing idle connection");
                        break String::new();
                    }
                } else if let Some(since) = partial_since {
                    if now - since >= limits.frame_timeout {
                        break format!(
                            "slow peer: a frame still incomplete after {:?}",
                            limits.frame_timeout
                        );
                    }
                } else {
                    partial_since = Some(now);
                }
                continue;
            }
        };
        last_frame = Instant::now();
        partial_since = (!reader.read_buffer().is_empty()).then_some(last_frame);
        // What a connection may send is decided by the type its frames decode to: with a
        // client key, `ClientFrame` (client and server requests only).
        // Maps in frames are encoded for the connection's version (`map_wire`).
        let version = peer.version;
        let decoded = scope(version, || {
            if peer.credential == Credential::Client {
                decode::<ClientFrame>(&frame).map(RequestFrame::from)
            } else {
                decode::<RequestFrame>(&frame)
            }
        });
        let mut req = match decoded {
            Ok(r) => r,
            Err(e) => {
                // A well-formed request this connection may not send: refused, and the
                // connection goes on. Anything else ends it.
                let Ok(other) = scope(version, || decode::<RequestFrame>(&frame)) else {
                    break e.to_string();
                };
                let refusal = ResponseFrame {
                    id: other.id,
                    result: Err(WireError::PermissionDenied),
                };
                tracing::warn!(peer = %peer_addr, op = other.body.op_name(), "refused: needs the cluster secret");
                if let Ok(bytes) = myriad_proto::codec::encode(&refusal) {
                    let _ = tx.send(Bytes::from(bytes)).await;
                }
                continue;
            }
        };
        if squash && req.caller.uid == 0 {
            req.caller = Caller {
                uid: SQUASHED_ID,
                gid: SQUASHED_ID,
                groups: Vec::new(),
            };
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break String::new();
        };
        let h = handler.clone();
        let tx = tx.clone();
        let peer = peer.clone();
        let (kind, bytes_in) = (req.body.traffic_kind(), frame.len());
        tokio::spawn(async move {
            let resp = h.clone().handle(peer.clone(), req).await;
            let hint = resp.size_hint();
            let resp = resp.for_version(version);
            match scope(version, || {
                myriad_proto::codec::encode_with_capacity(&resp, hint)
            }) {
                Ok(bytes) => {
                    h.traffic(&peer, kind, bytes_in, bytes.len());
                    let _ = tx.send(Bytes::from(bytes)).await;
                }
                Err(e) => tracing::error!("cannot encode response: {e}"),
            }
            drop(permit);
        });
    };
    if !why.is_empty() {
        tracing::warn!(peer = %peer_addr, "closing connection: {why}");
    }
    drop(tx);
    // Let in-flight replies drain; the writer ends when every sender is gone (or stalls).
    let _ = writer_task.await;
}

/// The connection's writer: replies from the request tasks, several per write when they
/// come together. The receiver hears why it stopped early (a failed write, a peer that
/// stopped reading for `stall`).
fn spawn_writer(
    mut writer: FramedWrite<tokio::net::tcp::OwnedWriteHalf, crate::frame::FrameCodec>,
    mut rx: mpsc::Receiver<Bytes>,
    stall: Duration,
) -> (tokio::task::JoinHandle<()>, oneshot::Receiver<String>) {
    let (stalled_tx, stalled) = oneshot::channel::<String>();
    let task = tokio::spawn(async move {
        let why = loop {
            let Some(first) = rx.recv().await else {
                break None;
            };
            // Let the tasks that are ready run first: under load they queue more replies
            // for this write (one syscall for several: echo 130k -> 190k/s, fetch +25%;
            // a yield, not a timer: an idle connection answers at once).
            tokio::task::yield_now().await;
            let wrote = tokio::time::timeout(stall, async {
                writer.feed(first).await?;
                while let Ok(more) = rx.try_recv() {
                    writer.feed(more).await?;
                }
                SinkExt::<Bytes>::flush(&mut writer).await
            })
            .await;
            match wrote {
                Ok(Ok(())) => {}
                Ok(Err(e)) => break Some(format!("write failed: {e}")),
                Err(_) => {
                    break Some(format!(
                        "peer stopped reading: replies not taken for {stall:?}"
                    ));
                }
            }
        };
        if let Some(why) = why {
            let _ = stalled_tx.send(why);
        }
    });
    (task, stalled)
}
