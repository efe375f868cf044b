//! Deterministic simulation of a Myriad cluster (docs/simulation.md): real servers
//! (`myriad_server::embed`) and real clients on one thread and a virtual clock, over a
//! simulated network (`net`) and simulated disks (`disk`), with a map authority in place of
//! the Raft group (`authority`), faults drawn from one seed, and the history of what the
//! clients saw checked as it happens (`history`).
//!
//! Must not depend on: the CLI, FUSE. Nothing here is used by the server process.

mod authority;
mod disk;
mod driver;
mod history;
mod lock_check;
mod net;
mod rng;
mod trace;
mod workload;

pub use driver::{Failure, Report, SimConfig, run};

#[cfg(test)]
mod tests;
