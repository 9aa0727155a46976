//! Metric exporters whose failures are counted.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;

/// A push metric exporter that counts its failed exports; see below.
///
/// # How it works
///
/// The SDK's periodic reader logs a failed metric export and moves on. [`CountedMetricExporter`]
/// wraps any push exporter and adds one to a counter for every export that fails, so the loss
/// shows up in [`Telemetry::stats`](crate::Telemetry::stats) (`failed_metric_exports`), in the
/// shutdown report on stderr, and in the `nemo.lens.dropped` metric.
pub(crate) struct CountedMetricExporter<E> {
    inner: E,
    failed: Arc<AtomicU64>,
}

impl<E> fmt::Debug for CountedMetricExporter<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountedMetricExporter")
            .field("failed", &self.failed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<E: PushMetricExporter> CountedMetricExporter<E> {
    /// Wraps `inner`; each failed export adds one to `failed`.
    pub(crate) fn new(inner: E, failed: Arc<AtomicU64>) -> Self {
        CountedMetricExporter { inner, failed }
    }
}

impl<E: PushMetricExporter> PushMetricExporter for CountedMetricExporter<E> {
    fn export(&self, metrics: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        let failed = self.failed.clone();
        let export = self.inner.export(metrics);
        async move {
            let result = export.await;
            if result.is_err() {
                failed.fetch_add(1, Ordering::Relaxed);
            }
            result
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn failed_exports_start_at_zero() {
        use super::CountedMetricExporter;
        use opentelemetry_sdk::metrics::{
            InMemoryMetricExporter, PeriodicReader, SdkMeterProvider,
        };
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};

        let failed = Arc::new(AtomicU64::new(0));
        let exporter =
            CountedMetricExporter::new(InMemoryMetricExporter::default(), failed.clone());
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter).build())
            .build();
        provider.shutdown().unwrap();
        assert_eq!(failed.load(Ordering::Relaxed), 0);
    }
}
