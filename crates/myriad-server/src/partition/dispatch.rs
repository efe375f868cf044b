//! What drives a partition: requests (`dispatch` unwraps their envelopes: a change sent
//! once goes through `exactly_once.rs`, a leased read, a batch; the request itself to
//! `serve_request.rs`) and ticks (`start_tasks`: recovery of abandoned two-node operations,
//! bookkeeping of ancestor replicas). The top of the partition layer: it names the
//! partition's modules, none of them names it.

use std::collections::BTreeSet;
use std::sync::Arc;

use myriad_placement::PartitionId;
use myriad_proto::{Caller, ClientRequest, Envelope, Request, Response, SentOnce, WireError};

use crate::partition::core::Partition;
use crate::partition::made::{BatchTouches, Made};

/// How often outcomes of changes too old for a retry are forgotten (`exactly_once.rs`).
const FORGET_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

impl Partition {
    /// Starts recovery of abandoned intents (at once, then every `recovery_interval`) and the
    /// bookkeeping of ancestor replicas.
    pub(crate) fn start_tasks(self: &Arc<Self>) {
        let rec = self.clone();
        let recovery = tokio::spawn(async move {
            let mut seen = rec.recover(&BTreeSet::new(), true).await;
            loop {
                tokio::time::sleep(rec.env.config().recovery_interval).await;
                seen = rec.recover(&seen, false).await;
            }
        });
        // Trees moving between zones (tree_move.rs): one at a time, tried again after a
        // failure, abandoned after `tree_move::TRIES` failures in a row.
        let mover = self.clone();
        let tree_moves = tokio::spawn(async move {
            let mut failed: Option<(u32, u32)> = None;
            loop {
                tokio::time::sleep(mover.env.config().recovery_interval).await;
                let before = failed.map_or(0, |(_, n)| n);
                failed = match mover.tree_move_tick(before).await {
                    Some(group) if failed.is_some_and(|(g, _)| g == group) => {
                        Some((group, before + 1))
                    }
                    Some(group) => Some((group, 1)),
                    None => None,
                };
            }
        });
        let keeper = self.clone();
        let bookkeeping = tokio::spawn(async move {
            loop {
                tokio::time::sleep(keeper.bookkeeping_interval()).await;
                keeper.replica_bookkeeping().await;
            }
        });
        let forgetter = self.clone();
        let forgetting = tokio::spawn(async move {
            loop {
                tokio::time::sleep(FORGET_INTERVAL).await;
                forgetter.forget_outcomes().await;
            }
        });
        let checker = self.clone();
        let interval = self.env.config().anti_entropy_interval;
        let entropy = tokio::spawn(async move {
            if interval.is_zero() {
                return;
            }
            loop {
                tokio::time::sleep(interval).await;
                match checker.anti_entropy().await {
                    Ok(r) if r.repaired > 0 => tracing::warn!(
                        partition = %checker.me,
                        keys = r.repaired,
                        "anti-entropy repaired copies"
                    ),
                    Ok(r) => tracing::debug!(
                        partition = %checker.me,
                        compared = r.compared,
                        busy = r.busy,
                        "anti-entropy round: copies equal"
                    ),
                    Err(e) => tracing::debug!(partition = %checker.me, "anti-entropy round: {e}"),
                }
            }
        });
        let sweeper = self.clone();
        let orphans = tokio::spawn(async move {
            loop {
                tokio::time::sleep(crate::partition::orphans::SWEEP_EVERY).await;
                match sweeper.sweep_orphans().await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(partition = %sweeper.me, n, "orphans dropped"),
                    Err(e) => tracing::debug!(partition = %sweeper.me, "orphan sweep: {e}"),
                }
            }
        });
        // The trash's expired days (trash_expiry.rs): passes a second apart while they
        // find something, else one every `trash_expiry_interval`.
        let expirer = self.clone();
        let trash_expiry = tokio::spawn(async move {
            let idle = expirer.env.config().trash_expiry_interval;
            if idle.is_zero() {
                return;
            }
            let mut next = idle;
            loop {
                tokio::time::sleep(next).await;
                next = match expirer.expire_trash().await {
                    Ok(0) => idle,
                    Ok(n) => {
                        tracing::debug!(partition = %expirer.me, n, "expired trash freed");
                        idle.min(std::time::Duration::from_secs(1))
                    }
                    Err(e) => {
                        tracing::debug!(partition = %expirer.me, "trash expiry: {e}");
                        idle
                    }
                };
            }
        });
        let coder = self.clone();
        let coding = tokio::spawn(async move {
            let interval = coder.env.config().coding.interval;
            if !coder.env.config().coding.enabled || interval.is_zero() {
                return;
            }
            loop {
                tokio::time::sleep(interval).await;
                coder.coding_round().await;
            }
        });
        if let Ok(mut t) = self.tasks.lock() {
            t.push(coding);
            t.push(orphans);
            t.push(trash_expiry);
            t.push(recovery);
            t.push(tree_moves);
            t.push(bookkeeping);
            t.push(forgetting);
            t.push(entropy);
        }
    }

    /// Ends the background tasks; requests in flight finish on their own.
    pub(crate) fn stop(&self) {
        if let Ok(mut t) = self.tasks.lock() {
            for task in t.drain(..) {
                task.abort();
            }
        }
    }

    /// Serves a request that reached this partition: opens a client's envelope (a change
    /// sent once goes through `exactly_once.rs`, a leased read, a read made as a client,
    /// a batch) and hands the request inside to `dispatch_request`.
    pub(crate) async fn dispatch(
        self: &Arc<Self>,
        from: Option<PartitionId>,
        epoch: u64,
        caller: Caller,
        body: Request,
    ) -> Result<Response, WireError> {
        let envelope = match (from, body) {
            (None, Request::Client(envelope)) => envelope,
            // A request of another audience, or from another server (possibly in the task
            // of a client's change on another partition of this server: none of this work
            // completes that change, which has a context of its own). A server carries a
            // client's request on alone, never in an envelope.
            (from, body) => {
                let body = body.opened().map_err(|e| {
                    WireError::InvalidArgument(format!(
                        "a {} in an envelope comes from its client",
                        e.op_name()
                    ))
                })?;
                return self
                    .dispatch_request(from, epoch, caller, body, &Made::now())
                    .await;
            }
        };
        match envelope {
            // A read by a client that did not say who it is gives way to any exclusive
            // lease on the directory it reads.
            Envelope::Alone(request) => self.serve_read_as(epoch, caller, None, request).await,
            Envelope::Once(SentOnce {
                id,
                request,
                visible,
            }) => {
                self.serve_once(epoch, caller, id, request, (visible, &Made::now()))
                    .await
            }
            Envelope::Resend { id, request } => self.serve_resend(epoch, caller, id, request).await,
            Envelope::Recorded { id, request } => self.serve_recorded(epoch, id, request).await,
            Envelope::Leased {
                holder,
                request,
                exclusive,
            } => Box::pin(self.serve_leased(epoch, caller, (holder, exclusive), request)).await,
            Envelope::ReadAs { holder, request } => {
                if request.read_of().is_none() {
                    return Err(WireError::InvalidArgument(format!(
                        "only reads are made as a client, not {}",
                        request.op_name()
                    )));
                }
                self.serve_read_as(epoch, caller, Some(holder), request)
                    .await
            }
            Envelope::Batch { ops, times } => {
                // One client's journal: its touches report that client's changes.
                let clients: BTreeSet<u64> = ops.iter().map(|op| op.id.client).collect();
                if clients.len() > 1 {
                    return Err(WireError::InvalidArgument(
                        "a batch holds one client's changes".into(),
                    ));
                }
                let client = clients.first().copied();
                // Its changes come to the applier one by one: they share a store batch.
                // Boxed: a batch's future holds a change's, and every request's future
                // would otherwise be as large as both (debug builds overflowed the stack).
                // Held until the batch is served (the end of this arm).
                let held = self.applier.hold();
                let serving = held.batch;
                Box::pin(self.batched((client, Some(serving)), move |touches| {
                    self.serve_batch(epoch, caller, (ops, times), (touches, serving))
                }))
                .await
            }
        }
    }

    /// A client's request sent alone, or a read made as client `holder`: a read gives way
    /// first to every exclusive lease on the directory it reads but `holder`'s own, and
    /// counts `holder` among the directory's readers.
    async fn serve_read_as(
        self: &Arc<Self>,
        epoch: u64,
        caller: Caller,
        holder: Option<u64>,
        request: ClientRequest,
    ) -> Result<Response, WireError> {
        if let Some(dir) = request.read_dir() {
            if let Some(h) = holder {
                self.read_mostly.reader(dir, h);
            }
            if let Some(t) = self.leases() {
                t.before_read(dir, holder).await;
                // The wait may have outlasted this server's turn (a move, a failover).
                self.not_deposed()?;
            }
        }
        let body = Request::Client(request);
        self.dispatch_request(None, epoch, caller, body, &Made::now())
            .await
    }

    /// A read with a lease on the directory it reads (docs/fuse.md "Directory leases"):
    /// granted before the read runs, so a change applied after the read's answer was
    /// made recalls it first.
    async fn serve_leased(
        self: &Arc<Self>,
        epoch: u64,
        caller: Caller,
        (holder, exclusive): (u64, bool),
        request: ClientRequest,
    ) -> Result<Response, WireError> {
        let dir = match &request {
            // The root's attributes are the entry ("/", "") of "/" itself (`attrs_key`):
            // changed only by changes of "/", which recall its leases.
            ClientRequest::Fetch { path, .. } | ClientRequest::Stat { path } => {
                Some(myriad_placement::parent_of(path).to_string())
            }
            ClientRequest::StatMany { dir, .. } => Some(dir.clone()),
            ClientRequest::ReadDir { path, .. } => Some(path.clone()),
            _ => {
                return Err(WireError::InvalidArgument(
                    "only reads (fetch, stat, stat_many, readdir) come with a lease".into(),
                ));
            }
        };
        if let Some(d) = request.read_dir() {
            self.read_mostly.reader(d, holder);
        }
        let table = self.leases();
        if let (Some(d), Some(t)) = (&dir, &table) {
            t.before_read(d, Some(holder)).await;
            self.not_deposed()?;
        }
        let lease = dir
            .as_deref()
            .and_then(|d| table.as_ref().and_then(|t| t.grant(d, holder, exclusive)));
        // An exclusive lease is for writing: the holder must be allowed to create names
        // there, and learns the directory's attributes (docs/fuse.md "Write-behind").
        let mut dir_attrs = lease.as_ref().and_then(|g| g.attrs.clone());
        // Asked again: checked again (the caller may be another, the directory's own
        // entry may have changed since: its mode and owner live on its parent's partition).
        if let (true, Some(g), Some(d), Some(t)) = (exclusive, &lease, &dir, &table)
            && g.exclusive
        {
            let probe = myriad_placement::join(d, "x");
            // A frozen directory takes no changes: none may be answered behind either; nor
            // in an automatic index's tree, whose first change must reach this server.
            let frozen = self.indexed_here(d).unwrap_or(true);
            match self.may_create(&caller, &probe).await {
                Ok(Some(attrs)) if !frozen => {
                    t.set_attrs(d, holder, attrs.clone());
                    dir_attrs = Some(attrs);
                }
                _ => t.share(d, holder),
            }
        }
        let body = Request::Client(request);
        let answer = match self
            .dispatch_request(None, epoch, caller, body, &Made::now())
            .await
        {
            Ok(r) => Ok(Box::new(r)),
            // A negative entry is leased too; every other error goes back as it is (the
            // client's routing acts on redirects and wrong shards).
            Err(WireError::NotFound) => Err(WireError::NotFound),
            Err(e) => return Err(e),
        };
        let lease = lease.map(|g| myriad_proto::LeaseGrant {
            key: g.key,
            valid_ms: crate::commit::leases::LEASE_PERIOD.as_millis() as u64,
            exclusive: dir_attrs,
        });
        Ok(Response::Leased { answer, lease })
    }

    /// A batch of changes sent once (a write-behind journal's), applied in order, each
    /// as if sent alone; one answered busy or routed elsewhere stops it (the rest are
    /// answered busy, untried).
    async fn serve_batch(
        self: &Arc<Self>,
        epoch: u64,
        caller: Caller,
        (ops, times): (Vec<SentOnce>, Vec<i64>),
        (touches, serving): (BatchTouches, u64),
    ) -> Result<Response, WireError> {
        if ops.len() > myriad_proto::limits::BATCH_MAX {
            return Err(WireError::InvalidArgument(format!(
                "at most {} changes per batch",
                myriad_proto::limits::BATCH_MAX
            )));
        }
        let mut out = Vec::with_capacity(ops.len());
        let mut stopped = false;
        for (i, op) in ops.into_iter().enumerate() {
            // A change that must be tried again (busy, or routed elsewhere now) stops the
            // batch: the ones after it may depend on it, and the client sends them again
            // in order.
            if stopped {
                out.push(Err(WireError::Busy));
                continue;
            }
            let SentOnce {
                id,
                request,
                visible,
            } = op;
            let made = Made {
                at: times.get(i).copied(),
                batch: Some(touches.clone()),
                serving: Some(serving),
                ..Made::now()
            };
            let once = self.serve_once(epoch, caller.clone(), id, request, (visible, &made));
            let r = Box::pin(once).await;
            // Any change refused for now stops it (an undone mkdir answered `TimedOut`
            // while its home failed over: an rmdir of it after would be refused for good).
            stopped = matches!(&r, Err(e) if e.is_transient() || e.is_routing());
            out.push(r);
        }
        Ok(Response::Bundle(out))
    }
}
