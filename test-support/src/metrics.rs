//! Metric test helpers: an exporting telemetry whose metrics land in memory.

use nemo_lens::{LensConfig, Telemetry};
use opentelemetry_sdk::metrics::data::{Metric, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};

/// An exporting, metrics-only telemetry reading into an in-memory exporter.
pub fn exporting() -> (Telemetry, InMemoryMetricExporter) {
    let exporter = InMemoryMetricExporter::default();
    let reader_exporter = exporter.clone();
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.traces_enabled = false;
    });
    let telemetry = Telemetry::builder(config)
        .metric_reader(move || PeriodicReader::builder(reader_exporter).build())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    (telemetry, exporter)
}

/// The last (cumulative) batch after a flush, if any.
pub fn collect(
    telemetry: &Telemetry,
    exporter: &InMemoryMetricExporter,
) -> Option<ResourceMetrics> {
    telemetry.force_flush().unwrap();
    exporter.get_finished_metrics().unwrap().pop()
}

/// The metric called `name` in `rm`; panics when absent.
pub fn metric<'a>(rm: &'a ResourceMetrics, name: &str) -> &'a Metric {
    rm.scope_metrics()
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}
