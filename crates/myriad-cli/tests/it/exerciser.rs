//! What the exercisers (fsx, nsx) share: their random numbers (splitmix64, so a seed
//! replays the same sequence everywhere) and the tail of their step log in a report.

/// splitmix64: small, fast, and the same sequence everywhere.
pub use myriad_placement::splitmix::Rng;

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
