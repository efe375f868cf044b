//! The Tokio runtime the bindings' calls run on: one per process. A forked child (a
//! PyTorch DataLoader worker, a multiprocessing pool) makes its own, because a runtime's
//! threads and its connections do not survive `fork`.

use std::sync::{Arc, Mutex};

use tokio::runtime::Runtime;

/// The process's runtime and the pid it was made in.
static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// Worker threads: the client's own work per request is small (the servers do the rest),
/// so a few threads carry many requests in flight.
const WORKERS: usize = 4;

/// This process's runtime, made on first use (and again after a fork).
pub fn runtime() -> std::io::Result<(u32, Arc<Runtime>)> {
    let pid = std::process::id();
    let mut g = RUNTIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((made_in, rt)) = g.as_ref()
        && *made_in == pid
    {
        return Ok((pid, rt.clone()));
    }
    if let Some(inherited) = g.take() {
        // The parent's runtime: its threads are not in this process, so dropping it would
        // wait for them forever. Leak it instead (once per fork).
        std::mem::forget(inherited);
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name("myriad-py")
            .enable_all()
            .build()?,
    );
    *g = Some((pid, rt.clone()));
    Ok((pid, rt))
}
