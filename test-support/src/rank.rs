//! A user's rank set up from the environment alone, as the fixture programs and the tests'
//! child processes run one.

use nemo_lens::{LensConfig, Telemetry};
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::prelude::*;

/// A rank configured from `NEMO_LENS_*` and `OTEL_*` only, which must export: its telemetry,
/// and the guard that keeps a registry with the telemetry's layer this thread's default
/// subscriber.
///
/// # Panics
///
/// If the configuration or the setup fails, or the rank does not export.
///
/// ```no_run
/// use std::time::Duration;
///
/// let (telemetry, guard) = nemo_lens_test_support::rank::exporting_from_env();
/// tracing::info_span!("train_step").in_scope(|| {});
/// drop(guard);
/// telemetry.shutdown(Duration::from_secs(20)).expect("shutdown");
/// ```
pub fn exporting_from_env() -> (Telemetry, DefaultGuard) {
    let config = LensConfig::from_env().expect("config");
    let telemetry = Telemetry::builder(config).build().expect("setup");
    assert!(telemetry.is_exporting());
    let guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    (telemetry, guard)
}
