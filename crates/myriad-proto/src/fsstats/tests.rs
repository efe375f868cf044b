use proptest::prelude::*;

use super::*;

#[test]
fn buckets_follow_fsstats_edges() {
    let h = Histogram::new(SIZE_FIRST_EDGE);
    assert_eq!(h.bucket_of(0), 0);
    assert_eq!(h.bucket_of(2047), 0);
    assert_eq!(h.bucket_of(2048), 1, "2 KiB starts [2 KiB, 4 KiB)");
    assert_eq!(h.bucket_of(4095), 1);
    assert_eq!(h.bucket_of(16 * 1024), 4, "16 KiB is in [16 KiB, 32 KiB)");
    assert_eq!(h.edges(4), (16 * 1024, Some(32 * 1024)));
    assert_eq!(h.edges(0), (0, Some(2048)));
    let last = h.bucket_of(u64::MAX);
    assert_eq!(h.edges(last).1, None, "no upper edge fits");
    let e = Histogram::new(ENTRIES_FIRST_EDGE);
    assert_eq!(e.bucket_of(0), 0, "empty directories");
    assert_eq!(e.bucket_of(1), 1);
    assert_eq!(e.bucket_of(2), 2);
    assert_eq!(e.bucket_of(3), 2);
}

#[test]
fn rows_give_percentages_and_running_totals() {
    let mut h = Histogram::new(SIZE_FIRST_EDGE);
    for v in [100, 100, 3000, 10_000] {
        h.add(v);
    }
    let rows = h.rows();
    assert_eq!(rows.len(), 4, "buckets 0..=3, one of them empty");
    assert_eq!(rows[0].count, 2);
    assert!((rows[0].count_pct - 50.0).abs() < 1e-9);
    assert_eq!(rows[2].count, 0);
    assert!((rows[3].count_cum_pct - 100.0).abs() < 1e-9);
    assert!((rows[3].sum_cum_pct - 100.0).abs() < 1e-9);
    assert_eq!(rows[3].sum, 10_000);
    assert_eq!((h.min, h.max), (Some(100), Some(10_000)));
    assert!((h.average() - 3300.0).abs() < 1e-9);
    assert!(Histogram::new(1).rows().is_empty());
}

#[test]
fn histograms_of_other_edges_do_not_merge() {
    let mut a = Histogram::new(2);
    assert!(!a.merge(&Histogram::new(4)));
}

#[test]
fn the_fast_tier_holds_small_files_and_names_with_their_copies() {
    let mut s = FsStats::default();
    let file = |size| FileFacts {
        size,
        capacity: size,
        nlink: 1,
        mtime_age_secs: 0,
        ctime_age_secs: 0,
    };
    s.add_file(4, file(1000));
    s.add_file(4, file(40_000));
    s.add_file(4, file(10 << 20));
    s.add_dir(3, 3);
    // Below 64 KiB: 41,000 bytes, 4 names, 3 copies, 100 bytes a name.
    assert_eq!(
        s.fast_tier_bytes(64 << 10, 3, 100),
        41_000 * 3 + 4 * 3 * 100
    );
}

proptest! {
    /// Each value lands in the one bucket whose edges hold it, and the merge of two walks
    /// is the walk of both.
    #[test]
    fn every_value_is_in_its_bucket_and_merges_add_up(
        edge in 1u64..5000,
        a in proptest::collection::vec(any::<u64>(), 0..50),
        b in proptest::collection::vec(0u64..1 << 40, 0..50),
    ) {
        let mut ha = Histogram::new(edge);
        for v in &a {
            let bucket = ha.bucket_of(*v);
            let (low, high) = ha.edges(bucket);
            prop_assert!(low <= *v, "{v} below bucket {bucket} [{low}, {high:?})");
            prop_assert!(high.is_none_or(|h| *v < h), "{v} above bucket {bucket}");
            ha.add(*v);
        }
        let mut hb = Histogram::new(edge);
        for v in &b {
            hb.add(*v);
        }
        let mut both = Histogram::new(edge);
        for v in a.iter().chain(&b) {
            both.add(*v);
        }
        prop_assert!(ha.merge(&hb));
        // Trailing empty buckets aside, the same histogram.
        prop_assert_eq!(ha.count, both.count);
        prop_assert_eq!(ha.sum, both.sum);
        prop_assert_eq!((ha.min, ha.max), (both.min, both.max));
        prop_assert_eq!(ha.rows(), both.rows());
    }
}
