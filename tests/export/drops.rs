//! Every dropped span, log record and metric export is counted: on the handle, in the shutdown
//! report, and as lens's own `nemo.lens.dropped` metric.

use std::time::Duration;

use nemo_lens::{ExporterKind, LensConfig, Telemetry};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing_subscriber::prelude::*;

/// A collector that refuses everything.
#[derive(Debug)]
struct Refuse;

impl SpanExporter for Refuse {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure(
            "collector refused the batch".into(),
        ))
    }
}

impl LogExporter for Refuse {
    async fn export(&self, _batch: LogBatch<'_>) -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure(
            "collector refused the batch".into(),
        ))
    }
}

fn enabled() -> LensConfig {
    LensConfig::default()
        .with_enabled(true)
        .with(|c| c.logs_enabled = true)
}

/// The `nemo.lens.dropped` value of `signal` in the last export that has it.
fn dropped_metric(exported: &[ResourceMetrics], signal: &str) -> Option<u64> {
    let mut found = None;
    for rm in exported {
        for sm in rm.scope_metrics() {
            for m in sm.metrics().filter(|m| m.name() == "nemo.lens.dropped") {
                if let AggregatedMetrics::U64(MetricData::Sum(sum)) = m.data() {
                    for dp in sum.data_points() {
                        if dp
                            .attributes()
                            .any(|kv| kv.key.as_str() == "signal" && kv.value.as_str() == signal)
                        {
                            found = Some(dp.value());
                        }
                    }
                }
            }
        }
    }
    found
}

#[test]
fn refused_spans_and_log_records_are_counted_and_exported_as_a_metric() {
    let metrics = InMemoryMetricExporter::default();
    let m = metrics.clone();
    let t = Telemetry::builder(enabled())
        .span_exporter(Refuse)
        .log_exporter(Refuse)
        .metric_reader(move || PeriodicReader::builder(m).build())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(t.layer()), || {
        for step in 0..25_i64 {
            tracing::info_span!("step", step).in_scope(|| tracing::info!(step, "done"));
        }
    });
    let _ = t.force_flush();
    let stats = t.stats();
    assert_eq!(
        (
            stats.dropped_spans,
            stats.dropped_logs,
            stats.failed_metric_exports
        ),
        (25, 25, 0)
    );
    let _ = t.shutdown(Duration::from_secs(5));
    let exported = metrics.get_finished_metrics().unwrap();
    assert_eq!(dropped_metric(&exported, "spans"), Some(25));
    assert_eq!(dropped_metric(&exported, "logs"), Some(25));
    // Nothing dropped there: no series (healthy runs carry no extra metric).
    assert_eq!(dropped_metric(&exported, "metric_exports"), None);
}

#[test]
fn failed_metric_exports_are_counted() {
    // Every write to /dev/full fails (ENOSPC): the console exporters cannot write anything.
    let config = enabled().with(|c| {
        c.export.exporter = ExporterKind::Console;
        c.export.console_path = Some("/dev/full".into());
        c.logs_enabled = false;
    });
    let t = Telemetry::builder(config)
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(t.layer()), || {
        tracing::info_span!("step").in_scope(|| {});
    });
    t.instruments()
        .meter()
        .u64_counter("steps")
        .build()
        .add(1, &[]);
    let _ = t.force_flush();
    let _ = t.shutdown(Duration::from_secs(5));
    let dropped = t.stats();
    assert_eq!(dropped.dropped_spans, 1, "{dropped:?}");
    assert!(dropped.failed_metric_exports >= 1, "{dropped:?}");
}

#[test]
fn a_bad_log_queue_variable_fails_setup_naming_it() {
    for (var, value) in [
        ("OTEL_BLRP_MAX_QUEUE_SIZE", "lots"),
        ("OTEL_BLRP_SCHEDULE_DELAY", "-1"),
        ("OTEL_BLRP_EXPORT_TIMEOUT", "0"),
    ] {
        let err = Telemetry::builder(enabled())
            .env_lookup(move |k| (k == var).then(|| value.to_string()))
            .allow_reinit_for_testing(true)
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains(var) && err.contains(value), "{err}");
    }
}

#[test]
fn a_full_log_queue_drops_and_counts_instead_of_blocking() {
    /// Takes 300 ms per batch: the queue fills behind it.
    #[derive(Debug)]
    struct Slow;
    impl LogExporter for Slow {
        async fn export(&self, _batch: LogBatch<'_>) -> OTelSdkResult {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        }
    }
    let t = Telemetry::builder(enabled().with(|c| {
        c.traces_enabled = false;
        c.metrics_enabled = false;
    }))
    .env_lookup(|k| match k {
        "OTEL_BLRP_MAX_QUEUE_SIZE" => Some("16".into()),
        "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE" => Some("16".into()),
        _ => None,
    })
    .log_exporter(Slow)
    .allow_reinit_for_testing(true)
    .build()
    .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(t.layer()), || {
        for i in 0..1000_i64 {
            tracing::warn!(i, "burst");
        }
    });
    let dropped = t.stats().dropped_logs;
    assert!(
        dropped >= 1000 - 3 * 16,
        "at most a few batches fit: dropped {dropped}"
    );
    let _ = t.shutdown(Duration::from_secs(5));
}
