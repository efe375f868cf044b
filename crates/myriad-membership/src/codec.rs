//! Values of the Raft spaces: postcard, with errors turned into openraft's storage errors.

use openraft::StorageIOError;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{NodeId, StorageError};

/// Which openraft error a failure becomes.
#[derive(Clone, Copy)]
pub enum What {
    Logs,
    Vote,
    StateMachine,
}

fn wrap(what: What, read: bool, e: &(impl std::error::Error + 'static)) -> StorageError {
    let io: StorageIOError<NodeId> = match (what, read) {
        (What::Logs, true) => StorageIOError::read_logs(e),
        (What::Logs, false) => StorageIOError::write_logs(e),
        (What::Vote, true) => StorageIOError::read_vote(e),
        (What::Vote, false) => StorageIOError::write_vote(e),
        (What::StateMachine, true) => StorageIOError::read_state_machine(e),
        (What::StateMachine, false) => StorageIOError::write_state_machine(e),
    };
    io.into()
}

pub fn encode<T: Serialize>(what: What, v: &T) -> Result<Vec<u8>, StorageError> {
    postcard::to_allocvec(v).map_err(|e| wrap(what, false, &e))
}

pub fn decode<T: DeserializeOwned>(what: What, bytes: &[u8]) -> Result<T, StorageError> {
    postcard::from_bytes(bytes).map_err(|e| wrap(what, true, &e))
}

/// A store failure while reading (`read`) or writing.
pub fn store_err(what: What, read: bool, e: &myriad_storage::StorageError) -> StorageError {
    wrap(what, read, e)
}
