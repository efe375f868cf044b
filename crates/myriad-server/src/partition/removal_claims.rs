//! The removals of hard-linked files' names under way (docs/trash.md "As built (step 3,
//! part 3)"). With the trash on, an unlink or a rename replacing a linked file's name
//! asks the inode's home whether that name is the last (`InodeOp::ClaimRemoval`): the last
//! is kept in the trash, any other only removed. Two names removed at once used to both
//! hear "two links", both go, and free the file. The home now answers the link count less
//! the removals it told "not the last" whose link it has not yet seen dropped, so of two
//! such removals one is told it is the last.
//!
//! Each claim is ended only by its own removal's drop: the partition that claimed
//! remembers it (`claimed_here`) and drops that link with `InodeOp::DropClaimed`, not with
//! a plain `AdjustLinks` (which a failed link's take-back or the trash's expiry also send).
//! At the home, reading the count and claiming, and dropping and ending a claim, each run
//! under one lock (`order`), so a drop never falls between a count read and its claim.
//! Kept in memory only: a home that fails over forgets its claims (the removals under way
//! at that moment may each be told "not the last" again), and a claim whose removal never
//! dropped its link (the removal failed after asking) ends after `CLAIM_KEPT`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use myriad_proto::InodeId;
use tokio::time::Instant;

use crate::unpoisoned::lock;

/// How long a claim counts without its drop: far longer than a removal takes from the
/// answer to its drop.
const CLAIM_KEPT: Duration = Duration::from_secs(60);

/// Claims per inode, oldest first.
type Claims = BTreeMap<InodeId, VecDeque<Instant>>;

#[derive(Default)]
pub(crate) struct RemovalClaims {
    /// As a home: the removals told "not the last", not yet dropped.
    under_way: Mutex<Claims>,
    /// As the partition of a removed name: the removals it claimed, not yet dropped.
    mine: Mutex<Claims>,
    order: tokio::sync::Mutex<()>,
}

fn prune(claims: &mut VecDeque<Instant>, now: Instant) {
    while claims
        .front()
        .is_some_and(|t| now.duration_since(*t) > CLAIM_KEPT)
    {
        claims.pop_front();
    }
}

/// Ends the oldest of `ino`'s claims in `all`, if it has one: whether it had.
fn end_one(all: &Mutex<Claims>, ino: InodeId, now: Instant) -> bool {
    let mut all = lock(all);
    let Some(claims) = all.get_mut(&ino) else {
        return false;
    };
    prune(claims, now);
    let had = claims.pop_front().is_some();
    if claims.is_empty() {
        all.remove(&ino);
    }
    had
}

impl RemovalClaims {
    /// The home's lock around reading a count and claiming, and dropping a link and
    /// ending its claim.
    pub(crate) async fn order(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.order.lock().await
    }

    /// At the home, under `order`: a removal of a name of `ino` (holding `nlink` links,
    /// read under the lock) asks: the links it may count on (`nlink` less the removals
    /// under way). Answered more than one (not the last), it is under way itself until
    /// its drop (`dropped`).
    pub(crate) fn claim(&self, ino: InodeId, nlink: u32, now: Instant) -> u32 {
        let mut all = lock(&self.under_way);
        let claims = all.entry(ino).or_default();
        prune(claims, now);
        let left = nlink.saturating_sub(u32::try_from(claims.len()).unwrap_or(u32::MAX));
        if left > 1 {
            claims.push_back(now);
        }
        if claims.is_empty() {
            all.remove(&ino);
        }
        left
    }

    /// At the home, under `order`: a claimed removal of a name of `ino` dropped its link.
    pub(crate) fn dropped(&self, ino: InodeId, now: Instant) {
        end_one(&self.under_way, ino, now);
    }

    /// At the removed name's partition: its removal of a name of `ino` was told "not the
    /// last", so its drop is to end that claim.
    pub(crate) fn claimed_here(&self, ino: InodeId, now: Instant) {
        let mut all = lock(&self.mine);
        all.entry(ino).or_default().push_back(now);
    }

    /// At the removed name's partition, dropping a link of `ino`: whether a removal here
    /// claimed it (then dropped with `InodeOp::DropClaimed`).
    pub(crate) fn take_claimed_here(&self, ino: InodeId, now: Instant) -> bool {
        end_one(&self.mine, ino, now)
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
        c.dropped(ino, now);
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
        c.dropped(InodeId(9), now);
        assert_eq!(c.claim(InodeId(9), 2, now), 2);
    }

    #[test]
    fn only_a_removal_that_claimed_ends_a_claim() {
        let c = RemovalClaims::default();
        let (ino, now) = (InodeId(7), Instant::now());
        c.claimed_here(ino, now);
        assert!(c.take_claimed_here(ino, now), "its own drop");
        assert!(
            !c.take_claimed_here(ino, now),
            "another drop of the same file"
        );
        c.claimed_here(ino, now);
        assert!(!c.take_claimed_here(ino, now + CLAIM_KEPT * 2), "too old");
    }
}
