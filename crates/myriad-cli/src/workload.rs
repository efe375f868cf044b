//! Deterministic small-file workloads: sizes from a realistic small-file mix and contents that
//! can be regenerated from the file's index, so readers verify every byte without keeping a copy.

/// The workloads' numbers: SplitMix64, the same sequence everywhere.
pub use myriad_placement::splitmix::Rng;

/// Size buckets of the 1-64 KiB mix, with their share in percent. Small files dominate by
/// count, as in the Panasas seed's survey (most files are a few KiB).
const SMALL_MIX: [(u64, u64, u64); 6] = [
    (1024, 2048, 15),
    (2048, 4096, 20),
    (4096, 8192, 25),
    (8192, 16_384, 20),
    (16_384, 32_768, 12),
    (32_768, 65_536, 8),
];
const _: () = assert!(
    SMALL_MIX[0].2
        + SMALL_MIX[1].2
        + SMALL_MIX[2].2
        + SMALL_MIX[3].2
        + SMALL_MIX[4].2
        + SMALL_MIX[5].2
        == 100
);

/// Size of small file number `index` (1 KiB to 64 KiB), reproducible.
#[must_use]
pub fn small_file_size(index: u64) -> usize {
    let mut rng = Rng::new(index ^ 0x5eed_0000_0000_0000);
    let mut pick = rng.below(100);
    for (lo, hi, pct) in SMALL_MIX {
        if pick < pct {
            return usize::try_from(lo + rng.below(hi - lo + 1)).unwrap_or(4096);
        }
        pick -= pct;
    }
    4096
}

/// Contents of file number `index` with length `len`, reproducible.
#[must_use]
pub fn file_content(index: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(index.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0xc0ff_ee00);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_mix_and_are_reproducible() {
        let sizes: Vec<usize> = (0..20_000).map(small_file_size).collect();
        assert!(sizes.iter().all(|&s| (1024..=65_536).contains(&s)));
        let under_8k = sizes.iter().filter(|&&s| s <= 8192).count() as f64 / 20_000.0;
        assert!(
            (0.55..0.65).contains(&under_8k),
            "share <= 8 KiB: {under_8k}"
        );
        assert_eq!(small_file_size(17), small_file_size(17));
        assert_eq!(file_content(5, 100), file_content(5, 100));
        assert_ne!(file_content(5, 100), file_content(6, 100));
    }
}
