//! The double-init guard: a second enabled setup in one process is an error.
//! (In a process of its own, `nemo_lens_test_support::child`: the guard is process-wide.)

use std::time::Duration;

use nemo_lens::testing::CollectingExporter;
use nemo_lens::{LensConfig, LensError, Telemetry};

use nemo_lens_test_support::child;

fn enabled() -> LensConfig {
    LensConfig::default()
        .with_enabled(true)
        .with(|c| c.export.strategy = "all_ranks".into())
}

#[test]
fn a_second_enabled_setup_is_an_error_unless_allowed_for_tests() {
    child::run_alone(second_enabled_setup);
}

fn second_enabled_setup() {
    // Disabled setups never arm the guard.
    Telemetry::builder(LensConfig::default()).build().unwrap();
    let first = Telemetry::builder(enabled())
        .span_exporter(CollectingExporter::default())
        .build();
    let first = first.expect("first enabled setup");
    let second = Telemetry::builder(enabled())
        .span_exporter(CollectingExporter::default())
        .build();
    assert!(matches!(second, Err(LensError::AlreadyInitialized)));
    let msg = second.unwrap_err().to_string();
    assert!(msg.contains("already been initialised") && msg.contains("allow_reinit_for_testing"));
    // A disabled setup after it is still fine, and the escape hatch works.
    Telemetry::builder(LensConfig::default()).build().unwrap();
    Telemetry::builder(enabled())
        .span_exporter(CollectingExporter::default())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    first.shutdown(Duration::from_secs(1)).unwrap();
}
