//! Waiting between tries: every retry loop of the server names its pacing here, so the
//! numbers are in one place with their reasons.

use std::time::Duration;

/// Exponential backoff: the first wait, doubling up to a cap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { next: first, max }
    }

    /// The wait before the next try (and doubles the one after it).
    pub(crate) fn step(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    /// The wait the next `step` returns.
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// Sleeps for the next step.
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.step()).await;
    }
}

/// A call to another partition that found it unavailable (its server dead, a failover under
/// way): asked again, for up to `host_env::NESTED_RETRY`.
pub(crate) const NESTED_CALL: Backoff =
    Backoff::new(Duration::from_millis(20), Duration::from_millis(250));
/// Creating the root directory at a partition's start (its backups may be down until a
/// newer map drops them).
pub(crate) const ROOT_INIT: Backoff =
    Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
/// A replicated batch that failed (not a gap): sent again.
pub(crate) const REPLICATE: Backoff =
    Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
/// A whole copy to a backup that failed midway: started over.
pub(crate) const WHOLE_COPY: Backoff =
    Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
/// A permission-change notification that was not acknowledged: sent again until the
/// subscriber's lease ends (`Partition::notify_one`).
pub(crate) const NOTIFY: Backoff =
    Backoff::new(Duration::from_millis(10), Duration::from_millis(200));
/// A replication request that must get through (`Link::call_until_ok`).
pub(crate) const UNTIL_OK: Backoff =
    Backoff::new(Duration::from_millis(10), Duration::from_secs(1));

/// A copy still opening answers `Busy`: a primary catching up asks it again this often.
pub(crate) const BUSY_COPY_RETRY: Duration = Duration::from_millis(20);
/// An entry being moved by an operation in flight (`Busy`) while a split exports its shard:
/// looked at again this often, within `PENDING_PATIENCE`.
pub(crate) const BUSY_ENTRY_RETRY: Duration = Duration::from_millis(20);
/// How often a map install by an administrator looks whether this server follows the new
/// map yet (it arrives through the Raft group).
pub(crate) const MAP_FOLLOW_POLL: Duration = Duration::from_millis(10);
/// A waiter for acknowledgements looks at the set of streams again at least this often
/// after one ended (a stream dropped or started over).
pub(crate) const STREAMS_RECHECK: Duration = Duration::from_millis(50);
/// The shortest period of ancestor-replica bookkeeping (configured windows and leases can
/// make it shorter).
pub(crate) const BOOKKEEPING_MIN: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_its_cap() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(35));
        let steps: Vec<u128> = (0..4).map(|_| b.step().as_millis()).collect();
        assert_eq!(steps, vec![10, 20, 35, 35]);
        assert_eq!(b.peek(), Duration::from_millis(35));
    }
}
