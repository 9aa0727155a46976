//! The parts of the pipelines an application brings itself: its span exporter and processors,
//! metric reader, log exporter, tracer provider builder and export strategy, and the export
//! mode ([`ExportMode`]). Each is built only on an exporting rank.

use opentelemetry_sdk::logs::LogExporter;
use opentelemetry_sdk::trace::{SpanExporter, SpanProcessor, TracerProviderBuilder};

use super::TelemetryBuilder;
use crate::queue::processors::{BoxedProcessor, exporter_processor, log_provider};

impl TelemetryBuilder {
    /// Sends spans to `exporter` instead of the configured console/OTLP exporter (traces only;
    /// metrics keep theirs). It is put behind nemo-lens's bounded batch queue (`OTEL_BSP_*`,
    /// drops counted in [`Telemetry::stats`](crate::Telemetry::stats)), built only on an
    /// exporting rank.
    ///
    /// ```
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    /// let exporter = InMemorySpanExporter::default();
    /// let builder = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default())
    ///     .span_exporter(exporter.clone());
    /// # let _ = builder;
    /// ```
    pub fn span_exporter<E: SpanExporter + 'static>(mut self, exporter: E) -> Self {
        self.span_exporter = Some(Box::new(move |settings| {
            exporter_processor(exporter, settings)
        }));
        self
    }

    /// Adds a span processor, built by `make` only on an exporting rank, registered before the
    /// exporter's processor (the counterpart of `add_span_processor` after Python setup).
    pub fn span_processor<P, F>(mut self, make: F) -> Self
    where
        P: SpanProcessor + 'static,
        F: FnOnce() -> P + Send + 'static,
    {
        self.span_processors
            .push(Box::new(move || BoxedProcessor(Box::new(make()))));
        self
    }

    /// Reads metrics with `make()` (e.g. a `ManualReader` in tests) on an exporting rank.
    pub fn metric_reader<R, F>(mut self, make: F) -> Self
    where
        R: opentelemetry_sdk::metrics::reader::MetricReader,
        F: FnOnce() -> R + Send + 'static,
    {
        self.metric_reader = Some(Box::new(move |b| b.with_reader(make())));
        self
    }

    /// Sends log records to `exporter` instead of the configured console/OTLP exporter (logs
    /// only). It is wrapped in a batch processor, built only on an exporting rank with
    /// `logs_enabled`.
    ///
    /// ```
    /// use opentelemetry_sdk::logs::InMemoryLogExporter;
    /// let exporter = InMemoryLogExporter::default();
    /// let builder = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default())
    ///     .log_exporter(exporter.clone());
    /// # let _ = builder;
    /// ```
    pub fn log_exporter<E: LogExporter + 'static>(mut self, exporter: E) -> Self {
        self.log_exporter = Some(Box::new(move |resource, settings| {
            log_provider(exporter, resource, settings)
        }));
        self
    }

    /// Builds the tracer provider from the application's own `builder` (its processors,
    /// exporters, sampler and resource) instead of an empty one. Lens adds its ID generator
    /// (replacing the builder's), the rank sampler when enabled, the processors of
    /// [`TelemetryBuilder::span_processor`], and an exporter only when
    /// [`TelemetryBuilder::span_exporter`] names one: the application's processors do the
    /// exporting. The builder's resource is kept (lens's resource attributes are not added to
    /// it; [`Telemetry::resource`](crate::Telemetry::resource) still describes this rank). On
    /// a disabled or non-exporting rank the builder is dropped unbuilt, and nothing is started.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    ///
    /// let mine = InMemorySpanExporter::default();
    /// let builder = SdkTracerProvider::builder().with_simple_exporter(mine.clone());
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.export.strategy = "all_ranks".into());
    /// let telemetry = Telemetry::builder(config)
    ///     .install_globals(false)
    ///     .tracer_provider(builder)
    ///     .build()?;
    /// let subscriber = tracing_subscriber::registry();
    /// use tracing_subscriber::layer::SubscriberExt;
    /// tracing::subscriber::with_default(subscriber.with(telemetry.layer()), || {
    ///     tracing::info_span!("job", nemo.group.job = tracing::field::Empty).in_scope(|| {});
    /// });
    /// telemetry.force_flush()?; // (the in-memory exporter forgets its spans at shutdown)
    /// assert_eq!(mine.get_finished_spans().unwrap()[0].name, "job");
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn tracer_provider(mut self, builder: TracerProviderBuilder) -> Self {
        self.provider_builder = Some(builder);
        self
    }

    /// How spans are exported (default [`ExportMode::Batched`]).
    ///
    /// ```
    /// use nemo_lens::{ExportMode, LensConfig, Telemetry};
    /// let builder = Telemetry::builder(LensConfig::default()).export_mode(ExportMode::Synchronous);
    /// # let _ = builder;
    /// ```
    pub fn export_mode(mut self, mode: ExportMode) -> Self {
        self.mode = mode;
        self
    }
}

/// How spans reach the exporter ([`TelemetryBuilder::export_mode`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportMode {
    /// Spans are queued and exported in batches by a worker thread (the default): the thread
    /// that ends a span never waits for the exporter.
    #[default]
    Batched,
    /// Every span is exported on the thread that ends it (tests, debugging).
    Synchronous,
}
