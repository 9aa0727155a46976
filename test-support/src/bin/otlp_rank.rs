//! A rank of the OTLP delivery tests (`tests/export/otlp.rs`): a user's program configured
//! from the environment only (`NEMO_LENS_*`, `OTEL_*`; it must export).
//!
//! It records a `train` span holding a `train_step` (with an event and a warning), training
//! metrics, and leaves a `prefetch` span open at shutdown (exported as truncated).

use std::time::Duration;

use nemo_lens_test_support::rank::exporting_from_env;

fn main() {
    let (telemetry, _guard) = exporting_from_env();
    let train = tracing::info_span!("train", dl.model = "gpt-test");
    let _train = train.enter();
    tracing::info_span!("train_step", dl.step = 7_i64, loss = 0.5_f64).in_scope(|| {
        tracing::info!(tokens = 4096_i64, "step done");
        tracing::warn!(grad_norm = 12.5_f64, "loss spiked");
    });
    nemo_lens::metrics::TrainingMetrics {
        loss: Some(0.5),
        step_duration_s: Some(0.25),
        attributes: &[opentelemetry::KeyValue::new("phase", "train")],
        ..Default::default()
    }
    .record(telemetry.instruments());
    // Still open at shutdown: exported as truncated.
    let prefetch = tracing::info_span!("prefetch", batch = 8_i64);
    let _prefetch = prefetch.enter();
    telemetry
        .shutdown(Duration::from_secs(20))
        .expect("shutdown");
}
