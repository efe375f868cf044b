//! The run's one source of randomness: every choice (delays, faults, the workload) is drawn
//! from it, so a seed replays the run.

use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand::rngs::StdRng;

#[derive(Clone)]
pub struct SimRng(Arc<Mutex<StdRng>>);

impl SimRng {
    #[must_use]
    pub fn new(seed: u64) -> SimRng {
        SimRng(Arc::new(Mutex::new(StdRng::seed_from_u64(seed))))
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut StdRng) -> T) -> T {
        match self.0.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }
}
