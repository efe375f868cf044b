//! Replication bundles (docs/write-path.md, part 1): every stream's `Replicate` to one peer
//! server goes through that peer's queue, and a sender task takes whatever has queued into
//! one `ReplicaRequest::Bundle` frame. While a bundle is out more batches queue, so bundles
//! grow with the load, as group commits do: one frame, one answer and one fsync on the copy
//! for many batches of many partitions.
//!
//! ```text
//! stream (p3) ─┐
//! stream (p7) ─┼─> queue for server 2 ──sender task──> Bundle[p3#41, p7#12, p3#42] ──> server 2
//! stream (p9) ─┘                                   <── Bundle[ok, ok, ok] ──
//! ```
//! An item's answer is exactly what its own request would have got; a bundle that fails as
//! a whole fails each of its items, and each stream resends as it always did.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use myriad_placement::{NodeId, PartitionId};
use myriad_proto::{BundleItem, Endpoints, ReplicaRequest, Request, Response, WireError};
use tokio::sync::{mpsc, oneshot};

use crate::commit::Syncer;
use crate::replication::copy_side::Backup;
use crate::replication::peers::{Bundles, Peers};
use crate::replication::wire::ops_bytes;

/// At most this many batches in one bundle.
pub(crate) const BUNDLE_ITEMS_MAX: usize = 256;
/// A bundle closes once its batches' operations pass this many bytes (keys and values):
/// well under the frame limit, and big enough that a busy server's batches share frames.
pub(crate) const BUNDLE_BYTES_MAX: usize = 4 << 20;
/// Batches waiting for their peer's sender task. Every stream keeps at most `WINDOW` batches
/// in flight, so this is reached only with thousands of partitions per peer; then a stream
/// waits to queue.
const QUEUE_MAX: usize = 8192;

struct Item {
    partition: PartitionId,
    request: ReplicaRequest,
    bytes: usize,
    reply: oneshot::Sender<Result<Response, WireError>>,
}

/// One server's queues to its peers, one sender task each (started on first use).
#[derive(Default)]
pub(crate) struct Bundler {
    queues: Mutex<BTreeMap<NodeId, mpsc::Sender<Item>>>,
}

impl Bundler {
    /// Sends `request` for partition `partition`'s copy on server `to` in a bundle, and
    /// returns its own answer.
    pub(crate) async fn send_in_bundle(
        &self,
        peers: &Arc<dyn Peers>,
        to: NodeId,
        partition: PartitionId,
        request: ReplicaRequest,
    ) -> Result<Response, WireError> {
        let (reply, answer) = oneshot::channel();
        let item = Item {
            partition,
            bytes: request_bytes(&request),
            request,
            reply,
        };
        let queue = self.queue(peers, to);
        queue
            .send(item)
            .await
            .map_err(|_| WireError::Unavailable(format!("bundles to server {to} ended")))?;
        answer
            .await
            .map_err(|_| WireError::Unavailable(format!("bundle to server {to} dropped")))?
    }

    fn queue(&self, peers: &Arc<dyn Peers>, to: NodeId) -> mpsc::Sender<Item> {
        let mut g = crate::unpoisoned::lock(&self.queues);
        if let Some(q) = g.get(&to).filter(|q| !q.is_closed()) {
            return q.clone();
        }
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        // Weak: the server owns its bundler, whose tasks must not keep the server alive.
        tokio::spawn(run_sender(Arc::downgrade(peers), to, rx));
        g.insert(to, tx.clone());
        tx
    }
}

impl Bundles for Bundler {
    fn call<'a>(
        &'a self,
        peers: &'a Arc<dyn Peers>,
        to: NodeId,
        partition: PartitionId,
        request: ReplicaRequest,
    ) -> futures::future::BoxFuture<'a, Result<Response, WireError>> {
        Box::pin(self.send_in_bundle(peers, to, partition, request))
    }
}

/// The bytes a request's operations carry (what `BUNDLE_BYTES_MAX` counts).
fn request_bytes(request: &ReplicaRequest) -> usize {
    match request {
        ReplicaRequest::Replicate { ops, .. } => ops_bytes(ops),
        ReplicaRequest::ReplicaCopy { ops } => ops_bytes(ops),
        _ => 0,
    }
}

/// The sender task of one peer: takes every item queued (up to the limits) into a bundle
/// and sends it on a task of its own, so that bundles never wait on each other (a bundle
/// may wait on a batch parked behind one still queued).
async fn run_sender(peers: Weak<dyn Peers>, to: NodeId, mut rx: mpsc::Receiver<Item>) {
    while let Some(first) = rx.recv().await {
        // Let the tasks that are ready run first: under load they queue more batches for
        // this bundle (a yield, not a timer: an idle server sends at once).
        tokio::task::yield_now().await;
        let mut bytes = first.bytes;
        let mut items = vec![first];
        while items.len() < BUNDLE_ITEMS_MAX && bytes < BUNDLE_BYTES_MAX {
            match rx.try_recv() {
                Ok(item) => {
                    bytes += item.bytes;
                    items.push(item);
                }
                Err(_) => break,
            }
        }
        let Some(peers) = peers.upgrade() else {
            return;
        };
        tokio::spawn(send_bundle(peers, to, items));
    }
}

async fn send_bundle(peers: Arc<dyn Peers>, to: NodeId, items: Vec<Item>) {
    let mut replies = Vec::with_capacity(items.len());
    let mut bundle = Vec::with_capacity(items.len());
    for item in items {
        replies.push(item.reply);
        bundle.push(BundleItem {
            partition: item.partition,
            request: item.request,
        });
    }
    let st = peers.map();
    let req = Request::Replica(ReplicaRequest::Bundle(bundle));
    let answers = match peers.send(to, st.map.epoch, Endpoints::SERVER, &req).await {
        Ok(Response::Bundle(answers)) if answers.len() == replies.len() => answers,
        Ok(other) => {
            let e = WireError::Protocol(format!("server {to} answered a bundle with {other:?}"));
            vec![Err(e); replies.len()]
        }
        Err(WireError::Redirect(map)) => {
            // The peer has a newer map: adopt it (it may end these streams); not awaited.
            peers.newer_map(*map);
            vec![Err(WireError::Busy); replies.len()]
        }
        Err(WireError::MapTooOld(_)) => {
            crate::replication::peers::push_map(peers.as_ref(), to, &st.map).await;
            vec![Err(WireError::Busy); replies.len()]
        }
        Err(e) => vec![Err(e); replies.len()],
    };
    for (reply, answer) in replies.into_iter().zip(answers) {
        let _ = reply.send(answer);
    }
}

/// A server receiving a bundle from server `from`: each item goes to its copy
/// (`backup_for`), in the bundle's order, all joining the same group commit; one answer per
/// item.
pub(crate) async fn receive<F>(items: Vec<BundleItem>, syncer: &Syncer, backup_for: F) -> Response
where
    F: Fn(PartitionId) -> Result<Arc<Backup>, WireError>,
{
    let answers = items.into_iter().map(|item| {
        let backup = backup_for(item.partition);
        async move {
            if matches!(item.request, ReplicaRequest::Bundle(_)) {
                return Err(WireError::Protocol("a bundle inside a bundle".into()));
            }
            backup?.handle(syncer, Request::Replica(item.request)).await
        }
    });
    // join_all polls the items in order: one partition's batches reach its copy in the
    // order they were bundled (the copy parks any that overtake, all the same).
    Response::Bundle(futures::future::join_all(answers).await)
}

#[cfg(test)]
mod tests;
