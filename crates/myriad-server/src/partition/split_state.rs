//! What a partition remembers about splits: names added per directory since it was last
//! checked, and the splits running.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct SplitState {
    pub(super) added: Mutex<BTreeMap<String, u64>>,
    pub(super) running: Mutex<BTreeSet<String>>,
}
