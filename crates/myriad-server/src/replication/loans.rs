//! The loans of reads a server holds as a copy (docs/zones.md "Nearest copy"; asked for
//! and used by the process, `host_copy_reads.rs`): state only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use myriad_placement::PartitionId;
use tokio::time::Instant;

/// A loan of reads held by this server for one partition it keeps a copy of: valid under
/// map `epoch` (which names the primary that lent it) until `until` (counted from before
/// it was asked), for reads once the copy holds batch `seq`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loan {
    pub(crate) epoch: u64,
    pub(crate) until: Instant,
    pub(crate) seq: u64,
}

/// The loans this server holds, the partitions whose primary refused one lately, and one
/// request in flight per partition.
#[derive(Default)]
pub(crate) struct Loans {
    pub(crate) held: Mutex<BTreeMap<PartitionId, Loan>>,
    /// Partitions whose primary refused a loan, until when not to ask again.
    pub(crate) refused: Mutex<BTreeMap<PartitionId, Instant>>,
    pub(crate) asking: Mutex<BTreeMap<PartitionId, Arc<tokio::sync::Mutex<()>>>>,
}
