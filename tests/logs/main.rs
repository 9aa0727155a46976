//! Logs: the log bridge (`tracing` events and `log` records become OpenTelemetry log records in
//! Python's layout), and the `exception` span events as Python's `record_exception` writes them.
//!
//! One test binary: its tests run as threads of one process. A test that installs process-wide
//! state (the `log` forwarder, the global subscriber, the environment) runs its body in a child
//! (`nemo_lens_test_support::child`).

mod exception_events;
mod log_records;
mod logs;
mod logs_feedback;
