//! What a partition's batches carry to its copies: their numbers, chain and term (meta
//! keys written in every batch), and the `Ship` seam replication implements.

use futures::future::BoxFuture;
use myriad_proto::{ReplOp, WireError};
use myriad_storage::Batch;

/// The meta key holding the sequence number of the last batch committed to a partition's
/// store (written in the batch itself; copies apply batches in this order).
pub(crate) const SEQ_KEY: &str = "repl_seq";
/// The meta key holding the hash chain of the batches up to `SEQ_KEY` (written in each batch,
/// so copies hold the same value): two copies at one batch number over different histories
/// (a deposed primary's own batches) differ here, and the primary's stream copies the whole
/// partition to such a copy. Found by the simulation (seed 3059).
pub(crate) const CHAIN_KEY: &str = "repl_chain";
/// The meta key holding the term of the last batch: the map epoch under which the primary
/// that committed it was opened (written in each batch, so copies hold it too). Of two
/// copies, the one whose last batch has the newer term holds every acknowledged batch
/// (each primary caught up before it wrote), whatever their batch numbers: a copy that was
/// down while a newer primary wrote may hold more batches of an older history
/// (simulation seed 60151).
pub(crate) const TERM_KEY: &str = "repl_term";

/// The chain after `batch`: a hash of the previous chain and every operation of the batch.
pub(crate) fn chain_next(prev: u64, batch: &Batch) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&prev.to_le_bytes());
    for (space, key, value) in &batch.ops {
        h.update(&[space.code()]);
        h.update(&(key.len() as u64).to_le_bytes());
        h.update(key);
        match value {
            Some(v) => {
                h.update(&[1]);
                h.update(&(v.len() as u64).to_le_bytes());
                h.update(v);
            }
            None => h.update(&[0]),
        }
    }
    h.digest()
}

/// Where numbered batches go once committed: the partition's copies. Commit names only this
/// trait; replication implements it (the primary's streams), tests may implement it with
/// no copies.
pub trait Ship: Send + Sync {
    /// Holds the shipping order for one batch, from numbering to shipping, so that a copy
    /// added meanwhile starts at a batch boundary.
    fn hold(&self) -> Box<dyn ShipSlot + '_>;
    /// Returns once every current copy has acknowledged every batch up to `seq`.
    fn wait(&self, seq: u64) -> BoxFuture<'_, Result<(), WireError>>;
    /// Ends shipping; writes waiting for acknowledgements fail.
    fn close(&self);
}

/// Where a batch sits in its partition's history: its number, and the batch chain before
/// and after it (`CHAIN_KEY`). Copies apply a batch only on top of `prev_chain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numbered {
    pub seq: u64,
    pub prev_chain: u64,
    pub chain: u64,
}

/// One batch's turn to be shipped (`Ship::hold`).
pub trait ShipSlot {
    /// The batch as copies get it, if any copy wants batches (else it is not encoded).
    fn encode(&self, batch: &Batch) -> Option<Vec<ReplOp>>;
    /// Hands batch `at` (encoded by `encode`) to every copy, in order.
    fn ship(&mut self, at: Numbered, ops: Option<Vec<ReplOp>>);
}

/// A partition without copies: nothing to ship, nothing to wait for (tests of this layer).
#[cfg(test)]
pub struct NoCopies;

#[cfg(test)]
impl Ship for NoCopies {
    fn hold(&self) -> Box<dyn ShipSlot + '_> {
        Box::new(NoCopies)
    }
    fn wait(&self, _seq: u64) -> BoxFuture<'_, Result<(), WireError>> {
        Box::pin(async { Ok(()) })
    }
    fn close(&self) {}
}

#[cfg(test)]
impl ShipSlot for NoCopies {
    fn encode(&self, _batch: &Batch) -> Option<Vec<ReplOp>> {
        None
    }
    fn ship(&mut self, _at: Numbered, _ops: Option<Vec<ReplOp>>) {}
}
