//! Partition replication (docs/replication.md "Write protocol"): the primary's `Replicator`
//! streams every committed batch, numbered, to each backup; a write is acknowledged once the
//! primary's fsync and every backup's ack cover its batch. A backup (`Backup`) applies
//! batches strictly in sequence order and answers only once they are durable.
//!
//! ```text
//! applier thread: commit batch (seq n, written with the batch) ─ship─> one queue per backup
//! stream task:    up to WINDOW batches in flight ── Replicate{n} ──> backup ── ack ──> acked
//! Applier::run:   local fsync, then wait until every backup's acked >= n
//! ```
//! A stream first checks that the backup holds exactly the primary's state at start (same
//! seq); if not (the backup missed batches or holds batches the primary lost in a crash,
//! which were never acknowledged), it copies the whole partition: drop, pages of every
//! key, then the batches committed since the copy began, replayed in order. Replaying
//! physical puts and deletes over a copy taken while writes went on yields the primary's
//! state, because every key a later batch touched ends with that batch's value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use myriad_placement::{ClusterMap, NodeId, PartitionId};
use myriad_proto::{Endpoints, FsError, ReplOp, Request, Response};
use myriad_storage::{Batch, Kv, Space, StorageError, Store};
use tokio::sync::{mpsc, oneshot, watch};

use crate::cluster::MapState;
use crate::commit::{Done, SEQ_KEY, Ship, ShipSlot, Syncer};
use crate::state::mutation::{Outcome, storage_err};

/// Meta key of the last batch applied to a partition's store (written with the batch).
/// Meta key present while a whole copy is being received: the store is incomplete.
const COPYING_KEY: &str = "repl_copying";
/// How often an idle stream checks that its backup still holds what it acknowledged.
const IDLE_CHECK: Duration = Duration::from_secs(1);
/// Batches in flight to one backup.
const WINDOW: usize = 64;
/// How far ahead of the next batch a backup parks out-of-order arrivals: the primary has
/// at most WINDOW in flight, so anything further is refused (`Busy`) rather than held in
/// memory (a batch can be 4 MiB).
const PARK_AHEAD_MAX: u64 = 2 * WINDOW as u64;
/// Keys per page of a whole copy; blocks are up to 64 KiB, so 48 stay under 4 MiB.
const COPY_PAGE: usize = 512;
const COPY_PAGE_BLOCKS: usize = 48;

/// Partition `pid`'s store on this server's engine.
pub(crate) fn partition_store(
    kv: Arc<dyn Kv>,
    pid: PartitionId,
) -> Result<Store, myriad_storage::StorageError> {
    Store::open(Arc::new(myriad_storage::PartitionKv::new(kv, pid)), pid)
}

/// The ops of `batch` in wire form.
pub(crate) fn to_wire(batch: &Batch) -> Vec<ReplOp> {
    batch
        .ops
        .iter()
        .map(|(space, key, value)| ReplOp {
            space: space.code(),
            key: key.clone(),
            value: value.clone().map(serde_bytes::ByteBuf::from),
        })
        .collect()
}

/// A batch from the wire; refuses spaces that are not a partition's.
fn from_wire(ops: Vec<ReplOp>) -> Result<Batch, FsError> {
    let mut batch = Batch::new();
    for op in ops {
        let space = Space::partition_space(op.space).ok_or_else(|| {
            FsError::Protocol(format!("replicated op in unknown space {}", op.space))
        })?;
        batch
            .ops
            .push((space, op.key, op.value.map(serde_bytes::ByteBuf::into_vec)));
    }
    Ok(batch)
}

struct Shipped {
    seq: u64,
    /// Built once per backup: resends reuse it.
    req: Arc<Request>,
}

struct Stream {
    tx: mpsc::UnboundedSender<Shipped>,
    acked: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

/// The primary side of one partition's replication: one stream per live backup. The set
/// of backups follows the map (`set_backups`): a backup marked down is dropped (writes stop
/// waiting for it), one that comes back is added and first brought up to date.
pub(crate) struct Replicator {
    peers: Arc<dyn Peers>,
    pid: PartitionId,
    store: Store,
    inner: Mutex<Streams>,
    /// Bumped whenever the set of streams changes, so that waiters look again.
    changed: watch::Sender<u64>,
}

pub(crate) struct Streams {
    streams: BTreeMap<NodeId, Stream>,
    /// The last batch handed to the streams (a new stream starts there).
    last_shipped: u64,
    closed: bool,
}

impl Drop for Streams {
    fn drop(&mut self) {
        for s in self.streams.values() {
            s.task.abort();
        }
    }
}

impl Streams {
    /// True if a shipped batch has anyone to go to (else it is not even encoded).
    pub(crate) fn wants_batches(&self) -> bool {
        !self.streams.is_empty()
    }

    /// Hands batch `seq` to every backup's stream (called by the applier thread, in order,
    /// with `ops` set when `wants_batches`). Each request carries the floor that backup had
    /// acknowledged by now (a lower bound of the stream's, which is all the backup's check
    /// needs); the last backup gets `ops` itself, the others a copy.
    pub(crate) fn ship(&mut self, seq: u64, ops: Option<Vec<ReplOp>>) {
        self.last_shipped = seq;
        let mut ops = ops;
        let last = self.streams.len().saturating_sub(1);
        for (i, s) in self.streams.values().enumerate() {
            let ops = if i == last {
                ops.take().unwrap_or_default()
            } else {
                ops.clone().unwrap_or_default()
            };
            let req = Request::Replicate {
                seq,
                acked: *s.acked.borrow(),
                ops,
            };
            let _ = s.tx.send(Shipped {
                seq,
                req: Arc::new(req),
            });
        }
    }
}

impl ShipSlot for std::sync::MutexGuard<'_, Streams> {
    fn encode(&self, batch: &Batch) -> Option<Vec<ReplOp>> {
        self.wants_batches().then(|| to_wire(batch))
    }
    fn ship(&mut self, seq: u64, ops: Option<Vec<ReplOp>>) {
        Streams::ship(self, seq, ops);
    }
}

impl Ship for Replicator {
    fn hold(&self) -> Box<dyn ShipSlot + '_> {
        Box::new(self.lock())
    }
    fn wait(&self, seq: u64) -> futures::future::BoxFuture<'_, Result<(), FsError>> {
        Box::pin(Replicator::wait(self, seq))
    }
    fn close(&self) {
        Replicator::close(self);
    }
}

impl Replicator {
    /// A replicator whose streams start at `start_seq` (the seq before the partition's
    /// applier starts); `set_backups` adds them.
    pub(crate) fn new(
        peers: Arc<dyn Peers>,
        pid: PartitionId,
        store: &Store,
        start_seq: u64,
    ) -> Replicator {
        Replicator {
            peers,
            pid,
            store: store.clone(),
            inner: Mutex::new(Streams {
                streams: BTreeMap::new(),
                last_shipped: start_seq,
                closed: false,
            }),
            changed: watch::channel(0).0,
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Streams> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Streams to exactly `backups`: drops the others, and starts a stream to each new one,
    /// which first checks that the backup holds this store's state at the last shipped
    /// batch (else copies the partition to it).
    pub(crate) fn set_backups(&self, backups: &[NodeId]) {
        let mut g = self.lock();
        if g.closed {
            return;
        }
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
            let (tx, rx) = mpsc::unbounded_channel();
            let (atx, arx) = watch::channel(0u64);
            let link = Link {
                peers: self.peers.clone(),
                pid: self.pid,
                backup,
            };
            let start = g.last_shipped;
            let task = tokio::spawn(run_stream(link, self.store.clone(), start, rx, atx));
            g.streams.insert(
                backup,
                Stream {
                    tx,
                    acked: arx,
                    task,
                },
            );
            changed = true;
        }
        if changed {
            tracing::info!(partition = self.pid, ?backups, "replicating to");
            self.changed.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// Ends every stream; waiting writes fail.
    pub(crate) fn close(&self) {
        let mut g = self.lock();
        g.closed = true;
        for s in g.streams.values() {
            s.task.abort();
        }
        g.streams.clear();
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Returns once every current backup has acknowledged every batch up to `seq` (a backup
    /// dropped meanwhile is no longer waited for).
    pub(crate) async fn wait(&self, seq: u64) -> Result<(), FsError> {
        loop {
            let mut changed = self.changed.subscribe();
            let acks: Vec<watch::Receiver<u64>> = {
                let g = self.lock();
                if g.closed {
                    return Err(FsError::Unavailable(
                        "the partition is no longer served by this server".into(),
                    ));
                }
                g.streams.values().map(|s| s.acked.clone()).collect()
            };
            let all = async {
                for mut rx in acks {
                    if rx.wait_for(|a| *a >= seq).await.is_err() {
                        return false;
                    }
                }
                true
            };
            tokio::select! {
                ok = all => {
                    if ok {
                        return Ok(());
                    }
                    // A stream ended: look at the set again (after it changed).
                    let _ = tokio::time::timeout(Duration::from_millis(50), changed.changed()).await;
                }
                _ = changed.changed() => {}
            }
        }
    }
}

/// How replication reaches the other servers: the server process implements it over its
/// connection pool, a simulation in memory. Replication never names the process.
pub(crate) trait Peers: Send + Sync {
    /// The map this server serves under now.
    fn map(&self) -> Arc<MapState>;
    /// Sends `req` to server `to` (its endpoint `ends`), stamped with map `epoch`.
    fn send<'a>(
        &'a self,
        to: NodeId,
        epoch: u64,
        ends: Endpoints,
        req: &'a Request,
    ) -> BoxFuture<'a, Result<Response, FsError>>;
    /// A peer holds a newer map: adopt it without waiting (the caller may be running inside
    /// the reconcile that would apply it).
    fn newer_map(&self, map: ClusterMap);
    /// How long a request may wait for its answer.
    fn request_timeout(&self) -> Duration;
}

/// Where a stream sends: partition `pid`'s copy on server `backup`.
struct Link {
    peers: Arc<dyn Peers>,
    pid: PartitionId,
    backup: NodeId,
}

impl Link {
    async fn call(&self, req: &Request) -> Result<Response, FsError> {
        let st = self.peers.map();
        let ends = Endpoints {
            target: self.pid,
            source: self.pid,
        };
        let result = self.peers.send(self.backup, st.map.epoch, ends, req).await;
        match result {
            Err(FsError::Redirect(map)) => {
                // The backup has a newer map: adopt it (it may end this stream). Not
                // awaited: this may run inside the reconcile that would apply it.
                self.peers.newer_map(*map);
                Err(FsError::Busy)
            }
            Err(FsError::MapTooOld(_)) => {
                let push = Request::InstallMap(Box::new(st.map.clone()));
                let _ = self
                    .peers
                    .send(self.backup, st.map.epoch, Endpoints::SERVER, &push)
                    .await;
                Err(FsError::Busy)
            }
            other => other,
        }
    }

    /// Sends `req` until the backup acknowledges it.
    async fn call_until_ok(&self, req: &Request) -> Response {
        let mut backoff = Duration::from_millis(10);
        let mut failures = 0u32;
        loop {
            match self.call(req).await {
                Ok(r) => return r,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!(
                            partition = self.pid,
                            backup = self.backup,
                            "replication to backup failing ({failures} tries): {e}"
                        );
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

async fn run_stream(
    link: Link,
    store: Store,
    start_seq: u64,
    mut rx: mpsc::UnboundedReceiver<Shipped>,
    acked: watch::Sender<u64>,
) {
    // 1. The backup must hold exactly our state at start_seq.
    let mut need_copy = match link.call_until_ok(&Request::ReplicaSeq).await {
        Response::Seq(Some(s)) if s == start_seq => false,
        other => {
            tracing::info!(
                partition = link.pid,
                backup = link.backup,
                "backup at {other:?}, primary at {start_seq}: copying the whole partition"
            );
            true
        }
    };
    // 2. Batches in order, up to WINDOW in flight. `water`: every batch up to it acked;
    // `pending`: every batch above it (sent or queued), kept until acked so that a backup
    // that lost its disk can be refilled by a copy plus a replay from `water`.
    let mut pending: BTreeMap<u64, Arc<Request>> = BTreeMap::new();
    let mut done = BTreeSet::new();
    let mut water = start_seq;
    let mut sent_upto = start_seq;
    let mut inflight = FuturesUnordered::new();
    let mut backoff = Duration::ZERO;
    let mut open = true;
    let mut idle = tokio::time::interval(IDLE_CHECK);
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if need_copy {
            inflight = FuturesUnordered::new();
            done.clear();
            copy_partition(&link, &store, water).await;
            sent_upto = water;
            need_copy = false;
        }
        let _ = acked.send_if_modified(|a| {
            let changed = *a < water;
            *a = (*a).max(water);
            changed
        });
        // Top up the window with queued batches.
        while inflight.len() < WINDOW {
            let Some((&seq, req)) = pending.range(sent_upto + 1..).next() else {
                break;
            };
            inflight.push(send_batch(&link, seq, req.clone(), backoff));
            sent_upto = seq;
        }
        tokio::select! {
            item = rx.recv(), if open => match item {
                Some(item) => {
                    pending.insert(item.seq, item.req);
                }
                None => open = false,
            },
            Some((seq, result)) = inflight.next() => match result {
                Ok(()) => {
                    backoff = Duration::ZERO;
                    done.insert(seq);
                    while done.remove(&(water + 1)) {
                        water += 1;
                        pending.remove(&water);
                    }
                }
                Err(FsError::ReplicaGap { next }) => {
                    tracing::warn!(
                        partition = link.pid,
                        backup = link.backup,
                        "backup lacks acknowledged batches (its next is {next:?}, acked {water}): copying the whole partition"
                    );
                    need_copy = true;
                }
                Err(e) => {
                    backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    tracing::debug!(partition = link.pid, backup = link.backup, seq, "replicate failed: {e}");
                    if let Some(req) = pending.get(&seq) {
                        inflight.push(send_batch(&link, seq, req.clone(), backoff));
                    }
                }
            },
            _ = idle.tick(), if inflight.is_empty() => {
                // Nothing to send: check that the backup still holds what it acknowledged
                // (a server that came back without its disk is refilled without waiting
                // for the next write).
                let asked = tokio::time::timeout(IDLE_CHECK, link.call(&Request::ReplicaSeq)).await;
                match asked {
                    Ok(Ok(Response::Seq(Some(s)))) if s >= water => {}
                    Ok(Ok(Response::Seq(other))) => {
                        tracing::warn!(
                            partition = link.pid,
                            backup = link.backup,
                            "backup is at {other:?}, below the acknowledged {water}: copying the whole partition"
                        );
                        need_copy = true;
                    }
                    _ => {}
                }
            }
            else => break,
        }
    }
}

/// One attempt to send batch `seq` (after `delay`).
async fn send_batch(
    link: &Link,
    seq: u64,
    req: Arc<Request>,
    delay: Duration,
) -> (u64, Result<(), FsError>) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    (seq, link.call(&req).await.map(|_| ()))
}

/// Copies every key of the partition to the backup, then marks the copy complete at
/// `seq`; the stream then replays every batch after `seq`. Any failure starts it over.
async fn copy_partition(link: &Link, store: &Store, seq: u64) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match try_copy(link, store, seq).await {
            Ok(keys) => {
                tracing::info!(
                    partition = link.pid,
                    backup = link.backup,
                    keys,
                    seq,
                    "partition copied to backup"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(
                    partition = link.pid,
                    backup = link.backup,
                    "copying the partition failed, starting over: {e}"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

async fn try_copy(link: &Link, store: &Store, seq: u64) -> Result<u64, FsError> {
    link.call(&Request::ReplicaReset).await?;
    let mut keys = 0u64;
    for space in Space::PARTITION {
        let mut pages = Pages::new(store.kv().as_ref(), space, page_limit(space));
        while let Some(page) = pages.next_page()? {
            keys += page.len() as u64;
            let ops = to_ops(space, page);
            link.call(&Request::ReplicaCopy { ops }).await?;
        }
    }
    link.call(&Request::ReplicaCopyDone { seq }).await?;
    Ok(keys)
}

/// A space of a partition's store read page by page, in key order.
struct Pages<'a> {
    kv: &'a dyn Kv,
    space: Space,
    limit: usize,
    after: Option<Vec<u8>>,
}

impl<'a> Pages<'a> {
    fn new(kv: &'a dyn Kv, space: Space, limit: usize) -> Pages<'a> {
        Pages {
            kv,
            space,
            limit,
            after: None,
        }
    }

    /// The next page; `None` once the space is exhausted.
    fn next_page(&mut self) -> Result<Option<myriad_storage::Pairs>, FsError> {
        let page = self
            .kv
            .scan(self.space, &[], self.after.as_deref(), self.limit)
            .map_err(storage_err)?;
        Ok(page.last().map(|(k, _)| k.clone()).map(|last| {
            self.after = Some(last);
            page
        }))
    }
}

/// Keys per page when a space is copied: blocks are up to 64 KiB each.
fn page_limit(space: Space) -> usize {
    if space == Space::Blocks {
        COPY_PAGE_BLOCKS
    } else {
        COPY_PAGE
    }
}

/// A page of keys and values as replication ops (puts).
fn to_ops(space: Space, page: myriad_storage::Pairs) -> Vec<ReplOp> {
    page.into_iter()
        .map(|(key, value)| ReplOp {
            space: space.code(),
            key,
            value: Some(serde_bytes::ByteBuf::from(value)),
        })
        .collect()
}

/// The replication bookkeeping of a copy (its seq, the copying marker): not part of what
/// is copied or compared.
fn is_bookkeeping(space: Space, key: &[u8]) -> bool {
    space == Space::Meta && (key == SEQ_KEY.as_bytes() || key == COPYING_KEY.as_bytes())
}

/// Deletes every key of `space` in `kv` but `keep`; true if there was anything.
fn clear_space(kv: &dyn Kv, space: Space, keep: Option<&[u8]>) -> Result<bool, FsError> {
    let mut any = false;
    // Deleted pages are gone from the next scan, but `keep` is not: page past it.
    let mut pages = Pages::new(kv, space, COPY_PAGE);
    while let Some(page) = pages.next_page()? {
        let mut b = Batch::new();
        for (key, _) in page {
            if keep != Some(key.as_slice()) {
                any = true;
                b.delete(space, key);
            }
        }
        kv.commit(b).map_err(storage_err)?;
    }
    Ok(any)
}

/// Deletes every key of partition `pid` on this server: a copy the map no longer gives it
/// (moved away; the servers the map lists hold every acknowledged write). True if there
/// was anything.
pub(crate) fn drop_copy(kv: Arc<dyn Kv>, pid: PartitionId) -> Result<bool, FsError> {
    let pkv = myriad_storage::PartitionKv::new(kv, pid);
    let mut any = false;
    for space in Space::PARTITION {
        any |= clear_space(&pkv, space, None)?;
    }
    Ok(any)
}

/// Before a primary serves: if a backup has applied batches this copy lacks (this server
/// lost its disk, or crashed before its fsync while the batches reached the backups), copy
/// the partition back from the most advanced backup. A backup that cannot be reached is
/// not waited for (docs/replication.md: with the Raft map, only up replicas count).
pub(crate) async fn catch_up_from_backups(
    peers: &Arc<dyn Peers>,
    pid: PartitionId,
    store: &Store,
    backups: &[NodeId],
) -> Result<(), FsError> {
    let mine = store.meta_u64(SEQ_KEY).map_err(storage_err)?.unwrap_or(0);
    let mut best: Option<(NodeId, u64)> = None;
    for &b in backups {
        let link = Link {
            peers: peers.clone(),
            pid,
            backup: b,
        };
        // A backup still opening answers Busy: ask again until it answers or the deadline.
        let asked = tokio::time::timeout(peers.request_timeout(), async {
            loop {
                match link.call(&Request::ReplicaSeq).await {
                    Err(FsError::Busy) => tokio::time::sleep(Duration::from_millis(20)).await,
                    other => return other,
                }
            }
        })
        .await;
        if let Ok(Ok(Response::Seq(Some(s)))) = asked
            && s > mine
            && best.is_none_or(|(_, bs)| s > bs)
        {
            best = Some((b, s));
        }
    }
    let Some((from, seq)) = best else {
        return Ok(());
    };
    tracing::warn!(
        partition = pid,
        from,
        seq,
        mine,
        "a backup is ahead of this primary: copying the partition from it before serving"
    );
    let link = Link {
        peers: peers.clone(),
        pid,
        backup: from,
    };
    // Empty this copy, then take every page of the backup's.
    for space in Space::PARTITION {
        clear_space(store.kv().as_ref(), space, None)?;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let req = Request::ReplicaRead {
                space: space.code(),
                after: after.clone().map(serde_bytes::ByteBuf::from),
            };
            let Response::ReplicaPage(ops) = link.call(&req).await? else {
                return Err(FsError::Protocol("unexpected reply to replica_read".into()));
            };
            let Some(last) = ops.last() else {
                break;
            };
            after = Some(last.key.clone());
            store.commit(from_wire(ops)?).map_err(storage_err)?;
        }
    }
    store.sync().map_err(storage_err)?;
    Ok(())
}

/// The digest `FsckReplica` reports: every key and value of the partition's copy, in key
/// order, except the sequence-number bookkeeping.
pub(crate) fn digest(store: &Store) -> Result<(Option<u64>, u64, u64), FsError> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut keys = 0u64;
    for space in Space::PARTITION {
        let mut pages = Pages::new(store.kv().as_ref(), space, page_limit(space));
        while let Some(page) = pages.next_page()? {
            for (k, v) in &page {
                if is_bookkeeping(space, k) {
                    continue;
                }
                keys += 1;
                h.update(&[space.code()]);
                h.update(&(k.len() as u64).to_be_bytes());
                h.update(k);
                h.update(&(v.len() as u64).to_be_bytes());
                h.update(v);
            }
        }
    }
    let copying = store.meta_u64(COPYING_KEY).map_err(storage_err)?.is_some();
    let seq = store.meta_u64(SEQ_KEY).map_err(storage_err)?.unwrap_or(0);
    Ok(((!copying).then_some(seq), keys, h.digest()))
}

/// The backup side of one partition on this server.
pub(crate) struct Backup {
    pid: PartitionId,
    store: Store,
    state: Mutex<BackupState>,
    changed: watch::Sender<u64>,
}

struct BackupState {
    /// The next seq to apply.
    next: u64,
    /// True while a whole copy is being received (the store is incomplete).
    copying: bool,
    parked: BTreeMap<u64, (Batch, oneshot::Sender<Result<Done, FsError>>)>,
}

impl Backup {
    pub(crate) fn open(
        kv: Arc<dyn Kv>,
        pid: PartitionId,
    ) -> Result<Backup, myriad_storage::StorageError> {
        let store = partition_store(kv, pid)?;
        let next = store.meta_u64(SEQ_KEY)?.unwrap_or(0) + 1;
        let copying = store.meta_u64(COPYING_KEY)?.is_some();
        Ok(Backup {
            pid,
            store,
            state: Mutex::new(BackupState {
                next,
                copying,
                parked: BTreeMap::new(),
            }),
            changed: watch::channel(0).0,
        })
    }

    /// Starts receiving a whole copy: marks the store incomplete and empties it.
    fn reset(&self) -> Result<(), FsError> {
        let mut st = self.lock();
        st.copying = true;
        st.parked.clear();
        let mut b = Batch::new();
        self.store.put_meta_u64(&mut b, COPYING_KEY, 1);
        self.store.commit(b).map_err(storage_err)?;
        for space in Space::PARTITION {
            clear_space(
                self.store.kv().as_ref(),
                space,
                Some(COPYING_KEY.as_bytes()),
            )?;
        }
        Ok(())
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The last batch applied; None while a whole copy is arriving.
    pub(crate) fn seq(&self) -> Option<u64> {
        let st = self.lock();
        (!st.copying).then(|| st.next - 1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BackupState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub(crate) async fn handle(&self, syncer: &Syncer, body: Request) -> Result<Response, FsError> {
        match body {
            Request::Replicate { seq, acked, ops } => {
                let batch = from_wire(ops)?;
                let (tx, rx) = oneshot::channel();
                {
                    let mut st = self.lock();
                    if st.copying {
                        return Err(FsError::ReplicaGap { next: None });
                    }
                    if st.next <= acked {
                        // The primary counts batches up to `acked` as acknowledged here, but
                        // this copy does not have them: it lost its disk.
                        st.parked.clear();
                        return Err(FsError::ReplicaGap {
                            next: Some(st.next),
                        });
                    }
                    if seq < st.next {
                        // A resend of a batch already applied: ack once it is durable.
                        syncer.after_sync(self.changed.clone(), vec![(tx, Done::unit(seq))]);
                    } else if seq > st.next {
                        if seq - st.next > PARK_AHEAD_MAX {
                            return Err(FsError::Busy);
                        }
                        st.parked.insert(seq, (batch, tx));
                    } else {
                        let mut ready = vec![(seq, batch, tx)];
                        let mut n = seq + 1;
                        while let Some((b, t)) = st.parked.remove(&n) {
                            ready.push((n, b, t));
                            n += 1;
                        }
                        let mut replies = Vec::with_capacity(ready.len());
                        for (s, b, t) in ready {
                            if let Err(e) = self.store.commit(b) {
                                // Nothing after a failed batch may be applied.
                                tracing::error!(
                                    partition = self.pid,
                                    seq = s,
                                    "replicated batch failed: {e}"
                                );
                                let _ = t.send(Err(storage_err(e)));
                                break;
                            }
                            st.next = s + 1;
                            replies.push((t, Done::unit(s)));
                        }
                        syncer.after_sync(self.changed.clone(), replies);
                    }
                }
                rx.await
                    .map_err(|_| FsError::Unavailable("backup replaced".into()))??;
                Ok(Response::Unit)
            }
            Request::ReplicaSeq => {
                let st = self.lock();
                Ok(Response::Seq((!st.copying).then(|| st.next - 1)))
            }
            Request::ReplicaReset => {
                let (tx, rx) = oneshot::channel();
                self.reset()?;
                syncer.after_sync(self.changed.clone(), vec![(tx, Done::unit(0))]);
                rx.await
                    .map_err(|_| FsError::Unavailable("backup replaced".into()))??;
                Ok(Response::Unit)
            }
            Request::ReplicaCopy { ops } => {
                let mut batch = from_wire(ops)?;
                // The primary's own sequence number is not the copy's: set at the end.
                batch
                    .ops
                    .retain(|(space, key, _)| !is_bookkeeping(*space, key));
                let (tx, rx) = oneshot::channel();
                {
                    let st = self.lock();
                    if !st.copying {
                        return Err(FsError::Protocol(
                            "replica copy page without a reset".into(),
                        ));
                    }
                    self.store.commit(batch).map_err(storage_err)?;
                    syncer.after_sync(self.changed.clone(), vec![(tx, Done::unit(0))]);
                }
                // Durable before the next page: a crash must not leave holes in a copy.
                rx.await
                    .map_err(|_| FsError::Unavailable("backup replaced".into()))??;
                Ok(Response::Unit)
            }
            Request::ReplicaCopyDone { seq } => {
                let (tx, rx) = oneshot::channel();
                {
                    let mut st = self.lock();
                    if !st.copying {
                        return Err(FsError::Protocol("replica copy end without a reset".into()));
                    }
                    let mut b = Batch::new();
                    self.store.put_meta_u64(&mut b, SEQ_KEY, seq);
                    b.delete(Space::Meta, COPYING_KEY.as_bytes().to_vec());
                    self.store.commit(b).map_err(storage_err)?;
                    st.copying = false;
                    st.next = seq + 1;
                    syncer.after_sync(self.changed.clone(), vec![(tx, Done::unit(seq))]);
                }
                rx.await
                    .map_err(|_| FsError::Unavailable("backup replaced".into()))??;
                Ok(Response::Unit)
            }
            Request::ReplicaBlock { ino, block } => match self.store.block(ino, block) {
                Ok(d) => Ok(Response::BlockCopy(d.map(serde_bytes::ByteBuf::from))),
                Err(StorageError::Checksum { .. }) => {
                    tracing::error!(
                        partition = self.pid,
                        ino,
                        block,
                        "backup copy of a block fails its checksum too"
                    );
                    Err(FsError::Corrupt { ino, block })
                }
                Err(e) => Err(storage_err(e)),
            },
            Request::ReplicaRead { space, after } => {
                let space = Space::partition_space(space)
                    .ok_or_else(|| FsError::InvalidArgument(format!("unknown space {space}")))?;
                if self.lock().copying {
                    return Err(FsError::ReplicaGap { next: None });
                }
                let page = self
                    .store
                    .kv()
                    .scan(
                        space,
                        &[],
                        after.as_deref().map(|a| a.as_slice()),
                        page_limit(space),
                    )
                    .map_err(storage_err)?;
                Ok(Response::ReplicaPage(to_ops(space, page)))
            }
            _ => Err(FsError::InvalidArgument("not a replication request".into())),
        }
    }
}

impl Done {
    fn unit(seq: u64) -> Done {
        Done {
            outcome: Outcome::Unit,
            seq,
        }
    }
}
