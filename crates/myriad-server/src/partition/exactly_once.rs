//! Changes applied exactly once (docs/write-path.md, "Exactly once"). A client sends each
//! change as `Envelope::Once` with its `OnceId`; every retry carries the same id. The
//! partition answers a change whose outcome it recorded with that outcome, without
//! applying it again, so a create retried after a timeout or a failover does not fail with
//! `AlreadyExists`, nor an unlink with `NotFound`.
//!
//! The outcome is recorded in the batch of the mutation that completes the change when
//! one mutation does (a create, an unlink, a write: `completes`/`answer` below), so the
//! change and its outcome are applied, replicated and made durable together. A mkdir or
//! rmdir records it as its intent resolves, whoever resolves it (`Mutation::MkdirBegin::once`);
//! a rename between partitions with its decision (an exchange must never run twice: it
//! would swap back). Other changes whose work spans partitions (a link, a copy) record
//! their answer in a batch of their own once the work is done: a crash between the two
//! leaves the change without its outcome, and its retry runs again as before.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use myriad_proto::{Caller, ClientRequest, OnceId, Request, Response, WireError};

use crate::commit::OnceSlot;
use crate::partition::core::Partition;
use crate::partition::made::Made;
use crate::state::intent::{Decision, Intent};
use crate::state::mutation::{Mutation, Outcome, storage_err};

/// Outcomes older than this are forgotten: a retry comes within a client's request
/// deadline (20 s by default), failovers included.
pub(crate) const OUTCOME_AGE_MAX_NS: i64 = 10 * 60 * 1_000_000_000;
/// At most this many outcomes per partition (the oldest go first).
pub(crate) const OUTCOMES_MAX: usize = 200_000;

impl Partition {
    /// Serves change `request` sent once as `id` by a client.
    pub(super) async fn serve_once(
        self: &Arc<Self>,
        epoch: u64,
        caller: Caller,
        id: OnceId,
        request: ClientRequest,
        (visible, made): (bool, &Made),
    ) -> Result<Response, WireError> {
        self.admit_once(epoch, &request)?;
        let arrived = tokio::time::Instant::now();
        let _running = self.changes.run((id.client, id.seq)).await;
        if let Some(answer) = crate::state::outcomes::recorded(&self.store, id.client, id.seq)? {
            // A retry: its client never had the answer. Not a resend (`serve_resend`),
            // answered long ago, its touch included.
            if let Some(dir) = request.listing_altered() {
                self.touch_again(dir, made).await;
            }
            return self.answer_recorded(made, &request, answer).await;
        }
        // A copy that waited behind its twin (which applied nothing) may find its client
        // gone on since (simulation seed 1032): held up from its arrival, not from now.
        crate::partition::made::in_time(arrived)?;
        // Noted before it runs: a resend of another client's lost change arriving
        // meanwhile must not be applied over it.
        self.resend_guard.note(&request, id.client, id.seq);
        let (completes, answer) = recording(&request);
        let slot = Arc::new(OnceSlot::new(
            (id, self.env.now_ns()),
            completes,
            answer,
            visible,
        ));
        let made = Made {
            once: Some(slot.clone()),
            arrived: Some(arrived),
            ..made.clone()
        };
        let body = Request::Client(request);
        let result = self
            .dispatch_request(None, epoch, caller, body, &made)
            .await;
        // Answered once applied (its completing mutation did not wait for durability): the
        // client syncs it later, with this incarnation. Otherwise it is durable already.
        if visible && slot.settled.load(Ordering::Acquire) {
            // Only with its outcome recorded: its client may send it again after later
            // changes (a resend after a failover), and one without a record would run
            // again over them (simulation seed 40060 with --locks --dir-moves: a create
            // over an existing file, recording nothing, came back after its unlink).
            // Without one, it is answered plain, and not kept by the client: at once if
            // it wrote nothing (an open of an existing name), else once durable.
            if !slot.recorded.load(Ordering::Acquire) {
                let answer = result?;
                if slot.wrote.load(Ordering::Acquire) {
                    self.applier.run(Mutation::Barrier).await?;
                }
                return Ok(answer);
            }
            return result.map(|answer| Response::Applied {
                answer: Box::new(answer),
                incarnation: self.incarnation,
            });
        }
        // A change whose intent recorded its outcome as it resolved (mkdir, rmdir) needs no
        // batch of its own. (A failed read here records it again rather than turn a change
        // that succeeded into an error.)
        if let Ok(answer) = &result
            && !slot.settled.load(Ordering::Acquire)
            && !matches!(
                crate::state::outcomes::recorded(&self.store, id.client, id.seq),
                Ok(Some(_))
            )
        {
            let record = Mutation::RecordOnce {
                id,
                at_ns: self.env.now_ns(),
                answer: answer.clone(),
            };
            if let Err(e) = self.applier.run(record).await {
                // The change is done; only a retry of it would not find its outcome.
                tracing::warn!(partition = %self.me, "outcome of a change not recorded: {e}");
            }
        }
        result
    }

    /// Serves change `request`, sent again as `id` by a client that kept it after an
    /// earlier primary answered it once applied and then went away (`Envelope::Resend`,
    /// `resend_guard.rs`): answered by its outcome if it survived, else applied and
    /// answered once durable, unless another client changed what it touches since this
    /// primary opened, or a later change of the same client is here.
    pub(super) async fn serve_resend(
        self: &Arc<Self>,
        epoch: u64,
        caller: Caller,
        id: OnceId,
        request: ClientRequest,
    ) -> Result<Response, WireError> {
        if let Some(answer) = crate::state::outcomes::recorded(&self.store, id.client, id.seq)? {
            return self.answer_recorded(&Made::now(), &request, answer).await;
        }
        tracing::info!(partition = %self.me, client = id.client, seq = id.seq, "a change lost with an earlier primary was sent again: {}", request.op_name());
        let refused = if !request.is_change() {
            None
        } else if self.later_change_recorded(id)? {
            Some("a later change of the same client is recorded here".to_string())
        } else {
            self.resend_guard.refuses(&request, id.client, id.seq)
        };
        if let Some(why) = refused {
            tracing::info!(partition = %self.me, client = id.client, seq = id.seq, "a resent change is not applied: {why}");
            return Err(WireError::Io(format!(
                "partition {}: a change answered by its earlier primary was lost with it and is not applied again: {why}",
                self.me
            )));
        }
        self.serve_once(epoch, caller, id, request, (false, &Made::now()))
            .await
    }

    /// The outcome recorded here of change `request`, sent once as `id` by a try whose
    /// answer its client never had, which now goes to another partition: its name moved
    /// there (`Envelope::Recorded`). A try of it running here is waited for. `None`
    /// is final: the name is no longer served here (the move froze it here before the
    /// client's map could say so), so no later try applies it here either.
    pub(super) async fn serve_recorded(
        self: &Arc<Self>,
        epoch: u64,
        id: OnceId,
        request: ClientRequest,
    ) -> Result<Response, WireError> {
        self.admit_once(epoch, &request)?;
        let _running = self.changes.run((id.client, id.seq)).await;
        let Some(answer) = crate::state::outcomes::recorded(&self.store, id.client, id.seq)? else {
            return Ok(Response::Recorded(None));
        };
        // As a retry answered here would: its first try may have died before the touch.
        if let Some(dir) = request.listing_altered() {
            self.touch_again(dir, &Made::now()).await;
        }
        let answer = self.answer_recorded(&Made::now(), &request, answer).await?;
        Ok(Response::Recorded(Some(Box::new(answer))))
    }

    /// What a change sent once, or a question after one, must be: a change, from a map
    /// this partition follows.
    fn admit_once(&self, epoch: u64, request: &ClientRequest) -> Result<(), WireError> {
        if !request.is_change() {
            return Err(WireError::InvalidArgument(format!(
                "only changes are sent once, not {}",
                request.op_name()
            )));
        }
        let ours = self.state().map.epoch;
        if epoch > ours {
            return Err(WireError::MapTooOld(ours));
        }
        Ok(())
    }

    /// While recovery resolves intent `txid`: the place of the client's change it records
    /// the outcome of (mkdir, rmdir), if any, so that a retry of that change arriving
    /// meanwhile waits and then finds the outcome (simulation seed 300: a retry looked for
    /// it just before recovery's resolution recorded it, ran again and met `NotFound`).
    pub(super) async fn hold_awaited(
        &self,
        txid: u64,
    ) -> Result<Option<crate::partition::changes::Running<'_>>, WireError> {
        let Some(once) = crate::state::outcomes::awaited(&self.store, txid)? else {
            return Ok(None);
        };
        Ok(Some(self.changes.run((once.id.client, once.id.seq)).await))
    }

    /// Answers a change whose outcome `answer` was recorded by an earlier try.
    async fn answer_recorded(
        self: &Arc<Self>,
        made: &Made,
        request: &ClientRequest,
        answer: Response,
    ) -> Result<Response, WireError> {
        // A directory rename's outcome is recorded with its decision, but its old
        // directory objects stay readable until they are dropped: its first try would
        // not have answered before that, nor does a retry (simulation seeds 71001 and
        // 72033 with --dir-moves: the coordinator died after the decision, the retry
        // found "ok" recorded, and the moved file was read under its old name while
        // recovery was still dropping the old objects). The client retries `Busy`.
        if let ClientRequest::Rename { from, .. } = request
            && self.directory_rename_unfinished(from)?
        {
            return Err(WireError::Busy);
        }
        // Answered before: the answer leaves only once what it reports is durable here
        // and on every copy (the first try may have failed before that).
        self.applier
            .run_in(&made.context(), Mutation::Barrier)
            .await?;
        Ok(answer)
    }

    /// Whether a change of `id`'s client later than `id` has its outcome recorded here.
    /// A resend of `id` not recorded here must then not be applied: the later change ran
    /// without it (or found it carried here by a tree move, its record left behind), and
    /// applying it now would undo what came after it (simulation seed 87: a create resent
    /// after its file's recorded removal).
    fn later_change_recorded(&self, id: OnceId) -> Result<bool, WireError> {
        let next = self
            .store
            .outcomes(Some((id.client, id.seq)), 1)
            .map_err(storage_err)?;
        Ok(next
            .first()
            .is_some_and(|(client, _, _)| *client == id.client))
    }

    /// Forgets outcomes too old for any retry, and the oldest beyond `OUTCOMES_MAX`.
    pub(crate) async fn forget_outcomes(&self) {
        if !self.env.serves(self.me) {
            return;
        }
        let forget = Mutation::ForgetOnces {
            before_ns: self.env.now_ns().saturating_sub(OUTCOME_AGE_MAX_NS),
            keep_max: OUTCOMES_MAX,
        };
        if let Err(e) = self.applier.run(forget).await {
            tracing::debug!(partition = %self.me, "old outcomes not forgotten: {e}");
        }
    }
}

fn never(_: &Mutation) -> bool {
    false
}

fn nothing(_: &Outcome) -> Option<Response> {
    None
}

/// The changed entry's new attributes (the parent's are not kept: the client fetches them).
fn changed_entry(o: &Outcome) -> Option<Response> {
    match o {
        Outcome::Created(i) | Outcome::Inode(i) => Some(Response::Changed {
            inode: Some(i.clone()),
            parent: None,
        }),
        _ => None,
    }
}

/// A create records only a new file: opening an existing name may simply run again.
fn created(o: &Outcome) -> Option<Response> {
    match o {
        Outcome::Created(_) => changed_entry(o),
        _ => None,
    }
}

fn removed(_: &Outcome) -> Option<Response> {
    Some(Response::Changed {
        inode: None,
        parent: None,
    })
}

fn attrs(o: &Outcome) -> Option<Response> {
    match o {
        Outcome::Inode(i) | Outcome::InodeGc(i, _) => Some(Response::Attr(i.clone())),
        _ => None,
    }
}

fn ids(o: &Outcome) -> Option<Response> {
    match o {
        Outcome::Ids(first, count) => Some(Response::Ids {
            first: myriad_proto::InodeId(*first),
            count: *count,
        }),
        _ => None,
    }
}

fn unit(_: &Outcome) -> Option<Response> {
    Some(Response::Unit)
}

/// A chunk write that met a coded chunk wrote nothing: no answer to record.
fn written(o: &Outcome) -> Option<Response> {
    matches!(o, Outcome::Unit).then_some(Response::Unit)
}

/// For a change made by one mutation here: which mutation completes it, and its answer
/// from that mutation's outcome (what `client_ops.rs` answers). Other changes record their
/// answer once done (`never`, `nothing`).
type Recording = (fn(&Mutation) -> bool, fn(&Outcome) -> Option<Response>);

fn recording(request: &ClientRequest) -> Recording {
    match request {
        ClientRequest::Create { .. } => (|m| matches!(m, Mutation::CreateFile { .. }), created),
        ClientRequest::Symlink { .. } => (|m| matches!(m, Mutation::Symlink { .. }), changed_entry),
        ClientRequest::Mknod { .. } => (|m| matches!(m, Mutation::Mknod { .. }), changed_entry),
        // Or, with the trash on, by the rename that moves the file there (`trash.rs`).
        ClientRequest::Unlink { .. } => (
            |m| {
                matches!(
                    m,
                    Mutation::Unlink { .. }
                        | Mutation::RenameLocal { .. }
                        | Mutation::RenameSourceDecide { commit: true, .. }
                )
            },
            removed,
        ),
        ClientRequest::SetAttr { .. } | ClientRequest::SetXattr { .. } => {
            (|m| matches!(m, Mutation::SetAttr { .. }), attrs)
        }
        ClientRequest::Write { .. } => (|m| matches!(m, Mutation::Write { .. }), attrs),
        ClientRequest::ExtendSize { .. } => (|m| matches!(m, Mutation::ExtendSize { .. }), attrs),
        ClientRequest::Truncate { .. } => (|m| matches!(m, Mutation::Truncate { .. }), attrs),
        ClientRequest::WriteChunk { .. } => (|m| matches!(m, Mutation::WriteChunk { .. }), written),
        ClientRequest::ReserveIds { .. } => (|m| matches!(m, Mutation::ReserveIds { .. }), ids),
        // A rename within the partition is one mutation; between partitions, its answer
        // goes with its decision (which stays durable before anyone acts on it), so a
        // retry after a failover finds it: an exchange run twice would swap back.
        ClientRequest::Rename { .. } => (
            |m| {
                matches!(
                    m,
                    Mutation::RenameLocal { .. }
                        | Mutation::RenameSourceDecide { commit: true, .. }
                )
            },
            unit,
        ),
        _ => (never, nothing),
    }
}

impl Partition {
    /// Whether a committed rename of directory `from` coordinated here still has old
    /// directory objects to drop (its intent is deleted once it is finished).
    fn directory_rename_unfinished(&self, from: &str) -> Result<bool, WireError> {
        for (_, bytes) in self.store.intents().map_err(storage_err)? {
            if let Some(Intent::RenameOut {
                from_dir,
                from_name,
                decision: Decision::Commit,
                moves,
                ..
            }) = Intent::decode(&bytes)
                && !moves.is_empty()
                && myriad_placement::join(&from_dir, &from_name) == from
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
