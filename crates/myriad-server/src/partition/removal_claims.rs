//! The removals of hard-linked files' names a home has answered lately (docs/trash.md
//! "As built (step 3, part 3)"). With the trash on, an unlink or a rename replacing a
//! linked file's name asks the inode's home whether that name is the last
//! (`InodeOp::ClaimRemoval`): the last is kept in the trash, any other only removed. Two
//! names removed at once used to both hear "two links" and both go, freeing the file. The
//! home now answers the link count less the removals it told "not the last" whose link it
//! has not yet seen dropped, so of two such removals one is told it is the last. Kept in
//! memory only: a home that fails over forgets them (the removals under way at that
//! moment may each be told "not the last" again).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use myriad_proto::InodeId;
use tokio::time::Instant;

/// How long a removal answered "not the last" counts without its link dropped: far longer
/// than an unlink takes from the answer to its drop (an unlink that failed meanwhile
/// drops nothing; its claim then ends here).
const CLAIM_KEPT: Duration = Duration::from_secs(60);

#[derive(Default)]
pub(crate) struct RemovalClaims {
    under_way: Mutex<BTreeMap<InodeId, VecDeque<Instant>>>,
}

impl RemovalClaims {
    /// A removal of a name of `ino` (holding `nlink` links) asks: the links it may count
    /// on (`nlink` less the removals under way). Answered more than one (not the last), it
    /// is under way itself until its link is dropped (`dropped`).
    pub(crate) fn claim(&self, ino: InodeId, nlink: u32, now: Instant) -> u32 {
        let mut all = self.under_way.lock().unwrap_or_else(|p| p.into_inner());
        let claims = all.entry(ino).or_default();
        while claims
            .front()
            .is_some_and(|t| now.duration_since(*t) > CLAIM_KEPT)
        {
            claims.pop_front();
        }
        let left = nlink.saturating_sub(u32::try_from(claims.len()).unwrap_or(u32::MAX));
        if left > 1 {
            claims.push_back(now);
        }
        if claims.is_empty() {
            all.remove(&ino);
        }
        left
    }

    /// A link of `ino` was dropped: one removal under way is done.
    pub(crate) fn dropped(&self, ino: InodeId) {
        let mut all = self.under_way.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(claims) = all.get_mut(&ino) {
            claims.pop_front();
            if claims.is_empty() {
                all.remove(&ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_two_names_removed_at_once_one_is_told_it_is_the_last() {
        let c = RemovalClaims::default();
        let (ino, now) = (InodeId(7), Instant::now());
        assert_eq!(c.claim(ino, 2, now), 2, "the first: another name stays");
        assert_eq!(c.claim(ino, 2, now), 1, "the second: the last (kept)");
        // The first's link dropped: the count the home has is then the truth.
        c.dropped(ino);
        assert_eq!(c.claim(ino, 1, now), 1);
        // Three names: two may go as names, the third is the last.
        let three = InodeId(8);
        assert_eq!(c.claim(three, 3, now), 3);
        assert_eq!(c.claim(three, 3, now), 2);
        assert_eq!(c.claim(three, 3, now), 1);
    }

    #[test]
    fn a_removal_that_never_dropped_its_link_stops_counting() {
        let c = RemovalClaims::default();
        let (ino, now) = (InodeId(7), Instant::now());
        assert_eq!(c.claim(ino, 2, now), 2);
        assert_eq!(c.claim(ino, 2, now + CLAIM_KEPT / 2), 1);
        assert_eq!(
            c.claim(ino, 2, now + CLAIM_KEPT * 2),
            2,
            "the old claim ended"
        );
        // A drop with no claim under way changes nothing.
        c.dropped(InodeId(9));
        assert_eq!(c.claim(InodeId(9), 2, now), 2);
    }
}
