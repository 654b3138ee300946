//! `lock`: a mutex of the bindings' state, taken even when a thread panicked while
//! holding it (the state is counters and handles, still whole: a poisoned lock must
//! not turn every later call into a panic across the FFI boundary).

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
