//! The wall clock file times come from: the system's in the server process; in a
//! simulation, one that starts at a fixed instant and follows the runtime's (virtual) clock,
//! so that a run replays exactly.

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug)]
pub enum Clock {
    System,
    /// `epoch_ns` at the runtime instant `start`, then advancing with the runtime's clock.
    Virtual {
        start: tokio::time::Instant,
        epoch_ns: i64,
    },
}

impl Clock {
    /// Nanoseconds since the Unix epoch.
    #[must_use]
    pub fn now_ns(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
                .unwrap_or(0),
            Clock::Virtual { start, epoch_ns } => {
                let since = i64::try_from(start.elapsed().as_nanos()).unwrap_or(i64::MAX);
                epoch_ns.saturating_add(since)
            }
        }
    }
}
