//! The one blocking wait of the handoff queues: take an item from a
//! mutex-guarded state, or sleep on its condvar until one comes, the deadline
//! passes or the queue is closed.

use std::sync::{Condvar, MutexGuard};
use std::time::{Duration, Instant};

/// Waits on `cv` up to `timeout` until `take` yields an item; `None` on
/// timeout, or at once when nothing is there and `closed` says no more will come.
/// A poisoned lock is taken over: the queues stay consistent (each operation is
/// one push or pop).
pub fn take_or_wait<S, T>(
    mut state: MutexGuard<'_, S>,
    cv: &Condvar,
    timeout: Duration,
    mut take: impl FnMut(&mut S) -> Option<T>,
    closed: impl Fn(&S) -> bool,
) -> Option<T> {
    let deadline = Instant::now().checked_add(timeout);
    loop {
        if let Some(item) = take(&mut state) {
            return Some(item);
        }
        if closed(&state) {
            return None;
        }
        let left = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(3600),
        };
        if left.is_zero() {
            return None;
        }
        state = match cv.wait_timeout(state, left) {
            Ok((s, _)) => s,
            Err(e) => e.into_inner().0,
        };
    }
}
