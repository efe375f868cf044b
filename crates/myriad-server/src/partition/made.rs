//! How a client's change is made (`Made`): passed explicitly from where the change arrives
//! (`dispatch.rs`, a batch in `serve_batch`) through its handler to where it is applied
//! and its directory touched (`dirtimes.rs`), in place of the task-locals that carried it
//! between frames (issue 50). An in-memory part below `core.rs`: it names only the commit
//! layer's `Context`, which it becomes where a mutation is submitted.

use std::sync::Arc;

use myriad_proto::WireError;

use crate::commit::{Context, OnceSlot};

/// How long a change may be held up inside a server and still be applied (waiting for a
/// quota allowance, for an undecided directory's mkdir, for the trash's directories):
/// well under any client's request deadline, so that a change is never applied after
/// its client gave up on it and went on to change the same names (simulation seeds 3073
/// with `--quotas` and 711 with `--dir-moves --trash --behind`: a create, then a rename,
/// applied seconds late, undid what their clients had done since). Past it the change
/// answers `Busy`, and a client still waiting sends it again.
pub(crate) const HELD_UP_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// `Busy` once a change begun at `began` has been held up past `HELD_UP_MAX`.
pub(crate) fn in_time(began: tokio::time::Instant) -> Result<(), WireError> {
    if began.elapsed() > HELD_UP_MAX {
        return Err(WireError::Busy);
    }
    Ok(())
}

/// How a client's change is made, passed from where it arrives to where it is applied
/// (issue 50: in place of task-locals): when its client says it made it, the batch whose
/// end its directory's touch waits for, and whose change a touch reports.
#[derive(Clone, Default)]
pub(crate) struct Made {
    /// When the change was made, if its client said (`Envelope::Batch::times`): its
    /// new times and its directory's are that (`Partition::time_of`).
    pub(crate) at: Option<i64>,
    /// Inside a batch (`Partition::batched`): the directories its changes touch, touched
    /// once after the batch's last change.
    pub(crate) batch: Option<BatchTouches>,
    /// The client a touch reports the change of, when it is not the task's own change
    /// (`once`): a batch's touches, sent after its changes.
    pub(crate) for_client: Option<u64>,
    /// The client's change sent once that the request applies (`exactly_once.rs`).
    pub(crate) once: Option<Arc<OnceSlot>>,
    /// The client's batch being served (`Applier::hold`): its changes share a store
    /// batch.
    pub(crate) serving: Option<u64>,
    /// When the change arrived here, if it waited before it began (behind a copy of
    /// itself the network sent twice): its time held up counts from then (`in_time`).
    pub(crate) arrived: Option<tokio::time::Instant>,
}

/// The directories a batch's changes touched, waiting for the batch's end, each with the
/// time of the last change that touched it (as its client made it, if said): a batch's
/// later changes elsewhere (a chown of a file, a create in another directory) must not
/// move its times (nsx seed 6: a create then a chown answered behind showed the
/// directory's mtime moving to the chown's time once the lease went).
#[derive(Clone, Debug, Default)]
pub(crate) struct BatchTouches(
    pub(crate) Arc<std::sync::Mutex<std::collections::BTreeMap<String, Option<i64>>>>,
);

impl BatchTouches {
    /// Directory `dir` was changed by a change made at `at`.
    pub(crate) fn note(&self, dir: &str, at: Option<i64>) {
        let mut g = crate::unpoisoned::lock(&self.0);
        let e = g.entry(dir.to_string()).or_insert(at);
        *e = (*e).max(at);
    }
}

impl Made {
    /// A change made now, by the server's clock, touching its directory at once.
    pub(crate) fn now() -> Made {
        Made::default()
    }

    /// The context a mutation of this change is applied in: the change it may complete,
    /// the batch it is part of, and `for_client` (whose change this carries on) exempt
    /// from its recalls.
    pub(crate) fn context(&self) -> Context {
        Context {
            once: self.once.clone(),
            batch: self.serving,
            ..Context::for_client(self.for_client)
        }
    }

    /// The client whose change sent once the request applies, if any.
    pub(crate) fn sent_once_by(&self) -> Option<u64> {
        self.once.as_ref().map(|s| s.id.client)
    }

    /// The client whose change this is: the one a touch reports (`for_client`), else the
    /// change sent once the request applies.
    pub(crate) fn client(&self) -> Option<u64> {
        self.for_client.or_else(|| self.sent_once_by())
    }
}
