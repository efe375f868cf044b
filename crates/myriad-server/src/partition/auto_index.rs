//! Automatic indexes, the registry's side (docs/metadata-index.md "Automatic indexes"):
//! a node about to change a directory of an automatic index's tree asks the node holding
//! its registry entry to unlink it (`PeerRequest::UnregisterIndex`).

use std::sync::Arc;

use myriad_placement::join;
use myriad_proto::tree_index::TREES_DIR;
use myriad_proto::{WireError, validate_name};

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::partition::made::Made;

impl Partition {
    /// Unlinks registry entry `name` (an automatic index's, pending or live) if it is
    /// there. Its unlink passes the registry's change gate: every client's lease on the
    /// registry is recalled, so every client stops answering from the index, before it
    /// applies.
    pub(crate) async fn unregister_index(
        self: &Arc<Self>,
        st: &MapState,
        name: &str,
    ) -> Result<(), WireError> {
        validate_name(name)?;
        let path = join(TREES_DIR, name);
        self.own_entry(st, &path)?;
        // Unlinked even when the store shows no such entry: a create answered behind (an
        // exclusive lease's journal) reaches the store only once the unlink's gate has
        // recalled that lease. Each applier asks once per index (`Applier::unregistered`).
        match self
            .unlink_entry(TREES_DIR.to_string(), name.to_string(), &Made::now())
            .await
        {
            Ok(_) | Err(WireError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
