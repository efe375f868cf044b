//! What the state layer fails with (ARCHITECTURE.md, "Errors"): what the file system says
//! of a request, or the store failing, its kind kept. The partition above turns a failure
//! into the client's answer (`From<StateError> for WireError`, the one place a store's
//! failure becomes an errno); below it, a store failure is never mistaken for an answer
//! about the file system, and tests can tell a full disk from a corrupt record.

use myriad_proto::{FsError, WireError};
use myriad_storage::StorageError;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// What the file system says of the request (`NotFound`, `NotEmpty`, a shard that is
    /// not here...): answered to the client as it is.
    #[error(transparent)]
    Fs(WireError),
    /// The store could not read or stage what the request needs.
    #[error(transparent)]
    Store(StorageError),
}

impl From<WireError> for StateError {
    fn from(e: WireError) -> StateError {
        StateError::Fs(e)
    }
}

/// From the checks the state layer shares with clients (`myriad_proto::access`, `path`).
impl From<FsError> for StateError {
    fn from(e: FsError) -> StateError {
        StateError::Fs(e.into())
    }
}

impl From<StorageError> for StateError {
    fn from(e: StorageError) -> StateError {
        StateError::Store(e)
    }
}

impl From<StateError> for WireError {
    fn from(e: StateError) -> WireError {
        match e {
            StateError::Fs(e) => e,
            StateError::Store(e) => storage_err(e),
        }
    }
}

/// The client's answer for a store's failure: a full disk is `NoSpace` (ENOSPC), a block
/// failing its checksum `Corrupt`, anything else `Io` (EIO) with the store's message.
pub fn storage_err(e: StorageError) -> WireError {
    match e {
        StorageError::NoSpace => WireError::NoSpace,
        StorageError::Checksum { ino, block } => WireError::Corrupt { ino, block },
        other => WireError::Io(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_proto::InodeId;

    #[test]
    fn a_store_failure_keeps_its_kind_until_it_is_answered() {
        let full: StateError = StorageError::NoSpace.into();
        assert!(matches!(full, StateError::Store(StorageError::NoSpace)));
        assert_eq!(WireError::from(full), WireError::NoSpace);
        let bad = StorageError::Checksum {
            ino: InodeId(4),
            block: 2,
        };
        assert_eq!(
            WireError::from(StateError::from(bad)),
            WireError::Corrupt {
                ino: InodeId(4),
                block: 2
            }
        );
        let record = StorageError::Corrupt {
            space: "entries",
            detail: "short".into(),
        };
        let answered = WireError::from(StateError::from(record));
        assert!(
            matches!(&answered, WireError::Io(m) if m.contains("entries") && m.contains("short")),
            "{answered:?}"
        );
        // An answer about the file system goes through as it is.
        assert_eq!(
            WireError::from(StateError::from(WireError::NotEmpty)),
            WireError::NotEmpty
        );
        assert_eq!(
            WireError::from(StateError::from(FsError::NameTooLong)),
            WireError::NameTooLong
        );
    }
}
