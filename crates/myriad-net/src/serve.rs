//! Server side of a connection: handshake, then read frames, run each request as its own task,
//! and write replies through one writer task that batches flushes.
//!
//! A malformed frame, an oversized frame, or a bad hello closes this connection only, with a
//! logged reason. Nothing a peer sends can panic the server.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use myriad_proto::codec::{decode, encode};
use myriad_proto::{
    Hello, HelloReply, MAGIC, PROTOCOL_VERSION, PeerKind, RequestFrame, ResponseFrame,
};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::frame::frame_codec;

/// Requests one connection may have in flight; more wait in the socket (backpressure).
const IN_FLIGHT_PER_CONN_MAX: usize = 1024;
/// A peer must say hello within this time.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

pub trait Handler: Send + Sync + 'static {
    /// Identity for the hello reply: (node id, map epoch).
    fn identity(&self) -> (u32, u64);
    fn handle(
        self: Arc<Self>,
        peer: PeerKind,
        frame: RequestFrame,
    ) -> BoxFuture<'static, ResponseFrame>;
}

pub async fn serve_connection<H: Handler>(stream: TcpStream, handler: Arc<H>) {
    let peer_addr = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let mut reader = FramedRead::new(rd, frame_codec());
    let mut writer = FramedWrite::new(wr, frame_codec());
    writer.set_backpressure_boundary(crate::frame::WRITE_BATCH_BYTES);

    let hello = match tokio::time::timeout(HELLO_TIMEOUT, reader.next()).await {
        Ok(Some(Ok(frame))) => decode::<Hello>(&frame),
        Ok(Some(Err(e))) => {
            tracing::warn!(peer = %peer_addr, "closing connection: bad first frame: {e}");
            return;
        }
        Ok(None) => return,
        Err(_) => {
            tracing::warn!(peer = %peer_addr, "closing connection: no hello within {HELLO_TIMEOUT:?}");
            return;
        }
    };
    let (node_id, epoch) = handler.identity();
    let refused = match &hello {
        Err(e) => Some(format!("malformed hello: {e}")),
        Ok(h) if h.magic != MAGIC => Some("not a Myriad peer (bad magic)".to_string()),
        Ok(h) if h.version != PROTOCOL_VERSION => Some(format!(
            "protocol version {} not supported (this server speaks {PROTOCOL_VERSION})",
            h.version
        )),
        Ok(_) => None,
    };
    let reply = HelloReply {
        version: PROTOCOL_VERSION,
        node_id,
        epoch,
        refused: refused.clone(),
    };
    if let Ok(bytes) = encode(&reply) {
        let _ = writer.send(Bytes::from(bytes)).await;
    }
    let peer = match (refused, hello) {
        (None, Ok(h)) => h.peer,
        _ => {
            tracing::warn!(peer = %peer_addr, "refused connection: {}", why_or(&reply));
            return;
        }
    };

    let (tx, mut rx) = mpsc::channel::<Bytes>(IN_FLIGHT_PER_CONN_MAX);
    let writer_task = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            if writer.feed(first).await.is_err() {
                return;
            }
            while let Ok(more) = rx.try_recv() {
                if writer.feed(more).await.is_err() {
                    return;
                }
            }
            if SinkExt::<Bytes>::flush(&mut writer).await.is_err() {
                return;
            }
        }
    });

    let permits = Arc::new(Semaphore::new(IN_FLIGHT_PER_CONN_MAX));
    loop {
        let frame = match reader.next().await {
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                tracing::warn!(peer = %peer_addr, "closing connection: {e}");
                break;
            }
            None => break,
        };
        let req = match decode::<RequestFrame>(&frame) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(peer = %peer_addr, "closing connection: {e}");
                break;
            }
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let h = handler.clone();
        let tx = tx.clone();
        let peer = peer.clone();
        tokio::spawn(async move {
            let resp = h.handle(peer, req).await;
            let hint = resp
                .result
                .as_ref()
                .map(myriad_proto::Response::size_hint)
                .unwrap_or(256);
            match myriad_proto::codec::encode_with_capacity(&resp, hint) {
                Ok(bytes) => {
                    let _ = tx.send(Bytes::from(bytes)).await;
                }
                Err(e) => tracing::error!("cannot encode response: {e}"),
            }
            drop(permit);
        });
    }
    drop(tx);
    // Let in-flight replies drain; the writer ends when every sender is gone.
    let _ = writer_task.await;
}

fn why_or(reply: &HelloReply) -> &str {
    reply.refused.as_deref().unwrap_or("?")
}
