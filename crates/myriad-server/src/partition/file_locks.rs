//! `ClientRequest::Lock` on the partition keeping the inode's locks (docs/fuse.md "File
//! locks between mounts"): the table is `lock_table.rs`; this adds the ownership check,
//! the term's marker before its first grant, and the waits of blocking requests.

use std::sync::Arc;
use std::time::Duration;

use myriad_proto::locks::{LockAnswer, LockKind, LockRequest};
use myriad_proto::{Response, WireError};
use tokio::time::Instant;

use crate::cluster::MapState;
use crate::partition::core::Partition;
use crate::state::mutation::Mutation;

/// A blocking request waits at most this long per try (the client asks again), so that a
/// waiter whose process got a signal is let go soon.
const WAIT_MAX: Duration = Duration::from_secs(5);
/// Waiters look again this often even without a release: a silent holder's locks expire
/// without anyone releasing them.
const RECHECK: Duration = Duration::from_millis(250);

impl Partition {
    pub(super) async fn serve_lock(
        self: &Arc<Self>,
        st: &MapState,
        req: LockRequest,
    ) -> Result<Response, WireError> {
        let table = &self.file_locks;
        let answer = match req {
            LockRequest::Set { set, wait_ms } => {
                self.own(st, st.ring.owner_of_locks(set.ino))?;
                if set.kind != LockKind::Unlock {
                    self.mark_file_locks().await?;
                }
                let deadline = Instant::now() + Duration::from_millis(wait_ms).min(WAIT_MAX);
                loop {
                    let released = table.released();
                    tokio::pin!(released);
                    released.as_mut().enable();
                    let now = Instant::now();
                    let answer = table.set(&set, now)?;
                    if !matches!(answer, LockAnswer::Blocked { .. }) || now >= deadline {
                        break answer;
                    }
                    let wake = (now + RECHECK).min(deadline);
                    let _ = tokio::time::timeout_at(wake, released).await;
                }
            }
            LockRequest::Test {
                ino,
                owner,
                start,
                end,
                kind,
            } => {
                self.own(st, st.ring.owner_of_locks(ino))?;
                table.test(ino, owner, start, end, kind, Instant::now())?
            }
            LockRequest::Renew { holder } => table.renew(holder, Instant::now()),
            LockRequest::ReleaseAll { holder } => table.release_all(holder),
        };
        Ok(Response::Lock(answer))
    }

    /// Before this term's first grant: the marker that makes the next primary open in
    /// grace, durable on every copy (`state/lock_marks.rs`).
    async fn mark_file_locks(&self) -> Result<(), WireError> {
        let mut marked = self.lock_marked.lock().await;
        if !*marked {
            let term = self.incarnation;
            self.applier.run(Mutation::MarkFileLocks { term }).await?;
            *marked = true;
        }
        Ok(())
    }
}
