//! What a copy does: applies batches strictly in sequence order, answers once they are
//! durable, takes whole copies, and serves its state for checks and repair.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use myriad_placement::PartitionId;
use myriad_proto::{Request, Response, WireError};
use myriad_storage::{Batch, Kv, Space, StorageError, Store};
use tokio::sync::{oneshot, watch};

use crate::commit::{CHAIN_KEY, Done, SEQ_KEY, SyncSlot, Syncer, TERM_KEY};
use crate::replication::entropy;
use crate::replication::wire::{
    COPYING_KEY, PARK_AHEAD_MAX, WINDOW, empty_marked, from_wire, is_bookkeeping, page_limit,
    partition_store, to_ops,
};
use crate::state::mutation::{Outcome, storage_err};
use myriad_proto::ReplicaRequest;

/// The backup side of one partition on this server.
pub(crate) struct Backup {
    pid: PartitionId,
    store: Store,
    state: Mutex<BackupState>,
    changed: watch::Sender<u64>,
}

pub(crate) struct BackupState {
    /// The next seq to apply.
    next: u64,
    /// The batch chain after the last batch applied (`CHAIN_KEY`).
    chain: u64,
    /// True while a whole copy is being received (the store is incomplete).
    copying: bool,
    /// Whole copies started since this copy was opened: a read that saw this number change
    /// may have read a store being emptied.
    resets: u64,
    /// Batches that arrived ahead of `next`, applied once it reaches them if they continue
    /// this copy's chain.
    parked: BTreeMap<u64, Parked>,
    /// The chain after each of the last `RECENT_KEPT` batches applied: a resend is
    /// acknowledged only if it is the batch applied under its number.
    applied: BTreeMap<u64, u64>,
}

impl BackupState {
    /// The last batch applied; None while a whole copy is arriving.
    fn seq(&self) -> Option<u64> {
        (!self.copying).then(|| self.next - 1)
    }
}

/// What became of a batch sent to this copy (`receive`).
enum Received {
    /// Applied, parked, or acknowledged again: its answer comes once durable.
    Queued,
    /// This copy cannot take it (`Response::ReplicaGap`): another history, lost batches, or
    /// a whole copy arriving (`None`).
    Gap(Option<u64>),
    /// Not now (too far ahead of what this copy has).
    Refused(WireError),
}

pub(crate) struct Parked {
    batch: Batch,
    prev_chain: u64,
    chain: u64,
    reply: oneshot::Sender<Result<Done, WireError>>,
}

/// Chains of applied batches remembered for resends: a primary resends only batches within
/// its window, and batches wait in the parking lot at most `PARK_AHEAD_MAX` ahead.
const RECENT_KEPT: usize = PARK_AHEAD_MAX as usize + WINDOW;

impl BackupState {
    fn applied_one(&mut self, seq: u64, chain: u64) {
        // Strictly in order: a copy never skips a batch nor applies one twice.
        debug_assert_eq!(seq, self.next, "batch {seq} applied out of order");
        self.record(seq, chain);
    }

    /// A whole copy ends at batch `seq` with chain `chain`: what this copy holds now.
    fn copied_at(&mut self, seq: u64, chain: u64) {
        self.applied.clear();
        self.record(seq, chain);
    }

    fn record(&mut self, seq: u64, chain: u64) {
        self.next = seq + 1;
        self.chain = chain;
        self.applied.insert(seq, chain);
        while self.applied.len() > RECENT_KEPT {
            self.applied.pop_first();
        }
    }
}

impl Backup {
    pub(crate) fn open(
        kv: Arc<dyn Kv>,
        pid: PartitionId,
    ) -> Result<Backup, myriad_storage::StorageError> {
        let store = partition_store(kv, pid)?;
        let last = store.meta_u64(SEQ_KEY)?.unwrap_or(0);
        let chain = store.meta_u64(CHAIN_KEY)?.unwrap_or(0);
        let copying = store.meta_u64(COPYING_KEY)?.is_some();
        Ok(Backup {
            pid,
            store,
            state: Mutex::new(BackupState {
                next: last + 1,
                chain,
                copying,
                resets: 0,
                parked: BTreeMap::new(),
                applied: BTreeMap::from([(last, chain)]),
            }),
            changed: watch::channel(0).0,
        })
    }

    /// Starts receiving a whole copy: marks the store incomplete and empties it.
    pub(crate) fn reset(&self) -> Result<(), WireError> {
        let mut st = self.lock();
        st.copying = true;
        st.resets += 1;
        st.parked.clear();
        st.applied.clear();
        empty_marked(&self.store)?;
        Ok(())
    }

    /// Signalled whenever batches this copy applied are durable.
    pub(crate) fn changed(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The last batch applied (None while a whole copy is arriving) and the number of
    /// whole copies started so far.
    pub(crate) fn standing(&self) -> (Option<u64>, u64) {
        let st = self.lock();
        (st.seq(), st.resets)
    }

    /// The last batch applied; None while a whole copy is arriving.
    pub(crate) fn seq(&self) -> Option<u64> {
        self.lock().seq()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, BackupState> {
        crate::unpoisoned::lock(&self.state)
    }

    /// Batch `seq` from the primary: applied (with the parked batches that follow it) if it
    /// is the next and continues this copy's chain, parked if ahead, acknowledged again if
    /// it is the batch applied under its number. Any other case means this copy holds
    /// another history (or lost batches): a gap, and the primary copies the whole
    /// partition. Its answer goes to `batch.reply` once durable.
    fn receive(&self, slot: SyncSlot, seq: u64, acked: u64, batch: Parked) -> Received {
        let mut st = self.lock();
        if st.copying {
            return Received::Gap(None);
        }
        let gap = Received::Gap(Some(st.next));
        if st.next <= acked {
            // The primary counts batches up to `acked` as acknowledged here, but this copy
            // does not have them: it lost its disk.
            st.parked.clear();
            return gap;
        }
        if seq < st.next {
            // A resend of a batch applied: acknowledged once durable, if it is the same.
            if st.applied.get(&seq) != Some(&batch.chain) {
                return gap;
            }
            slot.after_sync(self.changed.clone(), vec![(batch.reply, Done::unit(seq))]);
            return Received::Queued;
        }
        if seq > st.next {
            if seq - st.next > PARK_AHEAD_MAX {
                return Received::Refused(WireError::Busy);
            }
            // A batch parked under this number before (a resend, or another history's)
            // gives way; its sender hears `backup replaced` and sends again if it still
            // should.
            st.parked.insert(seq, batch);
            return Received::Queued;
        }
        if batch.prev_chain != st.chain {
            return gap;
        }
        let mut ready = vec![(seq, batch)];
        let mut chain = ready[0].1.chain;
        let mut n = seq + 1;
        while let Some(p) = st.parked.remove(&n) {
            if p.prev_chain != chain {
                // Parked by a stream of another history: dropped (its sender hears
                // `backup replaced`), and so is everything parked after it.
                st.parked.clear();
                break;
            }
            chain = p.chain;
            ready.push((n, p));
            n += 1;
        }
        let mut replies = Vec::with_capacity(ready.len());
        for (s, p) in ready {
            if let Err(e) = self.store.commit(p.batch) {
                // Nothing after a failed batch may be applied.
                tracing::error!(
                    partition = %self.pid,
                    seq = s,
                    "replicated batch failed: {e}"
                );
                let _ = p.reply.send(Err(storage_err(e)));
                break;
            }
            st.applied_one(s, p.chain);
            replies.push((p.reply, Done::unit(s)));
        }
        slot.after_sync(self.changed.clone(), replies);
        Received::Queued
    }

    pub(crate) async fn handle(
        &self,
        syncer: &Syncer,
        body: Request,
    ) -> Result<Response, WireError> {
        match body {
            Request::Replica(ReplicaRequest::Replicate {
                seq,
                prev_chain,
                chain,
                acked,
                ops,
            }) => {
                let batch = from_wire(Arc::unwrap_or_clone(ops))?;
                self.replicate(syncer, (seq, acked), (prev_chain, chain), batch)
                    .await
            }
            Request::Replica(ReplicaRequest::ReplicaSeq) => {
                let st = self.lock();
                let chain = self
                    .store
                    .meta_u64(CHAIN_KEY)
                    .map_err(storage_err)?
                    .unwrap_or(0);
                let term = self
                    .store
                    .meta_u64(TERM_KEY)
                    .map_err(storage_err)?
                    .unwrap_or(0);
                Ok(Response::ReplicaState {
                    seq: st.seq(),
                    chain,
                    term,
                })
            }
            Request::Replica(ReplicaRequest::ReplicaReset) => {
                let (tx, rx) = oneshot::channel();
                let slot = syncer.slot().await?;
                self.reset()?;
                slot.after_sync(self.changed.clone(), vec![(tx, Done::unit(0))]);
                rx.await
                    .map_err(|_| WireError::Unavailable("backup replaced".into()))??;
                Ok(Response::Unit)
            }
            Request::Replica(ReplicaRequest::ReplicaCopy { ops }) => {
                self.copy_page(syncer, from_wire(ops)?).await
            }
            Request::Replica(ReplicaRequest::ReplicaCopyDone { seq, chain }) => {
                self.copy_done(syncer, seq, chain).await
            }
            Request::Replica(ReplicaRequest::ReplicaRecord { space, key }) => {
                let space = Space::partition_space(space)
                    .ok_or_else(|| WireError::InvalidArgument(format!("no space {space}")))?;
                let raw = self.store.raw_record(space, &key).map_err(storage_err)?;
                Ok(Response::RecordCopy(
                    raw.filter(|v| myriad_storage::record_intact(v))
                        .map(serde_bytes::ByteBuf::from),
                ))
            }
            Request::Replica(ReplicaRequest::ReplicaBlock { ino, block }) => {
                match self.store.block(ino, block) {
                    Ok(d) => Ok(Response::BlockCopy(d.map(serde_bytes::ByteBuf::from))),
                    Err(StorageError::Checksum { .. }) => {
                        tracing::error!(
                            partition = %self.pid,
                            ino = %ino,
                            block,
                            "backup copy of a block fails its checksum too"
                        );
                        Err(WireError::Corrupt { ino, block })
                    }
                    Err(e) => Err(storage_err(e)),
                }
            }
            Request::Replica(ReplicaRequest::ReplicaRead { space, after }) => {
                let space = Space::partition_space(space)
                    .ok_or_else(|| WireError::InvalidArgument(format!("unknown space {space}")))?;
                if self.lock().copying {
                    return Ok(Response::ReplicaGap { next: None });
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
            Request::Replica(ReplicaRequest::ReplicaSums { at, chain }) => {
                self.at_batch(at, chain)?;
                let sums = entropy::bucket_sums(&self.store).await?;
                self.at_batch(at, chain)?;
                Ok(Response::Sums(sums))
            }
            Request::Replica(ReplicaRequest::ReplicaBucket {
                at,
                chain,
                space,
                bucket,
            }) => self.bucket_keys((at, chain), space, bucket).await,
            _ => Err(WireError::InvalidArgument(
                "not a replication request".into(),
            )),
        }
    }

    /// A batch of the primary's stream: queued to be applied in order on its chain, and
    /// answered once durable (`ReplicaGap` if this copy cannot take it: a whole copy).
    async fn replicate(
        &self,
        syncer: &Syncer,
        (seq, acked): (u64, u64),
        (prev_chain, chain): (u64, u64),
        batch: Batch,
    ) -> Result<Response, WireError> {
        let (reply, rx) = oneshot::channel();
        let batch = Parked {
            batch,
            prev_chain,
            chain,
            reply,
        };
        match self.receive(syncer.slot().await?, seq, acked, batch) {
            Received::Queued => {}
            Received::Gap(next) => return Ok(Response::ReplicaGap { next }),
            Received::Refused(e) => return Err(e),
        }
        rx.await
            .map_err(|_| WireError::Unavailable("backup replaced".into()))??;
        Ok(Response::Unit)
    }

    /// One page of a whole copy (after `ReplicaReset`), durable before the next page: a
    /// crash must not leave holes in a copy.
    async fn copy_page(&self, syncer: &Syncer, mut batch: Batch) -> Result<Response, WireError> {
        // The primary's own sequence number is not the copy's: set at the end.
        batch
            .ops
            .retain(|(space, key, _)| !is_bookkeeping(*space, key));
        let (tx, rx) = oneshot::channel();
        let slot = syncer.slot().await?;
        {
            let st = self.lock();
            if !st.copying {
                return Err(WireError::Protocol(
                    "replica copy page without a reset".into(),
                ));
            }
            self.store.commit(batch).map_err(storage_err)?;
            slot.after_sync(self.changed.clone(), vec![(tx, Done::unit(0))]);
        }
        rx.await
            .map_err(|_| WireError::Unavailable("backup replaced".into()))??;
        Ok(Response::Unit)
    }

    /// The end of a whole copy: the copy is at batch `seq` on `chain`, durable.
    async fn copy_done(
        &self,
        syncer: &Syncer,
        seq: u64,
        chain: u64,
    ) -> Result<Response, WireError> {
        let (tx, rx) = oneshot::channel();
        let slot = syncer.slot().await?;
        {
            let mut st = self.lock();
            if !st.copying {
                return Err(WireError::Protocol(
                    "replica copy end without a reset".into(),
                ));
            }
            let mut b = Batch::new();
            self.store.put_meta_u64(&mut b, SEQ_KEY, seq);
            self.store.put_meta_u64(&mut b, CHAIN_KEY, chain);
            b.delete(Space::Meta, COPYING_KEY.as_bytes().to_vec());
            self.store.commit(b).map_err(storage_err)?;
            st.copying = false;
            st.copied_at(seq, chain);
            slot.after_sync(self.changed.clone(), vec![(tx, Done::unit(seq))]);
        }
        rx.await
            .map_err(|_| WireError::Unavailable("backup replaced".into()))??;
        Ok(Response::Unit)
    }

    /// Anti-entropy: the keys of one bucket of `space` and their hashes, at batch `at` on
    /// `chain` (`Busy` if this copy is elsewhere).
    async fn bucket_keys(
        &self,
        (at, chain): (u64, u64),
        space: u8,
        bucket: u32,
    ) -> Result<Response, WireError> {
        let space = Space::partition_space(space)
            .ok_or_else(|| WireError::InvalidArgument(format!("unknown space {space}")))?;
        let bucket = usize::try_from(bucket)
            .ok()
            .filter(|&b| b < entropy::BUCKETS_PER_SPACE)
            .ok_or_else(|| WireError::InvalidArgument(format!("no bucket {bucket}")))?;
        self.at_batch(at, chain)?;
        let keys = entropy::bucket_keys(&self.store, space, bucket).await?;
        self.at_batch(at, chain)?;
        Ok(Response::BucketKeys(
            keys.into_iter()
                .map(|(k, h)| (serde_bytes::ByteBuf::from(k), h))
                .collect(),
        ))
    }

    /// `Busy` unless this copy has applied exactly batch `at` of the history whose chain
    /// after it is `chain`: anti-entropy compares two copies at one batch of one history
    /// only. (Simulation seed 5694 with `--dir-moves`: a copy of another history at the
    /// same batch number, about to be replaced whole by the stream, was compared and
    /// "repaired".)
    fn at_batch(&self, at: u64, chain: u64) -> Result<(), WireError> {
        let st = self.lock();
        if st.seq() == Some(at) && st.chain == chain {
            Ok(())
        } else {
            Err(WireError::Busy)
        }
    }
}

impl Done {
    pub(crate) fn unit(seq: u64) -> Done {
        Done {
            outcome: Outcome::Unit,
            seq,
        }
    }
}

#[cfg(test)]
mod tests;
