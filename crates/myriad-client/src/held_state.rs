//! What a client keeps of the changes it was answered once applied, until they are
//! durable (the state only; what is done with it is `held.rs`, docs/fuse.md "Keeping
//! answered changes until they are durable").

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use myriad_placement::PartitionId;
use myriad_proto::{ClientRequest, Envelope, OnceId, Request};

use crate::route::Route;

/// The bytes of held changes a client keeps at most before new changes wait.
pub const HELD_BYTES_MAX: usize = 64 << 20;
/// The number of held changes a client keeps at most before new changes wait.
pub const HELD_CHANGES_MAX: usize = 10_000;
/// How often a mount makes its held changes durable in the background.
pub const BARRIER_EVERY: Duration = Duration::from_secs(1);
/// How long a request to one partition waits for the recovery of another's held changes
/// (a change there may depend on them), and how long after that recovery failed such
/// requests go on without trying it again: a partition with no copy up must not stall
/// the whole client. Its own requests always wait for it.
pub(crate) const ELSEWHERE_WAIT: Duration = Duration::from_secs(2);
/// How long a change waiting for room waits between rounds of barriers.
pub(crate) const ROOM_WAIT: Duration = Duration::from_millis(50);
/// The first protocol whose servers take `Envelope::Resend`.
pub(crate) const RESEND_PROTOCOL: u16 = 31;

/// One change answered once applied and not yet known durable.
pub(crate) struct Change {
    pub(crate) id: OnceId,
    /// The change itself (not its `Once` wrapper), and where it was sent.
    pub(crate) request: ClientRequest,
    pub(crate) route: Route,
    /// The incarnation of the primary that answered it.
    pub(crate) incarnation: u64,
    pub(crate) bytes: usize,
}

/// One partition's held changes, in the order they were answered.
#[derive(Default)]
pub(crate) struct Part {
    pub(crate) changes: VecDeque<Change>,
    /// The primary's address and the connection to it the last change was answered over.
    pub(crate) addr: String,
    pub(crate) connection: u64,
    /// Something says its primary may have changed: recover before its next request.
    pub(crate) suspect: bool,
    /// When a recovery before another partition's request last failed (`recover_before`).
    pub(crate) failed_at: Option<tokio::time::Instant>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) parts: BTreeMap<PartitionId, Part>,
    pub(crate) bytes: usize,
    pub(crate) count: usize,
    /// Changes found lost since the last sync reported it (one reason).
    pub(crate) lost: Option<String>,
}

/// Every partition's held changes (`Client::held`).
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) state: std::sync::Mutex<State>,
    /// One recovery of a partition at a time: the others wait, then find nothing left
    /// to do (one per partition: a partition with no copy up holds up only its own).
    pub(crate) recovering:
        std::sync::Mutex<BTreeMap<PartitionId, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl Held {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub(crate) fn full(&self) -> bool {
        let g = self.lock();
        g.bytes >= HELD_BYTES_MAX || g.count >= HELD_CHANGES_MAX
    }
}

/// What a held change costs in memory, roughly.
pub(crate) fn size_of(request: &ClientRequest) -> usize {
    match request {
        ClientRequest::Write(myriad_proto::requests::Write { path, data, .. }) => {
            128 + path.len() + data.len()
        }
        ClientRequest::WriteChunk { data, .. } => 128 + data.len(),
        _ => 512,
    }
}

/// Whether asking `req` again is harmless (a read, or a change sent once): an answer that
/// came over a new connection is asked again after a recovery.
pub(crate) fn asks_again_safely(req: &Request) -> bool {
    match req {
        Request::Client(Envelope::Once(_)) => true,
        Request::Client(
            Envelope::Alone(request)
            | Envelope::Leased { request, .. }
            | Envelope::ReadAs { request, .. },
        ) => request.read_of().is_some(),
        _ => false,
    }
}
