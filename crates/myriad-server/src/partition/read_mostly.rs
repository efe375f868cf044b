//! Directories read far more than changed: the candidates for an automatic metadata
//! index (issue 20, docs/metadata-index.md "Automatic indexes"). Reads of names and
//! listings are counted per directory with the popularity machinery (Space-Saving top-k
//! over a sliding window, `popularity.rs`); changes are known to the lease table's gate
//! (`LeaseTable::last_change`), which every mutation passes.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::partition::popularity::WindowedTopK;

/// Directories followed: the most read this many. Enough for every directory of a big
/// software tree on its partitions: an automatic index's root is found by climbing from
/// its hot directories through parents read only once per client, which a smaller set
/// evicted (256: the first storm measurement indexed 48 corners of one Python tree).
/// A read of a directory not followed costs a scan of the set when it is full.
const TRACKED: usize = 2048;

pub(crate) struct ReadMostly {
    reads: Mutex<WindowedTopK>,
    started: Instant,
}

impl ReadMostly {
    pub(crate) fn new(window: Duration) -> ReadMostly {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
        ReadMostly {
            reads: Mutex::new(WindowedTopK::new(TRACKED, window_ms)),
            started: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A read of a name in `dir`, or of its listing.
    pub(crate) fn read(&self, dir: &str) {
        let now = self.now_ms();
        if let Ok(mut r) = self.reads.lock() {
            r.insert(dir, now);
        }
    }

    /// The directories read at least `min_reads` times in the window and not changed for
    /// `quiet` (`last_change`: when a directory last changed, if known): path, reads, time
    /// since the last change (`None`: no change seen).
    pub(crate) fn candidates(
        &self,
        min_reads: u64,
        quiet: Duration,
        last_change: impl Fn(&str) -> Option<Instant>,
    ) -> Vec<(String, u64, Option<u64>)> {
        let now = self.now_ms();
        let top = match self.reads.lock() {
            Ok(mut r) => r.top(now),
            Err(_) => return Vec::new(),
        };
        top.into_iter()
            .filter(|(_, reads)| *reads >= min_reads)
            .filter_map(|(dir, reads)| {
                let since = last_change(&dir).map(|t| t.elapsed());
                if since.is_some_and(|s| s < quiet) {
                    return None;
                }
                let ms = since.map(|s| u64::try_from(s.as_millis()).unwrap_or(u64::MAX));
                Some((dir, reads, ms))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_read_often_and_not_changed_lately_is_a_candidate() {
        let rm = ReadMostly::new(Duration::from_secs(60));
        for _ in 0..50 {
            rm.read("/sw/lib");
        }
        for _ in 0..3 {
            rm.read("/tmp");
        }
        rm.read("/busy");
        for _ in 0..60 {
            rm.read("/busy");
        }
        let changed = |d: &str| (d == "/busy").then(Instant::now);
        let got = rm.candidates(10, Duration::from_secs(5), changed);
        assert_eq!(got, vec![("/sw/lib".to_string(), 50, None)]);
        // Quiet enough for a zero quiet period: the busy one too, with its last change.
        let all = rm.candidates(10, Duration::ZERO, changed);
        assert_eq!(all.len(), 2);
        assert!(
            all.iter()
                .any(|(d, n, since)| d == "/busy" && *n == 61 && since.is_some())
        );
    }
}
