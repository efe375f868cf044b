//! Directory touches of every partition of one server, sent together (`dirtimes.rs` hands
//! them over). One queue per target partition (the one holding the touched directories'
//! entries); a sender task per target takes whatever has queued into one
//! `PeerRequest::DirTouches`, which the target applies in one batch. Touches that arrive
//! while a request is out go in the next one, so requests grow with the load, as group
//! commits and replication bundles do, and an idle server sends at once.
//!
//! ```text
//! partition 3: touch /a/x ─┐
//! partition 7: touch /a/y ─┼─> queue for partition 12 ──sender──> DirTouches[/a/x, /a/y, /b] ──> 12
//! partition 3: touch /b   ─┘                           <── Attrs[ok, ok, NotFound] ──
//! ```
//! Each touch gets exactly the answer it would have got alone; a request that fails as a
//! whole fails each of its touches (a touch that fails is logged by its sender and costs
//! only a stale directory time, never data: the change it reports is already applied).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use myriad_placement::PartitionId;
use myriad_proto::ask;
use myriad_proto::reply::Attrs;
use myriad_proto::{DirTouchItem, Inode, WireError, limits};
use tokio::sync::oneshot;

use crate::partition::env::Env;
use crate::unpoisoned::lock;

/// A request of touches waits at most this long for its target; past it the changes go on
/// (their directories' times may stay behind).
pub(crate) const TOUCH_TIMEOUT: Duration = Duration::from_secs(2);

type Answer = Result<Option<Inode>, WireError>;

struct Waiting {
    item: DirTouchItem,
    source: PartitionId,
    reply: oneshot::Sender<Answer>,
}

/// The touches waiting for one target, and whether its sender task runs.
#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    sending: bool,
}

/// One server's queues of directory touches, by target partition.
#[derive(Default)]
pub(crate) struct TouchSender {
    queues: Mutex<HashMap<PartitionId, Queue>>,
}

impl TouchSender {
    /// Sends `item` (from partition `source`) to partition `target` with whatever else is
    /// queued for it; the directory's attributes after the touch, `None` if the target
    /// holds no such directory entry (nothing changed).
    pub(crate) async fn touch(
        self: &Arc<Self>,
        env: &Arc<dyn Env>,
        source: PartitionId,
        target: PartitionId,
        item: DirTouchItem,
    ) -> Answer {
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut g = lock(&self.queues);
            let q = g.entry(target).or_default();
            q.waiting.push(Waiting {
                item,
                source,
                reply,
            });
            !std::mem::replace(&mut q.sending, true)
        };
        if start {
            tokio::spawn(self.clone().run(env.clone(), target));
        }
        answer
            .await
            .map_err(|_| WireError::Unavailable("directory touch dropped".into()))?
    }

    /// The sender task of `target`: requests until its queue is empty.
    async fn run(self: Arc<Self>, env: Arc<dyn Env>, target: PartitionId) {
        loop {
            // Let the tasks that are ready run first: under load they queue more touches
            // for this request (a yield, not a timer).
            tokio::task::yield_now().await;
            let batch: Vec<Waiting> = {
                let mut g = lock(&self.queues);
                let Some(q) = g.get_mut(&target) else {
                    return;
                };
                if q.waiting.is_empty() {
                    g.remove(&target);
                    return;
                }
                let n = q.waiting.len().min(limits::DIR_TOUCHES_MAX);
                q.waiting.drain(..n).collect()
            };
            send(&env, target, batch).await;
        }
    }
}

/// One request of `batch`'s touches; every touch gets its own answer.
async fn send(env: &Arc<dyn Env>, target: PartitionId, batch: Vec<Waiting>) {
    let source = batch.first().map_or(PartitionId(0), |w| w.source);
    let touches = batch.iter().map(|w| w.item.clone()).collect::<Vec<_>>();
    let n = touches.len();
    let touch = ask::dir_touches(touches);
    // A touch is worth sending whoever asked: it only moves times forward.
    let always = || true;
    let answer = tokio::time::timeout(
        TOUCH_TIMEOUT,
        env.call_partition(source, target, touch.request, &always),
    )
    .await;
    let results: Vec<Answer> = match answer.map(|r| r.and_then(|r| touch.answer.of(r))) {
        Ok(Ok(Attrs(r))) if r.len() == n => r
            .into_iter()
            .map(|r| match r {
                Ok(i) => Ok(Some(i)),
                Err(WireError::NotFound) => Ok(None),
                Err(e) => Err(e),
            })
            .collect(),
        Ok(Ok(Attrs(r))) => {
            let e = WireError::Protocol(format!("{} answers to {n} directory touches", r.len()));
            vec![Err(e); n]
        }
        Ok(Err(e)) => vec![Err(e); n],
        Err(_) => vec![Err(WireError::TimedOut("directory touches".into())); n],
    };
    for (w, r) in batch.into_iter().zip(results) {
        let _ = w.reply.send(r);
    }
}
