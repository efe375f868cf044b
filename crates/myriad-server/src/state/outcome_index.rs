//! The applier's index of the outcomes a partition holds (`outcomes.rs` records and forgets
//! them): apart from `outcomes.rs` so that `ops.rs` (whose `Ctx` carries it) and `outcomes.rs`
//! (which executes on a `Ctx`) do not name each other.

use crate::state::failure::StateError;
use std::collections::BTreeMap;

use myriad_proto::{Response, WireError, codec};
use myriad_storage::{Batch, Store};
use serde::{Deserialize, Serialize};

/// A recorded outcome as stored: when it was recorded, and the answer.
#[derive(Serialize, Deserialize)]
pub(crate) struct Recorded {
    pub(crate) at_ns: i64,
    pub(crate) answer: Response,
}

/// Outcomes read per page while loading `Outcomes`.
const SCAN_PAGE: usize = 4096;

/// The outcomes a partition holds, by client: seq -> when recorded. Kept by the applier
/// (the store's only writer) and loaded from the store on first use, so that forgetting
/// never scans the store: forgotten records linger in the engine as tombstones, and
/// scanning a client's records over them cost more than the creates themselves (measured:
/// 2,000 creates/s instead of 3,600, the time in the memtable's skiplist).
#[derive(Default)]
pub struct Outcomes {
    loaded: bool,
    pub(crate) by_client: BTreeMap<u64, BTreeMap<u64, i64>>,
}

impl Outcomes {
    pub(crate) fn load(&mut self, store: &Store) -> Result<(), StateError> {
        if self.loaded {
            return Ok(());
        }
        self.by_client.clear();
        let mut after = None;
        loop {
            let page = store
                .outcomes(after, SCAN_PAGE)
                .map_err(|e| WireError::Io(e.to_string()))?;
            let Some(&(c, s, _)) = page.last() else {
                break;
            };
            after = Some((c, s));
            for (client, seq, value) in page {
                // One that does not decode is forgotten first (as the oldest).
                let at_ns = codec::decode::<Recorded>(&value).map_or(i64::MIN, |r| r.at_ns);
                self.by_client.entry(client).or_default().insert(seq, at_ns);
            }
        }
        self.loaded = true;
        Ok(())
    }

    /// What this holds may differ from the store (a batch that failed to commit): loaded
    /// again on next use.
    pub fn reload(&mut self) {
        self.loaded = false;
    }

    pub(crate) fn forget(&mut self, store: &Store, b: &mut Batch, client: u64, seq: u64) {
        store.delete_outcome(b, client, seq);
        if let Some(mine) = self.by_client.get_mut(&client) {
            mine.remove(&seq);
            if mine.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }
}
