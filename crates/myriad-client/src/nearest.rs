//! Nearest-copy reads (docs/zones.md "Nearest copy"): a client that knows its zone sends a
//! `Stat` or `Fetch` of an entry whose partition's primary is in another zone to an
//! in-sync copy in its own zone. The copy answers only under a loan of reads from the
//! primary that keeps the answer as fresh as the primary's (no older than any write
//! acknowledged before the read); anything else it answers `AskPrimary`, and the read goes
//! to the primary as usual.

use std::time::Duration;

use myriad_placement::NodeId;
use myriad_proto::{ClientRequest, Endpoints, FsError, Request, Response, WireError};

use crate::client::{Client, Parents, Route};

/// The longest a read waits for a copy before asking the primary instead.
const COPY_READ_TIMEOUT: Duration = Duration::from_secs(1);
/// How long reads skip a copy that did not answer (unreachable, timed out): a server cut
/// off stays up in a client's map until something tells it otherwise, and each read would
/// wait for it first.
const COPY_AVOID: Duration = Duration::from_secs(10);

impl Client {
    /// `read` of the entry `path` from a copy in this client's zone (`read_nearest`), its
    /// answer as `entry_op` gives the primary's: a name not found under a parent that is
    /// not a directory is `NotADirectory`.
    pub(crate) async fn entry_nearest(
        &self,
        path: &str,
        read: &ClientRequest,
        parents: Parents,
    ) -> Option<Result<Response, FsError>> {
        let answer = self
            .read_nearest(&Route::Entry(path.to_string()), read)
            .await?;
        Some(match answer {
            Ok(r) => {
                self.note_parent(path, &r);
                Ok(r)
            }
            Err(e) => Err(self.refine_under(path, e, parents).await),
        })
    }

    /// `read` (of an entry, or a listing page) sent where `route` leads, answered by a
    /// copy in this client's zone when the primary is elsewhere and such a copy is in
    /// sync in the map; None: ask the primary.
    pub(crate) async fn read_nearest(
        &self,
        route: &Route,
        read: &ClientRequest,
    ) -> Option<Result<Response, FsError>> {
        let zone = &self.config.zone;
        if zone.is_empty() {
            return None;
        }
        let st = self.st();
        let pid = self.partition_for(&st, route);
        let part = st.map.partition(pid)?;
        let primary = st.map.primary_of(pid)?;
        // This client's own changes answered once applied may not have reached the copy
        // yet (the copy's loan covers what the primary acknowledged durable): while it
        // keeps any of that partition, its reads go to the primary (simulation seed 664
        // with --zones --tree-moves: a writer read its own file back from a copy, one
        // version old).
        if st.map.zone_of(primary) == zone || self.holds_changes_of(pid) {
            return None;
        }
        let now = tokio::time::Instant::now();
        let avoided = |n: NodeId| {
            crate::index_state::lock(&self.copies_avoided)
                .get(&n)
                .is_some_and(|until| now < *until)
        };
        let copy = part.replicas.iter().copied().find(|&n| {
            n != primary
                && st.map.is_up(n)
                && !part.is_behind(n)
                && st.map.zone_of(n) == zone
                && !avoided(n)
        })?;
        let addr = st.map.node(copy)?.addr.clone();
        let answer = self
            .transport
            .call_with_timeout(
                &addr,
                st.map.epoch,
                Endpoints::to(pid),
                self.acting_caller(),
                &Request::from(read.clone()),
                COPY_READ_TIMEOUT.min(self.config.request_timeout),
            )
            .await;
        match answer {
            Ok(r @ (Response::Attr(_) | Response::Fetched { .. } | Response::DirPage { .. })) => {
                tracing::trace!(partition = %pid, copy = %copy, ?route, "read answered by a copy");
                Some(Ok(r))
            }
            // Answers about the file system itself, as the primary would give them.
            Err(
                e @ (WireError::NotFound | WireError::PermissionDenied | WireError::NotADirectory),
            ) => Some(Err(e.into())),
            Ok(other) => {
                tracing::debug!(partition = %pid, "copy answered a read with {other:?}");
                None
            }
            // The copy knows a newer map: learn it.
            Err(WireError::Redirect(map)) => {
                self.adopt(*map);
                None
            }
            Err(e @ (WireError::AskPrimary | WireError::Busy | WireError::MapTooOld(_))) => {
                tracing::trace!(partition = %pid, copy = %copy, "copy read: {e}; asking the primary");
                None
            }
            Err(e) => {
                tracing::debug!(partition = %pid, copy = %copy, "copy read: {e}; avoiding it for {COPY_AVOID:?}");
                crate::index_state::lock(&self.copies_avoided).insert(copy, now + COPY_AVOID);
                None
            }
        }
    }
}
