//! The pauses between a request's tries (`Client::route_with`): one deadline for the
//! whole request, a short pause doubling to a cap for a server that answers `Busy` (or a
//! map that is a step behind), and a longer one for a partition that is unavailable.

use std::time::Duration;

use tokio::time::Instant;

/// Waits between tries of a request answered `Busy` (or `WrongShard`): short at first (a
/// pending entry usually resolves within a round trip), doubling to this cap.
const BUSY_BACKOFF_FIRST: Duration = Duration::from_millis(1);
const BUSY_BACKOFF_MAX: Duration = Duration::from_millis(100);
/// Waits between tries of a partition that is unavailable (its server dead, a failover
/// under way, typically seconds): doubling to the cap, within the request's deadline.
const DOWN_BACKOFF_FIRST: Duration = Duration::from_millis(50);
const DOWN_BACKOFF_MAX: Duration = Duration::from_millis(200);

/// One request's deadline and its next pauses.
pub(super) struct Pacing {
    pub(super) deadline: Instant,
    busy: Duration,
    down: Duration,
}

impl Pacing {
    pub(super) fn new(timeout: Duration) -> Pacing {
        Pacing {
            deadline: Instant::now() + timeout,
            busy: BUSY_BACKOFF_FIRST,
            down: DOWN_BACKOFF_FIRST,
        }
    }

    /// Whether the next busy pause ends before the deadline.
    pub(super) fn busy_fits(&self) -> bool {
        Instant::now() + self.busy < self.deadline
    }

    /// Whether the next pause for an unavailable partition ends before the deadline.
    pub(super) fn down_fits(&self) -> bool {
        Instant::now() + self.down < self.deadline
    }

    /// Whether the deadline has not passed.
    pub(super) fn in_time(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Sleeps the busy pause (at least `min`), then doubles it up to its cap.
    pub(super) async fn busy_pause(&mut self, min: Duration) {
        tokio::time::sleep(self.busy.max(min)).await;
        self.busy = (self.busy * 2).min(BUSY_BACKOFF_MAX);
    }

    /// Sleeps the pause for an unavailable partition, then doubles it up to its cap.
    pub(super) async fn down_pause(&mut self) {
        tokio::time::sleep(self.down).await;
        self.down = (self.down * 2).min(DOWN_BACKOFF_MAX);
    }

    /// When the next pause for an unavailable partition would end.
    pub(super) fn after_down_pause(&self) -> Instant {
        Instant::now() + self.down
    }
}

/// A request's tries of a partition no copy of which is up in the client's map
/// (`Client::no_copy_up`): since when, and whether the map was asked for once already.
#[derive(Default)]
pub(super) struct NoCopy {
    pub(super) since: Option<Instant>,
    pub(super) refreshed: bool,
}
