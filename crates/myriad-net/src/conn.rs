//! One multiplexed client connection.
//!
//! ```text
//!  call() ──encode──> mpsc ──> writer task (feed frames, flush when the queue is empty) ──> TCP
//!  call() <──oneshot── pending[id] <── reader task (decode ResponseFrame) <─────────────── TCP
//! ```
//! When either task fails, the connection is marked closed and every pending call fails with
//! `Unavailable`; the pool makes a new connection on the next call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use myriad_proto::auth::Keyring;
use myriad_proto::codec::{decode, encode};
use myriad_proto::versioned::scope;
use myriad_proto::{
    Caller, Endpoints, PeerKind, Request, RequestFrameRef, Response, ResponseFrame, WireError,
};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::frame::frame_codec;

type Reply = Result<Response, WireError>;
type PendingMap = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;

/// Frames queued for the writer before callers wait. Bounds memory per connection.
const SEND_QUEUE_MAX: usize = 4096;

pub struct RpcConn {
    addr: String,
    tx: mpsc::Sender<Bytes>,
    pending: PendingMap,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    /// The peer's node id and map epoch from its hello reply.
    pub peer_node_id: myriad_proto::NodeId,
    pub peer_epoch: u64,
    /// The protocol this connection speaks, and the newest the peer speaks
    /// (docs/upgrades.md).
    pub version: u16,
    pub peer_newest: u16,
    /// When the connection was made, and when the last call started (ms after `born`): a
    /// connection idle for long may have been closed by the server's idle timeout just as a
    /// call goes out (the pool retries that call once). An atomic: every call stamps it.
    born: Instant,
    last_used_ms: AtomicU64,
}

impl RpcConn {
    /// Connects and performs the authenticated handshake with `keys`, all within `timeout`.
    pub async fn connect(
        addr: &str,
        me: PeerKind,
        zone: &str,
        keys: &Keyring,
        timeout: Duration,
    ) -> Result<RpcConn, WireError> {
        match tokio::time::timeout(timeout, Self::connect_inner(addr, me, zone, keys)).await {
            Ok(r) => r,
            Err(_) => Err(WireError::Unavailable(format!(
                "{addr}: connect timed out after {} ms",
                timeout.as_millis()
            ))),
        }
    }

    async fn connect_inner(
        addr: &str,
        me: PeerKind,
        zone: &str,
        keys: &Keyring,
    ) -> Result<RpcConn, WireError> {
        let mut offer = crate::handshake::newest();
        loop {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|e| WireError::Unavailable(format!("{addr}: {e}")))?;
            let _ = stream.set_nodelay(true);
            let (rd, wr) = stream.into_split();
            let mut reader = FramedRead::new(rd, frame_codec());
            let mut writer = FramedWrite::new(wr, frame_codec());
            writer.set_backpressure_boundary(crate::frame::WRITE_BATCH_BYTES);
            let shook = crate::handshake::client(
                addr,
                &mut reader,
                &mut writer,
                (me.clone(), zone),
                keys,
                offer,
            )
            .await?;
            match shook {
                crate::handshake::Shook::Done(h) => {
                    return Ok(Self::start(addr, reader, writer, h));
                }
                // An older server refused what we offered, naming one we speak: again
                // with that (a version only goes down, so this ends).
                crate::handshake::Shook::OfferOlder(v) => {
                    tracing::debug!(server = addr, offered = offer, again = v, "older server");
                    offer = v;
                }
            }
        }
    }

    /// Runs the connection's writer and reader tasks once the handshake is done.
    fn start(
        addr: &str,
        mut reader: FramedRead<tokio::net::tcp::OwnedReadHalf, crate::frame::FrameCodec>,
        mut writer: FramedWrite<tokio::net::tcp::OwnedWriteHalf, crate::frame::FrameCodec>,
        h: crate::handshake::Handshaken,
    ) -> RpcConn {
        let pending: PendingMap = Arc::new(Mutex::new(HashMap::new()));
        let closed = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = mpsc::channel::<Bytes>(SEND_QUEUE_MAX);

        let w_closed = closed.clone();
        let w_pending = pending.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                // As the server's writer: a yield lets ready tasks queue more requests
                // for this write.
                tokio::task::yield_now().await;
                if writer.feed(first).await.is_err() {
                    break;
                }
                // Batch: everything already queued goes out with one flush.
                let mut failed = false;
                while let Ok(more) = rx.try_recv() {
                    if writer.feed(more).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed || SinkExt::<Bytes>::flush(&mut writer).await.is_err() {
                    break;
                }
            }
            fail_all(&w_closed, &w_pending, "connection closed while sending");
        });

        let r_closed = closed.clone();
        let r_pending = pending.clone();
        let r_addr = addr.to_string();
        let version = h.version;
        tokio::spawn(async move {
            loop {
                match reader.next().await {
                    Some(Ok(frame)) => match scope(version, || decode::<ResponseFrame>(&frame)) {
                        Ok(resp) => {
                            let waiter = r_pending.lock().ok().and_then(|mut p| p.remove(&resp.id));
                            if let Some(w) = waiter {
                                let _ = w.send(resp.result);
                            }
                        }
                        Err(e) => {
                            tracing::error!(peer = %r_addr, "malformed response, closing connection: {e}");
                            break;
                        }
                    },
                    Some(Err(e)) => {
                        tracing::debug!(peer = %r_addr, "connection read error: {e}");
                        break;
                    }
                    None => break,
                }
            }
            fail_all(&r_closed, &r_pending, "connection closed");
        });

        RpcConn {
            addr: addr.to_string(),
            tx,
            pending,
            next_id: AtomicU64::new(1),
            closed,
            peer_node_id: h.node_id,
            peer_epoch: h.epoch,
            version: h.version,
            peer_newest: h.newest,
            born: Instant::now(),
            last_used_ms: AtomicU64::new(0),
        }
    }

    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// How long since the last call started.
    #[must_use]
    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_used_ms.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(last)
    }

    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends one request and waits for its reply, at most `timeout`.
    pub async fn call(
        &self,
        epoch: u64,
        ends: Endpoints,
        caller: &Caller,
        body: &Request,
        timeout: Duration,
    ) -> Reply {
        if self.is_closed() {
            return Err(WireError::Unavailable(format!(
                "{}: connection closed",
                self.addr
            )));
        }
        let now_ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_used_ms.fetch_max(now_ms, Ordering::Relaxed);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = RequestFrameRef {
            id,
            epoch,
            ends,
            caller,
            body,
        };
        let bytes = scope(self.version, || encode(&frame))
            .map_err(|e| WireError::Protocol(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let result = tokio::time::timeout(timeout, async {
            self.tx
                .send(Bytes::from(bytes))
                .await
                .map_err(|_| WireError::Unavailable(format!("{}: connection closed", self.addr)))?;
            rx.await
                .map_err(|_| WireError::Unavailable(format!("{}: connection closed", self.addr)))?
        })
        .await;
        match result {
            Ok(r) => r,
            Err(_) => {
                if let Ok(mut p) = self.pending.lock() {
                    p.remove(&id);
                }
                Err(WireError::TimedOut(format!(
                    "{} did not answer within {} ms",
                    self.addr,
                    timeout.as_millis()
                )))
            }
        }
    }
}

fn fail_all(closed: &AtomicBool, pending: &PendingMap, why: &str) {
    closed.store(true, Ordering::Release);
    let waiters: Vec<_> = pending
        .lock()
        .map(|mut p| p.drain().map(|(_, w)| w).collect())
        .unwrap_or_default();
    for w in waiters {
        let _ = w.send(Err(WireError::Unavailable(why.to_string())));
    }
}
