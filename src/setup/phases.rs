//! The phases of [`TelemetryBuilder::build`](crate::TelemetryBuilder::build), in the order it
//! runs them: resolve who this process is, decide what it exports, read the exporting rank's
//! variables, plan the pipelines, build them, install the process-wide state, start the flight
//! recorder, assemble the handle.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::logs::SdkLogRecord;
use opentelemetry_sdk::trace::{SpanData, TracerProviderBuilder};

use super::handle::{Inner, Telemetry};
use super::once::ShutdownOnce;
use super::pipelines::{
    Built, LogExporterFactory, METRIC_INTERVAL_VAR, ProcessorFactory, ReaderFactory, TraceParts,
};
use crate::SCOPE_NAME;
use crate::config::env::Env;
use crate::config::resource;
use crate::config::{ExporterKind, LensConfig};
use crate::error::{LensError, Result};
use crate::export::otlp::{self, Signal};
use crate::flight_recorder::{self, FlightRecorder};
use crate::ids;
use crate::layer::detail::DetailSettings;
use crate::layer::filter::LensFilter;
use crate::metrics::Instruments;
use crate::propagation;
use crate::queue::budget;
use crate::queue::config::QueueConfig;
use crate::queue::drops::DropCounters;
use crate::queue::processors::{BoxedProcessor, ExportSettings};
use crate::rank::groups::{self, GroupGate};
use crate::rank::rules::{self, CallsiteRules};
use crate::rank::sampler::RankAwareSampler;
use crate::rank::strategy;
use crate::rank::tags::GroupTags;
use crate::record::attributes::{RedactKeys, TextRules};

/// `1 +` the fork generation in which an enabled setup ran, or 0: a forked child (another
/// generation) may set up its own telemetry.
static INITIALIZED_IN: AtomicU64 = AtomicU64::new(0);

/// How the builder reads the environment.
pub(super) type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// What the application told the builder about the process's place in the job.
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    /// [`TelemetryBuilder::place`](crate::TelemetryBuilder::place).
    pub(super) place: super::place::Place,
    /// [`TelemetryBuilder::random_run_id`](crate::TelemetryBuilder::random_run_id).
    pub(super) random_run_id: bool,
    /// Also write `dl.rank` / `dl.world_size`.
    pub(super) legacy_rank_keys: bool,
    /// The rank and world size of `resource_attribute_defaults`, if integers.
    pub(super) defaults: (Option<u32>, Option<u32>),
}

/// Who this process is, once resolved.
pub(super) struct Identity {
    /// The rank export strategies and `{rank}` see (0 when unknown).
    pub(super) rank: u32,
    /// The world size export strategies see (above the rank when unknown).
    pub(super) world_size: u32,
    /// The fork generation of this setup.
    pub(super) generation: u64,
    /// What the resource says about the rank.
    pub(super) participant: resource::Participant,
}

/// Checks the configuration and resolves who this process is: `OTEL_SDK_DISABLED`, the rank and
/// world size (the application's, else the launcher's), the one-enabled-setup-per-process rule
/// and the run id.
/// Installs the fork handler (on every rank).
pub(super) fn resolve_identity(
    config: &mut LensConfig,
    place: Place,
    reinit_allowed: bool,
    lookup: &Lookup,
) -> Result<Identity> {
    config.validate()?;
    // `OTEL_SDK_DISABLED=true` (the OpenTelemetry SDK switch, as Python's SDK reads it:
    // stripped, any case, only `true`) makes the process inert: a disabled setup.
    if lookup("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        config.enabled = false;
    }
    let (rank, world_size) = resource::participant::resolve(
        (place.place.rank, place.place.unknown_rank, place.defaults.0),
        (
            place.place.world_size,
            place.place.unknown_world_size,
            place.defaults.1,
        ),
        lookup,
    );
    let rank_number = rank.value.unwrap_or(0);
    let world_number = world_size
        .value
        .unwrap_or_else(|| rank_number.saturating_add(1));
    // A disabled setup builds nothing and uses neither, so it takes any rank and world size
    // (a launcher may hand out numbers nemo-lens would refuse when enabled).
    if config.enabled && (world_number == 0 || rank_number >= world_number) {
        return Err(LensError::InvalidArgument(format!(
            "rank must be below world_size (rank {rank_number}, world_size {world_number}{})",
            [&rank, &world_size]
                .iter()
                .filter_map(|r| r.from_launcher.then_some(r.key))
                .map(|key| format!("; {key} from {}", crate::carrier::OTEL_RESOURCE_ATTRIBUTES))
                .collect::<String>()
        )));
    }
    ids::install_fork_handler();
    let generation = ids::fork_generation();
    if config.enabled && !reinit_allowed && INITIALIZED_IN.load(Ordering::SeqCst) == generation + 1
    {
        return Err(LensError::AlreadyInitialized);
    }
    let run_id_configured = !config.identity.run_id.is_empty();
    let no_job_id = lookup("SLURM_JOB_ID").is_none_or(|v| v.trim().is_empty());
    if place.random_run_id || !config.identity.run_id.is_empty() || !no_job_id {
        config.identity.run_id = resource::resolve_run_id(&config.identity.run_id, lookup);
    }
    Ok(Identity {
        rank: rank_number,
        world_size: world_number,
        generation,
        participant: resource::Participant {
            rank: rank.value,
            world_size: world_size.value,
            legacy_rank_keys: place.legacy_rank_keys,
            run_id_configured,
        },
    })
}

/// What the export strategy and the group settings decided for this rank.
pub(super) struct ExportDecision {
    /// The export strategy chose this rank (whether or not telemetry is enabled).
    pub(super) chosen: bool,
    /// The enabled span groups (empty when disabled).
    pub(super) groups: BTreeSet<String>,
    /// Names of `NEMO_LENS_SPAN_GROUPS` no registered group has.
    pub(super) unknown_groups: Vec<String>,
    /// The span-group rules and span level (checked on every rank, enabled or not).
    pub(super) rules: CallsiteRules,
    /// The flight recorder to start, if `NEMO_LENS_FLIGHT_RECORDER` asks for one.
    pub(super) recorder: Option<flight_recorder::Plan>,
}

/// Decides whether this rank exports: the export strategy (evaluated even when disabled, so an
/// unknown strategy fails on every rank), the span groups and the flight recorder's plan.
pub(super) fn decide_export(
    config: &LensConfig,
    identity: &Identity,
    lookup: &Lookup,
) -> Result<ExportDecision> {
    let strategy =
        strategy::get_export_strategy(&config.export.strategy, &config.strategy_origin())?;
    let chosen = strategy.decide_with(config, identity.rank, identity.world_size, lookup)?;
    // Unknown names are another process's groups: warned about (by the exporting rank,
    // the one they would matter on) and ignored.
    let (groups, unknown_groups) = if config.enabled {
        groups::resolve_known(&config.groups.span_groups)
    } else {
        Default::default()
    };
    let rules = CallsiteRules::new(
        rules::parse_span_group_rules(
            &config.groups.rules,
            &config.span_group_rules_origin(),
            &groups::registered_groups(),
        )?,
        config.groups.span_level,
    );
    let recorder = flight_recorder::Plan::new(config)?;
    Ok(ExportDecision {
        chosen,
        groups,
        unknown_groups,
        rules,
        recorder,
    })
}

/// The variables only the exporting rank reads.
pub(super) struct ExportVariables {
    /// The span queue (`OTEL_BSP_*`, `NEMO_LENS_QUEUE_MAX_BYTES`).
    pub(super) spans: QueueConfig,
    /// The log-record queue (`OTEL_BLRP_*`, `NEMO_LENS_QUEUE_MAX_BYTES`).
    pub(super) logs: QueueConfig,
    /// The longest string attribute value of spans and of log records.
    pub(super) value_limit: Option<usize>,
    pub(super) log_value_limit: Option<usize>,
    /// `OTEL_METRIC_EXPORT_INTERVAL`, when lens builds the metric reader.
    pub(super) metric_interval: Option<Duration>,
}

/// Reads the queue sizes, value length limits and metric interval on the exporting rank only
/// (the one rank that uses them: a value a job-wide environment sets for Python ranks never
/// stops the others), before anything global is touched. The queues' byte budget is read on
/// every enabled rank, and their rings are kept within it.
pub(super) fn read_export_variables(
    config: &LensConfig,
    chosen: bool,
    own_metric_reader: bool,
    lookup: &Lookup,
) -> Result<ExportVariables> {
    let exporting = config.enabled && chosen;
    let (mut spans, mut logs, value_limit, log_value_limit) = if exporting {
        (
            QueueConfig::from_env("OTEL_BSP", lookup)?,
            QueueConfig::from_env_over("OTEL_BLRP", QueueConfig::logs_default(), lookup)?,
            crate::config::env::value_length_limit(Env::new(lookup))?,
            crate::config::env::log_value_length_limit(Env::new(lookup))?,
        )
    } else {
        (
            QueueConfig::default(),
            QueueConfig::logs_default(),
            None,
            None,
        )
    };
    if config.enabled {
        // Memory bounded in bytes: the queues' budget, and their rings kept within it.
        let max_bytes = budget::queue_max_bytes(Env::new(lookup))?;
        for (b, var, slot) in [
            (&mut spans, "OTEL_BSP_MAX_QUEUE_SIZE", size_of::<SpanData>()),
            (
                &mut logs,
                "OTEL_BLRP_MAX_QUEUE_SIZE",
                size_of::<(SdkLogRecord, InstrumentationScope)>(),
            ),
        ] {
            b.max_queue_bytes = max_bytes;
            // A ring slot is the item and a stamp.
            let slot = slot + size_of::<usize>();
            b.max_queue_size = budget::clamp_queue_size(var, b.max_queue_size, slot, max_bytes);
            b.max_export_batch_size = b.max_export_batch_size.min(b.max_queue_size);
        }
    }
    // Likewise read on the exporting rank only.
    let metric_interval = if exporting && config.metrics_enabled && !own_metric_reader {
        Env::new(lookup).positive_millis(METRIC_INTERVAL_VAR)?
    } else {
        None
    };
    Ok(ExportVariables {
        spans,
        logs,
        value_limit,
        log_value_limit,
        metric_interval,
    })
}

/// What the pipelines of this rank will be, before anything is built.
pub(super) struct PipelinePlan {
    /// Telemetry is enabled and the export strategy chose this rank.
    pub(super) exporting: bool,
    /// Exporting, with traces on, and the rank sampler (if on) keeps this rank.
    pub(super) recording: bool,
    pub(super) sampler: RankAwareSampler,
    /// The enabled span groups (none on a rank that does not export).
    pub(super) gate: Arc<GroupGate>,
    /// Groups whose spans each start a trace (`NEMO_LENS_TRACE_PER`), lower-case.
    pub(super) trace_per: Vec<String>,
    /// Per-step detail capture (`NEMO_LENS_DETAIL_GROUPS`), when asked for on this rank.
    pub(super) detail: Option<DetailSettings>,
    /// Spans and log records go through the exporter synchronously (no batch queue).
    pub(super) synchronous: bool,
    pub(super) span_queue: QueueConfig,
    pub(super) log_queue: QueueConfig,
    pub(super) dropped: DropCounters,
    /// The longest export timeout: how long a flush waits.
    pub(super) flush_timeout: Duration,
    pub(super) value_limit: Option<usize>,
    pub(super) log_value_limit: Option<usize>,
    pub(super) metric_interval: Option<Duration>,
}

/// Plans the pipelines from the decision and the variables: whether the rank exports and
/// records, the group gate, the queues' settings and drop counters, and the trace-per groups.
/// Warns (on the exporting rank) about group names nothing registered.
pub(super) fn plan_pipelines(
    config: &LensConfig,
    identity: &Identity,
    decision: &ExportDecision,
    variables: ExportVariables,
    synchronous: bool,
) -> PipelinePlan {
    let flush_timeout = variables
        .spans
        .export_timeout
        .max(variables.logs.export_timeout);
    let dropped = DropCounters::default();
    let exporting = config.enabled && decision.chosen;
    let sampler = RankAwareSampler::new(
        identity.rank,
        identity.world_size,
        config.export.sample_rate,
    );
    let recording =
        exporting && config.traces_enabled && (!config.export.sampler || sampler.is_sampled());
    let detail = if exporting {
        detail_settings(config)
    } else {
        None
    };
    let mut enabled = if exporting {
        decision.groups.clone()
    } else {
        Default::default()
    };
    // Detail capture records its groups, and the steps that decide for them.
    if let Some(d) = &detail {
        enabled.extend(d.groups.iter().cloned());
        enabled.insert(groups::STEP.to_string());
    }
    let gate = Arc::new(GroupGate::new(enabled).with_rules(decision.rules.clone()));
    // Groups whose spans start a trace each: unknown names are warned about and ignored,
    // as in the span-group spec (presets name their groups).
    let trace_per: Vec<String> = if exporting && !config.groups.trace_per.trim().is_empty() {
        let (set, unknown) = groups::resolve_known(&config.groups.trace_per);
        if !unknown.is_empty() {
            eprintln!(
                "{}",
                groups::unknown_warning(&config.trace_per_origin(), &unknown)
            );
        }
        set.into_iter().collect()
    } else {
        Vec::new()
    };
    if exporting && !decision.unknown_groups.is_empty() {
        eprintln!(
            "{}",
            groups::unknown_warning(&config.span_groups_origin(), &decision.unknown_groups)
        );
    }
    PipelinePlan {
        exporting,
        recording,
        sampler,
        gate,
        trace_per,
        detail,
        synchronous,
        span_queue: variables.spans,
        log_queue: variables.logs,
        dropped,
        flush_timeout,
        value_limit: variables.value_limit,
        log_value_limit: variables.log_value_limit,
        metric_interval: variables.metric_interval,
    }
}

/// The detail-capture settings of `config`, `None` when no detail group is named. Unknown
/// group names are warned about and ignored, as in the span-group spec.
fn detail_settings(config: &LensConfig) -> Option<DetailSettings> {
    let g = &config.groups;
    if g.detail_groups.trim().is_empty() {
        return None;
    }
    let (set, unknown) = groups::resolve_known(&g.detail_groups);
    if !unknown.is_empty() {
        eprintln!(
            "{}",
            groups::unknown_warning(&config.detail_groups_origin(), &unknown)
        );
    }
    // A step is never its own detail: it is always exported.
    let groups: Vec<String> = set.into_iter().filter(|g| g != groups::STEP).collect();
    (!groups.is_empty()).then(|| DetailSettings {
        groups,
        slow_factor: g.detail_slow_factor,
        window: g.detail_window.max(1),
        max_bytes: g.detail_max_bytes,
    })
}

/// What the application handed the builder for the pipelines.
pub(super) struct Given {
    pub(super) resource: super::resource::ResourceRequest,
    pub(super) span_exporter: Option<ProcessorFactory>,
    pub(super) span_processors: Vec<Box<dyn FnOnce() -> BoxedProcessor + Send>>,
    pub(super) metric_reader: Option<ReaderFactory>,
    pub(super) log_exporter: Option<LogExporterFactory>,
    pub(super) provider_builder: Option<TracerProviderBuilder>,
    pub(super) install_globals: bool,
    pub(super) redact: RedactKeys,
    /// [`TelemetryBuilder::error_backtraces`](crate::TelemetryBuilder::error_backtraces).
    pub(super) error_backtraces: bool,
    /// How the environment is read
    /// ([`TelemetryBuilder::env_lookup`](crate::TelemetryBuilder::env_lookup)).
    pub(super) lookup: Box<Lookup>,
    /// [`TelemetryBuilder::local_rank`](crate::TelemetryBuilder::local_rank).
    pub(super) local_rank: Option<u32>,
}

/// Builds the exporting rank's pipelines: checks every OTLP setting first, then the resource,
/// the tracer, meter and logger providers (each installed globally unless told not to) and the
/// global propagator. Builds nothing on any other rank.
pub(super) fn build_pipelines(
    config: &LensConfig,
    identity: &Identity,
    plan: &PipelinePlan,
    given: &mut Given,
) -> Result<Built> {
    let lookup = &*given.lookup;
    let mut built = Built::default();
    if !plan.exporting {
        let who = &identity.participant;
        built.handed_down =
            super::resource::publish_unexported(config, who, &given.resource, lookup);
        return Ok(built);
    }
    if let Some((var, value)) = &config.sources.bad_exporter {
        return Err(LensError::UnknownExporter {
            var: var.clone(),
            value: value.clone(),
        });
    }
    // Every OTLP setting is checked before the first pipeline is installed globally.
    if config.export.exporter == ExporterKind::Otlp {
        let signals = [
            (
                config.traces_enabled && given.span_exporter.is_none(),
                Signal::Traces,
            ),
            (
                config.metrics_enabled && given.metric_reader.is_none(),
                Signal::Metrics,
            ),
            (
                config.logs_enabled && given.log_exporter.is_none(),
                Signal::Logs,
            ),
        ];
        let used: Vec<Signal> = signals
            .iter()
            .filter(|(on, _)| *on)
            .map(|&(_, s)| s)
            .collect();
        otlp::preflight(&used, Env::new(lookup))?;
    }
    let env = Env::new(lookup);
    let rank = identity.rank;
    let resource = super::resource::rank_resource(
        config,
        &identity.participant,
        &given.resource,
        given.local_rank,
        lookup,
    );
    // Before the exporters start their threads.
    built.handed_down = super::resource::hand_down(&resource, &given.resource, lookup);
    if config.traces_enabled {
        let parts = TraceParts {
            resource: resource.clone(),
            sampler: config.export.sampler.then(|| plan.sampler.clone()),
            processors: std::mem::take(&mut given.span_processors),
            exporter: given.span_exporter.take(),
            settings: ExportSettings {
                synchronous: plan.synchronous,
                batch: plan.span_queue,
                dropped: plan.dropped.spans.clone(),
                span_queue: Default::default(),
            },
            recording: plan.recording,
            text: TextRules {
                limit: plan.value_limit,
                redact: given.redact.clone(),
            },
            trace_per: plan.trace_per.clone(),
            detail: plan
                .detail
                .clone()
                .map(|settings| (settings, plan.gate.clone())),
            error_backtraces: given.error_backtraces,
            group_tags: GroupTags::new(plan.gate.rules().clone()),
            provider_builder: given.provider_builder.take(),
            install_global: given.install_globals,
        };
        built.traces(config, rank, env, parts)?;
    }
    if config.metrics_enabled {
        built.metrics(
            config,
            rank,
            env,
            resource.clone(),
            given.metric_reader.take(),
            plan.metric_interval,
            &plan.dropped,
            given.install_globals,
        )?;
    }
    if config.logs_enabled {
        built.logs(
            config,
            rank,
            env,
            resource.clone(),
            given.log_exporter.take(),
            &ExportSettings {
                synchronous: plan.synchronous,
                batch: plan.log_queue,
                dropped: plan.dropped.logs.clone(),
                span_queue: Default::default(),
            },
            TextRules {
                limit: plan.log_value_limit,
                redact: given.redact.clone(),
            },
        )?;
    }
    if given.install_globals {
        propagation::install_global_propagator();
    }
    built.resource = Some(resource);
    Ok(built)
}

/// Installs what belongs to the whole process on an enabled setup that installs globals: the
/// group gate `is_span_group_enabled` reads, and the mark that refuses a second setup.
pub(super) fn install_process_state(
    config: &LensConfig,
    install_globals: bool,
    gate: &Arc<GroupGate>,
    nvtx: Option<&Arc<GroupGate>>,
    generation: u64,
) {
    if config.enabled && install_globals {
        groups::install_process_gate(gate.clone(), nvtx.cloned());
        INITIALIZED_IN.store(generation + 1, Ordering::SeqCst);
    }
}

/// Starts the flight recorder on every enabled rank, exporting or not: its own slots and
/// thread (no provider, exporter thread or socket); see [`crate::flight_recorder`].
pub(super) fn start_flight_recorder(
    config: &LensConfig,
    identity: &Identity,
    plan: &PipelinePlan,
    recorder: Option<flight_recorder::Plan>,
    built: &Built,
    filter: &LensFilter,
    given: Given,
) -> Result<Option<FlightRecorder>> {
    let Some(recorder) = recorder else {
        return Ok(None);
    };
    let resource = built.resource.clone().unwrap_or_else(|| {
        super::resource::recorder_resource(
            config,
            &identity.participant,
            &given.resource,
            &*given.lookup,
        )
    });
    recorder
        .start(
            config,
            identity.rank,
            plan.exporting,
            &resource,
            plan.gate.clone(),
            filter.clone(),
            given.redact,
            built.pipeline.as_ref().and_then(|p| p.detail.clone()),
        )
        .map(Some)
}

/// The instruments of the meter provider (no-op without one) and the layer's filter.
pub(super) fn instruments_and_filter(
    built: &Built,
    gate: &Arc<GroupGate>,
) -> (Instruments, LensFilter) {
    let instruments = match &built.meter_provider {
        Some(p) => {
            Instruments::new(p.meter_with_scope(InstrumentationScope::builder(SCOPE_NAME).build()))
        }
        None => Instruments::noop(),
    };
    let filter = LensFilter::new(built.pipeline.is_none(), gate.clone());
    (instruments, filter)
}

/// Everything the handle holds, in one place.
pub(super) struct HandleParts {
    pub(super) config: LensConfig,
    pub(super) identity: Identity,
    pub(super) plan: PipelinePlan,
    pub(super) built: Built,
    pub(super) instruments: Instruments,
    pub(super) filter: LensFilter,
    pub(super) flight_recorder: Option<FlightRecorder>,
    pub(super) context_activation: bool,
    /// The groups of NVTX ranges, when this rank pushes them.
    pub(super) nvtx: Option<Arc<GroupGate>>,
}

/// Assembles the [`Telemetry`] handle.
pub(super) fn assemble_handle(parts: HandleParts) -> Telemetry {
    let HandleParts {
        config,
        identity,
        plan,
        built,
        instruments,
        filter,
        flight_recorder,
        context_activation,
        nvtx,
    } = parts;
    Telemetry::from_inner(Inner {
        instruments,
        filter,
        flight_recorder,
        config,
        rank: identity.rank,
        world_size: identity.world_size,
        exporting: plan.exporting,
        groups: plan.gate,
        built,
        shutdown: ShutdownOnce::default(),
        flush_timeout: plan.flush_timeout,
        panic_hook: AtomicBool::new(false),
        generation: identity.generation,
        context_activation,
        dropped: plan.dropped,
        nvtx,
    })
}
