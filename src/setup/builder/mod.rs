//! [`TelemetryBuilder`]: what a process asks for, checked and built once. This file holds the
//! process's place in the job ([`Place`]), its run id and resource attributes, and the build;
//! [`components`] the pipeline parts an application brings, [`behaviour`] how the telemetry
//! behaves in its process, [`resource`] what the resource holds and hands to child processes.

mod behaviour;
mod components;
mod resource;

pub use components::ExportMode;

use std::fmt;

use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::TracerProviderBuilder;

use super::handle::Telemetry;
use super::phases;
use super::pipelines::{LogExporterFactory, ProcessorFactory, ReaderFactory};
use super::place::Place;
use super::resource::ResourceRequest;

use crate::config::LensConfig;
use crate::error::Result;
use crate::queue::processors::BoxedProcessor;
use crate::record::attributes::RedactKeys;
use crate::semconv;

type Lookup = Box<phases::Lookup>;

/// Builds a [`Telemetry`]: the counterpart of the Python `setup_telemetry(config, rank,
/// world_size, resource_attributes, span_exporter, metric_reader, export_strategy)` (a custom
/// strategy is registered by name: [`strategy::register_export_strategy`](crate::strategy::register_export_strategy)).
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
///    (with [`LensConfig::logs_enabled`]), the W3C TraceContext + Baggage propagator and the global tracer
///    and meter providers.
///
/// ```
/// use nemo_lens::{LensConfig, Place, Telemetry};
/// let telemetry = Telemetry::builder(LensConfig::default().with_enabled(true))
///     .place(Place::rank(3).of(8)) // single_rank: rank 7 exports, rank 3 builds nothing
///     .build()?;
/// assert!(!telemetry.is_exporting());
/// # Ok::<(), nemo_lens::LensError>(())
/// ```
pub struct TelemetryBuilder {
    config: LensConfig,
    place: Place,
    /// The resource's attributes, defaults, job scope and publication.
    resource: ResourceRequest,
    span_exporter: Option<ProcessorFactory>,
    span_processors: Vec<Box<dyn FnOnce() -> BoxedProcessor + Send>>,
    metric_reader: Option<ReaderFactory>,
    log_exporter: Option<LogExporterFactory>,
    mode: ExportMode,
    allow_reinit: bool,
    install_globals: bool,
    context_activation: bool,
    provider_builder: Option<TracerProviderBuilder>,
    lookup: Lookup,
    /// [`TelemetryBuilder::random_run_id`] (default on).
    random_run_id: bool,
    /// [`TelemetryBuilder::legacy_rank_attributes`] (default on).
    legacy_rank_keys: bool,
    /// [`TelemetryBuilder::redact_keys`] (default: the keys it lists).
    redact: RedactKeys,
    /// [`TelemetryBuilder::error_backtraces`].
    error_backtraces: bool,
}

impl fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryBuilder")
            .field("config", &self.config)
            .field("place", &self.place)
            .field("custom_span_exporter", &self.span_exporter.is_some())
            .field("extra_span_processors", &self.span_processors.len())
            .field("custom_metric_reader", &self.metric_reader.is_some())
            .field("mode", &self.mode)
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
            place: Place::default(),
            resource: ResourceRequest::default(),
            span_exporter: None,
            span_processors: Vec::new(),
            metric_reader: None,
            log_exporter: None,
            mode: ExportMode::Batched,
            allow_reinit: false,
            install_globals: true,
            context_activation: true,
            provider_builder: None,
            lookup: Box::new(crate::config::env::process_var),
            random_run_id: true,
            legacy_rank_keys: true,
            redact: RedactKeys::default(),
            error_backtraces: false,
        }
    }

    /// This process's place in the job: its rank, the world size and its rank on its node
    /// (default: what the launcher says, see [`Place`]).
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Place, Telemetry};
    /// let telemetry = Telemetry::builder(LensConfig::default().with_enabled(true))
    ///     .place(Place::rank(3).of(8)) // single_rank: rank 7 exports, rank 3 builds nothing
    ///     .build()?;
    /// assert!(!telemetry.is_exporting());
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    ///
    /// Without it, a launcher's values are read from `OTEL_RESOURCE_ATTRIBUTES`:
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::{Key, Value};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// // A launcher handed this process its rank and world size.
    /// let env = [("OTEL_RESOURCE_ATTRIBUTES", "nv.dl.rank=3,nv.dl.world_size=8")];
    /// let config = LensConfig::default().with_enabled(true).with(|c| {
    ///     c.export.strategy = "all_ranks".into();
    ///     c.identity.run_id = "exp-1".into();
    ///     c.metrics_enabled = false;
    /// });
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
    pub fn place(mut self, place: Place) -> Self {
        self.place = place;
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
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.metrics_enabled = false);
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

    /// Whether an unset run id is drawn at random (default `true`): without a configured
    /// [`identity.run_id`](crate::IdentityConfig::run_id) and without `SLURM_JOB_ID`, `false`
    /// leaves the run id empty, so the resource has no `nemo.run.id` and no
    /// `service.instance.id` (a one-off process would otherwise stamp a run id no rank shares).
    /// See [`Place::unknown`] for an example.
    pub fn random_run_id(mut self, random: bool) -> Self {
        self.random_run_id = random;
        self
    }

    /// Extra resource attributes (detected host/SLURM/Kubernetes values win on collision, as in
    /// the Python library).
    pub fn resource_attributes(mut self, attributes: impl IntoIterator<Item = KeyValue>) -> Self {
        self.resource.caller.extend(attributes);
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
            place,
            mut resource,
            span_exporter,
            span_processors,
            metric_reader,
            log_exporter,
            mode,
            allow_reinit,
            install_globals,
            context_activation,
            provider_builder,
            lookup,
            random_run_id,
            legacy_rank_keys,
            redact,
            error_backtraces,
        } = self;
        // The rank keys the application's place gives (inheritable, as explicit attributes).
        resource.placed = [
            (
                place.rank.is_some() && !place.unknown_rank,
                semconv::NV_DL_RANK,
            ),
            (place.world_size.is_some(), semconv::NV_DL_WORLD_SIZE),
        ]
        .into_iter()
        .filter_map(|(given, key)| given.then_some(key))
        .collect();
        let defaults = resource.rank_defaults();
        let mut given = phases::Given {
            resource,
            span_exporter,
            span_processors,
            metric_reader,
            log_exporter,
            provider_builder,
            install_globals,
            redact,
            error_backtraces,
            lookup,
            local_rank: place.local_rank,
        };
        // Only a setup that installs globals counts as the process's one enabled setup.
        let reinit_allowed = allow_reinit || !install_globals;
        let place = phases::Place {
            place,
            random_run_id,
            legacy_rank_keys,
            defaults,
        };
        let identity =
            phases::resolve_identity(&mut config, place, reinit_allowed, &*given.lookup)?;
        let decision = phases::decide_export(&config, &identity, &*given.lookup)?;
        let variables = phases::read_export_variables(
            &config,
            decision.chosen,
            given.metric_reader.is_some(),
            &*given.lookup,
        )?;
        let plan = phases::plan_pipelines(
            &config,
            &identity,
            &decision,
            variables,
            mode == ExportMode::Synchronous,
        );
        let nvtx = crate::gpu::nvtx::start(
            &config,
            decision.groups.iter().cloned(),
            decision.rules.clone(),
        );
        let built = phases::build_pipelines(&config, &identity, &plan, &mut given)?;
        phases::install_process_state(
            &config,
            install_globals,
            &plan.gate,
            nvtx.as_ref(),
            identity.generation,
        );
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
