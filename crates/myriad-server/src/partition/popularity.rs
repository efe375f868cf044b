//! Popularity of directory paths: Space-Saving top-k counting over a sliding time window
//! (TyrFS Section V-B, Algorithm 1; Metwally et al., ICDT 2005).
//!
//! Pure: time comes in as milliseconds from the caller, so tests are deterministic.
//!
//! The window is split into `SUB_WINDOWS` sub-windows, each with its own Space-Saving summary;
//! inserts go to the newest; a query sums the summaries of the sub-windows still inside the
//! window. Rotation drops the oldest, so popularity fades within one window of going quiet.

use std::collections::{BTreeMap, VecDeque};

/// Sub-windows per window: the window slides in steps of window / 4.
pub const SUB_WINDOWS: u64 = 4;
/// Counters per sub-window per top-k slot. Space-Saving's error bound is N / capacity, so
/// more counters than k sharpen the estimate of the k-th item.
pub const COUNTERS_PER_K: usize = 8;

/// Space-Saving: at most `capacity` counters. Each counter's `count` over-estimates the true
/// frequency by at most its `error`, and `error` <= N / capacity for a stream of N items.
#[derive(Clone, Debug)]
pub struct SpaceSaving {
    capacity: usize,
    counters: BTreeMap<String, Counter>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    pub count: u64,
    pub error: u64,
}

impl SpaceSaving {
    #[must_use]
    pub fn new(capacity: usize) -> SpaceSaving {
        SpaceSaving {
            capacity: capacity.max(1),
            counters: BTreeMap::new(),
        }
    }

    pub fn insert(&mut self, key: &str) {
        if let Some(c) = self.counters.get_mut(key) {
            c.count += 1;
            return;
        }
        if self.counters.len() < self.capacity {
            self.counters
                .insert(key.to_string(), Counter { count: 1, error: 0 });
            return;
        }
        // Replace the minimum: the newcomer inherits its count as error (the Space-Saving step).
        let Some((victim, min)) = self
            .counters
            .iter()
            .min_by_key(|(_, c)| c.count)
            .map(|(k, c)| (k.clone(), c.count))
        else {
            return;
        };
        self.counters.remove(&victim);
        self.counters.insert(
            key.to_string(),
            Counter {
                count: min + 1,
                error: min,
            },
        );
    }

    #[must_use]
    pub fn get(&self, key: &str) -> Option<Counter> {
        self.counters.get(key).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Counter)> {
        self.counters.iter()
    }
}

/// How long `is_top` may answer from the last computed top-k. Computing merges and sorts
/// every counter of the window, too much for every miss of the resolver.
pub const TOP_REFRESH_MS: u64 = 100;

/// Top-k over a sliding window of `window_ms`.
#[derive(Debug)]
pub struct WindowedTopK {
    k: usize,
    sub_window_ms: u64,
    /// (start of sub-window in ms, its summary), oldest first.
    windows: VecDeque<(u64, SpaceSaving)>,
    /// The top-k keys as computed at the given time (dropped when the window rotates).
    /// The last computed top-k: (when, the keys, the k-th count or 0 if fewer than k keys).
    cached_top: Option<(u64, std::collections::BTreeSet<String>, u64)>,
}

impl WindowedTopK {
    #[must_use]
    pub fn new(k: usize, window_ms: u64) -> WindowedTopK {
        WindowedTopK {
            cached_top: None,
            k: k.max(1),
            sub_window_ms: (window_ms / SUB_WINDOWS).max(1),
            windows: VecDeque::new(),
        }
    }

    fn rotate(&mut self, now_ms: u64) {
        let horizon = self.sub_window_ms * SUB_WINDOWS;
        while self
            .windows
            .front()
            .is_some_and(|(start, _)| now_ms.saturating_sub(*start) >= horizon)
        {
            self.windows.pop_front();
            self.cached_top = None;
        }
        let need_new = self
            .windows
            .back()
            .is_none_or(|(start, _)| now_ms.saturating_sub(*start) >= self.sub_window_ms);
        if need_new {
            let start = now_ms - now_ms % self.sub_window_ms;
            self.windows
                .push_back((start, SpaceSaving::new(self.k * COUNTERS_PER_K)));
        }
    }

    /// Records one request for `key` at `now_ms`.
    pub fn insert(&mut self, key: &str, now_ms: u64) {
        self.rotate(now_ms);
        if let Some((_, ss)) = self.windows.back_mut() {
            ss.insert(key);
        }
    }

    /// The k most requested keys in the window, most requested first (ties by key, so the
    /// answer is deterministic).
    #[must_use]
    pub fn top(&mut self, now_ms: u64) -> Vec<(String, u64)> {
        self.rotate(now_ms);
        let mut sums: BTreeMap<&String, u64> = BTreeMap::new();
        for (_, ss) in &self.windows {
            for (key, c) in ss.iter() {
                *sums.entry(key).or_default() += c.count;
            }
        }
        let mut all: Vec<(String, u64)> = sums.into_iter().map(|(k, c)| (k.clone(), c)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(self.k);
        all
    }

    /// The key's count summed over the window.
    fn count(&self, key: &str) -> u64 {
        self.windows
            .iter()
            .filter_map(|(_, ss)| ss.get(key))
            .map(|c| c.count)
            .sum()
    }

    /// Whether `key` is among the top k. Answers from the last computed top-k while it is
    /// fresh (`TOP_REFRESH_MS`), unless `key` now counts as much as its k-th entry and may
    /// have entered: a key entering is seen at once, one leaving within the refresh interval.
    #[must_use]
    pub fn is_top(&mut self, key: &str, now_ms: u64) -> bool {
        self.rotate(now_ms);
        if let Some((at, top, kth)) = &self.cached_top
            && now_ms.saturating_sub(*at) < TOP_REFRESH_MS
        {
            if top.contains(key) {
                return true;
            }
            if *kth > 0 && self.count(key) < *kth {
                return false;
            }
        }
        let top = self.top(now_ms);
        let kth = if top.len() == self.k {
            top.last().map_or(0, |t| t.1)
        } else {
            0
        };
        let found = top.iter().any(|(k, _)| k == key);
        self.cached_top = Some((now_ms, top.into_iter().map(|(k, _)| k).collect(), kth));
        found
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use myriad_placement::splitmix::Rng;

    /// Zipf-like skewed stream: key i has weight 1 / (i + 1).
    fn skewed(n: usize, keys: usize, seed: u64) -> Vec<String> {
        let weights: Vec<f64> = (0..keys).map(|i| 1.0 / (i as f64 + 1.0)).collect();
        let total: f64 = weights.iter().sum();
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| {
                let mut x = rng.unit() * total;
                for (i, w) in weights.iter().enumerate() {
                    if x < *w {
                        return format!("/k{i}");
                    }
                    x -= w;
                }
                format!("/k{}", keys - 1)
            })
            .collect()
    }

    fn check_bounds(stream: &[String], capacity: usize) {
        let mut ss = SpaceSaving::new(capacity);
        let mut truth: BTreeMap<&str, u64> = BTreeMap::new();
        for k in stream {
            ss.insert(k);
            *truth.entry(k).or_default() += 1;
        }
        let n = stream.len() as u64;
        for (key, c) in ss.iter() {
            let t = truth.get(key.as_str()).copied().unwrap_or(0);
            assert!(c.count >= t, "{key}: count {} under true {t}", c.count);
            assert!(
                c.count - c.error <= t,
                "{key}: guaranteed {} over true {t}",
                c.count - c.error
            );
            assert!(
                c.error <= n / capacity as u64,
                "{key}: error {} over N/m = {}",
                c.error,
                n / capacity as u64
            );
        }
        // Every key with true frequency > N / capacity is monitored.
        for (key, t) in &truth {
            if *t > n / capacity as u64 {
                assert!(ss.get(key).is_some(), "{key} (true {t}) must be monitored");
            }
        }
    }

    #[test]
    fn space_saving_error_bounds_hold_on_skewed_stream() {
        check_bounds(&skewed(50_000, 2_000, 1), 160);
    }

    #[test]
    fn space_saving_error_bounds_hold_on_uniform_stream() {
        let mut rng = Rng::new(2);
        let stream: Vec<String> = (0..50_000)
            .map(|_| format!("/u{}", rng.below(500)))
            .collect();
        check_bounds(&stream, 160);
    }

    #[test]
    fn top_k_finds_the_heavy_hitters_of_a_skewed_stream() {
        let mut w = WindowedTopK::new(5, 60_000);
        for k in skewed(30_000, 1_000, 3) {
            w.insert(&k, 10);
        }
        let top: Vec<String> = w.top(10).into_iter().map(|x| x.0).collect();
        assert_eq!(top, ["/k0", "/k1", "/k2", "/k3", "/k4"]);
    }

    #[test]
    fn is_top_sees_a_key_enter_at_once_and_one_leave_within_the_refresh() {
        let mut w = WindowedTopK::new(1, 60_000);
        for _ in 0..3 {
            w.insert("/a", 0);
        }
        assert!(w.is_top("/a", 0));
        w.insert("/b", 1);
        assert!(
            !w.is_top("/b", 1),
            "counts less than the k-th: answered from the cache"
        );
        for _ in 0..5 {
            w.insert("/b", 2);
        }
        assert!(
            w.is_top("/b", 2),
            "a key that overtakes the k-th is seen at once"
        );
        assert!(!w.is_top("/a", 2));
    }

    #[test]
    fn window_rotation_favors_recent_popularity() {
        let mut w = WindowedTopK::new(1, 60_000);
        // Long ago, /old was hammered.
        for _ in 0..10_000 {
            w.insert("/old", 0);
        }
        // Recently, /new was requested a little.
        for t in 0..100 {
            w.insert("/new", 70_000 + t);
        }
        assert!(
            w.is_top("/new", 70_100),
            "after a full window, old popularity is gone"
        );
        assert!(!w.is_top("/old", 70_100));
        // Within the window, both counts add up across sub-windows.
        let mut w = WindowedTopK::new(1, 60_000);
        for t in 0..300 {
            w.insert("/steady", t * 100); // 30 s of steady requests across sub-windows
        }
        for _ in 0..200 {
            w.insert("/burst", 29_000);
        }
        assert!(w.is_top("/steady", 30_000));
    }
}
