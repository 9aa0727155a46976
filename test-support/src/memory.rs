//! An exporting telemetry whose spans go to an in-memory exporter, for tests that check what the
//! lens layer hands the SDK.

use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry, TelemetryBuilder};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing_subscriber::prelude::*;

/// Every rank exports traces (no metrics).
pub fn config() -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.metrics_enabled = false;
    })
}

/// A builder of an exporting telemetry ([`config`]) that installs nothing process-wide and
/// exports its spans to `exporter`.
pub fn builder(exporter: &InMemorySpanExporter) -> TelemetryBuilder {
    Telemetry::builder(config())
        .install_globals(false)
        .span_exporter(exporter.clone())
}

/// Builds an exporting telemetry (every rank exports, no metrics, nothing process-wide) whose
/// spans go to an in-memory exporter, lets `extra` add to the builder, runs `f` under a
/// registry with its lens layer, then flushes, shuts down and returns the exported spans.
pub fn run_exporting(
    extra: impl FnOnce(TelemetryBuilder) -> TelemetryBuilder,
    f: impl FnOnce(&Telemetry),
) -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let telemetry = extra(builder(&exporter)).build().unwrap();
    tracing::subscriber::with_default(
        tracing_subscriber::registry().with(telemetry.layer()),
        || f(&telemetry),
    );
    telemetry.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
    spans
}

/// The exported span named `name`.
pub fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}
