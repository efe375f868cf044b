//! Where a change sent once may have gone through (docs/write-path.md "Exactly once").
//!
//! A partition answers a retried change by the outcome it recorded, but outcomes stay with
//! the partition that recorded them. When a tree move, a directory split or a directory
//! export moves the change's name to another partition between two tries, the retry goes
//! there, which holds no record: a mkdir that went through, its answer lost, answered
//! `AlreadyExists`, and an exchange would swap back (simulation seeds 118 and 1137 with
//! `--zones --tree-moves`). So before a change goes to a partition, the partitions its
//! earlier tries went to are asked for their record (`Envelope::Recorded`). Each
//! answers once no try of the change runs there; "none" is final, because the move froze
//! the name there before any map placing it elsewhere existed.

use myriad_placement::PartitionId;
use myriad_proto::{ClientRequest, Envelope, OnceId, Request, Response, SentOnce};

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
    pub(super) fn sent(&mut self, pid: PartitionId) {
        if !self.reached.contains(&pid) {
            self.reached.push(pid);
        }
    }

    /// A partition an earlier try went to, other than `pid`, not asked since.
    pub(super) fn elsewhere_than(&self, pid: PartitionId) -> Option<PartitionId> {
        self.reached.iter().copied().find(|p| *p != pid)
    }

    /// Partition `pid` recorded no outcome of the change.
    pub(super) fn asked(&mut self, pid: PartitionId) {
        self.reached.retain(|p| *p != pid);
    }
}

/// The change a request sends once, with its id: `None` for other requests.
pub(super) fn sent_once(req: &Request) -> Option<(OnceId, &ClientRequest)> {
    match req {
        Request::Client(
            Envelope::Once(SentOnce { id, request, .. }) | Envelope::Resend { id, request },
        ) => Some((*id, request)),
        _ => None,
    }
}

/// What a try does once the partitions of earlier tries were asked (`before_try`).
pub(super) enum Before {
    /// Goes to its partition.
    Send,
    /// An earlier try went through: its recorded answer is the answer.
    Answered(Box<Response>),
    /// An earlier partition could not be asked yet: the try waits (paced) and starts over.
    Again,
}
