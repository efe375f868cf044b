//! Which files clients keep open on a partition, until when (`KeepOpen`; the orphans of
//! `orphans.rs` wait for them). In memory: a new primary starts empty, with `opened`
//! telling it how long to wait before it drops anything.

use std::collections::HashMap;
use std::sync::Mutex;

use myriad_proto::InodeId;
use tokio::time::Instant;

/// Which inodes clients keep open, until when.
pub(crate) struct OpenFiles {
    pub(crate) opened: Instant,
    pub(crate) kept: Mutex<HashMap<InodeId, Instant>>,
}

impl OpenFiles {
    pub(crate) fn new(now: Instant) -> OpenFiles {
        OpenFiles {
            opened: now,
            kept: Mutex::new(HashMap::new()),
        }
    }
}
