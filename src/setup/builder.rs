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
    install_globals: bool,
    context_activation: bool,
    provider_builder: Option<TracerProviderBuilder>,
    lookup: Lookup,
    /// `unknown_rank`, `unknown_world_size`, `no_random_run_id`.
    unknown: build::Unknown,
    /// [`TelemetryBuilder::redact_keys`] (default: [`crate::DEFAULT_REDACT_KEYS`]).
    redact: RedactKeys,
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
            install_globals: true,
            context_activation: true,
            provider_builder: None,
            lookup: Box::new(crate::config::env::process_var),
            unknown: build::Unknown::default(),
            redact: RedactKeys::default(),
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

    /// This process does not know its rank (a launcher, a job-level tool such as `nemo-lens
    /// emit-spans`): the resource gets no `dl.rank` and no rank-derived `service.instance.id`
    /// (values given in `OTEL_RESOURCE_ATTRIBUTES` still apply). Export strategies and `{rank}`
    /// in `NEMO_LENS_CONSOLE_PATH` see rank 0.
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
    /// for key in ["dl.rank", "dl.world_size", "service.instance.id", "nemo.run.id"] {
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

    /// This process does not know the world size: the resource gets no `dl.world_size`.
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
    /// [`crate::is_span_group_enabled`], and the one-enabled-setup-per-process guard.
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
            redact,
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
            lookup,
        };
        // Only a setup that installs globals counts as the process's one enabled setup.
        let reinit_allowed = allow_reinit || !install_globals;
        let identity = build::resolve_identity(
            &mut config,
            rank,
            world_size,
            unknown,
            reinit_allowed,
            &*given.lookup,
        )?;
        let decision = build::decide_export(&config, &identity, export_strategy, &*given.lookup)?;
        let variables = build::read_export_variables(
            &config,
            decision.chosen,
            given.metric_reader.is_some(),
            &*given.lookup,
        )?;
        let plan = build::plan_pipelines(&config, &identity, &decision, variables, synchronous);
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
        }))
    }
}
