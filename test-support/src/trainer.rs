//! What the trainer example (`examples/trainer.rs`) tells its tests on stderr: with
//! `RUST_LOG=trainer=debug` it logs a `step finished` line at the end of each step.

/// The steps the trainer logged as finished in `stderr`.
///
/// ```
/// use nemo_lens_test_support::trainer::finished_steps;
///
/// let stderr = "DEBUG trainer: step finished loss=0.5 step=1\nDEBUG trainer: step finished loss=0.4 step=2\n";
/// assert_eq!(finished_steps(stderr), 2);
/// ```
pub fn finished_steps(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.contains("step finished"))
        .count()
}
