//! Taking a std mutex whatever a panicking holder left: the server's locks guard maps and
//! counters that stay usable (a poisoned lock would otherwise stop the partition).

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// A read guard even if a writer panicked (the tables stay usable).
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
