//! Nearest-copy reads (docs/zones.md "Nearest copy"): a server keeping an in-sync copy of
//! a partition answers a client's `Stat` or `Fetch` of an entry there, so a client reads
//! in its own zone while the partition's primary is in another.
//!
//! The rule that keeps such reads as fresh as the primary's: a copy answers only under a
//! *loan of reads* from the primary (`PeerRequest::LendReads`), which the primary grants
//! only while the copy's stream is a member, and during which it acknowledges no write
//! the copy has not applied (`Replicator::lend`); and only once the copy has applied the
//! last batch the primary had shipped when it lent (every write acknowledged before).
//! The copy counts the loan from before it asked, the primary from when it answered plus
//! a margin; a loan holds for one map epoch only (a new primary, or copies that changed,
//! need a new one). Exclusive directory leases (a client's creates not sent yet, which a
//! read on the primary recalls first) and loans exclude each other
//! (`LeaseTable::lend_reads`). Anything the copy cannot answer from what it knows to be
//! current (no loan, batches missing, a pending or hard-linked entry, a split part, an
//! ancestor whose attributes no partition served here holds) is `WireError::AskPrimary`,
//! and the client asks the primary.

use std::sync::Arc;
use std::time::Duration;

use myriad_net::Peer;
use myriad_placement::{PartitionId, name_hash, split_parent};
use myriad_proto::ask;
use myriad_proto::reply::ReadsLent;
use myriad_proto::{
    Caller, ClientRequest, Endpoints, Envelope, FileKind, Inode, PeerKind, Request, Response,
    WireError, limits, validate_path,
};
use myriad_storage::{EntryRecord, Store};
use tokio::time::Instant;

use crate::host::Host;
use crate::replication::loans::Loan;
use crate::replication::primary::LEND_MARGIN;
use crate::state::perm;
use crate::unpoisoned::lock;

/// How long a loan of reads lasts. Asked again once half of it is gone, in the background
/// while reads go on.
pub(crate) const LEND_PERIOD: Duration = Duration::from_secs(2);
/// The longest a copy waits for its primary's answer to a loan request.
const LEND_ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest a read waits for the copy to apply the batch its loan names.
const CATCH_UP_WAIT: Duration = Duration::from_millis(50);
/// After the primary refused a loan (an exclusive lease held there, a copy joining), reads
/// go to the primary without asking again for this long: a refused ask costs a round trip
/// to the primary on top of the read's own.
const REFUSED_PAUSE: Duration = Duration::from_millis(500);

/// Whether `body` is a read a copy may answer.
pub(crate) fn copy_readable(body: &Request) -> bool {
    matches!(body, Request::Client(Envelope::Alone(c)) if c.copy_may_answer())
}

impl Host {
    /// The primary's side: lends reads of partition `pid` to the server `peer`.
    pub(crate) fn lend_reads(
        &self,
        pid: PartitionId,
        peer: &Peer,
        epoch: u64,
    ) -> Result<Response, WireError> {
        let PeerKind::Server { node_id: copy } = peer.kind else {
            return Err(WireError::PermissionDenied);
        };
        let node = self.serving(pid, epoch)?;
        let st = self.state();
        if epoch < st.map.epoch {
            return Err(WireError::Redirect(Box::new(st.map.clone())));
        }
        let in_sync = st
            .map
            .partition(pid)
            .is_some_and(|p| p.replicas.contains(&copy) && !p.is_behind(copy));
        if !in_sync || copy == self.id {
            return Err(WireError::InvalidArgument(format!(
                "server {copy} keeps no in-sync copy of partition {pid}"
            )));
        }
        node.not_deposed()?;
        let until = Instant::now() + LEND_PERIOD + LEND_MARGIN;
        if !node.leases().is_none_or(|t| t.lend_reads(until)) {
            return Err(WireError::Busy);
        }
        let seq = node
            .replicator
            .lend(copy, LEND_PERIOD)
            .ok_or(WireError::Busy)?;
        Ok(Response::ReadsLent {
            seq,
            valid_ms: u64::try_from(LEND_PERIOD.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// The copy's side: answers `body` (`copy_readable`) from the copy of `pid` kept here,
    /// or `AskPrimary`.
    pub(crate) async fn read_at_copy(
        self: &Arc<Self>,
        pid: PartitionId,
        epoch: u64,
        caller: &Caller,
        body: Request,
    ) -> Result<Response, WireError> {
        let st = self.state();
        if epoch > st.map.epoch {
            return Err(WireError::MapTooOld(st.map.epoch));
        }
        if self.authority.lease_error().is_some() {
            return Err(WireError::AskPrimary);
        }
        let backup = self.backup(pid).ok_or(WireError::AskPrimary)?;
        let loan = self.loan(pid).await.ok_or(WireError::AskPrimary)?;
        // Every batch acknowledged before the loan, applied here.
        let mut changed = backup.changed();
        let deadline = Instant::now() + CATCH_UP_WAIT;
        while backup.seq().is_none_or(|s| s < loan.seq) {
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return Err(WireError::AskPrimary);
            }
        }
        let (_, resets) = backup.standing();
        let store = backup.store();
        let answer = match body {
            Request::Client(Envelope::Alone(ClientRequest::ReadDir {
                path,
                from,
                after,
                limit,
            })) => {
                self.list_here(pid, store, caller, &path, (from, after, limit))
                    .await
            }
            Request::Client(Envelope::Alone(ClientRequest::Stat { path })) => {
                self.entry_read(pid, store, caller, &path, None).await
            }
            Request::Client(Envelope::Alone(ClientRequest::Fetch { path, max_bytes })) => {
                self.entry_read(pid, store, caller, &path, Some(max_bytes))
                    .await
            }
            _ => Err(WireError::AskPrimary),
        };
        // Still under the loan and the map it was lent under, now that the answer (or the
        // error: a name not found is an answer too) is made, and read from a store no whole
        // copy began to replace meanwhile.
        let now_valid = self.state().map.epoch == loan.epoch
            && Instant::now() < loan.until
            && matches!(backup.standing(), (Some(s), r) if s >= loan.seq && r == resets);
        if !now_valid {
            return Err(WireError::AskPrimary);
        }
        answer
    }

    /// A page of the listing of `dir` from the part of it this copy holds.
    async fn list_here(
        &self,
        pid: PartitionId,
        store: &Store,
        caller: &Caller,
        dir: &str,
        (from, after, limit): (u64, Option<String>, u32),
    ) -> Result<Response, WireError> {
        validate_path(dir)?;
        if store.dir(dir).map_err(|_| WireError::AskPrimary)?.is_none() {
            return Err(WireError::AskPrimary);
        }
        let mut dirs = crate::partition::ancestor_replicas::ancestors(dir);
        dirs.push(dir.to_string());
        self.check_dirs(pid, store, caller, &dirs, perm::READ)
            .await?;
        let page = crate::partition::split_dirs::readdir_page(store, dir, from, after, limit)
            .map_err(|_| WireError::AskPrimary)?;
        // Hard-link names: their attributes live with the inode (the primary resolves).
        if let Response::DirPage { entries, .. } = &page
            && entries.iter().any(|e| e.inode.kind == FileKind::HardLink)
        {
            return Err(WireError::AskPrimary);
        }
        Ok(page)
    }

    /// `Stat` (`fetch` None) or `Fetch` of the entry `path` from this copy.
    async fn entry_read(
        &self,
        pid: PartitionId,
        store: &Store,
        caller: &Caller,
        path: &str,
        fetch: Option<u64>,
    ) -> Result<Response, WireError> {
        validate_path(path)?;
        if caller.uid != 0 {
            let dirs = crate::partition::ancestor_replicas::ancestors(path);
            self.check_dirs(pid, store, caller, &dirs, perm::EXEC)
                .await?;
        }
        let st = self.state();
        let inode = entry_here(&st.ring, pid, store, path)?;
        Ok(match fetch {
            None => Response::Attr(inode),
            Some(max_bytes) => {
                let data = if inode.kind == FileKind::File {
                    perm::require(&inode, caller, perm::READ)?;
                    let cs = st.map.chunk_size_bytes;
                    let n = max_bytes.min(cs).min(limits::IO_BYTES_MAX);
                    let (data, whole) = store
                        .read_range_whole(inode.ino, 0, n, inode.size.min(cs))
                        .map_err(|_| WireError::AskPrimary)?;
                    // The entry and its bytes are two reads: a batch applied between them
                    // (an unlink, a truncate) would pair the old size with the blocks left
                    // after (`Partition::still_holds`).
                    if !whole
                        && entry_here(&st.ring, pid, store, path).ok().as_ref() != Some(&inode)
                    {
                        return Err(WireError::AskPrimary);
                    }
                    data
                } else {
                    Vec::new()
                };
                Response::Fetched { inode, data }
            }
        })
    }

    /// Search permission on directories `dirs` (in path order) and `last` on the last one,
    /// from what is known current here: this copy, a partition served here as primary, an
    /// ancestor replica a partition here holds under its lease (TyrFS, kept fresh by its
    /// owner's invalidations), or else resolved by a partition served here as it resolves
    /// its own (asking the owner, keeping a replica of a popular one). Root passes.
    async fn check_dirs(
        &self,
        pid: PartitionId,
        store: &Store,
        caller: &Caller,
        dirs: &[String],
        last: u32,
    ) -> Result<(), WireError> {
        if caller.uid == 0 {
            return Ok(());
        }
        let st = self.state();
        let nodes = self.nodes();
        let mut found: Vec<Option<Result<Inode, WireError>>> = vec![None; dirs.len()];
        let mut elsewhere = Vec::new();
        for (slot, dir) in found.iter_mut().zip(dirs) {
            if let Some(i) = nodes.iter().find_map(|n| n.cached_attrs(dir)) {
                *slot = Some(Ok(i));
                continue;
            }
            let owner = match nodes.first() {
                Some(n) => n.entry_node(dir),
                None => st.ring.owner_of_entry(dir),
            };
            if owner == pid {
                *slot = Some(entry_here(&st.ring, pid, store, dir));
            } else {
                elsewhere.push(dir.clone());
            }
        }
        if !elsewhere.is_empty() {
            let resolver = nodes.first().ok_or(WireError::AskPrimary)?;
            let mut resolved = resolver.resolve_each(&elsewhere).await.into_iter();
            for slot in found.iter_mut().filter(|s| s.is_none()) {
                *slot = resolved.next();
            }
        }
        let n = found.len();
        for (k, r) in found.into_iter().enumerate() {
            // In path order: the first failure is the answer, as on the primary.
            let inode = match r.ok_or(WireError::AskPrimary)? {
                Ok(i) => i,
                Err(
                    e @ (WireError::NotFound
                    | WireError::PermissionDenied
                    | WireError::NotADirectory),
                ) => {
                    return Err(e);
                }
                Err(_) => return Err(WireError::AskPrimary),
            };
            let want = if k + 1 == n { last } else { perm::EXEC };
            match inode.kind {
                FileKind::Directory => perm::require(&inode, caller, want)?,
                FileKind::HardLink => return Err(WireError::AskPrimary),
                _ => return Err(WireError::NotADirectory),
            }
        }
        Ok(())
    }

    /// A loan of reads of `pid` valid now under the current map, asked for if needed.
    async fn loan(self: &Arc<Self>, pid: PartitionId) -> Option<Loan> {
        let epoch = self.state().map.epoch;
        let usable = |l: &Loan, now: Instant| l.epoch == epoch && now < l.until;
        let held = lock(&self.loans.held).get(&pid).copied();
        let now = Instant::now();
        if let Some(l) = held
            && usable(&l, now)
        {
            // Half gone: asked again in the background (unless being asked), reads go on.
            if l.until.saturating_duration_since(now) < LEND_PERIOD / 2 && !self.asking(pid) {
                let host = self.clone();
                tokio::spawn(async move {
                    host.ask_loan(pid).await;
                });
            }
            return Some(l);
        }
        if lock(&self.loans.refused)
            .get(&pid)
            .is_some_and(|until| now < *until)
        {
            return None;
        }
        self.ask_loan(pid).await;
        let l = lock(&self.loans.held).get(&pid).copied()?;
        usable(&l, Instant::now()).then_some(l)
    }

    /// Whether a loan of `pid` is being asked for right now.
    fn asking(&self, pid: PartitionId) -> bool {
        lock(&self.loans.asking)
            .get(&pid)
            .is_some_and(|gate| gate.try_lock().is_err())
    }

    /// Asks `pid`'s primary for a loan of reads (one request at a time per partition; a
    /// caller that waited for another's finds its loan).
    async fn ask_loan(&self, pid: PartitionId) {
        let gate = lock(&self.loans.asking).entry(pid).or_default().clone();
        let Ok(_one) = gate.try_lock() else {
            // Another is asking: wait for its answer.
            let _done = gate.lock().await;
            return;
        };
        let st = self.state();
        let Some(primary) = st.map.primary_of(pid) else {
            return;
        };
        let Some(addr) = st.map.node(primary).map(|n| n.addr.clone()) else {
            return;
        };
        let asked = Instant::now();
        let lend = ask::lend_reads();
        let answer = self
            .transport
            .call_with_timeout(
                &addr,
                st.map.epoch,
                Endpoints::to(pid),
                &Caller::root(),
                &lend.request,
                LEND_ASK_TIMEOUT,
            )
            .await;
        match answer.and_then(|r| lend.answer.of(r)) {
            Ok(ReadsLent { seq, valid_ms }) => {
                let period = Duration::from_millis(valid_ms).min(LEND_PERIOD);
                let loan = Loan {
                    epoch: st.map.epoch,
                    until: asked + period,
                    seq,
                };
                lock(&self.loans.held).insert(pid, loan);
                lock(&self.loans.refused).remove(&pid);
                return;
            }
            Err(e) => tracing::debug!(partition = %pid, "no loan of reads: {e}"),
        }
        lock(&self.loans.refused).insert(pid, Instant::now() + REFUSED_PAUSE);
    }
}

/// The entry `path` as the copy `store` of partition `pid` holds it: only if this copy is
/// where it lives (the parent's part here holds its name, or the parent is unsplit and
/// homed here; for `/`, its own directory object, as `Partition::lookup` reads it) and no
/// operation is changing it; else `AskPrimary`.
fn entry_here(
    ring: &myriad_placement::Ring,
    pid: PartitionId,
    store: &Store,
    path: &str,
) -> Result<Inode, WireError> {
    let ask = |_| WireError::AskPrimary;
    if path == "/" {
        if ring.owner_of_dir("/") != pid {
            return Err(WireError::AskPrimary);
        }
        return store
            .dir("/")
            .map_err(ask)?
            .and_then(|rec| rec.root_attrs)
            .ok_or(WireError::NotFound);
    }
    let (dir, name) = split_parent(path);
    match store.dir(dir).map_err(ask)? {
        Some(rec) => match rec.shard_for(name_hash(name)) {
            Some(s) if s.hidden.is_none() => {}
            _ => return Err(WireError::AskPrimary),
        },
        None if ring.owner_of_dir(dir) == pid => {}
        None => return Err(WireError::AskPrimary),
    }
    match store.entry(dir, name).map_err(ask)? {
        Some(EntryRecord {
            pending: None,
            inode: Some(i),
        }) if i.kind != FileKind::HardLink => Ok(i),
        Some(EntryRecord {
            pending: None,
            inode: None,
        })
        | None => Err(WireError::NotFound),
        Some(_) => Err(WireError::AskPrimary),
    }
}
