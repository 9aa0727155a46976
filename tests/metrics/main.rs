//! Metrics: the instrument families, metrics from `tracing` events, the metric-group registry,
//! the metric pipeline's setup, and the console metric exporter against Python's output.
//!
//! One test binary: its tests run as threads of one process. A test that reads process-wide
//! state (the global meter provider, the process's threads) runs its body in a child
//! (`nemo_lens_test_support::child`).

mod console_metrics;
mod metrics_events;
mod metrics_instruments;
mod metrics_registry;
mod metrics_setup;
