//! Partition replication (docs/replication.md "Write protocol"), by role: what a primary does
//! (`primary.rs`: ship, wait, acknowledge, the log of recent batches that catches a returning copy up (`log.rs`),
//! whole copies to a copy that lacks batches), what a
//! copy does (`copy_side.rs`: apply in order, report), catching up (`catchup.rs`), the wire form
//! and the store pages (`wire.rs`), batches to one server sharing frames (`bundle.rs`),
//! the loans of reads a copy holds (`loans.rs`), and the other servers, reached through
//! `Peers` (`peers.rs`). Names commit and state below it; never a partition or the process.

pub(crate) mod bundle;
pub(crate) mod catchup;
pub(crate) mod copy_side;
pub(crate) mod entropy;
pub(crate) mod loans;
pub(crate) mod log;
pub(crate) mod peers;
pub(crate) mod primary;
pub(crate) mod wire;
