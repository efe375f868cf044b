//! SplitMix64: a deterministic sequence of well-mixed numbers from a seed. Pure (no
//! entropy, no clock), so it belongs here with the other hashing: the one copy that the
//! workloads (`myriad bench`), the process-level exercisers (fsx, nsx) and the decision
//! logic's tests draw from, so a seed replays the same sequence everywhere.

/// SplitMix64 (Steele, Lea and Flood): tiny, fast, and good enough for workloads.
pub struct Rng(u64);

impl Rng {
    #[must_use]
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `xs` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[usize::try_from(self.below(xs.len() as u64)).unwrap_or(0)]
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_sequence_is_splitmix64s() {
        // The reference values of SplitMix64 from seed 0 (as in its published code).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut a = Rng::new(7);
        assert!((0..1000).all(|_| a.below(10) < 10));
        assert_eq!(Rng::new(5).below(0), 0);
    }
}
