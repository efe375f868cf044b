//! What a primary does (docs/replication.md "Write protocol"): numbers and ships every
//! committed batch to each copy's stream, waits for their acknowledgements, and brings a
//! copy that lacks batches up to date with a whole copy.
//!
//! ```text
//! applier thread: commit batch (seq n, written with the batch) ─ship─> one queue per backup
//! stream task:    up to WINDOW batches in flight ── Replicate{n} ──> backup ── ack ──> acked
//! Applier::run:   local fsync, then wait until every backup's acked >= n
//! ```
//! A stream first checks that the backup holds exactly the primary's state at start (same
//! seq and same chain of batches, `commit::CHAIN_KEY`). If the backup is behind on the same
//! history and the primary's log of recent batches (`log.rs`) reaches back to it, the stream
//! sends it the batches it missed from the log. Else (the backup missed more, or holds
//! batches the primary lost in a crash, which were never acknowledged) it copies the whole
//! partition: drop, pages of every
//! key, then the batches committed since the copy began, replayed in order. Replaying
//! physical puts and deletes over a copy taken while writes went on yields the primary's
//! state, because every key a later batch touched ends with that batch's value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use myriad_placement::{NodeId, PartitionId};
use myriad_proto::{ReplOp, Request, Response, WireError};
use myriad_storage::{Batch, Space, Store};
use tokio::sync::{mpsc, watch};

use crate::commit::{CHAIN_KEY, Numbered, Ship, ShipSlot};
use crate::metrics::CopyLag;
use crate::replication::log::RecentBatches;
use crate::replication::peers::{Link, Peers};
use crate::replication::wire::{Pages, WINDOW, page_limit, to_ops, to_wire};
use crate::unpoisoned::lock;
use myriad_proto::ReplicaRequest;

/// How often an idle stream checks that its backup still holds what it acknowledged.
pub(crate) const IDLE_CHECK: Duration = Duration::from_secs(1);
/// Batches a stream keeps unacknowledged (to resend, or to replay after a whole copy);
/// past it the stream takes no more from its queue.
pub(crate) const STREAM_PENDING_MAX: usize = 4096;
/// Batches waiting in a stream's queue. A backup so far behind that its queue fills is
/// not queued for without end: its stream is replaced by a fresh one, which brings it
/// level with a whole copy (writes waiting for its acknowledgement wait for that copy).
pub(crate) const STREAM_QUEUE_MAX: usize = 1024;
/// How long past the end of a loan of reads as its copy counts it the primary still
/// honours it: the copy counts from before it asked, the primary from when it answered,
/// and their clocks may run at slightly different rates (as for serving leases).
pub(crate) const LEND_MARGIN: Duration = Duration::from_millis(250);

pub(crate) struct Shipped {
    at: Numbered,
    /// Built once per backup: resends reuse it.
    req: Arc<Request>,
}

pub(crate) struct Stream {
    tx: mpsc::Sender<Shipped>,
    acked: watch::Receiver<u64>,
    /// False while the backup is being brought level (a whole copy, a log tail, a backlog
    /// longer than a window): writes do not wait for a joining copy (docs/write-path.md,
    /// part 3, "Joining copies").
    member: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// What starting a stream needs: the partition, its store, the way to its copies, and the
/// signal that the set of streams changed.
struct StreamCtx {
    peers: Arc<dyn Peers>,
    pid: PartitionId,
    store: Store,
    changed: watch::Sender<u64>,
    /// The partition's recent batches, to catch a backup up without a whole copy.
    log: Arc<Mutex<RecentBatches>>,
    /// The runtime streams run on: `ship` starts a stream over from the applier, which is
    /// an OS thread in the server process (`tokio::spawn` there panicked and took the
    /// partition's applier down with it).
    runtime: tokio::runtime::Handle,
}

impl StreamCtx {
    /// A stream to `backup` starting at batch `start` (whose chain is `chain`): it first
    /// checks that the backup holds exactly that state, else copies the partition to it.
    fn start(&self, backup: NodeId, (start, chain): (u64, u64), member: bool) -> Stream {
        let (tx, rx) = mpsc::channel(STREAM_QUEUE_MAX);
        let (atx, arx) = watch::channel(0u64);
        // A copy in sync is a member until its first check finds the backup behind: a
        // write made meanwhile waits for it (and stops waiting if it turns out to be
        // joining). One the map lists as behind starts joining.
        let (mtx, mrx) = watch::channel(member);
        let link = Link {
            peers: self.peers.clone(),
            pid: self.pid,
            backup,
        };
        let task = self.runtime.spawn(run_stream(
            link,
            (self.store.clone(), self.log.clone()),
            (start, chain),
            rx,
            (
                atx,
                Membership {
                    member: mtx,
                    changed: self.changed.clone(),
                },
            ),
        ));
        Stream {
            tx,
            acked: arx,
            member: mrx,
            task,
        }
    }
}

/// The primary side of one partition's replication: one stream per live backup. The set
/// of backups follows the map (`set_backups`): a backup marked down is dropped (writes stop
/// waiting for it), one that comes back is added and first brought up to date.
pub(crate) struct Replicator {
    inner: Mutex<Streams>,
}

pub(crate) struct Streams {
    ctx: StreamCtx,
    streams: BTreeMap<NodeId, Stream>,
    /// The last batch handed to the streams (a new stream starts there).
    last_shipped: u64,
    closed: bool,
    /// Whether the map lists other copies of the partition (up or down): only then is
    /// there anyone for the log to catch up.
    keep_log: bool,
    /// Streams started over because their backup fell STREAM_QUEUE_MAX behind.
    restarts: u64,
    /// Reads lent to copies (`lend`), until when (this server's clock): no write is
    /// acknowledged before such a copy acknowledges it or its loan ends.
    lent: BTreeMap<NodeId, tokio::time::Instant>,
    /// Copies besides this one that must hold a write before it is acknowledged
    /// (`cluster::other_copies_needed`, `--min-copies`).
    others_needed: usize,
}

impl Drop for Streams {
    fn drop(&mut self) {
        for s in self.streams.values() {
            s.task.abort();
        }
    }
}

impl Streams {
    /// True if shipped batches are encoded: for the streams, and for the log while the
    /// partition has other copies (even while none of them is up).
    pub(crate) fn wants_batches(&self) -> bool {
        self.keep_log || !self.streams.is_empty()
    }

    /// Hands batch `seq` to every backup's stream (called by the applier thread, in order,
    /// with `ops` set when `wants_batches`). Each request carries the floor that backup had
    /// acknowledged by now (a lower bound of the stream's, which is all the backup's check
    /// needs); the last backup gets `ops` itself, the others a copy.
    pub(crate) fn ship(&mut self, at: Numbered, ops: Option<Vec<ReplOp>>) {
        // Batches reach the streams in order, none skipped: a stream replays from its
        // last acknowledged batch and a gap here would be a batch no copy ever gets.
        debug_assert_eq!(
            at.seq,
            self.last_shipped + 1,
            "batches shipped out of order"
        );
        self.last_shipped = at.seq;
        let ops = Arc::new(ops.unwrap_or_default());
        if self.keep_log {
            lock(&self.ctx.log).push(at, ops.clone());
        }
        let mut behind = Vec::new();
        for (&backup, s) in &self.streams {
            let req = ReplicaRequest::Replicate {
                seq: at.seq,
                prev_chain: at.prev_chain,
                chain: at.chain,
                acked: *s.acked.borrow(),
                ops: ops.clone(),
            };
            let shipped = Shipped {
                at,
                req: Arc::new(Request::Replica(req)),
            };
            if let Err(mpsc::error::TrySendError::Full(_)) = s.tx.try_send(shipped) {
                behind.push(backup);
            }
        }
        // Under the shipping lock the store holds exactly the batches up to `at`: a fresh
        // stream starts there.
        let restarted = !behind.is_empty();
        for backup in behind {
            self.restarts += 1;
            tracing::warn!(
                partition = %self.ctx.pid,
                backup = %backup,
                "backup {STREAM_QUEUE_MAX} batches behind: starting its stream over (a whole copy)"
            );
            let fresh = self.ctx.start(backup, (at.seq, at.chain), true);
            if let Some(old) = self.streams.insert(backup, fresh) {
                old.task.abort();
            }
        }
        if restarted {
            self.ctx.changed.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

impl ShipSlot for std::sync::MutexGuard<'_, Streams> {
    fn encode(&self, batch: &Batch) -> Option<Vec<ReplOp>> {
        self.wants_batches().then(|| to_wire(batch))
    }
    fn ship(&mut self, at: Numbered, ops: Option<Vec<ReplOp>>) {
        Streams::ship(self, at, ops);
    }
}

impl Ship for Replicator {
    fn hold(&self) -> Box<dyn ShipSlot + '_> {
        Box::new(self.lock())
    }
    fn wait(&self, seq: u64) -> futures::future::BoxFuture<'_, Result<(), WireError>> {
        Box::pin(Replicator::wait(self, seq))
    }
    fn close(&self) {
        Replicator::close(self);
    }
}

impl Replicator {
    /// A replicator whose streams start at `start_seq` (the seq before the partition's
    /// applier starts); `set_backups` adds them. Called on the runtime its streams run on.
    pub(crate) fn new(
        peers: Arc<dyn Peers>,
        pid: PartitionId,
        store: &Store,
        start_seq: u64,
    ) -> Replicator {
        Replicator {
            inner: Mutex::new(Streams {
                ctx: StreamCtx {
                    peers,
                    pid,
                    store: store.clone(),
                    changed: watch::channel(0).0,
                    log: Arc::new(Mutex::new(RecentBatches::default())),
                    runtime: tokio::runtime::Handle::current(),
                },
                streams: BTreeMap::new(),
                last_shipped: start_seq,
                closed: false,
                keep_log: false,
                restarts: 0,
                lent: BTreeMap::new(),
                others_needed: 0,
            }),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Streams> {
        lock(&self.inner)
    }

    /// Streams to exactly `backups` (the live ones): drops the others, and starts a stream
    /// to each new one, which first checks that the backup holds this store's state at the
    /// last shipped batch (else copies the partition to it). `keep_log`: the map lists other
    /// copies of the partition, live or not (a partition with one copy keeps no log).
    /// `behind`: the backups the map lists as behind (back from a stop or a crash): their
    /// streams start joining, so writes do not wait for a copy that is still opening its
    /// partitions (answering `Busy`: a write once waited 10 s in a rolling restart), and
    /// turn member once level, as any joining stream. `others_needed`: copies besides this
    /// one that must hold a write before it is acknowledged (`wait`).
    pub(crate) fn set_backups(
        &self,
        backups: &[NodeId],
        behind: &[NodeId],
        keep_log: bool,
        others_needed: usize,
    ) {
        let mut g = self.lock();
        if g.closed {
            return;
        }
        if g.others_needed != others_needed {
            g.others_needed = others_needed;
            g.ctx.changed.send_modify(|v| *v = v.wrapping_add(1));
        }
        if g.keep_log && !keep_log {
            *lock(&g.ctx.log) = RecentBatches::default();
        }
        g.keep_log = keep_log;
        let before = g.streams.len();
        g.streams.retain(|b, s| {
            let keep = backups.contains(b);
            if !keep {
                s.task.abort();
            }
            keep
        });
        let mut changed = g.streams.len() != before;
        for &backup in backups {
            if g.streams.contains_key(&backup) {
                continue;
            }
            let start = g.last_shipped;
            // Under the shipping lock the store holds exactly the batches up to `start`, so
            // its chain is the chain at `start`.
            let chain = g.ctx.store.meta_u64(CHAIN_KEY).ok().flatten().unwrap_or(0);
            let stream = g
                .ctx
                .start(backup, (start, chain), !behind.contains(&backup));
            g.streams.insert(backup, stream);
            changed = true;
        }
        if changed {
            tracing::info!(partition = %g.ctx.pid, ?backups, "replicating to");
            g.ctx.changed.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// How many streams started over (a backup STREAM_QUEUE_MAX batches behind).
    #[cfg(test)]
    pub(crate) fn restarts(&self) -> u64 {
        self.lock().restarts
    }

    /// Ends every stream; waiting writes fail.
    pub(crate) fn close(&self) {
        let mut g = self.lock();
        g.closed = true;
        for s in g.streams.values() {
            s.task.abort();
        }
        g.streams.clear();
        g.ctx.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Lends reads to `backup` for `period` (docs/zones.md "Nearest copy"), only while its
    /// stream is a member; returns the last batch shipped, at or above every write
    /// acknowledged so far. Until `period` + LEND_MARGIN from now, no write is acknowledged
    /// before `backup` acknowledges it, even if its stream is dropped or starts joining
    /// (`wait`): so a copy that holds the returned batch and counts the loan from before it
    /// asked has every acknowledged write while it counts the loan valid.
    pub(crate) fn lend(&self, backup: NodeId, period: Duration) -> Option<u64> {
        let mut g = self.lock();
        if g.closed || !g.streams.get(&backup).is_some_and(|s| *s.member.borrow()) {
            return None;
        }
        let now = tokio::time::Instant::now();
        g.lent.retain(|_, until| *until > now);
        let until = now + period + LEND_MARGIN;
        let slot = g.lent.entry(backup).or_insert(until);
        *slot = (*slot).max(until);
        Some(g.last_shipped)
    }

    /// Whether every stream is a member (none is bringing its backup level): only then
    /// does the partition report its batch for a move's completion (`PartitionSeqs`).
    pub(crate) fn all_members(&self) -> bool {
        self.lock().streams.values().all(|s| *s.member.borrow())
    }

    /// How far this partition's copies are behind it (`CopyLag`).
    pub(crate) fn copy_lag(&self) -> CopyLag {
        let g = self.lock();
        let log = lock(&g.ctx.log);
        let mut lag = CopyLag::default();
        for s in g.streams.values() {
            let acked = *s.acked.borrow();
            if acked >= g.last_shipped {
                continue;
            }
            lag.batches += g.last_shipped - acked;
            match log.bytes_after(acked) {
                Some(b) => lag.bytes += b,
                None => lag.whole += 1,
            }
        }
        lag
    }

    /// `Some((have, need))` when fewer copies can take writes now (this one and one per
    /// stream) than must hold each before it is acknowledged: a client's change is then
    /// refused before it is applied rather than left waiting (`dispatch_request`).
    pub(crate) fn short_of_copies(&self) -> Option<(usize, usize)> {
        let g = self.lock();
        let (have, need) = (1 + g.streams.len(), 1 + g.others_needed);
        (have < need).then_some((have, need))
    }

    /// Returns once every current member backup has acknowledged every batch up to `seq`
    /// (a backup dropped meanwhile, or found to be joining, is no longer waited for),
    /// and at least `others_needed` copies besides this one have: joining copies make up
    /// for missing members, and with fewer copies up than that the write waits for one to
    /// come back (issue 49: never acknowledged on fewer disks than `--min-copies`). With
    /// no member but a joining copy, once some joining copy has: a write is never
    /// acknowledged on the primary's disk alone while another live copy exists (else the
    /// primary's loss, with the joining copy then promoted, lost it: simulation seed 172).
    pub(crate) async fn wait(&self, seq: u64) -> Result<(), WireError> {
        loop {
            let (mut changed, acks, (any_of, from_joining), lent) = {
                let g = self.lock();
                if g.closed {
                    return Err(WireError::Unavailable(
                        "the partition is no longer served by this server".into(),
                    ));
                }
                let (members, joining): (Vec<&Stream>, Vec<&Stream>) =
                    g.streams.values().partition(|s| *s.member.borrow());
                let acks: Vec<watch::Receiver<u64>> =
                    members.iter().map(|s| s.acked.clone()).collect();
                // Joining copies' acks still needed: enough to reach `others_needed`, and
                // one if there is no member at all.
                let short = g.others_needed.saturating_sub(acks.len());
                let from_joining = short.max(usize::from(acks.is_empty() && !joining.is_empty()));
                let any_of: Vec<watch::Receiver<u64>> = if from_joining > 0 {
                    joining.iter().map(|s| s.acked.clone()).collect()
                } else {
                    Vec::new()
                };
                // Copies with reads lent and no member stream: their ack, or the loan's end.
                let now = tokio::time::Instant::now();
                let lent: Vec<(Option<watch::Receiver<u64>>, tokio::time::Instant)> = g
                    .lent
                    .iter()
                    .filter(|(b, until)| {
                        **until > now && !g.streams.get(b).is_some_and(|s| *s.member.borrow())
                    })
                    .map(|(b, until)| (g.streams.get(b).map(|s| s.acked.clone()), *until))
                    .collect();
                (
                    g.ctx.changed.subscribe(),
                    acks,
                    (any_of, from_joining),
                    lent,
                )
            };
            let all = async {
                for mut rx in acks {
                    if rx.wait_for(|a| *a >= seq).await.is_err() {
                        return false;
                    }
                }
                for (rx, until) in lent {
                    let acked = async {
                        let held = match rx {
                            Some(mut rx) => rx.wait_for(|a| *a >= seq).await.is_ok(),
                            None => false,
                        };
                        if !held {
                            std::future::pending::<()>().await;
                        }
                    };
                    tokio::select! {
                        biased;
                        () = acked => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
                if from_joining == 0 {
                    return true;
                }
                if any_of.len() < from_joining {
                    // Too few copies up to hold it: wait for the set to change.
                    std::future::pending::<()>().await;
                }
                // The first joining copies to hold it (in a fixed order: deterministic).
                let mut left: Vec<_> = any_of
                    .into_iter()
                    .map(|mut rx| Box::pin(async move { rx.wait_for(|a| *a >= seq).await.is_ok() }))
                    .collect();
                for _ in 0..from_joining {
                    let (ok, _, rest) = futures::future::select_all(left).await;
                    if !ok {
                        return false;
                    }
                    left = rest;
                }
                true
            };
            // Biased (fixed order, no random pick): deterministic under the simulation.
            tokio::select! {
                biased;
                ok = all => {
                    if ok {
                        return Ok(());
                    }
                    // A stream ended: look at the set again (after it changed).
                    let _ = tokio::time::timeout(crate::backoff::STREAMS_RECHECK, changed.changed()).await;
                }
                _ = changed.changed() => {}
            }
        }
    }
}

/// A stream's standing: member (writes wait for its backup) or joining; a change is
/// signalled on `changed`, so that waiting writes look at the set of members again.
pub(crate) struct Membership {
    member: watch::Sender<bool>,
    changed: watch::Sender<u64>,
}

impl Membership {
    fn set(&self, member: bool, link: &Link) {
        if self
            .member
            .send_if_modified(|m| std::mem::replace(m, member) != member)
        {
            tracing::info!(
                partition = %link.pid,
                backup = %link.backup,
                "{}",
                if member {
                    "backup caught up: writes wait for it again"
                } else {
                    "backup joining: writes do not wait for it until it is level"
                }
            );
            self.changed.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    fn is_member(&self) -> bool {
        *self.member.borrow()
    }
}

pub(crate) async fn run_stream(
    link: Link,
    (store, log): (Store, Arc<Mutex<RecentBatches>>),
    (start_seq, start_chain): (u64, u64),
    mut rx: mpsc::Receiver<Shipped>,
    (acked, standing): (watch::Sender<u64>, Membership),
) {
    // 1. Where the backup stands (`stream_start`).
    let StreamStart {
        mut need_copy,
        mut pending,
        mut water,
        mut water_chain,
        pending_max,
    } = stream_start(&link, &log, (start_seq, start_chain)).await;
    let mut done = BTreeSet::new();
    let mut sent_upto = water;
    if need_copy || !pending.is_empty() {
        standing.set(false, &link);
    }
    let mut inflight = FuturesUnordered::new();
    let mut copying: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>> =
        None;
    // The delay before a send: none while the backup answers, growing while it fails.
    let mut retry = crate::backoff::REPLICATE;
    let mut backoff = Duration::ZERO;
    let mut open = true;
    let mut idle = tokio::time::interval(IDLE_CHECK);
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if need_copy && copying.is_none() {
            inflight = FuturesUnordered::new();
            done.clear();
            // Copied while the stream keeps taking batches (kept in `pending` and replayed
            // once the copy is in): writes no longer wait for this backup, so they come
            // at full speed, and a queue that filled meanwhile would start the stream
            // over, copy and all.
            copying = Some(Box::pin(copy_partition(
                &link,
                &store,
                (water, water_chain),
            )));
            need_copy = false;
        }
        let _ = acked.send_if_modified(|a| {
            let changed = *a < water;
            *a = (*a).max(water);
            changed
        });
        // Level again once every batch it lacks fits in one window: from then on writes
        // wait for it, and its acknowledgements come within a round trip.
        if !standing.is_member() && copying.is_none() && pending.len() + rx.len() <= WINDOW {
            standing.set(true, &link);
        }
        // Top up the window with queued batches.
        while copying.is_none() && inflight.len() < WINDOW {
            let Some((&seq, (req, _))) = pending.range(sent_upto + 1..).next() else {
                break;
            };
            inflight.push(send_batch(&link, seq, req.clone(), backoff));
            sent_upto = seq;
        }
        // Biased (fixed order, no random pick: deterministic under the simulation).
        // Acknowledgements first: at most WINDOW of them, so new batches are never starved,
        // while new batches first could starve the acknowledgements under a steady load.
        tokio::select! {
            biased;
            () = async {
                if let Some(c) = copying.as_mut() {
                    c.await;
                }
            }, if copying.is_some() => {
                copying = None;
                sent_upto = water;
            }
            // `Ok(None)`: applied; `Ok(Some(next))`: the backup cannot take it (a gap).
            Some((seq, result)) = inflight.next() => match result {
                Ok(None) => {
                    retry = crate::backoff::REPLICATE;
                    backoff = Duration::ZERO;
                    done.insert(seq);
                    debug_assert!(water <= sent_upto, "acknowledged past what was sent");
                    while done.remove(&(water + 1)) {
                        water += 1;
                        if let Some((_, chain)) = pending.remove(&water) {
                            water_chain = chain;
                        }
                    }
                }
                Ok(Some(next)) => {
                    tracing::warn!(
                        partition = %link.pid,
                        backup = %link.backup,
                        "backup lacks acknowledged batches (its next is {next:?}, acked {water}): copying the whole partition"
                    );
                    need_copy = true;
                    standing.set(false, &link);
                }
                Err(e) => {
                    backoff = retry.step();
                    tracing::debug!(partition = %link.pid, backup = %link.backup, seq, "replicate failed: {e}");
                    if let Some((req, _)) = pending.get(&seq) {
                        inflight.push(send_batch(&link, seq, req.clone(), backoff));
                    }
                }
            },
            // At most `pending_max` unacknowledged: past it the queue fills, and the
            // primary starts this stream over.
            item = rx.recv(), if open && pending.len() < pending_max => match item {
                Some(item) => {
                    pending.insert(item.at.seq, (item.req, item.at.chain));
                }
                None => open = false,
            },
            _ = idle.tick(), if inflight.is_empty() && copying.is_none() => {
                // Nothing to send: check that the backup still holds what it acknowledged
                // (a server that came back without its disk is refilled without waiting
                // for the next write).
                let asked = tokio::time::timeout(IDLE_CHECK, link.call(&Request::Replica(ReplicaRequest::ReplicaSeq))).await;
                match asked {
                    Ok(Ok(Response::ReplicaState { seq: Some(s), .. })) if s >= water => {}
                    Ok(Ok(Response::ReplicaState { seq: other, .. })) => {
                        tracing::warn!(
                            partition = %link.pid,
                            backup = %link.backup,
                            "backup is at {other:?}, below the acknowledged {water}: copying the whole partition"
                        );
                        need_copy = true;
                        standing.set(false, &link);
                    }
                    _ => {}
                }
            }
            else => break,
        }
    }
}

/// Where a stream starts: the batches it must send first and the backup's position.
struct StreamStart {
    /// The backup holds neither our state nor one the log reaches back to: a whole copy.
    need_copy: bool,
    /// Batches are sent in order, up to WINDOW in flight. `water`: every batch up to it
    /// acked, `water_chain` the chain after it; `pending`: every batch above it (sent or
    /// queued), with its chain, kept until acked so that a backup that lost its disk (or
    /// holds another history) can be refilled by a copy plus a replay from `water`.
    pending: BTreeMap<u64, (Arc<Request>, u64)>,
    water: u64,
    water_chain: u64,
    /// Unacknowledged batches past which the stream takes no more from its queue: a
    /// catch-up from the log adds its tail (else a tail longer than STREAM_PENDING_MAX
    /// stops the stream taking batches, its queue fills and it starts over, again and
    /// again).
    pending_max: usize,
}

/// Step 1 of a stream: the backup must hold exactly our state at `start_seq`: the same
/// batch number over the same history (a deposed primary's own batches give an equal
/// number, not an equal chain), or an earlier state of it that the log reaches back to
/// (its tail is then pending), else it gets a whole copy.
async fn stream_start(
    link: &Link,
    log: &Mutex<RecentBatches>,
    (start_seq, start_chain): (u64, u64),
) -> StreamStart {
    let mut start = StreamStart {
        need_copy: false,
        pending: BTreeMap::new(),
        water: start_seq,
        water_chain: start_chain,
        pending_max: STREAM_PENDING_MAX,
    };
    match link
        .call_until_ok(&Request::Replica(ReplicaRequest::ReplicaSeq))
        .await
    {
        Response::ReplicaState {
            seq: Some(s),
            chain,
            ..
        } if s == start_seq && chain == start_chain => {}
        Response::ReplicaState {
            seq: Some(s),
            chain,
            ..
        } if let Some(tail) = lock(log).after(s, chain, start_seq) => {
            tracing::info!(
                partition = %link.pid,
                backup = %link.backup,
                batches = tail.len(),
                "backup at {s}, primary at {start_seq}: catching it up from the log"
            );
            for (at, ops) in tail {
                let req = ReplicaRequest::Replicate {
                    seq: at.seq,
                    prev_chain: at.prev_chain,
                    chain: at.chain,
                    acked: s,
                    ops,
                };
                start
                    .pending
                    .insert(at.seq, (Arc::new(Request::Replica(req)), at.chain));
            }
            start.pending_max = STREAM_PENDING_MAX + start.pending.len();
            (start.water, start.water_chain) = (s, chain);
        }
        other => {
            tracing::info!(
                partition = %link.pid,
                backup = %link.backup,
                "backup at {other:?}, primary at {start_seq}: copying the whole partition"
            );
            start.need_copy = true;
        }
    }
    start
}

/// One attempt to send batch `seq` (after `delay`).
pub(crate) async fn send_batch(
    link: &Link,
    seq: u64,
    req: Arc<Request>,
    delay: Duration,
) -> (u64, Result<Option<Option<u64>>, WireError>) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let answer = match link.call_bundled(&req).await {
        Ok(Response::ReplicaGap { next }) => Ok(Some(next)),
        Ok(_) => Ok(None),
        Err(e) => Err(e),
    };
    (seq, answer)
}

/// Copies every key of the partition to the backup, then marks the copy complete at
/// `seq` with its chain; the stream then replays every batch after `seq`. Any failure
/// starts it over.
pub(crate) async fn copy_partition(link: &Link, store: &Store, (seq, chain): (u64, u64)) {
    let mut backoff = crate::backoff::WHOLE_COPY;
    loop {
        match try_copy(link, store, (seq, chain)).await {
            Ok(keys) => {
                tracing::info!(
                    partition = %link.pid,
                    backup = %link.backup,
                    keys,
                    seq,
                    "partition copied to backup"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(
                    partition = %link.pid,
                    backup = %link.backup,
                    "copying the partition failed, starting over: {e}"
                );
                backoff.wait().await;
            }
        }
    }
}

pub(crate) async fn try_copy(
    link: &Link,
    store: &Store,
    (seq, chain): (u64, u64),
) -> Result<u64, WireError> {
    link.call(&Request::Replica(ReplicaRequest::ReplicaReset))
        .await?;
    let mut keys = 0u64;
    for space in Space::PARTITION {
        let mut pages = Pages::new(store.kv().as_ref(), space, page_limit(space));
        while let Some(page) = pages.next_page()? {
            keys += page.len() as u64;
            let ops = to_ops(space, page);
            link.call(&Request::Replica(ReplicaRequest::ReplicaCopy { ops }))
                .await?;
        }
    }
    link.call(&Request::Replica(ReplicaRequest::ReplicaCopyDone {
        seq,
        chain,
    }))
    .await?;
    Ok(keys)
}

#[cfg(test)]
mod tests;
