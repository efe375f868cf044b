//! What happened, in order, on the virtual clock: a digest of every event (two runs of one
//! seed must agree on it) and the last events, printed when a check fails.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

/// Events kept for the failure report.
const TAIL: usize = 400;

struct State {
    /// MYRIAD_SIM_TRACE=1: every event to stderr as it happens.
    echo: bool,
    start: Instant,
    digest: DefaultHasher,
    events: u64,
    tail: VecDeque<String>,
}

#[derive(Clone)]
pub struct Trace(Arc<Mutex<State>>);

impl Trace {
    #[must_use]
    pub fn new() -> Trace {
        Trace(Arc::new(Mutex::new(State {
            echo: std::env::var("MYRIAD_SIM_TRACE").is_ok_and(|v| v == "1"),
            start: Instant::now(),
            digest: DefaultHasher::new(),
            events: 0,
            tail: VecDeque::new(),
        })))
    }

    pub fn event(&self, what: std::fmt::Arguments<'_>) {
        let mut g = match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let at = g.start.elapsed();
        let mut line = String::new();
        let _ = write!(line, "{:>10.3} ms  {what}", at.as_secs_f64() * 1000.0);
        g.digest.write(line.as_bytes());
        if g.echo {
            eprintln!("{line}");
        }
        g.events += 1;
        if g.tail.len() == TAIL {
            g.tail.pop_front();
        }
        g.tail.push_back(line);
    }

    /// (events, digest) so far.
    #[must_use]
    pub fn digest(&self) -> (u64, u64) {
        match self.0.lock() {
            Ok(g) => (g.events, g.digest.finish()),
            Err(p) => {
                let g = p.into_inner();
                (g.events, g.digest.finish())
            }
        }
    }

    #[must_use]
    pub fn tail(&self) -> Vec<String> {
        match self.0.lock() {
            Ok(g) => g.tail.iter().cloned().collect(),
            Err(p) => p.into_inner().tail.iter().cloned().collect(),
        }
    }
}

impl Default for Trace {
    fn default() -> Trace {
        Trace::new()
    }
}
