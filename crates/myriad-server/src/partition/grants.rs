//! Chunk capabilities (docs/write-path.md, part 5). A file's chunks past the first live on
//! other partitions, addressed by inode id, away from the entry that holds its permissions.
//! So the partition of the entry checks a client's access once and grants a short-lived
//! capability (sealed with a key derived from the cluster key, which clients do not hold);
//! the partitions of the chunks serve a client's chunk request only with a good one.
//! Requests from servers (copies, trims, repairs) need none.

use std::sync::Arc;
use std::time::Duration;

use myriad_placement::parent_of;
use myriad_proto::{Caller, ClientRequest, InodeId, Response, WireError};

use crate::partition::core::Partition;
use crate::state::perm;

/// How long a capability is good for. A change of permissions reaches chunks already
/// granted within this time.
pub(crate) const CAPABILITY_TTL: Duration = Duration::from_secs(120);

impl Partition {
    /// A capability to read (`write`: also write) the chunks of file `path`, inode `ino`,
    /// if `caller` may.
    pub(super) async fn grant(
        self: &Arc<Self>,
        caller: &Caller,
        path: &str,
        ino: InodeId,
        write: bool,
        opened: bool,
    ) -> Result<Response, WireError> {
        // An orphan's chunks too: a descriptor stays usable after its file's last name
        // went, for writes as for reads (POSIX; `file_to_change`).
        let inode = self.open_file(caller, path, ino, true).await?;
        if write {
            // Chunks past the first are written by inode, past every directory's gate.
            self.before_change_in(parent_of(path)).await?;
            perm::require_write(&inode, caller, opened)?;
        } else {
            perm::require(&inode, caller, perm::READ)?;
        }
        let key = self.capability_key()?;
        let ttl_ns = i64::try_from(CAPABILITY_TTL.as_nanos()).unwrap_or(i64::MAX);
        let cap = key.grant(ino, write, self.env.now_ns().saturating_add(ttl_ns));
        Ok(Response::Granted {
            cap,
            valid_ms: u64::try_from(CAPABILITY_TTL.as_millis()).unwrap_or(u64::MAX),
        })
    }

    fn capability_key(&self) -> Result<myriad_proto::auth::CapabilityKey, WireError> {
        self.env
            .config()
            .keys
            .capability_key()
            .ok_or_else(|| WireError::Io("this server holds no cluster key".into()))
    }

    /// `PermissionDenied` for a client's chunk request without a good capability.
    pub(super) fn check_capability(&self, req: &ClientRequest) -> Result<(), WireError> {
        let (ino, write, cap) = match req {
            ClientRequest::ReadChunk { ino, cap, .. } => (*ino, false, cap),
            ClientRequest::WriteChunk { ino, cap, .. } => (*ino, true, cap),
            _ => return Ok(()),
        };
        let key = self.capability_key()?;
        match cap {
            Some(cap) if key.admits(cap, ino, write, self.env.now_ns()) => Ok(()),
            _ => {
                tracing::debug!(partition = %self.me, %ino, write, "chunk request refused: no good capability");
                Err(WireError::PermissionDenied)
            }
        }
    }
}
