//! A shutdown that runs once, and that later callers wait for.
//!
//! Three paths may shut the telemetry down at nearly the same moment: `main` calling
//! [`Telemetry::shutdown`](crate::Telemetry::shutdown), the signal thread on SIGTERM/SIGINT and
//! the panic hook. Only the first runs the shutdown; a later one must not return before it is
//! over (`main` would return and the process would exit mid-flush, with no drop report), so it
//! waits for it, at most for its own timeout.
//!
//! ```text
//! signal thread:  begin() -> Run ........ flush ........ finish()
//! main:                 begin() -> Wait  ---- wait(10 s) ----> Ok (done)
//! ```

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Where the shutdown is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    NotStarted,
    Running,
    Done,
}

/// What [`ShutdownOnce::begin`] tells its caller.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Turn {
    /// The caller runs the shutdown, then calls [`ShutdownOnce::finish`] (or drops the guard).
    Run,
    /// Another caller runs it (or ran it): [`ShutdownOnce::wait`] for it.
    Wait,
}

/// The state of one handle's shutdown: not started, running, done.
#[derive(Debug)]
pub(super) struct ShutdownOnce {
    phase: Mutex<Phase>,
    done: Condvar,
}

impl Default for ShutdownOnce {
    fn default() -> Self {
        ShutdownOnce {
            phase: Mutex::new(Phase::NotStarted),
            done: Condvar::new(),
        }
    }
}

impl ShutdownOnce {
    /// Claims the shutdown: [`Turn::Run`] for the first caller, [`Turn::Wait`] for the others.
    pub(super) fn begin(&self) -> Turn {
        let mut phase = self.phase.lock();
        if *phase == Phase::NotStarted {
            *phase = Phase::Running;
            Turn::Run
        } else {
            Turn::Wait
        }
    }

    /// Marks the shutdown done and wakes the callers waiting for it.
    pub(super) fn finish(&self) {
        *self.phase.lock() = Phase::Done;
        self.done.notify_all();
    }

    /// Waits until the running shutdown is done, at most `timeout`; whether it is done.
    pub(super) fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut phase = self.phase.lock();
        while *phase != Phase::Done {
            let timed_out = match deadline {
                Some(d) => self.done.wait_until(&mut phase, d).timed_out(),
                None => {
                    self.done.wait(&mut phase);
                    false
                }
            };
            if timed_out {
                return *phase == Phase::Done;
            }
        }
        true
    }
}

/// Calls [`ShutdownOnce::finish`] when dropped, so every return path of the shutdown (and an
/// unwinding one) releases the waiters.
pub(super) struct FinishOnDrop<'a>(pub(super) &'a ShutdownOnce);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_second_caller_waits_for_the_first() {
        let once = Arc::new(ShutdownOnce::default());
        assert_eq!(once.begin(), Turn::Run);
        assert_eq!(once.begin(), Turn::Wait);
        assert!(!once.wait(Duration::from_millis(10)), "still running");
        let waiter = {
            let once = once.clone();
            std::thread::spawn(move || once.wait(Duration::from_secs(60)))
        };
        drop(FinishOnDrop(&once));
        assert!(waiter.join().unwrap());
        assert_eq!(once.begin(), Turn::Wait);
        assert!(once.wait(Duration::ZERO), "done stays done");
    }
}
