//! Where a change sent once may have gone through (docs/write-path.md "Exactly once").
//!
//! A partition answers a retried change by the outcome it recorded, but outcomes stay with
//! the partition that recorded them. When a tree move, a directory split or a directory
//! export moves the change's name to another partition between two tries, the retry goes
//! there, which holds no record: a mkdir that went through, its answer lost, answered
//! `AlreadyExists`, and an exchange would swap back (simulation seeds 118 and 1137 with
//! `--zones --tree-moves`). So before a change goes to a partition, the partitions its
//! earlier tries went to are asked for their record (`ClientRequest::Recorded`). Each
//! answers once no try of the change runs there; "none" is final, because the move froze
//! the name there before any map placing it elsewhere existed.

use myriad_placement::PartitionId;
use myriad_proto::{ClientRequest, FsError, OnceId, Request, Response};

use crate::client::{Client, Route};

/// The first protocol that has `ClientRequest::Recorded`.
const RECORDED_PROTOCOL: u16 = 32;

/// The partitions one change's tries went to, whose records it has not asked for since.
#[derive(Default)]
pub(crate) struct Tries {
    reached: Vec<PartitionId>,
}

impl Tries {
    /// Tries of a change that an earlier primary of `pid` applied (a resend of a change
    /// held until durable).
    pub(crate) fn at(pid: PartitionId) -> Tries {
        Tries { reached: vec![pid] }
    }

    /// Notes that a try of the change goes to `pid`.
    fn sent(&mut self, pid: PartitionId) {
        if !self.reached.contains(&pid) {
            self.reached.push(pid);
        }
    }
}

/// The change a request sends once, with its id: `None` for other requests.
fn sent_once(req: &Request) -> Option<(OnceId, &ClientRequest)> {
    match req {
        Request::Client(
            ClientRequest::Once { id, request, .. } | ClientRequest::Resend { id, request },
        ) => Some((*id, request)),
        _ => None,
    }
}

impl Client {
    /// Before request `req` goes to partition `pid`: if it is a change whose earlier tries
    /// went to other partitions, the outcome one of them recorded (the change went
    /// through: that is its answer), else `None` once each said it has none. An error
    /// (one of them unreachable) leaves the question open: the caller asks again before
    /// its next try.
    pub(super) async fn recorded_elsewhere(
        &self,
        pid: PartitionId,
        req: &Request,
        tries: &mut Tries,
    ) -> Result<Option<Response>, FsError> {
        let Some((id, change)) = sent_once(req) else {
            return Ok(None);
        };
        while let Some(&earlier) = tries.reached.iter().find(|p| **p != pid) {
            if let Some(answer) = self.recorded_at(earlier, id, change).await? {
                return Ok(Some(answer));
            }
            tries.reached.retain(|p| *p != earlier);
        }
        tries.sent(pid);
        Ok(None)
    }

    /// The outcome partition `pid` recorded of change `change` sent as `id`.
    async fn recorded_at(
        &self,
        pid: PartitionId,
        id: OnceId,
        change: &ClientRequest,
    ) -> Result<Option<Response>, FsError> {
        let version = self
            .st()
            .map
            .partition_addr(pid)
            .map_or(0, |a| self.transport.link(a).version);
        if version != 0 && version < RECORDED_PROTOCOL {
            // A server that cannot be asked: the change runs again where it goes now, as
            // it did before protocol 32.
            tracing::debug!(partition = %pid, version, "a change's earlier partition cannot be asked for its outcome");
            return Ok(None);
        }
        let ask = ClientRequest::Recorded {
            id,
            request: Box::new(change.clone()),
        };
        match self
            .route_unheld(Route::Partition(pid), Request::Client(ask))
            .await?
        {
            Response::Recorded(answer) => {
                if answer.is_some() {
                    tracing::debug!(partition = %pid, seq = id.seq, "a retried change's outcome was recorded where its name was before: {}", change.op_name());
                }
                Ok(answer.map(|a| *a))
            }
            other => Err(crate::client::unexpected(&other)),
        }
    }
}
