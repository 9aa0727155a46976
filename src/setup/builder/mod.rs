//! [`TelemetryBuilder`]: what a process asks for, checked and built once. This file holds the
//! process's place in the job (rank, world size, run id, resource attributes) and the build;
//! [`components`] the pipeline parts an application brings, [`behaviour`] how the telemetry
//! behaves in its process.

mod behaviour;
mod components;

use std::fmt;

use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::TracerProviderBuilder;

use super::handle::Telemetry;
use super::phases;
use super::pipelines::{LogExporterFactory, ProcessorFactory, ReaderFactory};
use crate::config::LensConfig;
use crate::error::Result;
use crate::queue::processors::BoxedProcessor;
use crate::rank::strategy::ExportStrategy;
use crate::record::attributes::RedactKeys;

type Lookup = Box<phases::Lookup>;

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
    unknown: phases::Unknown,
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
            unknown: phases::Unknown::default(),
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

    /// Reads environment variables (`SLURM_*`, `OTEL_*`, …) through `lookup` instead of the
    /// process environment.
    ///
    /// A few are still read from the process environment, because the OpenTelemetry SDK and
    /// its TLS stack read them there and nemo-lens must agree with what they read:
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (the sampler),
    /// `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`, `OTEL_SPAN_EVENT_COUNT_LIMIT` and
    /// `OTEL_SPAN_LINK_COUNT_LIMIT` (the span limits), and `SSL_CERT_FILE` (the system
    /// certificate bundle).
    ///
    /// ```
    /// // Setup sees `OTEL_SDK_DISABLED=true`, whatever the process environment holds.
    /// let lookup = |name: &str| (name == "OTEL_SDK_DISABLED").then(|| "true".to_string());
    /// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default())
    ///     .env_lookup(lookup)
    ///     .build()?;
    /// assert!(!telemetry.is_exporting());
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn env_lookup(
        mut self,
        lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.lookup = Box::new(lookup);
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
        let mut given = phases::Given {
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
        let place = phases::Place {
            rank,
            world_size,
            unknown,
            legacy_rank_keys,
        };
        let identity =
            phases::resolve_identity(&mut config, place, reinit_allowed, &*given.lookup)?;
        let decision = phases::decide_export(&config, &identity, export_strategy, &*given.lookup)?;
        let variables = phases::read_export_variables(
            &config,
            decision.chosen,
            given.metric_reader.is_some(),
            &*given.lookup,
        )?;
        let plan = phases::plan_pipelines(&config, &identity, &decision, variables, synchronous);
        let nvtx = crate::gpu::nvtx::start(&config, decision.groups.iter().cloned());
        let built = phases::build_pipelines(&config, &identity, &plan, &mut given)?;
        phases::install_process_state(&config, install_globals, &plan.gate, identity.generation);
        let (instruments, filter) = phases::instruments_and_filter(&built, &plan.gate);
        let flight_recorder = phases::start_flight_recorder(
            &config,
            &identity,
            &plan,
            decision.recorder,
            &built,
            &filter,
            given,
        )?;
        Ok(phases::assemble_handle(phases::HandleParts {
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
