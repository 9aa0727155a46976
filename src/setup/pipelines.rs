//! What an exporting rank builds: the three providers, the console writer they share and the
//! one private Tokio runtime of the gRPC exporters.
//!
//! Nothing here runs on a disabled or non-exporting rank: [`Built::default`] (all `None`) is
//! what such a rank keeps.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use opentelemetry::global;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, TracerProviderBuilder};

use crate::SCOPE_NAME;
use crate::config::env::{Env, shown};
use crate::config::{ExporterKind, LensConfig};
use crate::error::{LensError, Result};
use crate::export::otlp::{self, Signal};
use crate::export::{
    ConsoleLogExporter, ConsoleMetricExporter, ConsoleSpanExporter, ConsoleWriter,
    CountedMetricExporter, MessageLimit, resolve_path,
};
use crate::ids::ChaChaIdGenerator;
use crate::layer::detail::{DetailCapture, DetailSettings};
use crate::layer::logs::LensLoggerProvider;
use crate::layer::pipeline::Pipeline;
use crate::propagation;
use crate::queue::drops::DropCounters;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use crate::queue::processors::ready_processor;
use crate::queue::processors::{
    BoxedProcessor, ExportSettings, SpanProcessors, exporter_processor, log_provider,
    yielding_exporter_processor,
};
use crate::rank::groups::GroupGate;
use crate::rank::sampler::RankAwareSampler;
use crate::rank::tags::GroupTags;
use crate::record::attributes::TextRules;
use crate::record::to_span_data::DirectBuild;

/// Builds the processor of the exporter given to
/// [`TelemetryBuilder::span_exporter`](crate::TelemetryBuilder::span_exporter).
pub(super) type ProcessorFactory =
    Box<dyn FnOnce(&ExportSettings) -> Result<BoxedProcessor> + Send>;
/// Builds the logger provider around the exporter given to
/// [`TelemetryBuilder::log_exporter`](crate::TelemetryBuilder::log_exporter).
pub(super) type LogExporterFactory =
    Box<dyn FnOnce(Resource, &ExportSettings) -> Result<SdkLoggerProvider> + Send>;
/// Adds the reader given to
/// [`TelemetryBuilder::metric_reader`](crate::TelemetryBuilder::metric_reader) to the meter
/// provider.
pub(super) type ReaderFactory =
    Box<dyn FnOnce(MeterProviderBuilder) -> MeterProviderBuilder + Send>;
/// The metric export interval when `OTEL_METRIC_EXPORT_INTERVAL` is unset (10 s, as Python).
pub(super) const DEFAULT_METRIC_EXPORT_INTERVAL: Duration = Duration::from_millis(10_000);

/// The variable of the metric export interval, in milliseconds.
pub(super) const METRIC_INTERVAL_VAR: &str = "OTEL_METRIC_EXPORT_INTERVAL";

/// What one process built. All `None` on a disabled or non-exporting rank.
#[derive(Default)]
pub(crate) struct Built {
    /// What the layer records through (`None`: the layer is inert).
    pub(crate) pipeline: Option<Arc<Pipeline>>,
    pub(crate) tracer_provider: Option<SdkTracerProvider>,
    /// The tracer provider's span processors, which the handle shuts down (not the provider:
    /// see [`SpanProcessors`]).
    pub(crate) span_processors: SpanProcessors,
    /// The tracer provider was built from the application's own builder, whose processors only
    /// the provider's shutdown reaches.
    pub(crate) own_provider: bool,
    pub(crate) meter_provider: Option<SdkMeterProvider>,
    pub(crate) logger_provider: Option<LensLoggerProvider>,
    pub(crate) resource: Option<Resource>,
    /// The part of the resource child processes inherit, and its publication.
    pub(crate) handed_down: super::resource::HandedDown,
    /// The interval of the periodic metric reader lens built (none with an injected reader).
    pub(crate) metric_interval: Option<Duration>,
    /// The exporters' transports: the gRPC runtime, when a signal uses gRPC.
    pub(crate) transport: otlp::transport::Transport,
    /// The console output shared by the console exporters (opened once, on first use).
    console: Option<ConsoleWriter>,
}

/// What the trace pipeline is built from.
pub(super) struct TraceParts {
    pub(super) resource: Resource,
    pub(super) sampler: Option<RankAwareSampler>,
    pub(super) processors: Vec<Box<dyn FnOnce() -> BoxedProcessor + Send>>,
    pub(super) exporter: Option<ProcessorFactory>,
    pub(super) settings: ExportSettings,
    /// Whether the layer records (false on a rank the rank sampler leaves out).
    pub(super) recording: bool,
    /// Redaction and the span attribute value length limit.
    pub(super) text: TextRules,
    /// Groups whose spans each start a trace (`NEMO_LENS_TRACE_PER`), lower-case.
    pub(super) trace_per: Vec<String>,
    /// Per-step detail capture, and the gate that gives a callsite's group.
    pub(super) detail: Option<(DetailSettings, Arc<GroupGate>)>,
    /// `ERROR` events and panics carry a backtrace.
    pub(super) error_backtraces: bool,
    /// The attributes each span group gives its spans.
    pub(super) group_tags: GroupTags,
    /// The application's own provider builder ([`TelemetryBuilder::tracer_provider`]).
    ///
    /// [`TelemetryBuilder::tracer_provider`]: super::TelemetryBuilder::tracer_provider
    pub(super) provider_builder: Option<TracerProviderBuilder>,
    /// Whether the provider becomes the global one.
    pub(super) install_global: bool,
}

impl Built {
    /// The console writer of this process: stdout, or the per-rank file of
    /// `NEMO_LENS_CONSOLE_PATH`, opened on first use and shared by every console exporter so
    /// their lines interleave whole.
    fn console_writer(&mut self, config: &LensConfig, rank: u32) -> Result<ConsoleWriter> {
        if let Some(w) = &self.console {
            return Ok(w.clone());
        }
        let writer = match &config.export.console_path {
            Some(template) => {
                ConsoleWriter::to_path(template, rank).map_err(|source| LensError::OutputFile {
                    var: "NEMO_LENS_CONSOLE_PATH".into(),
                    path: shown(&resolve_path(template, rank).display().to_string()),
                    source,
                })?
            }
            None => ConsoleWriter::stdout(),
        };
        self.console = Some(writer.clone());
        Ok(writer)
    }

    /// Builds the tracer provider (ChaCha IDs, optional rank sampler, the user's processors,
    /// then the exporter's), installs it as the global one (unless told not to), and the layer's
    /// pipeline when this rank records. On the application's own builder, lens adds an exporter
    /// only when one was given explicitly.
    pub(super) fn traces(
        &mut self,
        config: &LensConfig,
        rank: u32,
        env: Env<'_>,
        parts: TraceParts,
    ) -> Result<()> {
        let resource = parts.resource.clone();
        let own_builder = parts.provider_builder.is_some();
        let mut builder = match parts.provider_builder {
            Some(builder) => builder,
            None => SdkTracerProvider::builder().with_resource(parts.resource),
        }
        .with_id_generator(ChaChaIdGenerator::new());
        if let Some(sampler) = parts.sampler {
            builder = builder.with_sampler(sampler);
        }
        let mut processors: Vec<BoxedProcessor> =
            parts.processors.into_iter().map(|make| make()).collect();
        // No processor of the application sees the lens layer's spans (none added, not its own
        // provider): the worker builds the exporter's `SpanData` itself. The SDK-span closer
        // ignores lens-layer spans either way, and spans of the lens tracer (`tracer()`,
        // `opentelemetry_layer()`) still go through the provider.
        let direct =
            (processors.is_empty() && !own_builder).then(|| DirectBuild::from_env(SCOPE_NAME));
        let exporter = match parts.exporter {
            Some(make) => Some(make(&parts.settings)?),
            None if own_builder => None,
            None => Some(match config.export.exporter {
                ExporterKind::Console => {
                    let writer = self.console_writer(config, rank)?;
                    exporter_processor(ConsoleSpanExporter::new(writer), &parts.settings)?
                }
                // The worker writes the requests straight from the records.
                #[cfg(feature = "otlp-http")]
                ExporterKind::Otlp
                    if !parts.settings.synchronous
                        && otlp::protocol_for(Signal::Traces, env)?
                            == otlp::OtlpProtocol::HttpProtobuf =>
                {
                    let exporter = self
                        .transport
                        .http_trace_exporter(env, parts.settings.dropped.clone())?;
                    ready_processor(exporter, &parts.settings)?
                }
                #[cfg(feature = "otlp-grpc")]
                ExporterKind::Otlp
                    if !parts.settings.synchronous
                        && otlp::protocol_for(Signal::Traces, env)? == otlp::OtlpProtocol::Grpc =>
                {
                    let exporter = self
                        .transport
                        .grpc_trace_exporter(env, parts.settings.dropped.clone())?;
                    ready_processor(exporter, &parts.settings)?
                }
                ExporterKind::Otlp => {
                    let protocol = otlp::protocol_for(Signal::Traces, env)?;
                    let exporter = self.transport.span_exporter(protocol, env)?;
                    // One huge span must not make the collector refuse its whole batch.
                    let exporter = MessageLimit::new(exporter, parts.settings.dropped.clone());
                    yielding_exporter_processor(exporter, &parts.settings)?
                }
            }),
        };
        processors.extend(exporter);
        let processors = SpanProcessors::new(processors, &resource);
        if let Some(p) = processors.registered() {
            builder = builder.with_span_processor(p);
        }
        let provider = builder.build();
        self.span_processors = processors;
        self.own_provider = own_builder;
        if parts.install_global {
            global::set_tracer_provider(provider.clone());
        }
        if parts.recording {
            self.pipeline = Some(Arc::new(
                Pipeline::new(
                    provider.tracer(SCOPE_NAME),
                    propagation::env_parent(&|k| env.raw(k)),
                    parts.text,
                    parts.settings.span_queue.get().cloned(),
                    parts.settings.dropped.clone(),
                    config.export.sampler,
                    direct,
                )
                .with_trace_per(parts.trace_per)
                .with_detail(parts.detail.map(|(settings, gate)| {
                    Arc::new(DetailCapture::new(
                        settings,
                        gate,
                        parts.settings.dropped.clone(),
                    ))
                }))
                .with_error_backtraces(parts.error_backtraces)
                .with_group_tags(parts.group_tags)
                .with_thread_attributes(config.groups.thread_attributes),
            ));
        }
        self.tracer_provider = Some(provider);
        Ok(())
    }

    /// Builds the meter provider (the injected reader, or a periodic reader on the configured
    /// exporter whose failed exports are counted) and installs it as the global one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn metrics(
        &mut self,
        config: &LensConfig,
        rank: u32,
        env: Env<'_>,
        resource: Resource,
        reader: Option<ReaderFactory>,
        interval: Option<Duration>,
        dropped: &DropCounters,
        install_global: bool,
    ) -> Result<()> {
        let builder: MeterProviderBuilder = SdkMeterProvider::builder().with_resource(resource);
        let builder = match reader {
            Some(add_reader) => add_reader(builder),
            None => {
                let interval = interval.unwrap_or(DEFAULT_METRIC_EXPORT_INTERVAL);
                self.metric_interval = Some(interval);
                let failed = dropped.metric_exports.clone();
                match config.export.exporter {
                    ExporterKind::Console => {
                        let writer = self.console_writer(config, rank)?;
                        let exporter = ConsoleMetricExporter::new(writer);
                        builder.with_reader(periodic(exporter, failed, interval))
                    }
                    ExporterKind::Otlp => {
                        let protocol = otlp::protocol_for(Signal::Metrics, env)?;
                        let exporter = self.transport.metric_exporter(protocol, env)?;
                        builder.with_reader(periodic(exporter, failed, interval))
                    }
                }
            }
        };
        let provider = builder.build();
        dropped.observe(&provider.meter(SCOPE_NAME));
        if install_global {
            global::set_meter_provider(provider.clone());
        }
        self.meter_provider = Some(provider);
        Ok(())
    }

    /// Builds the logger provider the layer bridges events into.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn logs(
        &mut self,
        config: &LensConfig,
        rank: u32,
        env: Env<'_>,
        resource: Resource,
        exporter: Option<LogExporterFactory>,
        settings: &ExportSettings,
        text: TextRules,
    ) -> Result<()> {
        let provider = match exporter {
            Some(make) => make(resource, settings)?,
            None => match config.export.exporter {
                ExporterKind::Console => {
                    let writer = self.console_writer(config, rank)?;
                    log_provider(ConsoleLogExporter::new(writer), resource, settings)?
                }
                ExporterKind::Otlp => {
                    let protocol = otlp::protocol_for(Signal::Logs, env)?;
                    let exporter = self.transport.log_exporter(protocol, env)?;
                    log_provider(exporter, resource, settings)?
                }
            },
        };
        self.logger_provider = Some(LensLoggerProvider::new(provider, text));
        Ok(())
    }
}

/// A periodic reader every `interval` on `exporter`, whose failed exports add to `failed`.
fn periodic<E: PushMetricExporter>(
    exporter: E,
    failed: Arc<AtomicU64>,
    interval: Duration,
) -> PeriodicReader<CountedMetricExporter<E>> {
    PeriodicReader::builder(CountedMetricExporter::new(exporter, failed))
        .with_interval(interval)
        .build()
}
