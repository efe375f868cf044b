//! Anti-entropy (docs/write-path.md, part 3): now and then a primary compares its
//! partition with each backup's copy and makes what differs equal again, so that a copy
//! damaged or diverged outside the write path (a flipped bit on disk, a lost file, a bug)
//! is found and repaired without anyone reading the damaged key or running `fsck`.
//!
//! A round: a barrier (every batch so far is on every member copy), then the sums of the
//! partition's keys in buckets (`replication/entropy.rs`) here and on each backup, at the
//! same batch; for each bucket that differs, its keys with a hash of each value, here and
//! there; every key on which they disagree is written again with this copy's value (or
//! deleted everywhere if it has none) in an ordinary replicated batch (`Mutation::Resync`).
//! The primary's copy is the one clients read and every acknowledged write went through,
//! so it is the reference; a value here that fails its checksum is left alone (the read
//! path repairs it from an intact copy). A copy that is not at the barrier's batch (the
//! partition took more writes meanwhile, or the copy is joining) answers `Busy` and is
//! compared in a later round: a partition is checked while it is quiet.

use std::collections::BTreeSet;

use myriad_proto::{Endpoints, ReplicaRequest, Request, Response, WireError};
use myriad_storage::Space;

use crate::partition::core::Partition;
use crate::replication::entropy::{BUCKETS_PER_SPACE, bucket_keys, bucket_sums, differing};
use crate::state::mutation::{Mutation, Outcome, storage_err};

/// Keys rewritten per `Resync` batch.
const RESYNC_KEYS_MAX: usize = 1024;

/// What one round did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct EntropyRound {
    /// Backups compared at the round's batch.
    pub(crate) compared: usize,
    /// Backups not at that batch (compared another time).
    pub(crate) busy: usize,
    /// Keys written again on every copy.
    pub(crate) repaired: u64,
}

impl Partition {
    /// One anti-entropy round over every backup the map gives this partition.
    pub(crate) async fn anti_entropy(&self) -> Result<EntropyRound, WireError> {
        let mut round = EntropyRound::default();
        if !self.env.serves(self.me) {
            return Ok(round);
        }
        self.applier.run(Mutation::Barrier).await?;
        let at = self.last_batch()?;
        let chain = self
            .committed
            .meta_u64(crate::commit::CHAIN_KEY)
            .map_err(storage_err)?
            .unwrap_or(0);
        // The committed store: what batches up to `at` hold, not what the applier has
        // staged for the next (a held round's staged key, counted here and not on the
        // copy, would look like a diverged copy).
        let mine = bucket_sums(&self.committed).await?;
        if self.last_batch()? != at {
            return Ok(round);
        }
        let st = self.env.map();
        let ends = Endpoints {
            target: self.me,
            source: self.me,
        };
        let mut keys: BTreeSet<(Space, Vec<u8>)> = BTreeSet::new();
        for server in st.map.backups_of(self.me) {
            let asked = Request::Replica(ReplicaRequest::ReplicaSums { at, chain });
            let theirs = match self.env.send(server, st.map.epoch, ends, &asked).await {
                Ok(Response::Sums(s)) if s.len() == mine.len() => s,
                _ => {
                    round.busy += 1;
                    continue;
                }
            };
            round.compared += 1;
            for i in (0..mine.len()).filter(|&i| mine[i] != theirs[i]) {
                let space = Space::PARTITION[i / BUCKETS_PER_SPACE];
                let bucket = i % BUCKETS_PER_SPACE;
                let asked = Request::Replica(ReplicaRequest::ReplicaBucket {
                    at,
                    chain,
                    space: space.code(),
                    bucket: u32::try_from(bucket).unwrap_or(u32::MAX),
                });
                let Ok(Response::BucketKeys(theirs)) =
                    self.env.send(server, st.map.epoch, ends, &asked).await
                else {
                    continue;
                };
                let theirs: Vec<(Vec<u8>, u64)> =
                    theirs.into_iter().map(|(k, h)| (k.into_vec(), h)).collect();
                let here = bucket_keys(&self.committed, space, bucket).await?;
                // A batch committed here since `at` (a sweep, a client's change) makes
                // this copy's keys newer than the backup's answer: not a divergence.
                // The round ends without repairing anything; the next one compares again.
                if self.last_batch()? != at {
                    round.busy += 1;
                    return Ok(round);
                }
                for k in differing(&here, &theirs) {
                    tracing::warn!(
                        partition = %self.me,
                        backup = %server,
                        at,
                        space = space.name(),
                        key = %String::from_utf8_lossy(&k).escape_debug(),
                        "anti-entropy: a key differs between copies; rewriting it on every copy"
                    );
                    keys.insert((space, k));
                }
            }
        }
        let keys: Vec<(Space, Vec<u8>)> = keys.into_iter().collect();
        for chunk in keys.chunks(RESYNC_KEYS_MAX) {
            let m = Mutation::Resync {
                keys: chunk.to_vec(),
            };
            if let Outcome::Resynced(n) = self.applier.run(m).await? {
                round.repaired += n;
            }
        }
        self.env.count("anti_entropy_rounds");
        for _ in 0..round.repaired {
            self.env.count("anti_entropy_keys_repaired");
        }
        Ok(round)
    }

    /// The last batch committed to this partition's store.
    fn last_batch(&self) -> Result<u64, WireError> {
        Ok(self
            .committed
            .meta_u64(crate::commit::SEQ_KEY)
            .map_err(storage_err)?
            .unwrap_or(0))
    }
}
