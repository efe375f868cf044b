//! The small types requests of every audience carry (attributes to set, rename flags, an
//! extended attribute's mode, a directory lease's key): below the request enums, so that
//! none of them names another.

use serde::{Deserialize, Serialize};

use myriad_placement::PartitionId;

use crate::InodeId;

/// Attribute changes; `None` leaves a field as it is. Encoded by `appended.rs` (`of` only
/// for peers of 36 or later).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime_ns: Option<i64>,
    pub mtime_ns: Option<i64>,
    /// Both times to the server's now (utimensat with UTIME_NOW twice, utime(NULL)): POSIX
    /// lets anyone who may write the file do this, not only its owner.
    pub touch: bool,
    /// The inode the change is meant for: refused (`Stale`) if the name now holds
    /// another, so that a change through a descriptor (fchmod) never lands on a file
    /// another client put at its name. `None`: whatever the name holds. Not carried to a
    /// peer older than 36 (`appended.rs`).
    pub of: Option<InodeId>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenameFlags {
    /// Fail with `AlreadyExists` instead of replacing the destination (RENAME_NOREPLACE).
    pub no_replace: bool,
    /// Swap the two names, both of which must exist (RENAME_EXCHANGE; not directories).
    pub exchange: bool,
}

/// How `SetXattr` treats an existing attribute (XATTR_CREATE / XATTR_REPLACE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrMode {
    #[default]
    Either,
    /// Fail with `AlreadyExists` if it exists.
    Create,
    /// Fail with `NoData` if it does not exist.
    Replace,
}

/// What a directory lease covers: the entries of `dir` that partition `partition` holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseKey {
    pub partition: PartitionId,
    pub dir: String,
}
