//! Test utilities (feature `testing`): capture the spans your code emits, in a few lines.
//!
//! [`SpanCapture`] sets up an enabled, exporting telemetry whose spans are exported
//! synchronously into memory, and gives you a subscriber to run your code under:
//!
//! ```
//! use nemo_lens::testing::SpanCapture;
//!
//! #[tracing::instrument(fields(nemo.group.step))]
//! fn train_step(step: i64) {
//!     tracing::info!(loss = 0.5, "step done");
//! }
//!
//! let capture = SpanCapture::new();
//! capture.in_scope(|| train_step(7));
//! let span = capture.span("train_step").unwrap();
//! assert_eq!(SpanCapture::attribute(&span, "step"), Some(opentelemetry::Value::I64(7)));
//! assert_eq!(span.events.events[0].name, "step done");
//! ```
//!
//! Everything else (groups, redaction, truncation at shutdown) behaves as in production. Use
//! [`SpanCapture::with_config`] to test with a particular configuration, e.g. a span-group spec.
//! [`CollectingExporter`] is the exporter behind it, usable with [`TelemetryBuilder::span_exporter`](crate::TelemetryBuilder::span_exporter);
//! unlike the SDK's in-memory exporter it keeps its spans across shutdown, so shutdown paths can
//! be tested.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Value;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use parking_lot::Mutex;
use tracing_subscriber::layer::SubscriberExt;

use crate::{LensConfig, Telemetry};

/// A span exporter that appends every exported span to a shared list.
///
/// ```
/// let exporter = nemo_lens::testing::CollectingExporter::default();
/// assert!(exporter.spans().is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct CollectingExporter {
    spans: Arc<Mutex<Vec<SpanData>>>,
}

impl CollectingExporter {
    /// Every span exported so far, in export order.
    pub fn spans(&self) -> Vec<SpanData> {
        self.spans.lock().clone()
    }

    /// Forgets the spans collected so far.
    pub fn clear(&self) {
        self.spans.lock().clear();
    }
}

impl SpanExporter for CollectingExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.spans.lock().extend(batch);
        Ok(())
    }
}

/// An enabled telemetry that captures its spans in memory; see the [module docs](self).
#[derive(Debug)]
pub struct SpanCapture {
    telemetry: Telemetry,
    exporter: CollectingExporter,
}

impl Default for SpanCapture {
    fn default() -> Self {
        Self::new()
    }
}

impl SpanCapture {
    /// Captures every span (all groups enabled).
    pub fn new() -> Self {
        Self::with_config(LensConfig::default().with(|c| c.groups.span_groups = "all".into()))
            .expect("the default capture configuration is valid")
    }

    /// Captures with `config` (forced enabled, all ranks, traces on, metrics and logs off).
    ///
    /// ```
    /// use nemo_lens::{testing::SpanCapture, LensConfig};
    /// let capture = SpanCapture::with_config(LensConfig::default().with(|c| c.groups.span_groups = "step".into())).unwrap();
    /// capture.in_scope(|| {
    ///     tracing::info_span!("kept", nemo.group.step = tracing::field::Empty).in_scope(|| {});
    ///     tracing::info_span!("gated", nemo.group.optimizer = tracing::field::Empty).in_scope(|| {});
    /// });
    /// assert!(capture.span("kept").is_some());
    /// assert!(capture.span("gated").is_none());
    /// ```
    pub fn with_config(config: LensConfig) -> crate::Result<Self> {
        let exporter = CollectingExporter::default();
        // Spans only: a capture must never reach for a collector with metrics or logs.
        let config = config.with_enabled(true).with(|c| {
            c.traces_enabled = true;
            c.metrics_enabled = false;
            c.logs_enabled = false;
            c.export.strategy = "all_ranks".into();
        });
        let telemetry = Telemetry::builder(config)
            .span_exporter(exporter.clone())
            .export_mode(crate::ExportMode::Synchronous)
            .allow_reinit_for_testing(true)
            .build()?;
        Ok(SpanCapture {
            telemetry,
            exporter,
        })
    }

    /// The telemetry behind the capture.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// A subscriber with the lens layer, to install as you like.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + use<> {
        tracing_subscriber::registry().with(self.telemetry.layer())
    }

    /// Runs `f` with the capture's subscriber as the thread's default.
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        tracing::subscriber::with_default(self.subscriber(), f)
    }

    /// Installs the capture's subscriber as the thread's default until the guard drops.
    pub fn set_default(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(self.subscriber())
    }

    /// Every finished span, in the order they ended.
    pub fn spans(&self) -> Vec<SpanData> {
        self.exporter.spans()
    }

    /// The first finished span named `name`.
    pub fn span(&self, name: &str) -> Option<SpanData> {
        self.exporter.spans().into_iter().find(|s| s.name == name)
    }

    /// Shuts the telemetry down (ending open spans as truncated) and returns every span.
    pub fn finish(&self) -> Vec<SpanData> {
        let _ = self.telemetry.shutdown(Duration::from_secs(5));
        self.spans()
    }

    /// The value of attribute `key` on `span`.
    pub fn attribute(span: &SpanData, key: &str) -> Option<Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    }
}
