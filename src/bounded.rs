//! Work that must not hold its caller past a deadline (a shutdown, a flush): it runs on a
//! thread of its own, and the caller waits for its answer until the deadline only. An exporter
//! stuck in the work then keeps its own thread, not the caller's.

use std::sync::mpsc;
use std::time::Duration;

/// Why [`run_bounded`] has no answer.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The thread could not start.
    NotStarted(std::io::Error),
    /// The work was still running when the wait ended; it goes on alone.
    TimedOut,
}

/// Runs `work` on a new thread named `nemo-lens-<name>` and returns its answer, waiting at most
/// `wait` for it.
pub(crate) fn run_bounded<T: Send + 'static>(
    name: &str,
    wait: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Unanswered> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("nemo-lens-{name}"))
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(Unanswered::NotStarted)?;
    rx.recv_timeout(wait).map_err(|_| Unanswered::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_comes_back_from_the_named_thread() {
        let name = run_bounded("test", Duration::from_secs(60), || {
            std::thread::current().name().map(str::to_string)
        });
        assert_eq!(name.unwrap().as_deref(), Some("nemo-lens-test"));
    }

    /// Work that has not answered when the wait ends is left running: the caller is free.
    #[test]
    fn work_still_running_at_the_deadline_is_left_alone() {
        let (release, held) = mpsc::channel::<()>();
        let (done_tx, done) = mpsc::channel();
        let answer = run_bounded("test", Duration::ZERO, move || {
            let _ = held.recv();
            let _ = done_tx.send(());
        });
        assert!(matches!(answer, Err(Unanswered::TimedOut)), "{answer:?}");
        release.send(()).unwrap();
        done.recv_timeout(Duration::from_secs(60))
            .expect("the work finished once released");
    }
}
