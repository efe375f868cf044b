//! File-system statistics in the form of the Panasas seed's `fsstats` (seeds/002): powers-of-two
//! histograms of file size, capacity used, directory size, file age, plus symlinks and hard
//! links, with counts, sums, minimum, maximum and average. Pure: whoever walks a tree (the CLI
//! over a local directory or a mount, later the servers as files change) adds what it finds
//! with `FsStats::add_*`, and partial results of parallel walkers are merged with `merge`.
//!
//! Buckets follow fsstats: bucket 0 holds values below `first_edge`, bucket i >= 1 holds
//! `[first_edge * 2^(i-1), first_edge * 2^i)`; a value exactly on an edge goes to the bucket
//! that starts there (a 16 KiB file is in [16 KiB, 32 KiB)).

use serde::{Deserialize, Serialize};

/// Bytes are bucketed from 2 KiB up (fsstats: "files less than 2KB, 2KB up to 4KB, ...").
pub const SIZE_FIRST_EDGE: u64 = 2048;
/// Directory sizes (entries) from 1 up: [0, 1) is the empty directories.
pub const ENTRIES_FIRST_EDGE: u64 = 1;
/// Ages in days from one day up: [0, 1 day) is what changed today.
pub const AGE_FIRST_EDGE_SECS: u64 = 86_400;

/// A powers-of-two histogram of one metric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// The upper edge of bucket 0 (see the module doc).
    pub first_edge: u64,
    /// Per bucket, how many values fell in it.
    pub counts: Vec<u64>,
    /// Per bucket, the sum of the values in it (for size: the bytes those files hold).
    pub sums: Vec<u128>,
    pub count: u64,
    pub sum: u128,
    pub min: Option<u64>,
    pub max: Option<u64>,
}

impl Histogram {
    #[must_use]
    pub fn new(first_edge: u64) -> Histogram {
        Histogram {
            first_edge: first_edge.max(1),
            counts: Vec::new(),
            sums: Vec::new(),
            count: 0,
            sum: 0,
            min: None,
            max: None,
        }
    }

    /// The bucket `value` falls in.
    #[must_use]
    pub fn bucket_of(&self, value: u64) -> usize {
        if value < self.first_edge {
            return 0;
        }
        // value >= first_edge: bucket i holds [edge * 2^(i-1), edge * 2^i).
        let ratio = value / self.first_edge;
        (u64::BITS - ratio.leading_zeros()) as usize
    }

    /// The bucket's lower and upper edge (`None`: no upper edge fits in a u64).
    #[must_use]
    pub fn edges(&self, bucket: usize) -> (u64, Option<u64>) {
        if bucket == 0 {
            return (0, Some(self.first_edge));
        }
        let shift = |n: usize| {
            u32::try_from(n)
                .ok()
                .and_then(|n| 1u64.checked_shl(n))
                .and_then(|p| self.first_edge.checked_mul(p))
        };
        (shift(bucket - 1).unwrap_or(u64::MAX), shift(bucket))
    }

    pub fn add(&mut self, value: u64) {
        let b = self.bucket_of(value);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
            self.sums.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.sums[b] += u128::from(value);
        self.count += 1;
        self.sum += u128::from(value);
        self.min = Some(self.min.map_or(value, |m| m.min(value)));
        self.max = Some(self.max.map_or(value, |m| m.max(value)));
    }

    /// The same buckets, counts and sums (min and max aside: a histogram values left does
    /// not keep them; trailing empty buckets aside).
    #[must_use]
    pub fn same_counts(&self, o: &Histogram) -> bool {
        let trim = |h: &Histogram| {
            let mut n = h.counts.len();
            while n > 0 && h.counts[n - 1] == 0 && h.sums[n - 1] == 0 {
                n -= 1;
            }
            (h.counts[..n].to_vec(), h.sums[..n].to_vec())
        };
        self.first_edge == o.first_edge
            && self.count == o.count
            && self.sum == o.sum
            && trim(self) == trim(o)
    }

    /// Takes away one `value` added before (the servers keep histograms as files change).
    /// `min` and `max` are not kept by a histogram values leave: they become `None`.
    pub fn remove(&mut self, value: u64) {
        let b = self.bucket_of(value);
        if let (Some(c), Some(s)) = (self.counts.get_mut(b), self.sums.get_mut(b)) {
            *c = c.saturating_sub(1);
            *s = s.saturating_sub(u128::from(value));
        }
        self.count = self.count.saturating_sub(1);
        self.sum = self.sum.saturating_sub(u128::from(value));
        self.min = None;
        self.max = None;
    }

    /// Adds `other`'s values (the same `first_edge`; otherwise its values are lost: a
    /// programming error, reported by the return value).
    pub fn merge(&mut self, other: &Histogram) -> bool {
        if other.first_edge != self.first_edge {
            return false;
        }
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
            self.sums.resize(other.counts.len(), 0);
        }
        for (i, (c, s)) in other.counts.iter().zip(&other.sums).enumerate() {
            self.counts[i] += c;
            self.sums[i] += s;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = match (self.min, other.min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max = self.max.max(other.max);
        true
    }

    /// The average value (0 with no values).
    #[must_use]
    pub fn average(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Per bucket: (bucket, count, % of all values, cumulative %, sum, % of the total sum,
    /// cumulative %), buckets from the first to the last non-empty one.
    #[must_use]
    pub fn rows(&self) -> Vec<Row> {
        let mut out = Vec::new();
        let last = self.counts.iter().rposition(|c| *c > 0);
        let Some(last) = last else {
            return out;
        };
        let (mut cum_count, mut cum_sum) = (0u64, 0u128);
        let pct = |part: f64, whole: f64| {
            if whole > 0.0 {
                100.0 * part / whole
            } else {
                0.0
            }
        };
        for b in 0..=last {
            let (count, sum) = (self.counts[b], self.sums[b]);
            cum_count += count;
            cum_sum += sum;
            let (low, high) = self.edges(b);
            out.push(Row {
                low,
                high,
                count,
                count_pct: pct(count as f64, self.count as f64),
                count_cum_pct: pct(cum_count as f64, self.count as f64),
                sum,
                sum_pct: pct(sum as f64, self.sum as f64),
                sum_cum_pct: pct(cum_sum as f64, self.sum as f64),
            });
        }
        out
    }
}

/// One bucket of a histogram, as printed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub low: u64,
    pub high: Option<u64>,
    pub count: u64,
    pub count_pct: f64,
    pub count_cum_pct: f64,
    pub sum: u128,
    pub sum_pct: f64,
    pub sum_cum_pct: f64,
}

/// Everything one walk found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsStats {
    /// Regular files by length (bytes).
    pub size: Histogram,
    /// Regular files by capacity used (bytes of storage, `ls -s`: copies and parity
    /// where the file system counts them).
    pub capacity: Histogram,
    /// Directories by number of entries.
    pub dir_entries: Histogram,
    /// Regular files by time since their last modification (seconds).
    pub mtime_age: Histogram,
    /// Regular files by time since their last status change (seconds).
    pub ctime_age: Histogram,
    /// Name lengths (bytes) of everything met.
    pub name_len: Histogram,
    /// Symbolic links by the length of their target (bytes).
    pub symlinks: Histogram,
    /// Regular files with more than one link, by link count (each counted once per name).
    pub hard_links: Histogram,
    /// Devices, sockets, fifos.
    pub other: u64,
    /// Entries that could not be read (permissions, vanished meanwhile).
    pub errors: u64,
}

impl Default for FsStats {
    fn default() -> FsStats {
        FsStats {
            size: Histogram::new(SIZE_FIRST_EDGE),
            capacity: Histogram::new(SIZE_FIRST_EDGE),
            dir_entries: Histogram::new(ENTRIES_FIRST_EDGE),
            mtime_age: Histogram::new(AGE_FIRST_EDGE_SECS),
            ctime_age: Histogram::new(AGE_FIRST_EDGE_SECS),
            name_len: Histogram::new(ENTRIES_FIRST_EDGE),
            symlinks: Histogram::new(ENTRIES_FIRST_EDGE),
            hard_links: Histogram::new(2),
            other: 0,
            errors: 0,
        }
    }
}

/// What a walker knows of one regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileFacts {
    pub size: u64,
    pub capacity: u64,
    pub nlink: u64,
    pub mtime_age_secs: u64,
    pub ctime_age_secs: u64,
}

impl FsStats {
    pub fn add_file(&mut self, name_len: usize, f: FileFacts) {
        self.size.add(f.size);
        self.capacity.add(f.capacity);
        self.mtime_age.add(f.mtime_age_secs);
        self.ctime_age.add(f.ctime_age_secs);
        if f.nlink > 1 {
            self.hard_links.add(f.nlink);
        }
        self.name_len.add(name_len as u64);
    }

    pub fn add_dir(&mut self, name_len: usize, entries: u64) {
        self.dir_entries.add(entries);
        self.name_len.add(name_len as u64);
    }

    pub fn add_symlink(&mut self, name_len: usize, target_len: u64) {
        self.symlinks.add(target_len);
        self.name_len.add(name_len as u64);
    }

    pub fn add_other(&mut self, name_len: usize) {
        self.other += 1;
        self.name_len.add(name_len as u64);
    }

    /// Every histogram with the same counts (`Histogram::same_counts`), and the same
    /// other counts.
    #[must_use]
    pub fn same_counts(&self, o: &FsStats) -> bool {
        [
            (&self.size, &o.size),
            (&self.capacity, &o.capacity),
            (&self.dir_entries, &o.dir_entries),
            (&self.mtime_age, &o.mtime_age),
            (&self.ctime_age, &o.ctime_age),
            (&self.name_len, &o.name_len),
            (&self.symlinks, &o.symlinks),
            (&self.hard_links, &o.hard_links),
        ]
        .iter()
        .all(|(a, b)| a.same_counts(b))
            && self.other == o.other
            && self.errors == o.errors
    }

    /// Takes a regular file's facts away again (`add_file`'s inverse, ages aside).
    pub fn remove_file(&mut self, name_len: Option<usize>, f: FileFacts) {
        self.size.remove(f.size);
        self.capacity.remove(f.capacity);
        if f.nlink > 1 {
            self.hard_links.remove(f.nlink);
        }
        if let Some(n) = name_len {
            self.name_len.remove(n as u64);
        }
    }

    pub fn merge(&mut self, o: &FsStats) {
        for (mine, theirs) in [
            (&mut self.size, &o.size),
            (&mut self.capacity, &o.capacity),
            (&mut self.dir_entries, &o.dir_entries),
            (&mut self.mtime_age, &o.mtime_age),
            (&mut self.ctime_age, &o.ctime_age),
            (&mut self.name_len, &o.name_len),
            (&mut self.symlinks, &o.symlinks),
            (&mut self.hard_links, &o.hard_links),
        ] {
            // Both come from `FsStats::default`: the edges match.
            let _ = mine.merge(theirs);
        }
        self.other += o.other;
        self.errors += o.errors;
    }

    /// The fast tier that holds all metadata and every file below `small_bytes` (the seed:
    /// "metadata and small files on a small SSD tier"), with `copies` copies of each: those
    /// files' bytes times `copies`, plus `per_entry_bytes` for each name met. An upper
    /// estimate from the buckets: every file of a bucket starting below `small_bytes`
    /// counts.
    #[must_use]
    pub fn fast_tier_bytes(&self, small_bytes: u64, copies: u64, per_entry_bytes: u64) -> u128 {
        let small: u128 = (0..self.size.sums.len())
            .filter(|b| self.size.edges(*b).0 < small_bytes)
            .map(|b| self.size.sums[b])
            .sum();
        small * u128::from(copies)
            + u128::from(self.name_len.count) * u128::from(copies) * u128::from(per_entry_bytes)
    }
}

#[cfg(test)]
mod tests;
