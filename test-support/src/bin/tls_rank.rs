//! A rank of the OTLP-over-TLS tests (`tests/export/otlp_tls.rs`): a user's program configured
//! from the environment only (`NEMO_LENS_*`, `OTEL_*`; it must export).
//!
//! It records three `train_step` spans with a warning each and training metrics, shuts down,
//! and prints what it dropped: `DROPPED spans=<n> logs=<n> metric_exports=<n>`.

use std::time::Duration;

use tracing_subscriber::prelude::*;

fn main() {
    let config = nemo_lens::LensConfig::from_env().expect("config");
    let telemetry = nemo_lens::Telemetry::builder(config)
        .build()
        .expect("setup");
    assert!(telemetry.is_exporting());
    let _guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
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
