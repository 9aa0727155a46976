//! A rank of the OTLP-over-TLS tests (`tests/export/otlp_tls.rs`): a user's program configured
//! from the environment only (`NEMO_LENS_*`, `OTEL_*`; it must export).
//!
//! It records three `train_step` spans with a warning each and training metrics, shuts down,
//! and prints what it dropped: `DROPPED spans=<n> logs=<n> metric_exports=<n>`.

use std::time::Duration;

use nemo_lens_test_support::rank::exporting_from_env;

fn main() {
    let (telemetry, _guard) = exporting_from_env();
    for step in 0..3_i64 {
        tracing::info_span!("train_step", dl.step = step).in_scope(|| {
            tracing::warn!(step, "loss spiked");
        });
    }
    nemo_lens::metrics::TrainingMetrics {
        loss: Some(0.5),
        ..Default::default()
    }
    .record(telemetry.instruments());
    let _ = telemetry.shutdown(Duration::from_secs(20));
    let d = telemetry.stats();
    println!(
        "DROPPED spans={} logs={} metric_exports={}",
        d.dropped_spans, d.dropped_logs, d.failed_metric_exports
    );
}
