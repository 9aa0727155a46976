//! Setup: [`TelemetryBuilder`] builds the pipelines of one process; [`Telemetry`] is the handle.
//!
//! The builder mirrors the Python `setup_telemetry(config, rank, world_size,
//! resource_attributes, span_exporter, metric_reader, export_strategy)`:
//!
//! 1. a second *enabled* setup in one process is an error ([`LensError::AlreadyInitialized`]);
//! 2. an empty `run_id` becomes `SLURM_JOB_ID` or 12 random hex characters;
//! 3. the export strategy decides whether this rank exports (evaluated even when disabled, so an
//!    unknown strategy fails on every rank);
//! 4. disabled, or enabled on a non-exporting rank: **nothing is built**: no provider, no thread,
//!    no socket, and the layer is inert (every callsite `Interest::never`);
//! 5. exporting: resource, tracer provider (ChaCha IDs, optional rank sampler, extra
//!    processors, then the exporter's batch processor), meter provider (the injected reader, or
//!    a periodic reader every `OTEL_METRIC_EXPORT_INTERVAL` ms, default 10 000, on the
//!    configured exporter; console output shares the span exporter's stream), the W3C
//!    TraceContext + Baggage propagator and the global tracer and meter providers.
//!
//! # Fork
//!
//! A process forked without exec (a data-loader worker) inherits the telemetry of its parent,
//! but not its threads: the batch processor's worker, the gRPC runtime and the HTTP client are
//! gone. In the child, the inherited handle and its layer are therefore inert:
//!
//! * the layer records nothing (one relaxed atomic load per span compares the `pthread_atfork`
//!   generation recorded at setup with the current one; no syscall);
//! * spans the parent had open are neither ended nor truncated nor exported by the child (the
//!   parent exports them once), and the closer's slab is never touched;
//! * [`Telemetry::force_flush`], [`Telemetry::shutdown`] and dropping the handle return at once
//!   (the inherited providers are leaked, never shut down: that would wait for dead threads);
//! * the child may set up its own telemetry (the double-init guard counts per fork generation),
//!   which draws IDs from a freshly seeded stream ([`crate::ids`]).
//!
//! ```
//! use nemo_lens::{LensConfig, Telemetry};
//! use tracing_subscriber::prelude::*;
//!
//! let config = LensConfig::from_env().unwrap();
//! let telemetry = Telemetry::builder(config).rank(0).world_size(1).build().unwrap();
//! let _guard = tracing_subscriber::registry().with(telemetry.layer()).set_default();
//! tracing::info_span!("train").in_scope(|| { /* ... */ });
//! telemetry.shutdown(std::time::Duration::from_secs(5)).unwrap();
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use opentelemetry::InstrumentationScope;
use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::noop::NoopTracer;
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogExporter, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    SdkTracerProvider, SimpleSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};
use tracing_subscriber::registry::LookupSpan;

use crate::closer;
use crate::config::{ExporterKind, LensConfig};
use crate::error::{LensError, Result};
use crate::exit;
use crate::export::batch::{
    BatchLogProcessor, DropCounters, DropCounts, LensBatchProcessor, QueueConfig, SpanQueue,
};
use crate::export::console::{ConsoleSpanExporter, ConsoleWriter};
use crate::export::console_logs::ConsoleLogExporter;
use crate::export::console_metrics::ConsoleMetricExporter;
use crate::export::counted::CountedMetricExporter;
use crate::export::otlp::{self, OtlpProtocol, Signal};
use crate::filter::LensFilter;
use crate::groups::{self, GroupGate};
use crate::ids::{self, ChaChaIdGenerator};
use crate::layer::{self, LensLayer, Pipeline, WithLens};
use crate::logs::{LensLoggerProvider, LogFilter};
use crate::metrics::{EventMetricsLayer, Instruments};
use crate::propagation;
use crate::resource;
use crate::sampling::RankAwareSampler;
use crate::strategy::{self, ExportStrategy};

/// `1 +` the fork generation in which an enabled setup ran, or 0: a forked child (another
/// generation) may set up its own telemetry.
static INITIALIZED_IN: AtomicU64 = AtomicU64::new(0);

/// The instrumentation scope of spans created by the lens layer and by [`Telemetry::tracer`].
pub const SCOPE_NAME: &str = "nemo.lens";

type ProcessorFactory = Box<dyn FnOnce(&ExportSettings) -> Result<BoxedProcessor> + Send>;
type LogExporterFactory =
    Box<dyn FnOnce(Resource, &ExportSettings) -> Result<SdkLoggerProvider> + Send>;
type ReaderFactory = Box<dyn FnOnce(MeterProviderBuilder) -> MeterProviderBuilder + Send>;
type Lookup = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A span processor behind a box (the SDK builder wants a concrete type).
struct BoxedProcessor(Box<dyn SpanProcessor>);

impl fmt::Debug for BoxedProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl SpanProcessor for BoxedProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx)
    }
    fn on_end(&self, span: SpanData) {
        self.0.on_end(span)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn shutdown(&self) -> OTelSdkResult {
        self.0.shutdown()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource)
    }
}

/// A logger provider for `exporter`: nemo-lens's batch processor (`OTEL_BLRP_*`, counted
/// drops), or synchronous.
fn log_provider<E: LogExporter + 'static>(
    exporter: E,
    resource: Resource,
    settings: &ExportSettings,
) -> Result<SdkLoggerProvider> {
    let builder = SdkLoggerProvider::builder().with_resource(resource);
    Ok(if settings.synchronous {
        builder.with_simple_exporter(exporter).build()
    } else {
        builder
            .with_log_processor(BatchLogProcessor::new(
                exporter,
                settings.batch,
                settings.dropped.clone(),
            )?)
            .build()
    })
}

/// An exporter that runs with OpenTelemetry telemetry suppressed, so that what it logs through
/// `tracing` is not recorded by the lens layer (which would re-enter the exporter's lock in the
/// synchronous processor).
#[derive(Debug)]
struct Suppressed<E>(E);

impl<E: SpanExporter> SpanExporter for Suppressed<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let future = {
            let _guard = Context::enter_telemetry_suppressed_scope();
            self.0.export(batch)
        };
        SuppressedFuture(Box::pin(future))
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _guard = Context::enter_telemetry_suppressed_scope();
        self.0.shutdown_with_timeout(timeout)
    }
    fn force_flush(&self) -> OTelSdkResult {
        let _guard = Context::enter_telemetry_suppressed_scope();
        self.0.force_flush()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource)
    }
}

/// Polls the wrapped export future with telemetry suppressed.
struct SuppressedFuture<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for SuppressedFuture<F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let _guard = Context::enter_telemetry_suppressed_scope();
        self.0.as_mut().poll(cx)
    }
}

/// How the exporter's processor is built.
struct ExportSettings {
    synchronous: bool,
    batch: QueueConfig,
    dropped: Arc<AtomicU64>,
    /// The record queue of the span batch processor, once built (the lens layer feeds it).
    span_queue: std::sync::OnceLock<SpanQueue>,
}

fn exporter_processor<E: SpanExporter + 'static>(
    exporter: E,
    settings: &ExportSettings,
) -> Result<BoxedProcessor> {
    Ok(if settings.synchronous {
        BoxedProcessor(Box::new(SimpleSpanProcessor::new(Suppressed(exporter))))
    } else {
        let processor =
            LensBatchProcessor::new(exporter, settings.batch, settings.dropped.clone())?;
        let _ = settings.span_queue.set(processor.span_queue());
        BoxedProcessor(Box::new(processor))
    })
}

/// Builds a [`Telemetry`]; see the [module docs](crate::setup).
pub struct TelemetryBuilder {
    config: LensConfig,
    rank: u32,
    world_size: u32,
    resource_attributes: Vec<KeyValue>,
    span_exporter: Option<ProcessorFactory>,
    span_processors: Vec<Box<dyn FnOnce() -> BoxedProcessor + Send>>,
    metric_reader: Option<ReaderFactory>,
    log_exporter: Option<LogExporterFactory>,
    export_strategy: Option<ExportStrategy>,
    synchronous: bool,
    allow_reinit: bool,
    lookup: Lookup,
}

impl fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryBuilder")
            .field("config", &self.config)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("custom_span_exporter", &self.span_exporter.is_some())
            .field("extra_span_processors", &self.span_processors.len())
            .field("custom_metric_reader", &self.metric_reader.is_some())
            .field("synchronous", &self.synchronous)
            .finish_non_exhaustive()
    }
}

impl TelemetryBuilder {
    fn new(config: LensConfig) -> Self {
        TelemetryBuilder {
            config,
            rank: 0,
            world_size: 1,
            resource_attributes: Vec::new(),
            span_exporter: None,
            span_processors: Vec::new(),
            metric_reader: None,
            log_exporter: None,
            export_strategy: None,
            synchronous: false,
            allow_reinit: false,
            lookup: Box::new(resource::process_env),
        }
    }

    /// This process's rank (default 0).
    pub fn rank(mut self, rank: u32) -> Self {
        self.rank = rank;
        self
    }

    /// The number of ranks (default 1).
    pub fn world_size(mut self, world_size: u32) -> Self {
        self.world_size = world_size;
        self
    }

    /// Extra resource attributes (detected host/SLURM/Kubernetes values win on collision, as in
    /// the Python library).
    pub fn resource_attributes(mut self, attributes: impl IntoIterator<Item = KeyValue>) -> Self {
        self.resource_attributes.extend(attributes);
        self
    }

    /// Sends spans to `exporter` instead of the configured console/OTLP exporter (traces only;
    /// metrics keep theirs). It is wrapped in the [batch processor](crate::export::batch), built
    /// only on an exporting rank.
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
    /// For spans of the lens layer its `on_start` and `on_end` run on the batch worker thread,
    /// one after the other, once the span has ended (on the ending thread with
    /// [`synchronous_export`](Self::synchronous_export)).
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

    /// Decides with `strategy` instead of the registry entry named by `export_strategy`.
    ///
    /// ```
    /// let builder = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default())
    ///     .export_strategy(|_cfg, rank, _ws| rank % 8 == 0);
    /// # let _ = builder;
    /// ```
    pub fn export_strategy(
        mut self,
        strategy: impl Fn(&LensConfig, u32, u32) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.export_strategy = Some(ExportStrategy::custom(strategy));
        self
    }

    /// Exports every span on the thread that ends it instead of batching (tests, debugging).
    pub fn synchronous_export(mut self, synchronous: bool) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Reads environment variables (`SLURM_*`, `OTEL_*`, …) through `lookup` instead of the
    /// process environment.
    pub fn env_lookup(
        mut self,
        lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.lookup = Box::new(lookup);
        self
    }

    /// **Tests only**: allows a second enabled setup in this process.
    pub fn allow_reinit_for_testing(mut self, allow: bool) -> Self {
        self.allow_reinit = allow;
        self
    }

    /// Builds the pipelines (or nothing, on a disabled or non-exporting rank).
    pub fn build(self) -> Result<Telemetry> {
        let TelemetryBuilder {
            mut config,
            rank,
            world_size,
            resource_attributes,
            span_exporter,
            span_processors,
            metric_reader,
            log_exporter,
            export_strategy,
            synchronous,
            allow_reinit,
            lookup,
        } = self;
        config.validate()?;
        if world_size == 0 || rank >= world_size {
            return Err(LensError::InvalidArgument(format!(
                "rank must be below world_size (rank {rank}, world_size {world_size})"
            )));
        }
        ids::install_fork_handler();
        let generation = ids::fork_generation();
        if config.enabled
            && !allow_reinit
            && INITIALIZED_IN.load(Ordering::SeqCst) == generation + 1
        {
            return Err(LensError::AlreadyInitialized);
        }
        config.run_id = resource::resolve_run_id(&config.run_id, &*lookup);
        let strategy = match export_strategy {
            Some(s) => s,
            None => {
                strategy::get_export_strategy(&config.export_strategy, &config.strategy_origin())?
            }
        };
        let decision = strategy.decide(&config, rank, world_size)?;
        let resolved_groups = if config.enabled {
            groups::resolve(&config.span_groups, &config.span_groups_origin())?
        } else {
            Default::default()
        };
        // Read on every enabled rank, so a bad value fails alike everywhere, before anything
        // global is touched.
        let (batch, log_batch, value_limit) = if config.enabled {
            (
                QueueConfig::from_env("OTEL_BSP", &*lookup)?,
                QueueConfig::from_env_over("OTEL_BLRP", QueueConfig::logs_default(), &*lookup)?,
                layer::value_length_limit(&*lookup)?,
            )
        } else {
            (QueueConfig::default(), QueueConfig::logs_default(), None)
        };
        let dropped = DropCounters::default();
        let settings = ExportSettings {
            synchronous,
            batch,
            dropped: dropped.spans.clone(),
            span_queue: Default::default(),
        };
        let log_settings = ExportSettings {
            synchronous,
            batch: log_batch,
            dropped: dropped.logs.clone(),
            span_queue: Default::default(),
        };
        let exporting = config.enabled && decision;
        let sampler = RankAwareSampler::new(rank, world_size, config.export_sample_rate);
        let recording =
            exporting && config.traces_enabled && (!config.sampler_enabled || sampler.is_sampled());

        let gate = Arc::new(GroupGate::new(if exporting {
            resolved_groups
        } else {
            Default::default()
        }));
        // Read on every enabled rank, so a bad value fails the whole job at start-up.
        let metric_interval = if config.enabled && config.metrics_enabled && metric_reader.is_none()
        {
            metric_export_interval(&*lookup)?
        } else {
            None
        };
        let mut built = Built::default();
        if exporting {
            let resource =
                resource::build_resource(&config, rank, world_size, &resource_attributes, &*lookup);
            if config.traces_enabled {
                let mut builder = SdkTracerProvider::builder()
                    .with_resource(resource.clone())
                    .with_id_generator(ChaChaIdGenerator::new());
                if config.sampler_enabled {
                    builder = builder.with_sampler(sampler.clone());
                }
                for make in span_processors {
                    builder = builder.with_span_processor(make());
                }
                let exporter = match span_exporter {
                    Some(make) => make(&settings)?,
                    None => match config.exporter {
                        ExporterKind::Console => {
                            let writer = built.console_writer(&config, rank)?;
                            exporter_processor(ConsoleSpanExporter::with_writer(writer), &settings)?
                        }
                        ExporterKind::Otlp => {
                            let protocol = otlp::protocol_for(Signal::Traces, &*lookup)?;
                            if protocol == OtlpProtocol::Grpc && built.runtime.is_none() {
                                built.runtime = Some(otlp::grpc_runtime()?);
                            }
                            let exporter = otlp::span_exporter(protocol, built.runtime.as_ref())?;
                            exporter_processor(exporter, &settings)?
                        }
                    },
                };
                let provider = builder.with_span_processor(exporter).build();
                global::set_tracer_provider(provider.clone());
                if recording {
                    built.pipeline = Some(Arc::new(Pipeline::new(
                        provider.tracer(SCOPE_NAME),
                        propagation::env_parent(&*lookup),
                        value_limit,
                        settings.span_queue.get().cloned(),
                        config.sampler_enabled,
                    )));
                }
                built.tracer_provider = Some(provider);
            }
            if config.metrics_enabled {
                let builder = SdkMeterProvider::builder().with_resource(resource.clone());
                let builder = match metric_reader {
                    Some(add_reader) => add_reader(builder),
                    None => {
                        let interval = metric_interval.unwrap_or(DEFAULT_METRIC_EXPORT_INTERVAL);
                        built.metric_interval = Some(interval);
                        match config.exporter {
                            ExporterKind::Console => {
                                let writer = built.console_writer(&config, rank)?;
                                let exporter = CountedMetricExporter::new(
                                    ConsoleMetricExporter::new(writer),
                                    dropped.metric_exports.clone(),
                                );
                                builder.with_reader(
                                    PeriodicReader::builder(exporter)
                                        .with_interval(interval)
                                        .build(),
                                )
                            }
                            ExporterKind::Otlp => {
                                let protocol = otlp::protocol_for(Signal::Metrics, &*lookup)?;
                                if protocol == OtlpProtocol::Grpc && built.runtime.is_none() {
                                    built.runtime = Some(otlp::grpc_runtime()?);
                                }
                                let exporter = CountedMetricExporter::new(
                                    otlp::metric_exporter(protocol, built.runtime.as_ref())?,
                                    dropped.metric_exports.clone(),
                                );
                                builder.with_reader(
                                    PeriodicReader::builder(exporter)
                                        .with_interval(interval)
                                        .build(),
                                )
                            }
                        }
                    }
                };
                let provider = builder.build();
                dropped.observe(&provider.meter(SCOPE_NAME));
                global::set_meter_provider(provider.clone());
                built.meter_provider = Some(provider);
            }
            if config.logs_enabled {
                let provider = match log_exporter {
                    Some(make) => make(resource.clone(), &log_settings)?,
                    None => match config.exporter {
                        ExporterKind::Console => {
                            let writer = built.console_writer(&config, rank)?;
                            log_provider(
                                ConsoleLogExporter::new(writer),
                                resource.clone(),
                                &log_settings,
                            )?
                        }
                        ExporterKind::Otlp => {
                            let protocol = otlp::protocol_for(Signal::Logs, &*lookup)?;
                            if protocol == OtlpProtocol::Grpc && built.runtime.is_none() {
                                built.runtime = Some(otlp::grpc_runtime()?);
                            }
                            let exporter = otlp::log_exporter(protocol, built.runtime.as_ref())?;
                            log_provider(exporter, resource.clone(), &log_settings)?
                        }
                    },
                };
                built.logger_provider = Some(LensLoggerProvider::new(provider));
            }
            propagation::install_global_propagator();
            built.resource = Some(resource);
        }
        if config.enabled {
            groups::install_process_gate(gate.clone());
            INITIALIZED_IN.store(generation + 1, Ordering::SeqCst);
        }
        let instruments = match &built.meter_provider {
            Some(p) => Instruments::new(
                p.meter_with_scope(InstrumentationScope::builder(SCOPE_NAME).build()),
            ),
            None => Instruments::noop(),
        };
        Ok(Telemetry {
            inner: Arc::new(Inner {
                instruments,
                filter: LensFilter::new(built.pipeline.is_none(), gate.clone()),
                config,
                rank,
                world_size,
                exporting,
                groups: gate,
                built,
                shutdown_done: AtomicBool::new(false),
                panic_hook: AtomicBool::new(false),
                generation,
                dropped,
            }),
        })
    }
}

#[derive(Default)]
struct Built {
    pipeline: Option<Arc<Pipeline>>,
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    logger_provider: Option<LensLoggerProvider>,
    resource: Option<Resource>,
    runtime: Option<tokio::runtime::Runtime>,
    /// The console output shared by the console exporters (opened once, on first use).
    console: Option<ConsoleWriter>,
    /// The interval of the periodic metric reader lens built (none with an injected reader).
    metric_interval: Option<Duration>,
}

impl Built {
    /// The console writer of this process: stdout, or the per-rank file of
    /// `NEMO_LENS_CONSOLE_PATH`, opened on first use and shared by every console exporter so
    /// their lines interleave whole.
    fn console_writer(&mut self, config: &LensConfig, rank: u32) -> Result<ConsoleWriter> {
        if let Some(w) = &self.console {
            return Ok(w.clone());
        }
        let writer = match &config.console_path {
            Some(template) => {
                ConsoleWriter::to_path(template, rank).map_err(|source| LensError::OutputFile {
                    var: "NEMO_LENS_CONSOLE_PATH".into(),
                    path: crate::export::console::resolve_path(template, rank)
                        .display()
                        .to_string(),
                    source,
                })?
            }
            None => ConsoleWriter::stdout(),
        };
        self.console = Some(writer.clone());
        Ok(writer)
    }
}

/// The metric export interval when `OTEL_METRIC_EXPORT_INTERVAL` is unset (10 s, as Python).
pub const DEFAULT_METRIC_EXPORT_INTERVAL: Duration = Duration::from_millis(10_000);

/// Reads `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds) through `lookup`: `None` when unset or
/// blank, an error naming the variable when it is not a positive integer.
///
/// ```
/// use std::time::Duration;
/// use nemo_lens::setup::metric_export_interval;
///
/// assert_eq!(metric_export_interval(&|_| None).unwrap(), None);
/// let env = |v: &'static str| move |k: &str| (k == "OTEL_METRIC_EXPORT_INTERVAL").then(|| v.to_string());
/// assert_eq!(metric_export_interval(&env(" 2500 ")).unwrap(), Some(Duration::from_millis(2500)));
/// let err = metric_export_interval(&env("10s")).unwrap_err().to_string();
/// assert!(err.contains("OTEL_METRIC_EXPORT_INTERVAL") && err.contains("positive integer number of milliseconds"));
/// assert!(metric_export_interval(&env("0")).is_err());
/// ```
pub fn metric_export_interval(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Option<Duration>> {
    const VAR: &str = "OTEL_METRIC_EXPORT_INTERVAL";
    let Some(raw) = lookup(VAR) else {
        return Ok(None);
    };
    let value = raw.trim();
    if value.is_empty() {
        return Ok(None);
    }
    match value.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Some(Duration::from_millis(ms))),
        _ => Err(LensError::InvalidMillis {
            var: VAR.into(),
            value: raw,
        }),
    }
}

pub(crate) struct Inner {
    config: LensConfig,
    rank: u32,
    world_size: u32,
    exporting: bool,
    groups: Arc<GroupGate>,
    filter: LensFilter,
    built: Built,
    instruments: Instruments,
    shutdown_done: AtomicBool,
    panic_hook: AtomicBool,
    dropped: DropCounters,
    /// The fork generation of the setup; another one means this is a forked child.
    generation: u64,
}

/// The handle of one process's telemetry: the layer, the tracer, flush and shutdown.
///
/// Cloning is cheap (shared). Call [`Telemetry::shutdown`] before the process exits (a
/// `finally`-style path): spans still open are ended as truncated and everything queued is
/// exported. Dropping the last clone shuts down with a 5-second timeout.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.inner.config.enabled)
            .field("rank", &self.inner.rank)
            .field("world_size", &self.inner.world_size)
            .field("exporting", &self.inner.exporting)
            .field("recording", &self.inner.built.pipeline.is_some())
            .field("run_id", &self.inner.config.run_id)
            .finish()
    }
}

impl Telemetry {
    /// Starts a builder for `config`.
    ///
    /// ```
    /// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// assert!(!telemetry.is_exporting());
    /// ```
    pub fn builder(config: LensConfig) -> TelemetryBuilder {
        TelemetryBuilder::new(config)
    }

    /// A new lens layer for a `tracing` subscriber. On a rank that records nothing the layer is
    /// inert: every callsite is `Interest::never` for it.
    pub fn layer<S>(&self) -> LensLayer<S>
    where
        S: tracing_core::Subscriber + for<'a> LookupSpan<'a>,
    {
        let provider = self.inner.built.logger_provider.as_ref();
        let log_filter = match provider {
            Some(_) => LogFilter::new(
                self.inner.config.logs_level,
                self.inner.built.pipeline.is_some(),
                self.inner.groups.clone(),
            ),
            None => LogFilter::off(self.inner.groups.clone()),
        };
        LensLayer::new(
            self.inner.built.pipeline.clone(),
            self.inner.filter.clone(),
            (provider, log_filter),
        )
    }

    /// Whether this rank exports (enabled and chosen by the export strategy).
    pub fn is_exporting(&self) -> bool {
        self.inner.exporting
    }

    /// The configuration, with the run id resolved.
    pub fn config(&self) -> &LensConfig {
        &self.inner.config
    }

    /// The run id (`nemo.run.id`).
    pub fn run_id(&self) -> &str {
        &self.inner.config.run_id
    }

    /// The resource spans are exported with (`None` on a non-exporting rank).
    pub fn resource(&self) -> Option<&Resource> {
        self.inner.built.resource.as_ref()
    }

    /// An OpenTelemetry tracer for code that uses the OpenTelemetry API directly (a no-op
    /// tracer on a non-exporting rank). Spans made with it skip the lens layer (no groups, no
    /// truncation at shutdown).
    pub fn tracer(&self) -> BoxedTracer {
        match &self.inner.built.tracer_provider {
            Some(p) => BoxedTracer::new(Box::new(p.tracer(SCOPE_NAME))),
            None => BoxedTracer::new(Box::new(NoopTracer::new())),
        }
    }

    /// The meter provider, when metrics are exported from this rank.
    pub fn meter_provider(&self) -> Option<&SdkMeterProvider> {
        self.inner.built.meter_provider.as_ref()
    }

    /// How often metrics are exported: `OTEL_METRIC_EXPORT_INTERVAL` or 10 s, when this rank
    /// exports metrics through lens's periodic reader (`None` otherwise, and with an injected
    /// [`TelemetryBuilder::metric_reader`]).
    ///
    /// ```
    /// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// assert_eq!(telemetry.metric_export_interval(), None); // disabled: no reader
    /// ```
    pub fn metric_export_interval(&self) -> Option<Duration> {
        self.inner.built.metric_interval
    }

    /// The `nemo.lens` meter, for instruments of your own: the exporting meter provider's, or
    /// a no-op meter on a rank that exports no metrics (disabled, metrics off, non-exporting).
    ///
    /// ```
    /// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// let tokens = telemetry.meter().u64_counter("my.tokens").with_unit("{token}").build();
    /// tokens.add(512, &[]); // a no-op here: telemetry is disabled
    /// ```
    pub fn meter(&self) -> Meter {
        self.inner.instruments.meter().clone()
    }

    /// The cached instruments of [`Telemetry::meter`], used by
    /// [`InferenceMetrics`](crate::InferenceMetrics) and friends, [`crate::record_metrics`] and
    /// [`Telemetry::metrics_layer`]. The handle itself is `AsRef<Instruments>`, so those accept
    /// `&telemetry` directly.
    ///
    /// ```
    /// use nemo_lens::TrainingMetrics;
    /// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// TrainingMetrics { loss: Some(0.9), ..Default::default() }.record(telemetry.instruments());
    /// TrainingMetrics { loss: Some(0.8), ..Default::default() }.record(&telemetry); // same thing
    /// ```
    pub fn instruments(&self) -> &Instruments {
        &self.inner.instruments
    }

    /// A layer that records `histogram.*`, `gauge.*`, `counter.*` and `monotonic_counter.*`
    /// event fields as metrics (see [`crate::metrics::events`]). Inert (`Interest::never` for
    /// every callsite) on a rank that exports no metrics.
    ///
    /// ```
    /// use tracing_subscriber::prelude::*;
    /// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// let _guard = tracing_subscriber::registry()
    ///     .with(telemetry.layer())
    ///     .with(telemetry.metrics_layer())
    ///     .set_default();
    /// tracing::info!(histogram.step_ms = 812.5);
    /// ```
    pub fn metrics_layer<S>(&self) -> EventMetricsLayer<S>
    where
        S: tracing_core::Subscriber + for<'a> LookupSpan<'a>,
    {
        match &self.inner.built.meter_provider {
            Some(_) => EventMetricsLayer::new(self.inner.instruments.clone()),
            None => EventMetricsLayer::inert(),
        }
    }

    /// Whether `group` is enabled for this telemetry.
    pub fn is_span_group_enabled(&self, group: &str) -> bool {
        self.inner.groups.is_enabled(group)
    }

    /// Replaces the enabled span groups of this telemetry (a spec like `NEMO_LENS_SPAN_GROUPS`)
    /// and re-evaluates every callsite. An unknown name is an error and changes nothing; on a
    /// non-exporting rank nothing is recorded whatever the groups.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// t.set_span_groups("per_step").unwrap();
    /// assert!(t.set_span_groups("warp").is_err());
    /// ```
    pub fn set_span_groups(&self, spec: &str) -> Result<()> {
        let set = groups::resolve(spec, "set_span_groups")?;
        self.inner.groups.set(set);
        Ok(())
    }

    /// Number of spans the lens layer has started and not yet ended (0 in a forked child: the
    /// parent's spans are not the child's).
    pub fn open_spans(&self) -> usize {
        if self.inner.inherited() {
            return 0;
        }
        self.inner
            .built
            .pipeline
            .as_ref()
            .map_or(0, |p| p.open.len())
    }

    /// Whether this handle was set up in a parent process and inherited through `fork` without
    /// exec. Such a handle is inert: its layer records nothing, and flush and shutdown return
    /// at once without touching the parent's providers. Set up telemetry anew in the child to
    /// record there.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// assert!(!t.is_inherited_from_parent());
    /// ```
    pub fn is_inherited_from_parent(&self) -> bool {
        self.inner.inherited()
    }

    /// Exports everything queued, without closing live spans.
    pub fn force_flush(&self) -> Result<()> {
        if self.inner.inherited() {
            return Ok(());
        }
        let mut errors = Vec::new();
        if let Some(p) = &self.inner.built.tracer_provider {
            if let Err(e) = p.force_flush() {
                errors.push(format!("traces: {e}"));
            }
        }
        if let Some(p) = &self.inner.built.meter_provider {
            if let Err(e) = p.force_flush() {
                errors.push(format!("metrics: {e}"));
            }
        }
        if let Some(p) = &self.inner.built.logger_provider {
            if let Err(e) = p.sdk().force_flush() {
                errors.push(format!("logs: {e}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(LensError::Shutdown(errors.join("; ")))
        }
    }

    /// Opts in to recording panics: a panic adds an `exception` event to the innermost open span
    /// of its thread, and a panic that ends the process (on the main thread, or any panic under
    /// `panic = "abort"`) then ends every open span as truncated and flushes, within
    /// [`EXIT_FLUSH_TIMEOUT`](crate::exit::EXIT_FLUSH_TIMEOUT). The previous panic hook still
    /// runs, after it. See [`crate::exit`] for the reasoning. Call it once, after setup.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// t.install_panic_hook();
    /// ```
    pub fn install_panic_hook(&self) {
        if !self.inner.panic_hook.swap(true, Ordering::SeqCst) {
            exit::install_panic_hook(Arc::downgrade(&self.inner));
        }
    }

    /// Installs SIGTERM and SIGINT handlers: on the signal, a dedicated thread ends every open
    /// span as truncated, flushes within [`EXIT_FLUSH_TIMEOUT`](crate::exit::EXIT_FLUSH_TIMEOUT),
    /// then lets the signal end the process as it would have (status 128 + signo). The handler
    /// itself only writes to a pipe. See [`crate::exit`]; without it, open and queued spans are
    /// lost on those signals.
    ///
    /// ```no_run
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// t.install_signal_handlers().unwrap();
    /// ```
    pub fn install_signal_handlers(&self) -> Result<()> {
        exit::install_signal_handlers(Arc::downgrade(&self.inner))
    }

    /// Telemetry dropped so far: spans a full queue refused (the exporter could not keep up),
    /// spans of failed or timed-out exports, spans still queued when shutdown's deadline passed.
    /// Exported + dropped = produced. Reported once on stderr at shutdown when not zero.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// assert_eq!(t.dropped(), nemo_lens::DropCounts::default());
    /// ```
    pub fn dropped(&self) -> DropCounts {
        self.inner.dropped.snapshot()
    }

    /// Ends open spans as truncated, flushes and shuts the providers down, returning within
    /// `timeout` (plus scheduling slack) even when an exporter hangs. A second call does nothing.
    pub fn shutdown(&self, timeout: Duration) -> Result<()> {
        self.inner.shutdown(timeout)
    }
}

impl AsRef<Instruments> for Telemetry {
    fn as_ref(&self) -> &Instruments {
        &self.inner.instruments
    }
}

impl Inner {
    #[inline]
    fn inherited(&self) -> bool {
        self.generation != ids::fork_generation()
    }

    fn shutdown(&self, timeout: Duration) -> Result<()> {
        self.shutdown_because(timeout, closer::REASON_SHUTDOWN)
    }

    /// Records a panic on the innermost span the lens layer records on this thread.
    pub(crate) fn record_panic(&self, message: &str) {
        if self.inherited() || self.built.pipeline.is_none() {
            return;
        }
        let Some(pipeline) = &self.built.pipeline else {
            return;
        };
        // Never the span extensions (another layer may hold their lock on this thread): the
        // registry's scope walk, then the open-span table, with bounded waits.
        tracing::Span::current().with_subscriber(|(id, dispatch)| {
            if let Some(with) = dispatch.downcast_ref::<WithLens>() {
                pipeline.record_panic(&(with.scope)(dispatch, id), message);
            }
        });
    }

    /// Shuts down, truncating open spans with `reason`.
    pub(crate) fn shutdown_because(&self, timeout: Duration, reason: &'static str) -> Result<()> {
        if self.shutdown_done.swap(true, Ordering::SeqCst) || self.inherited() {
            // Done already, or a forked child: the parent's providers have no worker threads
            // here, and shutting them down would wait out `timeout` per processor.
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        if let Some(p) = &self.built.pipeline {
            p.close_all(reason);
        }
        let pipeline = self.built.pipeline.clone();
        let tracer = self.built.tracer_provider.clone();
        let meter = self.built.meter_provider.clone();
        let logger = self.built.logger_provider.as_ref().map(|p| p.sdk().clone());
        if tracer.is_none() && meter.is_none() && logger.is_none() {
            return Ok(());
        }
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("nemo-lens-shutdown".into())
            .spawn(move || {
                let mut errors = Vec::new();
                let remaining = || deadline.saturating_duration_since(Instant::now());
                if let Some(p) = pipeline {
                    // Span records become SDK spans only while the provider is up.
                    p.drain(deadline);
                }
                if let Some(t) = tracer {
                    if let Err(e) = t.shutdown_with_timeout(remaining()) {
                        errors.push(format!("traces: {e}"));
                    }
                }
                // Logs before metrics, so the last metric export carries the final
                // `nemo.lens.dropped` counts of spans and logs.
                if let Some(l) = logger {
                    if let Err(e) = l.shutdown_with_timeout(remaining()) {
                        errors.push(format!("logs: {e}"));
                    }
                }
                if let Some(m) = meter {
                    if let Err(e) = m.shutdown_with_timeout(remaining()) {
                        errors.push(format!("metrics: {e}"));
                    }
                }
                let _ = tx.send(errors);
            });
        // The processors stop exporting at the deadline and then report; allow them a moment.
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(500);
        let result = match worker {
            Err(e) => Err(LensError::Shutdown(format!(
                "cannot start the shutdown thread: {e}"
            ))),
            Ok(_) => match rx.recv_timeout(wait) {
                Ok(errors) if errors.is_empty() => Ok(()),
                Ok(errors) => Err(LensError::Shutdown(errors.join("; "))),
                Err(_) => Err(LensError::Shutdown(format!(
                    "timed out after {timeout:?}; data still queued was abandoned"
                ))),
            },
        };
        let dropped = self.dropped.snapshot();
        if dropped.total() > 0 {
            // Reported once: shutdown runs once.
            eprintln!(
                "nemo-lens: dropped {dropped} (queue full, export failed or timed out, or still \
                 queued at shutdown; see OTEL_BSP_MAX_QUEUE_SIZE and OTEL_BLRP_MAX_QUEUE_SIZE)"
            );
        }
        result
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.inherited() {
            // A forked child: dropping the parent's providers would shut them down (waiting for
            // worker threads that did not survive the fork) and a Tokio runtime would try to
            // stop threads that do not exist. Leak them instead; the child's memory is its own.
            std::mem::forget(self.built.tracer_provider.take());
            std::mem::forget(self.built.meter_provider.take());
            std::mem::forget(self.built.logger_provider.take());
            std::mem::forget(self.built.runtime.take());
            return;
        }
        let _ = self.shutdown(Duration::from_secs(5));
        if let Some(rt) = self.built.runtime.take() {
            rt.shutdown_background();
        }
    }
}
