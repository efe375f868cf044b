//! Directories read far more than changed: the candidates for an automatic metadata
//! index (issue 20, docs/metadata-index.md "Automatic indexes"). Reads of names and
//! listings are counted per directory with the popularity machinery (Space-Saving top-k
//! over a sliding window, `popularity.rs`); changes are known to the lease table's gate
//! (`LeaseTable::last_change`), which every mutation passes. The clients whose reads name
//! them (a mount's: `Leased`, `ReadAs`) are remembered per directory, a few each, so that
//! a tree read from several mounts can be told from one read by a single client
//! (`HotDir::readers`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use myriad_proto::HotDir;
use myriad_proto::limits::HOT_DIR_READERS_MAX;
use tokio::time::Instant;

use crate::partition::popularity::WindowedTopK;

/// Directories followed: the most read this many. Enough for every directory of a big
/// software tree on its partitions: an automatic index's root is found by climbing from
/// its hot directories through parents read only once per client, which a smaller set
/// evicted (256: the first storm measurement indexed 48 corners of one Python tree).
/// A read of a directory not followed costs a scan of the set when it is full.
const TRACKED: usize = 2048;

/// The clients that read each directory lately (`ReadMostly::reader`).
#[derive(Default)]
struct Readers {
    /// Directory: (client, ms of its last read).
    dirs: HashMap<String, Vec<(u64, u64)>>,
    /// When the directories were last swept for room (ms).
    swept_at: u64,
}

pub(crate) struct ReadMostly {
    reads: Mutex<WindowedTopK>,
    /// Per directory, the clients that read it lately and when (ms), at most
    /// `HOT_DIR_READERS_MAX`; at most `TRACKED` directories (`reader`).
    readers: Mutex<Readers>,
    window_ms: u64,
    started: Instant,
}

impl ReadMostly {
    pub(crate) fn new(window: Duration) -> ReadMostly {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
        ReadMostly {
            reads: Mutex::new(WindowedTopK::new(TRACKED, window_ms)),
            readers: Mutex::new(Readers::default()),
            window_ms,
            started: Instant::now(),
        }
    }

    /// A read of `dir` by client `holder` (as its read names it). Counted as a reader;
    /// the read itself is counted by `read`.
    pub(crate) fn reader(&self, dir: &str, holder: u64) {
        let now = self.now_ms();
        let Ok(mut readers) = self.readers.lock() else {
            return;
        };
        let window = self.window_ms;
        let Readers { dirs, swept_at } = &mut *readers;
        if !dirs.contains_key(dir) && dirs.len() >= TRACKED {
            // Full: the directories no client read within the window go, looked for at
            // most once a second (a walk of many directories must not scan them all at
            // each read); while none goes, a new directory is not remembered.
            if now.saturating_sub(*swept_at) < 1_000 {
                return;
            }
            *swept_at = now;
            dirs.retain(|_, r| r.iter().any(|(_, at)| now.saturating_sub(*at) < window));
            if dirs.len() >= TRACKED {
                return;
            }
        }
        // Looked up by `&str` first: a directory read again (the usual case) costs no
        // allocation.
        if !dirs.contains_key(dir) {
            dirs.insert(dir.to_string(), Vec::new());
        }
        let Some(these) = dirs.get_mut(dir) else {
            return;
        };
        these.retain(|(_, at)| now.saturating_sub(*at) < window);
        if let Some(r) = these.iter_mut().find(|(h, _)| *h == holder) {
            r.1 = now;
        } else if these.len() < HOT_DIR_READERS_MAX as usize {
            these.push((holder, now));
        }
    }

    /// Distinct clients that read `dir` within the window, as far as their reads named them.
    fn readers_of(&self, readers: &Readers, dir: &str, now: u64) -> u32 {
        readers.dirs.get(dir).map_or(0, |r| {
            let n = r
                .iter()
                .filter(|(_, at)| now.saturating_sub(*at) < self.window_ms)
                .count();
            u32::try_from(n).unwrap_or(u32::MAX)
        })
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
    ) -> Vec<HotDir> {
        let now = self.now_ms();
        let top = match self.reads.lock() {
            Ok(mut r) => r.top(now),
            Err(_) => return Vec::new(),
        };
        let mut hot: Vec<HotDir> = top
            .into_iter()
            .filter(|(_, reads)| *reads >= min_reads)
            .filter_map(|(dir, reads)| {
                let since = last_change(&dir).map(|t| t.elapsed());
                if since.is_some_and(|s| s < quiet) {
                    return None;
                }
                let since_ms = since.map(|s| u64::try_from(s.as_millis()).unwrap_or(u64::MAX));
                Some(HotDir {
                    path: dir,
                    reads,
                    since_ms,
                    readers: 0,
                })
            })
            .collect();
        // Their readers, under one lock (taken after the lease table's, never inside it).
        if let Ok(readers) = self.readers.lock() {
            for d in &mut hot {
                d.readers = self.readers_of(&readers, &d.path, now);
            }
        }
        hot
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
        assert_eq!(
            got,
            vec![HotDir {
                path: "/sw/lib".to_string(),
                reads: 50,
                since_ms: None,
                readers: 0
            }]
        );
        // Quiet enough for a zero quiet period: the busy one too, with its last change.
        let all = rm.candidates(10, Duration::ZERO, changed);
        assert_eq!(all.len(), 2);
        assert!(
            all.iter()
                .any(|h| h.path == "/busy" && h.reads == 61 && h.since_ms.is_some())
        );
    }

    #[test]
    fn the_clients_that_read_a_directory_are_counted_once_each_and_bounded() {
        let rm = ReadMostly::new(Duration::from_secs(60));
        for _ in 0..20 {
            rm.read("/sw");
            rm.reader("/sw", 7);
        }
        let readers = |rm: &ReadMostly| {
            rm.candidates(1, Duration::ZERO, |_| None)
                .into_iter()
                .find(|h| h.path == "/sw")
                .map(|h| h.readers)
        };
        assert_eq!(
            readers(&rm),
            Some(1),
            "one client reading often is one reader"
        );
        rm.reader("/sw", 8);
        assert_eq!(readers(&rm), Some(2));
        for client in 100..200 {
            rm.reader("/sw", client);
        }
        assert_eq!(readers(&rm), Some(HOT_DIR_READERS_MAX));
        // The directories remembered are bounded.
        for d in 0..TRACKED + 10 {
            rm.reader(&format!("/d{d}"), 1);
        }
        let kept = rm.readers.lock().map(|r| r.dirs.len()).unwrap_or(0);
        assert_eq!(kept, TRACKED, "directories remembered");
    }
}
