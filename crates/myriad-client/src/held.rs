//! Changes answered once applied, kept until they are durable on every copy (docs/fuse.md
//! "Keeping answered changes until they are durable"). A mount's changes are answered as
//! soon as their primary applied them (`SentOnce::visible`, `Response::Applied`); the copies
//! have them a moment later. If the primary dies in between, they are lost there, but not
//! here: the client keeps each one (its `OnceId` and the request itself) until a barrier
//! (`SyncPartition`) of the incarnation that answered it succeeds, and sends it again
//! (`Envelope::Resend`) to the partition's next primary before anything else of that
//! partition: the new primary answers one that survived by its recorded outcome and applies
//! one that did not, unless another client changed what it touches meanwhile.
//!
//! How the client knows a primary may have changed: the map names another server for the
//! partition, or the connection to that server is not the one the changes were answered
//! over (a restarted server is always a new connection: `Link::connection`), or a change
//! was answered by another incarnation, or a barrier says the incarnation is gone. Any of
//! these, before a request to that partition or after its answer, and the partition is
//! recovered first (`recover`): barriers, then the resends, then the request (an answer
//! that came over a new connection is asked again, a change by its `OnceId`).
//!
//! Bounds: `HELD_BYTES_MAX` and `HELD_CHANGES_MAX` per client; past them a new change
//! waits for barriers to make room (back-pressure, not loss). The mount sends a barrier
//! to every partition holding changes every `BARRIER_EVERY` (`sync_round`).

use myriad_placement::PartitionId;
use myriad_proto::{
    ClientRequest, Envelope, FsError, OnceId, Request, Response, SentOnce, WireError,
};

use crate::client::{Client, Route};
use crate::held_state::{Change, ELSEWHERE_WAIT, RESEND_PROTOCOL, ROOM_WAIT, size_of};

impl Client {
    /// Keeps change `request`, sent as `id` along `route` and answered once applied by
    /// incarnation `incarnation` of partition `pid`'s primary at `addr`, over connection
    /// `connection`.
    pub(crate) fn hold(
        &self,
        (pid, incarnation): (PartitionId, u64),
        (addr, connection): (&str, u64),
        route: &Route,
        id: OnceId,
        request: ClientRequest,
    ) {
        self.keep_low(id.seq);
        let bytes = size_of(&request);
        let mut g = self.held.lock();
        g.bytes += bytes;
        g.count += 1;
        let part = g.parts.entry(pid).or_default();
        if let Some(last) = part.changes.back()
            && (last.incarnation != incarnation
                || part.addr != addr
                || part.connection != connection)
        {
            // Answered by another primary than the earlier ones: those may be lost there.
            part.suspect = true;
        }
        part.addr = addr.to_string();
        part.connection = connection;
        part.changes.push_back(Change {
            id,
            request,
            route: route.clone(),
            incarnation,
            bytes,
        });
    }

    /// After an answer from partition `pid`'s primary (asked over connection `before`):
    /// whether it holds changes and the connection is another now.
    pub(crate) fn held_needs_recovery_after(
        &self,
        pid: PartitionId,
        st: &crate::client::MapState,
        route: &Route,
        before: u64,
    ) -> bool {
        if !self.held.lock().parts.contains_key(&pid) {
            return false;
        }
        Client::address_of(st, route, pid)
            .is_some_and(|addr| self.transport.link(&addr).connection != before)
    }

    /// The partitions holding changes whose primary may have changed since it answered
    /// them (the map names another server, or the connection to it is another). Any is
    /// recovered before a request to any partition: a change elsewhere may depend on one
    /// of them (a file created in a directory whose setgid bit a lost chmod set).
    pub(crate) fn held_to_recover(&self, for_pid: PartitionId) -> Vec<PartitionId> {
        let g = self.held.lock();
        if g.parts.is_empty() {
            return Vec::new();
        }
        // Before every request: no allocation, one look at the map.
        let now = tokio::time::Instant::now();
        let st = self.st();
        g.parts
            .iter()
            .filter(|(pid, p)| {
                **pid == for_pid || p.failed_at.is_none_or(|t| now >= t + ELSEWHERE_WAIT)
            })
            .filter(|(pid, p)| {
                p.suspect
                    || st.map.partition_addr(**pid) != Some(p.addr.as_str())
                    || self.transport.link(&p.addr).connection != p.connection
            })
            .map(|(pid, _)| *pid)
            .collect()
    }

    /// Before a request to partition `pid`: recovers `stale` (`held_to_recover`). Its own
    /// failure is the request's; another partition's is waited for at most
    /// `ELSEWHERE_WAIT`, then noted and passed over.
    pub(crate) async fn recover_before(
        &self,
        pid: PartitionId,
        stale: Vec<PartitionId>,
    ) -> Result<(), WireError> {
        for p in stale {
            if p == pid {
                self.recover(p).await?;
                continue;
            }
            let r = tokio::time::timeout(ELSEWHERE_WAIT, self.recover(p)).await;
            if !matches!(r, Ok(Ok(()))) {
                tracing::debug!(partition = %p, "held changes not recovered before a request elsewhere: {r:?}");
                if let Some(part) = self.held.lock().parts.get_mut(&p) {
                    part.failed_at = Some(tokio::time::Instant::now());
                }
            }
        }
        Ok(())
    }

    /// Partition `pid` holds changes: its next request recovers it first.
    pub(crate) fn held_suspect(&self, pid: PartitionId) {
        if let Some(p) = self.held.lock().parts.get_mut(&pid) {
            p.suspect = true;
        }
    }

    /// Drops held changes `ids` of partition `pid` (durable, or given up as lost).
    fn drop_held(&self, pid: PartitionId, ids: &[OnceId]) {
        if ids.is_empty() {
            return;
        }
        let mut g = self.held.lock();
        let mut freed = (0, 0);
        if let Some(p) = g.parts.get_mut(&pid) {
            p.changes.retain(|c| {
                let keep = !ids.contains(&c.id);
                if !keep {
                    freed.0 += c.bytes;
                    freed.1 += 1;
                }
                keep
            });
            if p.changes.is_empty() {
                g.parts.remove(&pid);
            }
        }
        g.bytes -= freed.0;
        g.count -= freed.1;
        drop(g);
        for id in ids {
            self.release_low(id.seq);
        }
    }

    fn lost(&self, why: String) {
        tracing::error!("a change this client answered was lost: {why}");
        let mut g = self.held.lock();
        g.lost.get_or_insert(why);
    }

    /// Makes partition `pid`'s held changes durable: a barrier per incarnation that
    /// answered them; those of an incarnation that is gone are sent again, in order.
    /// On success nothing taken at the start is held any more.
    /// Its requests, and whatever they ask on the way (a shard map, an earlier
    /// partition's record), are routed unheld: recovering again would wait for this very
    /// recovery.
    pub(crate) async fn recover(&self, pid: PartitionId) -> Result<(), WireError> {
        let one = {
            let mut g = match self.held.recovering.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            g.entry(pid).or_default().clone()
        };
        let _one = one.lock().await;
        let taken: Vec<(OnceId, u64)> = {
            let g = self.held.lock();
            match g.parts.get(&pid) {
                Some(p) => p.changes.iter().map(|c| (c.id, c.incarnation)).collect(),
                None => return Ok(()),
            }
        };
        let mut incarnations: Vec<u64> = Vec::new();
        for (_, inc) in &taken {
            if !incarnations.contains(inc) {
                incarnations.push(*inc);
            }
        }
        let mut gone = Vec::new();
        for inc in incarnations {
            let barrier = ClientRequest::SyncPartition { incarnation: inc };
            let of_inc: Vec<OnceId> = taken
                .iter()
                .filter(|(_, i)| *i == inc)
                .map(|(id, _)| *id)
                .collect();
            match self
                .route_unheld(Route::Partition(pid), Request::from(barrier))
                .await
            {
                Ok(_) => self.drop_held(pid, &of_inc),
                Err(WireError::Io(_)) => gone.push(inc),
                Err(e) => {
                    tracing::debug!(partition = %pid, "held changes: barrier failed: {e}");
                    return Err(e);
                }
            }
        }
        if !gone.is_empty() {
            self.resend(pid, &gone).await?;
        }
        // Whatever is held now was answered after: over the current link.
        let mut g = self.held.lock();
        if let Some(p) = g.parts.get_mut(&pid) {
            p.suspect = false;
            p.failed_at = None;
            if let Some((addr, connection)) = self.current_link(pid) {
                p.addr = addr;
                p.connection = connection;
            }
        }
        Ok(())
    }

    /// The address of partition `pid`'s primary and the connection a request would go
    /// over (empty and 0 if the map names none).
    pub(crate) fn link_of(&self, pid: PartitionId) -> (String, u64) {
        self.current_link(pid).unwrap_or_default()
    }

    /// The protocol partition `pid`'s primary speaks with this client (0: not known yet,
    /// no connection made): a request newer than that is not sent (docs/upgrades.md).
    pub(crate) fn protocol_of(&self, pid: PartitionId) -> u16 {
        self.current_link(pid)
            .map_or(0, |(a, _)| self.transport.link(&a).version)
    }

    /// The address of partition `pid`'s primary and the connection a request would go over.
    fn current_link(&self, pid: PartitionId) -> Option<(String, u64)> {
        let addr = self.st().map.partition_addr(pid)?.to_string();
        let connection = self.transport.link(&addr).connection;
        Some((addr, connection))
    }

    /// Sends again, in order, partition `pid`'s held changes answered by incarnations
    /// `gone`: each is durable or lost when its answer comes.
    async fn resend(&self, pid: PartitionId, gone: &[u64]) -> Result<(), WireError> {
        loop {
            let next = {
                let g = self.held.lock();
                g.parts.get(&pid).and_then(|p| {
                    p.changes
                        .iter()
                        .find(|c| gone.contains(&c.incarnation))
                        .map(|c| (c.id, c.request.clone(), c.route.clone()))
                })
            };
            let Some((id, request, route)) = next else {
                return Ok(());
            };
            let version = self.protocol_of(pid);
            if version != 0 && version < RESEND_PROTOCOL {
                self.lost(format!(
                    "partition {pid}: its primary changed before a change was durable, and its new primary speaks protocol {version}, which cannot take it again"
                ));
                self.drop_held(pid, &[id]);
                continue;
            }
            let what = request.op_name();
            let again = Envelope::Resend { id, request };
            // Applied by an earlier primary of `pid`: asked there first if its name moved.
            let mut tries = crate::client::Tries::at(pid);
            let answer = self
                .route_unheld_tried(route, Request::Client(again), &mut tries)
                .await;
            match answer {
                Ok(_) => {
                    tracing::debug!(partition = %pid, seq = id.seq, "a change answered by an earlier primary was sent again: {what}");
                    self.drop_held(pid, &[id]);
                }
                Err(WireError::Io(why)) => {
                    self.lost(why);
                    self.drop_held(pid, &[id]);
                }
                // Refused for good (the name is gone, or exists now): what it did is not
                // there. Reported like a loss.
                Err(e) if !e.is_transient() && !e.is_routing() => {
                    self.lost(format!(
                        "partition {pid}: a change ({what}) answered by an earlier primary was lost with it, and sent again it failed: {e}"
                    ));
                    self.drop_held(pid, &[id]);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes every change this client had answered once applied durable on every copy
    /// (recovering each partition holding some), or reports that some were lost: `Io`,
    /// once. Other errors (unreachable servers) leave the changes to the next call.
    pub async fn sync_changes(&self) -> Result<(), FsError> {
        let journal = &self.leases.journal;
        let sent = journal
            .drain(&|_, _| true, Some(self.config.request_timeout))
            .await;
        if !sent {
            // Their servers do not take them (they are retried meanwhile).
            return Err(FsError::TimedOut(
                "changes answered behind are not yet taken by their servers".into(),
            ));
        }
        // A removal answered behind and refused when applied: kept as `Io` (a loss).
        let loose = journal.take_loose_error();
        let first_err = self.sync_round().await;
        let lost = self.held.lock().lost.take().map(FsError::Io);
        match (loose, lost, first_err) {
            (Some(e), _, _) | (None, Some(e), _) | (None, None, Some(e)) => Err(e),
            (None, None, None) => Ok(()),
        }
    }

    /// Recovers every partition holding changes, all at once (one round trip and one group
    /// commit for the whole client, not one after another); the first error.
    pub async fn sync_round(&self) -> Option<FsError> {
        let pids: Vec<PartitionId> = self.held.lock().parts.keys().copied().collect();
        let results =
            futures::future::join_all(pids.iter().map(|&pid| self.recover_quickly(pid))).await;
        results.into_iter().find_map(Result::err).map(FsError::from)
    }

    /// `recover`, but a partition whose held changes have one incarnation and a link
    /// that has not changed needs no lock: its barrier alone (the usual case: many
    /// partitions synced at once).
    async fn recover_quickly(&self, pid: PartitionId) -> Result<(), WireError> {
        let plain = {
            let g = self.held.lock();
            g.parts.get(&pid).and_then(|p| {
                let first = p.changes.front()?.incarnation;
                let one = p.changes.iter().all(|c| c.incarnation == first);
                (one && !p.suspect).then(|| {
                    let ids: Vec<OnceId> = p.changes.iter().map(|c| c.id).collect();
                    (first, ids, p.addr.clone(), p.connection)
                })
            })
        };
        let Some((inc, ids, addr, connection)) = plain else {
            return self.recover(pid).await;
        };
        if self.current_link(pid) != Some((addr, connection)) {
            return self.recover(pid).await;
        }
        let barrier = ClientRequest::SyncPartition { incarnation: inc };
        match self
            .route_unheld(Route::Partition(pid), Request::from(barrier))
            .await
        {
            Ok(_) => {
                self.drop_held(pid, &ids);
                Ok(())
            }
            Err(WireError::Io(_)) => {
                self.held_suspect(pid);
                self.recover(pid).await
            }
            Err(e) => Err(e),
        }
    }

    /// Whether some change answered once applied is not yet known durable.
    #[must_use]
    pub fn has_unsynced_changes(&self) -> bool {
        !self.held.lock().parts.is_empty()
    }

    /// Whether this client keeps changes of partition `pid` not yet known durable.
    pub(crate) fn holds_changes_of(&self, pid: PartitionId) -> bool {
        self.held.lock().parts.contains_key(&pid)
    }

    /// Whether a change this client kept was found lost and not yet reported by
    /// `sync_changes`.
    #[must_use]
    pub fn has_lost_changes(&self) -> bool {
        self.held.lock().lost.is_some()
    }

    /// The bytes and number of changes held (for the mount's metrics and tests).
    #[must_use]
    pub fn held_changes(&self) -> (usize, usize) {
        let g = self.held.lock();
        (g.bytes, g.count)
    }

    /// Before a change is sent answered once applied: waits while the held changes are at
    /// their bound, making them durable, at most until `deadline`.
    pub(crate) async fn make_room(&self, deadline: tokio::time::Instant) -> Result<(), FsError> {
        while self.held.full() {
            if tokio::time::Instant::now() >= deadline {
                let (bytes, count) = self.held_changes();
                return Err(FsError::TimedOut(format!(
                    "this client holds {count} changes ({bytes} bytes) its servers have not yet made durable"
                )));
            }
            if self.sync_round().await.is_some() || self.held.full() {
                tokio::time::sleep(ROOM_WAIT).await;
            }
        }
        Ok(())
    }

    /// A response that is a change answered once applied: kept (`hold`), and its answer.
    pub(crate) fn keep_applied(
        &self,
        (pid, route): (PartitionId, &Route),
        link: (&str, u64),
        req: Request,
        answer: Response,
    ) -> Response {
        match (answer, req) {
            (
                Response::Applied {
                    answer,
                    incarnation,
                },
                Request::Client(Envelope::Once(SentOnce { id, request, .. })),
            ) => {
                self.hold((pid, incarnation), link, route, id, request);
                *answer
            }
            (Response::Applied { answer, .. }, _) => *answer,
            (other, _) => other,
        }
    }
}
