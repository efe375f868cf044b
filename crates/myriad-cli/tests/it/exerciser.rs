//! What the exercisers (fsx, nsx) share: their random numbers (splitmix64, so a seed
//! replays the same sequence everywhere) and the tail of their step log in a report.

/// splitmix64: small, fast, and the same sequence everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// The last `n` lines of `log`, oldest first, one per line: what a failure report shows.
pub fn last_lines(log: &[String], n: usize) -> String {
    let start = log.len().saturating_sub(n);
    let mut s = String::new();
    for l in &log[start..] {
        s.push_str(l);
        s.push('\n');
    }
    s
}
