//! The threads the partitions' apply loops run on: a few per process, each a
//! single-threaded runtime, the partitions dealt to them in turn (issue 51 item 4).
//!
//! A thread per partition (as before) made every change a wake-up of its own thread: on
//! the 2-core project machine `bench create` (4 servers, 3 copies) ran 6,692 creates/s
//! (median of 6) with 11.1 context switches per create; one thread per server process
//! ran 7,701/s, with fewer fsyncs per create (one thread finishes more partitions' rounds
//! between two fsyncs). The loops only wait on their own queue, the syncer (its own
//! thread) and timers, never on another partition's loop, so they can share a thread; an
//! apply blocked on the store (a write stall) holds up the other partitions of its thread,
//! which share that store anyway. Running them as tasks of the server's runtime was as
//! fast, but would block its workers, which keep the server's leases and heartbeats.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;

/// Cores per applier thread: one thread on the 2-core machine measured, two on eight
/// cores (larger machines are not measured yet).
const CORES_PER_THREAD: usize = 4;

static THREADS: Mutex<Vec<Handle>> = Mutex::new(Vec::new());
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Runs `apply` (one partition's apply loop) on one of the process's applier threads,
/// started on first use.
pub(super) fn spawn<F>(apply: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = {
        let mut threads = crate::unpoisoned::lock(&THREADS);
        if threads.is_empty() {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            for i in 0..cores.div_ceil(CORES_PER_THREAD).max(1) {
                threads.push(start(i)?);
            }
        }
        threads[NEXT.fetch_add(1, Ordering::Relaxed) % threads.len()].clone()
    };
    handle.spawn(apply);
    Ok(())
}

/// One applier thread: a single-threaded runtime that runs until the process ends.
fn start(i: usize) -> std::io::Result<Handle> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name(format!("myriad-applier-{i}"))
        .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}
