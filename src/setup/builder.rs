//! [`TelemetryBuilder`]: what a process asks for, checked and built once.

use std::fmt;

use opentelemetry::KeyValue;
use opentelemetry_sdk::logs::LogExporter;
use opentelemetry_sdk::trace::{SpanExporter, SpanProcessor, TracerProviderBuilder};

use super::build;
use super::handle::Telemetry;
use super::pipelines::{LogExporterFactory, ProcessorFactory, ReaderFactory};
use super::processors::{BoxedProcessor, exporter_processor, log_provider};
use crate::config::LensConfig;
use crate::error::Result;
use crate::layer::fields::RedactKeys;
use crate::rank::strategy::ExportStrategy;

type Lookup = Box<build::Lookup>;

/// Builds a [`Telemetry`]: the counterpart of the Python `setup_telemetry(config, rank,
/// world_size, resource_attributes, span_exporter, metric_reader, export_strategy)`.
///
/// 1. a second *enabled* setup in one process is an error
///    ([`LensError::AlreadyInitialized`](crate::LensError::AlreadyInitialized));
/// 2. an empty `run_id` becomes `SLURM_JOB_ID` or 12 random hex characters;
/// 3. the export strategy decides whether this rank exports (evaluated even when disabled, so
///    an unknown strategy fails on every rank);
/// 4. disabled (also by `OTEL_SDK_DISABLED=true`; then any rank and world size is accepted),
///    or enabled on a non-exporting rank: **nothing is built**: no provider, no
///    thread, no socket, and the layer is inert (every callsite `Interest::never`);
/// 5. exporting: resource, tracer provider (ChaCha IDs, optional rank sampler, extra
///    processors, then the exporter's batch processor), meter provider (the injected reader,
///    or a periodic reader every `OTEL_METRIC_EXPORT_INTERVAL` ms, default 10 000, on the
///    configured exporter; console output shares the span exporter's stream), logger provider
///    (with `logs_enabled`), the W3C TraceContext + Baggage propagator and the global tracer
///    and meter providers.
///
/// ```
/// use nemo_lens::{ExporterKind, LensConfig, Telemetry};
/// let telemetry = Telemetry::builder(LensConfig::default().with_enabled(true))
///     .rank(3)
///     .world_size(8) // single_rank: rank 7 exports, rank 3 builds nothing
///     .build()?;
/// assert!(!telemetry.is_exporting());
/// # Ok::<(), nemo_lens::LensError>(())
/// ```
pub struct TelemetryBuilder {
    config: LensConfig,
    rank: Option<u32>,
    world_size: Option<u32>,
    resource_attributes: Vec<KeyValue>,
    span_exporter: Option<ProcessorFactory>,
    span_processors: Vec<Box<dyn FnOnce() -> BoxedProcessor + Send>>,
    metric_reader: Option<ReaderFactory>,
    log_exporter: Option<LogExporterFactory>,
    export_strategy: Option<ExportStrategy>,
    synchronous: bool,
    allow_reinit: bool,
    install_globals: bool,
    context_activation: bool,
    provider_builder: Option<TracerProviderBuilder>,
    lookup: Lookup,
    /// `unknown_rank`, `unknown_world_size`, `no_random_run_id`.
    unknown: build::Unknown,
    /// [`TelemetryBuilder::legacy_rank_attributes`] (default on).
    legacy_rank_keys: bool,
    /// [`TelemetryBuilder::redact_keys`] (default: [`crate::DEFAULT_REDACT_KEYS`]).
    redact: RedactKeys,
    /// [`TelemetryBuilder::error_backtraces`].
    error_backtraces: bool,
    /// [`TelemetryBuilder::local_rank`].
    local_rank: Option<u32>,
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
}

impl TelemetryBuilder {
    fn new(config: LensConfig) -> Self {
        TelemetryBuilder {
            config,
            rank: None,
            world_size: None,
            resource_attributes: Vec::new(),
            span_exporter: None,
            span_processors: Vec::new(),
            metric_reader: None,
            log_exporter: None,
            export_strategy: None,
            synchronous: false,
            allow_reinit: false,
            install_globals: true,
            context_activation: true,
            provider_builder: None,
            lookup: Box::new(crate::config::env::process_var),
            unknown: build::Unknown::default(),
            legacy_rank_keys: true,
            redact: RedactKeys::default(),
            error_backtraces: false,
            local_rank: None,
        }
    }

    /// This process's rank. Without it, the rank is the launcher's `nv.dl.rank` in
    /// `OTEL_RESOURCE_ATTRIBUTES`, else 0.
    ///
    /// The resource carries it as `nv.dl.rank` (and `dl.rank`, see
    /// [`TelemetryBuilder::legacy_rank_attributes`]); export strategies, the rank sampler and
    /// `{rank}` in `NEMO_LENS_CONSOLE_PATH` use it.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::{Key, Value};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// // A launcher handed this process its rank and world size.
    /// let env = [("OTEL_RESOURCE_ATTRIBUTES", "nv.dl.rank=3,nv.dl.world_size=8")];
    /// let config = LensConfig::default().with_enabled(true).with_export_strategy("all_ranks")
    ///     .with_run_id("exp-1").with_metrics_enabled(false);
    /// let telemetry = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let resource = telemetry.resource().unwrap();
    /// assert_eq!(resource.get(&Key::from_static_str("nv.dl.rank")), Some(Value::I64(3)));
    /// assert_eq!(resource.get(&Key::from_static_str("dl.world_size")), Some(Value::I64(8)));
    /// assert_eq!(
    ///     resource.get(&Key::from_static_str("service.instance.id")),
    ///     Some("exp-1-rank3".into())
    /// );
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rank(mut self, rank: u32) -> Self {
        self.rank = Some(rank);
        self
    }

    /// The number of ranks. Without it, the launcher's `nv.dl.world_size` in
    /// `OTEL_RESOURCE_ATTRIBUTES`; else unknown when the rank came from the launcher, else 1.
    pub fn world_size(mut self, world_size: u32) -> Self {
        self.world_size = Some(world_size);
        self
    }

    /// Whether the resource also carries the 0.1.0 names of the rank attributes, `dl.rank` and
    /// `dl.world_size`, beside `nv.dl.rank` and `nv.dl.world_size` (default `true`: consumers
    /// of NeMo Lens 0.1.0 read those). Turn it off in a job whose consumers all read the
    /// `nv.dl.*` names.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::Key;
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let config = LensConfig::default().with_enabled(true).with_metrics_enabled(false);
    /// let telemetry = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(|_| None)
    ///     .legacy_rank_attributes(false)
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let resource = telemetry.resource().unwrap();
    /// assert!(resource.get(&Key::from_static_str("dl.rank")).is_none());
    /// assert!(resource.get(&Key::from_static_str("nv.dl.rank")).is_some());
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn legacy_rank_attributes(mut self, on: bool) -> Self {
        self.legacy_rank_keys = on;
        self
    }

    /// This process's rank among the ranks of its node, which picks its GPU for the `nv.gpu.*`
    /// resource attributes ([`LensConfig::detect_gpu`]). Default: `LOCAL_RANK`, else
    /// `SLURM_LOCALID`, else 0.
    ///
    /// ```
    /// // A launcher that names the local rank in a variable of its own (Open MPI):
    /// let local_rank = std::env::var("OMPI_COMM_WORLD_LOCAL_RANK").ok().and_then(|v| v.parse().ok());
    /// let mut builder = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default());
    /// if let Some(local_rank) = local_rank {
    ///     builder = builder.local_rank(local_rank);
    /// }
    /// # let _ = builder;
    /// ```
    pub fn local_rank(mut self, local_rank: u32) -> Self {
        self.local_rank = Some(local_rank);
        self
    }

    /// This process does not know its rank (a launcher, a job-level tool such as `nemo-lens
    /// emit-spans`): unless the launcher gave one (`nv.dl.rank` in `OTEL_RESOURCE_ATTRIBUTES`),
    /// the resource gets no rank attribute and no rank-derived `service.instance.id`. Export
    /// strategies and `{rank}` in `NEMO_LENS_CONSOLE_PATH` then see rank 0.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::Key;
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let config = LensConfig::default().with_enabled(true).with_metrics_enabled(false);
    /// let telemetry = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(|_| None) // no SLURM_JOB_ID, no OTEL_RESOURCE_ATTRIBUTES
    ///     .unknown_rank()
    ///     .unknown_world_size()
    ///     .no_random_run_id()
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let resource = telemetry.resource().unwrap();
    /// for key in ["dl.rank", "nv.dl.rank", "dl.world_size", "service.instance.id", "nemo.run.id"] {
    ///     assert_eq!(resource.get(&Key::from_static_str(key)), None, "{key}");
    /// }
    /// assert_eq!(telemetry.run_id(), "");
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unknown_rank(mut self) -> Self {
        self.unknown.rank = true;
        self
    }

    /// This process does not know the world size: unless the launcher gave one
    /// (`nv.dl.world_size` in `OTEL_RESOURCE_ATTRIBUTES`), the resource gets no world size
    /// attribute.
    pub fn unknown_world_size(mut self) -> Self {
        self.unknown.world_size = true;
        self
    }

    /// Without a configured `run_id` and without `SLURM_JOB_ID`, leave the run id empty instead
    /// of drawing a random one: the resource then has no `nemo.run.id` and no
    /// `service.instance.id` (a one-off process would otherwise stamp a run id no rank shares).
    pub fn no_random_run_id(mut self) -> Self {
        self.unknown.run_id = true;
        self
    }

    /// Extra resource attributes (detected host/SLURM/Kubernetes values win on collision, as in
    /// the Python library).
    pub fn resource_attributes(mut self, attributes: impl IntoIterator<Item = KeyValue>) -> Self {
        self.resource_attributes.extend(attributes);
        self
    }

    /// Sends spans to `exporter` instead of the configured console/OTLP exporter (traces only;
    /// metrics keep theirs). It is wrapped in the [batch processor](crate::export::LensBatchProcessor), built
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

    /// Whether setup installs anything process-wide (default `true`): the global tracer and
    /// meter providers, the global W3C propagator, the process-wide span-group state read by
    /// [`crate::groups::is_span_group_enabled`], and the one-enabled-setup-per-process guard.
    ///
    /// With `false`, the [`Telemetry`] is self-contained: its layer, [`Telemetry::tracer`],
    /// [`Telemetry::meter`] and [`Telemetry::is_span_group_enabled`] work as usual, and nothing
    /// else in the process sees it. For applications that own the globals themselves, and for
    /// tests that set up several telemetries in parallel. Several telemetries' layers may share
    /// one subscriber: each records its own spans ([`LensSpanExt`](crate::LensSpanExt)
    /// addresses the first lens layer of a subscriber).
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let config = LensConfig::default().with_enabled(true).with_export_strategy("all_ranks");
    /// let (a, b) = (InMemorySpanExporter::default(), InMemorySpanExporter::default());
    /// // Two telemetries in one process: no double-init error, no global touched.
    /// let first = Telemetry::builder(config.clone()).install_globals(false).span_exporter(a).build()?;
    /// let second = Telemetry::builder(config).install_globals(false).span_exporter(b).build()?;
    /// assert!(first.is_exporting() && second.is_exporting());
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn install_globals(mut self, install: bool) -> Self {
        self.install_globals = install;
        self
    }

    /// Whether `opentelemetry::Context::current()` carries the entered lens span (default
    /// `true`), so OpenTelemetry-API code inside lens spans (a global propagator injecting
    /// `traceparent` into HTTP headers, tonic interceptors, spans of an OpenTelemetry tracer)
    /// sees it as the current span. A span's context is built at its first enter (one
    /// allocation) and attached by clone at every enter, which costs about what the registry's
    /// own enter and exit cost (figures in `docs/performance.md`); turn it off
    /// when no such code runs inside lens spans.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::trace::TraceContextExt;
    /// use tracing_subscriber::prelude::*;
    ///
    /// let config = LensConfig::default()
    ///     .with_enabled(true)
    ///     .with_export_strategy("all_ranks")
    ///     .with_metrics_enabled(false);
    /// let telemetry = Telemetry::builder(config)
    ///     .install_globals(false)
    ///     .span_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
    ///     .build()?;
    /// let _guard = tracing_subscriber::registry().with(telemetry.layer()).set_default();
    /// tracing::info_span!("job", nemo.group.job = tracing::field::Empty).in_scope(|| {
    ///     // An HTTP client's OpenTelemetry middleware would inject this span's context:
    ///     assert!(opentelemetry::Context::current().span().span_context().is_valid());
    /// });
    /// assert!(!opentelemetry::Context::current().span().span_context().is_valid());
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn context_activation(mut self, activate: bool) -> Self {
        self.context_activation = activate;
        self
    }

    /// The keys whose string values are written as `[REDACTED]`, replacing the default set
    /// ([`DEFAULT_REDACT_KEYS`](crate::DEFAULT_REDACT_KEYS), as Python's `redact_keys=` argument replaces it): span
    /// attributes, span events and bridged log records alike (exact, case-sensitive match).
    /// Pass an empty list to redact nothing. To extend the default set instead, chain it:
    ///
    /// ```
    /// use nemo_lens::{DEFAULT_REDACT_KEYS, LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    /// use tracing_subscriber::prelude::*;
    ///
    /// let spans = InMemorySpanExporter::default();
    /// let config = LensConfig::default().with_enabled(true).with_export_strategy("all_ranks");
    /// let telemetry = Telemetry::builder(config)
    ///     .install_globals(false)
    ///     .span_exporter(spans.clone())
    ///     .redact_keys(DEFAULT_REDACT_KEYS.iter().copied().chain(["api_key"]))
    ///     .build()?;
    /// tracing::subscriber::with_default(tracing_subscriber::registry().with(telemetry.layer()), || {
    ///     tracing::info_span!("call", api_key = "sk-123", token = "t", model = "m").in_scope(|| {});
    /// });
    /// telemetry.force_flush()?;
    /// let span = &spans.get_finished_spans().unwrap()[0];
    /// let value = |k: &str| span.attributes.iter().find(|kv| kv.key.as_str() == k).unwrap().value.to_string();
    /// assert_eq!(value("api_key"), "[REDACTED]");
    /// assert_eq!(value("token"), "[REDACTED]"); // still in the (extended) default set
    /// assert_eq!(value("model"), "m");
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn redact_keys<I, K>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.redact = RedactKeys::custom(keys);
        self
    }

    /// Gives every `ERROR` event and `#[instrument(err)]` an `exception.stacktrace`, and every
    /// recorded panic too, whatever `RUST_BACKTRACE` says (default: off).
    ///
    /// Off, an `ERROR` event carries no backtrace, and a panic (with
    /// [`Telemetry::install_panic_hook`]) carries one when `RUST_BACKTRACE` /
    /// `RUST_LIB_BACKTRACE` enable backtraces, as `std`'s panic message does. On, the stack is
    /// captured on the thread of the event (its frames' addresses: microseconds) and resolved
    /// into text on the export worker when the span is exported, never on the training thread.
    /// Resolving costs the worker up to hundreds of microseconds per backtrace (a steady stream
    /// of errors can make it fall behind, and the queue then drops and counts spans), and the
    /// first resolution maps and parses the binary's debug information, which raises the
    /// process's resident memory once (tens of megabytes for a binary with line tables). The
    /// text starts at the event's own frame (a panic's: the panicking frame) and is cut to the
    /// attribute value length limit. With
    /// [`synchronous_export`](TelemetryBuilder::synchronous_export) the thread that ends the span
    /// resolves it.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    /// use tracing_subscriber::prelude::*;
    ///
    /// let spans = InMemorySpanExporter::default();
    /// let config = LensConfig::default().with_enabled(true).with_export_strategy("all_ranks");
    /// let telemetry = Telemetry::builder(config)
    ///     .install_globals(false)
    ///     .span_exporter(spans.clone())
    ///     .error_backtraces(true)
    ///     .build()?;
    /// tracing::subscriber::with_default(tracing_subscriber::registry().with(telemetry.layer()), || {
    ///     tracing::info_span!("step").in_scope(|| tracing::error!("nan loss"));
    /// });
    /// telemetry.force_flush()?;
    /// let event = &spans.get_finished_spans().unwrap()[0].events.events[0];
    /// let keys: Vec<&str> = event.attributes.iter().map(|kv| kv.key.as_str()).collect();
    /// assert_eq!(
    ///     keys,
    ///     ["exception.type", "exception.message", "exception.stacktrace", "exception.escaped"]
    /// );
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn error_backtraces(mut self, on: bool) -> Self {
        self.error_backtraces = on;
        self
    }

    /// Builds the tracer provider from the application's own `builder` (its processors,
    /// exporters, sampler and resource) instead of an empty one. Lens adds its ID generator
    /// (replacing the builder's), the rank sampler when enabled, the processors of
    /// [`TelemetryBuilder::span_processor`], and an exporter only when
    /// [`TelemetryBuilder::span_exporter`] names one: the application's processors do the
    /// exporting. The builder's resource is kept (lens's resource attributes are not added to
    /// it; [`Telemetry::resource`] still describes this rank). On a disabled or non-exporting
    /// rank the builder is dropped unbuilt, and nothing is started.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    ///
    /// let mine = InMemorySpanExporter::default();
    /// let builder = SdkTracerProvider::builder().with_simple_exporter(mine.clone());
    /// let config = LensConfig::default().with_enabled(true).with_export_strategy("all_ranks");
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

    /// **Tests only**: allows a second enabled setup in this process.
    ///
    /// ```
    /// let first = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default())
    ///     .allow_reinit_for_testing(true)
    ///     .build();
    /// assert!(first.is_ok());
    /// ```
    #[cfg(any(feature = "testing", test))]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
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
            install_globals,
            context_activation,
            provider_builder,
            lookup,
            unknown,
            legacy_rank_keys,
            redact,
            error_backtraces,
            local_rank,
        } = self;
        let mut given = build::Given {
            resource_attributes,
            span_exporter,
            span_processors,
            metric_reader,
            log_exporter,
            provider_builder,
            install_globals,
            redact,
            error_backtraces,
            lookup,
            local_rank,
        };
        // Only a setup that installs globals counts as the process's one enabled setup.
        let reinit_allowed = allow_reinit || !install_globals;
        let place = build::Place {
            rank,
            world_size,
            unknown,
            legacy_rank_keys,
        };
        let identity = build::resolve_identity(&mut config, place, reinit_allowed, &*given.lookup)?;
        let decision = build::decide_export(&config, &identity, export_strategy, &*given.lookup)?;
        let variables = build::read_export_variables(
            &config,
            decision.chosen,
            given.metric_reader.is_some(),
            &*given.lookup,
        )?;
        let plan = build::plan_pipelines(&config, &identity, &decision, variables, synchronous);
        let nvtx = crate::gpu::nvtx::start(&config, decision.groups.iter().cloned());
        let built = build::build_pipelines(&config, &identity, &plan, &mut given)?;
        build::install_process_state(&config, install_globals, &plan.gate, identity.generation);
        let (instruments, filter) = build::instruments_and_filter(&built, &plan.gate);
        let flight_recorder = build::start_flight_recorder(
            &config,
            &identity,
            &plan,
            decision.recorder,
            &built,
            &filter,
            given,
        )?;
        Ok(build::assemble_handle(build::HandleParts {
            config,
            identity,
            plan,
            built,
            instruments,
            filter,
            flight_recorder,
            context_activation,
            nvtx,
        }))
    }
}
