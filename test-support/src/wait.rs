//! Waiting for something another thread or process does: poll a condition until it holds, or
//! fail after a timeout with a message naming what was awaited. Never a fixed sleep.
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use nemo_lens_test_support::wait::{wait_for, wait_until};
//!
//! let done = Arc::new(AtomicBool::new(false));
//! let flag = done.clone();
//! std::thread::spawn(move || flag.store(true, Ordering::SeqCst));
//! wait_until(Duration::from_secs(30), "the worker thread", || done.load(Ordering::SeqCst));
//! let value = wait_for(Duration::from_secs(30), "a value", || Some(42));
//! assert_eq!(value, 42);
//! ```

use std::time::{Duration, Instant};

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(10);

/// Polls `done` until it holds; panics after `timeout` with "timed out after … waiting for
/// {what}".
#[track_caller]
pub fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    wait_for(timeout, what, || done().then_some(()))
}

/// Polls `ready` until it returns a value, and returns it; panics after `timeout` naming `what`.
#[track_caller]
pub fn wait_for<T>(timeout: Duration, what: &str, ready: impl FnMut() -> Option<T>) -> T {
    try_wait_for(timeout, ready)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Polls `ready` until it returns a value; `None` after `timeout` (for callers that add their
/// own context to the failure, e.g. what a collector printed).
pub fn try_wait_for<T>(timeout: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = ready() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}
