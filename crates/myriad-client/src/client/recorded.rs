//! Asking the partitions a change's earlier tries went to for its recorded outcome,
//! before it goes to another partition (`tries.rs` says why; docs/write-path.md "Exactly
//! once").

use std::time::Duration;

use myriad_placement::PartitionId;
use myriad_proto::{ClientRequest, OnceId, Request, Response, WireError};

use super::pacing::Pacing;
use super::tries::{Before, Tries, sent_once};
use super::{Client, Route};
use myriad_proto::reply::Recorded;

/// The first protocol that has `Envelope::Recorded`.
const RECORDED_PROTOCOL: u16 = 32;
/// The least pause before an earlier partition that could not be asked is asked again.
const ASK_AGAIN_MIN: Duration = Duration::from_millis(10);

impl Client {
    /// Before request `req` goes to partition `pid` (`route_with`): `recorded_elsewhere`,
    /// a partition that could not be asked tried again after a pause within the request's
    /// deadline.
    pub(super) async fn before_try(
        &self,
        pid: PartitionId,
        req: &Request,
        tries: &mut Tries,
        pace: &mut Pacing,
    ) -> Result<Before, WireError> {
        match self.recorded_elsewhere(pid, req, tries).await {
            Ok(Some(answer)) => Ok(Before::Answered(Box::new(answer))),
            Ok(None) => Ok(Before::Send),
            Err(e) if (e.is_transient() || e.is_routing()) && pace.busy_fits() => {
                tracing::debug!(partition = %pid, "a change's earlier partition not asked yet ({e}); retrying");
                pace.busy_pause(ASK_AGAIN_MIN).await;
                Ok(Before::Again)
            }
            Err(e) => Err(e),
        }
    }

    /// Before request `req` goes to partition `pid`: if it is a change whose earlier tries
    /// went to other partitions, the outcome one of them recorded (the change went
    /// through: that is its answer), else `None` once each said it has none. An error
    /// (one of them unreachable) leaves the question open: the caller asks again before
    /// its next try.
    async fn recorded_elsewhere(
        &self,
        pid: PartitionId,
        req: &Request,
        tries: &mut Tries,
    ) -> Result<Option<Response>, WireError> {
        let Some((id, change)) = sent_once(req) else {
            return Ok(None);
        };
        while let Some(earlier) = tries.elsewhere_than(pid) {
            if let Some(answer) = self.recorded_at(earlier, id, change).await? {
                return Ok(Some(answer));
            }
            tries.asked(earlier);
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
    ) -> Result<Option<Response>, WireError> {
        let version = self.protocol_of(pid);
        if version != 0 && version < RECORDED_PROTOCOL {
            // A server that cannot be asked: the change runs again where it goes now, as
            // it did before protocol 32.
            tracing::debug!(partition = %pid, version, "a change's earlier partition cannot be asked for its outcome");
            return Ok(None);
        }
        let ask = myriad_proto::ask::recorded(id, change.clone());
        let answer = self
            .route_unheld(Route::Partition(pid), Request::Client(ask.request))
            .await?;
        let Recorded(answer) = ask.answer.of::<WireError>(answer)?;
        if answer.is_some() {
            tracing::debug!(partition = %pid, seq = id.seq, "a retried change's outcome was recorded where its name was before: {}", change.op_name());
        }
        Ok(answer.map(|a| *a))
    }
}
