//! [`Telemetry`]: the handle of one process's telemetry (its shutdown is in `shutdown.rs`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::global::BoxedTracer;
use opentelemetry::metrics::Meter;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::noop::NoopTracer;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use tracing_subscriber::registry::LookupSpan;

use super::once::ShutdownOnce;
use super::pipelines::Built;
use super::stats::Stats;
use crate::SCOPE_NAME;
use crate::bounded::{Unanswered, run_bounded};
use crate::config::LensConfig;
use crate::error::{LensError, Result};
use crate::flight_recorder::{FlightRecorder, RecorderLayer};
use crate::gpu::nvtx::NvtxLayer;
use crate::ids;
use crate::layer::LensLayer;
use crate::layer::filter::LensFilter;
use crate::layer::logs::LogFilter;
use crate::metrics::{EventMetricsLayer, Instruments};
use crate::queue::drops::DropCounters;
use crate::rank::groups::GroupGate;

pub(crate) struct Inner {
    pub(super) config: LensConfig,
    pub(super) rank: u32,
    pub(super) world_size: u32,
    pub(super) exporting: bool,
    pub(super) groups: Arc<GroupGate>,
    pub(super) filter: LensFilter,
    pub(super) flight_recorder: Option<FlightRecorder>,
    pub(super) built: Built,
    pub(super) instruments: Instruments,
    pub(super) shutdown: ShutdownOnce,
    /// How long [`Telemetry::force_flush`] waits: the longest export timeout
    /// (`OTEL_BSP_EXPORT_TIMEOUT`, `OTEL_BLRP_EXPORT_TIMEOUT`).
    pub(super) flush_timeout: Duration,
    pub(super) panic_hook: AtomicBool,
    pub(super) dropped: DropCounters,
    /// The fork generation of the setup; another one means this is a forked child.
    pub(super) generation: u64,
    /// [`TelemetryBuilder::context_activation`](crate::TelemetryBuilder::context_activation).
    pub(super) context_activation: bool,
    /// The groups of NVTX ranges, when this rank pushes them (`NEMO_LENS_NVTX`).
    pub(super) nvtx: Option<Arc<GroupGate>>,
}

/// The handle of one process's telemetry: the layer, the tracer, flush and shutdown.
///
/// Cloning is cheap (shared). Call [`Telemetry::shutdown`] before the process exits (a
/// `finally`-style path): spans still open are ended as truncated and everything queued is
/// exported. Dropping the last clone shuts down with a 5-second timeout.
///
/// # Fork
///
/// A process forked without exec (a data-loader worker) inherits the telemetry of its parent,
/// but not its threads: the batch processor's worker, the gRPC runtime and the HTTP client are
/// gone. In the child, the inherited handle and its layer are therefore inert:
///
/// * the layer records nothing (one relaxed atomic load per span compares the `pthread_atfork`
///   generation recorded at setup with the current one; no syscall);
/// * spans the parent had open are neither ended nor truncated nor exported by the child (the
///   parent exports them once), and the layer's table of open spans is never touched;
/// * [`Telemetry::force_flush`], [`Telemetry::shutdown`] and dropping the handle return at once
///   (the inherited providers are leaked, never shut down: that would wait for dead threads);
/// * the child may set up its own telemetry (the double-init guard counts per fork generation),
///   which draws IDs from a freshly seeded stream ([`ChaChaIdGenerator`](crate::ChaChaIdGenerator)).
#[derive(Clone)]
pub struct Telemetry {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("enabled", &self.inner.config.enabled)
            .field("rank", &self.inner.rank)
            .field("world_size", &self.inner.world_size)
            .field("exporting", &self.inner.exporting)
            .field("recording", &self.inner.built.pipeline.is_some())
            .field("run_id", &self.inner.config.identity.run_id)
            .finish()
    }
}

impl Telemetry {
    pub(super) fn from_inner(inner: Inner) -> Self {
        Telemetry {
            inner: Arc::new(inner),
        }
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
            self.inner.context_activation,
        )
    }

    /// tracing-opentelemetry's own layer (feature `tracing-opentelemetry`), wired to the lens
    /// tracer (the tracer provider lens built: lens ids, the rank-aware sampler, the lens
    /// processors and exporter) and filtered by the lens layer's per-layer filter (rank and
    /// span groups), so that crates built on `tracing_opentelemetry::OpenTelemetrySpanExt`
    /// (HTTP and gRPC middleware calling `set_parent` / `context`) work unchanged. Use it
    /// *instead of* [`Telemetry::layer`] for spans (both would record every span twice); the
    /// lens layer is cheaper (see `docs/interop.md`, "Which layer to pick"). Its spans skip the lens
    /// layer's record path; those the SDK has started (tracing-opentelemetry starts one at its
    /// first enter, with context activation on) and that are still open at shutdown are
    /// exported as truncated from their start data (see [`Telemetry::shutdown`]). On a rank that records
    /// nothing the layer is inert: its filter never registers interest, and its tracer is a
    /// no-op one.
    ///
    /// ```
    /// use tracing_subscriber::prelude::*;
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// let _s = tracing_subscriber::registry().with(t.opentelemetry_layer());
    /// ```
    #[cfg(feature = "tracing-opentelemetry")]
    pub fn opentelemetry_layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing_core::Subscriber + for<'a> LookupSpan<'a>,
    {
        use tracing_subscriber::Layer as _;
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer())
            .with_context_activation(self.inner.context_activation)
            .with_filter(self.inner.filter.clone())
    }

    /// The [flight recorder](crate::flight_recorder)'s layer: add it next to [`Telemetry::layer`].
    /// It records spans of the recorder's groups on every enabled rank, exporting or not, and is
    /// inert (no interest registered, level hint `OFF`) when the recorder is off.
    ///
    /// ```
    /// use tracing_subscriber::prelude::*;
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// let _s = tracing_subscriber::registry().with(t.layer()).with(t.recorder_layer());
    /// ```
    pub fn recorder_layer<S>(&self) -> RecorderLayer<S>
    where
        S: tracing_core::Subscriber + for<'a> LookupSpan<'a>,
    {
        FlightRecorder::layer(self.inner.flight_recorder.as_ref())
    }

    /// Spans as NVTX ranges for Nsight Systems (feature `nvtx`, `NEMO_LENS_NVTX=1`): add it next
    /// to [`Telemetry::layer`]. On every enabled rank, exporting or not, spans the span groups
    /// let through become ranges in the NVTX domain `NeMo Lens`, with their group as the
    /// category, and events in them marks ([`NvtxLayer`] has the details). Inert (no interest
    /// registered, level hint `OFF`, no NVTX call) when the feature or the variable is off, or
    /// telemetry is disabled.
    ///
    /// ```
    /// use tracing_subscriber::prelude::*;
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// let _s = tracing_subscriber::registry().with(t.layer()).with(t.nvtx_layer());
    /// ```
    pub fn nvtx_layer<S>(&self) -> NvtxLayer<S>
    where
        S: tracing_core::Subscriber + for<'a> LookupSpan<'a>,
    {
        NvtxLayer::new(self.inner.nvtx.clone())
    }

    /// The [flight recorder](crate::flight_recorder), when `NEMO_LENS_FLIGHT_RECORDER` (or a
    /// control file) turned it on for this enabled rank.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// assert!(t.flight_recorder().is_none());
    /// ```
    pub fn flight_recorder(&self) -> Option<&FlightRecorder> {
        self.inner.flight_recorder.as_ref()
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
        &self.inner.config.identity.run_id
    }

    /// The resource spans are exported with (`None` on a non-exporting rank).
    ///
    /// # What the resource holds
    ///
    /// Setup composes the OpenTelemetry [`Resource`] of one rank as NeMo Lens does in Python
    /// (0.1.0's layers, with the nightly identity). The layers are applied in this order and
    /// **a later layer wins** on a key collision:
    ///
    /// 1. `service.name` = [`IdentityConfig::service_name`](crate::IdentityConfig::service_name),
    ///    `service.version` = this crate's version; the rank and world size when known, as
    ///    `nv.dl.rank` / `nv.dl.world_size` and (unless
    ///    [`legacy_rank_attributes(false)`](crate::TelemetryBuilder::legacy_rank_attributes))
    ///    `dl.rank` / `dl.world_size`, integers. The rank is the application's
    ///    ([`TelemetryBuilder::place`](crate::TelemetryBuilder::place)), else the launcher's
    ///    `nv.dl.rank` in `OTEL_RESOURCE_ATTRIBUTES`, else an integer `nv.dl.rank` among the
    ///    [defaults](crate::TelemetryBuilder::resource_attribute_defaults), else 0 (the world
    ///    size likewise);
    /// 2. if the run id is non-empty: `nemo.run.id` = run id, and when the rank is known and
    ///    neither the application nor `OTEL_RESOURCE_ATTRIBUTES` gives a `service.instance.id`:
    ///    `service.instance.id` = `"{run_id}-rank{rank}"`;
    /// 3. `nemo.user.id`, `wandb.entity`, `wandb.project`, each only if non-empty;
    /// 4. `deployment.environment` = `DEPLOYMENT_ENV` if that variable exists (even when empty),
    ///    otherwise `ENVIRONMENT`; set only if the chosen value is non-empty;
    /// 5. the application's attributes
    ///    ([`TelemetryBuilder::resource_attributes`](crate::TelemetryBuilder::resource_attributes));
    /// 6. detected attributes: local (`host.name`, `process.pid`, `host.gpu.count`), then the
    ///    job's identity: the Slurm attributes of [`identity::job_attributes`](crate::identity::job_attributes)
    ///    (typed integers, `nv.dl.job.uuid`), where the allowlisted `slurm.*` keys and the two
    ///    UUIDs found in `OTEL_RESOURCE_ATTRIBUTES` win over the derived ones (the launcher is
    ///    authoritative), and `nv.dl.run.uuid` unless the launcher or the application gave it
    ///    (as [`identity::job_attributes`](crate::identity::job_attributes) derives it: under Slurm from the job and its
    ///    restart counts; outside, from the configured run id, else `TORCHELASTIC_RUN_ID`, else
    ///    this process's run id — every rank must share it for one run UUID); then Kubernetes.
    ///    Note that **detected values override the caller's** on a collision, as in 0.1.0
    ///    (the launcher's job identity does not: the application's wins over it);
    /// 7. everything above is laid over the attributes parsed from `OTEL_RESOURCE_ATTRIBUTES`
    ///    (parsed as the OpenTelemetry SDKs do; the integer `nv.dl.*` / `nv.gpu.*` keys
    ///    restored to integers, an invalid one kept as its string with a warning), which in
    ///    turn lie over the SDK defaults `telemetry.sdk.name` = `opentelemetry`,
    ///    `telemetry.sdk.language` = `rust` and `telemetry.sdk.version` = the
    ///    `opentelemetry_sdk` version. So `OTEL_RESOURCE_ATTRIBUTES` can add keys but not
    ///    replace a key Lens sets.
    ///
    /// As in the Python SDK's `Resource.create`, an empty `service.name` at the end becomes
    /// `unknown_service`.
    ///
    /// Last, the [defaults](crate::TelemetryBuilder::resource_attribute_defaults) fill the keys
    /// nothing above set, and a job-scoped process
    /// ([`derive_run_uuid(false)`](crate::TelemetryBuilder::derive_run_uuid)) loses
    /// `nv.dl.run.uuid`, whoever gave it.
    ///
    /// With [`LensConfig::detect_gpu`](crate::LensConfig::detect_gpu) (`NEMO_LENS_DETECT_GPU`,
    /// feature `nvml`), the `nv.gpu.*` attributes of the rank's GPU, read through NVML, fill the
    /// keys that none of the above set (a launcher's value in `OTEL_RESOURCE_ATTRIBUTES` wins);
    /// `docs/gpu.md` has the rules.
    ///
    /// Environment variables are read only through
    /// [`TelemetryBuilder::env_lookup`](crate::TelemetryBuilder::env_lookup) (by default the
    /// process environment), so the composition is deterministic and testable. Three inputs are
    /// not behind it: the existence of `/var/run/secrets/kubernetes.io` (one way to detect
    /// Kubernetes), when `CUDA_VISIBLE_DEVICES` is unset the output of `nvidia-smi`, which is
    /// found through the `PATH` the lookup gives if any, else the process's own `PATH`, and is
    /// abandoned after 5 seconds, and NVML's answers with GPU detection on.
    ///
    /// ```
    /// use nemo_lens::{semconv, LensConfig, Place, Telemetry};
    /// use opentelemetry::{Key, Value};
    ///
    /// let env = [
    ///     ("SLURM_JOB_ID", "4242"),
    ///     ("SLURM_NNODES", "2"),
    ///     ("CUDA_VISIBLE_DEVICES", "0,1"),
    ///     ("OTEL_RESOURCE_ATTRIBUTES", "team=ml%20infra,nv.dl.rank=99"),
    /// ];
    /// let config = LensConfig::default()
    ///     .with_enabled(true)
    ///     .with(|c| {
    ///         c.export.strategy = "all_ranks".into();
    ///         c.traces_enabled = false;
    ///         c.metrics_enabled = false;
    ///     });
    /// let telemetry = Telemetry::builder(config)
    ///     .place(Place::rank(3).of(8))
    ///     .env_lookup(move |name| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    ///     .build()?;
    /// assert_eq!(telemetry.run_id(), "4242");
    /// let res = telemetry.resource().expect("an exporting rank");
    ///
    /// let get = |k: &'static str| res.get(&Key::from_static_str(k));
    /// assert_eq!(get(semconv::NV_DL_RANK), Some(Value::I64(3))); // the application's rank wins
    /// assert_eq!(get(semconv::DL_RANK), Some(Value::I64(3)));
    /// assert_eq!(get(semconv::SERVICE_INSTANCE_ID), Some("4242-rank3".into()));
    /// assert_eq!(get(semconv::SLURM_JOB_ID), Some("4242".into()));
    /// assert_eq!(get(semconv::SLURM_NNODES), Some(Value::I64(2)));
    /// assert!(get(semconv::NV_DL_JOB_UUID).is_some() && get(semconv::NV_DL_RUN_UUID).is_some());
    /// assert_eq!(get(semconv::HOST_GPU_COUNT), Some(Value::I64(2)));
    /// assert_eq!(get("team"), Some("ml infra".into())); // percent-decoded
    /// assert_eq!(get(semconv::TELEMETRY_SDK_LANGUAGE), Some("rust".into()));
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn resource(&self) -> Option<&Resource> {
        self.inner.built.resource.as_ref()
    }

    /// The part of [`Telemetry::resource`] a child process inherits (Python's
    /// `handle.resource_attributes`): what
    /// [`TelemetryBuilder::publish_resource_attributes`](crate::TelemetryBuilder::publish_resource_attributes)
    /// puts in `OTEL_RESOURCE_ATTRIBUTES`, with the resource's typed values. Empty on a
    /// disabled process, and on a rank that does not export unless it publishes.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Place, Telemetry};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let env = [("OTEL_RESOURCE_ATTRIBUTES", "team=infra,host.name=launcher")];
    /// let config = LensConfig::default().with_enabled(true).with(|c| {
    ///     c.export.strategy = "all_ranks".into();
    ///     c.metrics_enabled = false;
    /// });
    /// let telemetry = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    ///     .place(Place::rank(3).of(8))
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let keys: Vec<&str> = telemetry.resource_attributes().iter().map(|kv| kv.key.as_str()).collect();
    /// assert_eq!(keys[0], "team"); // the launcher's keys first
    /// assert!(keys.contains(&"nv.dl.rank") && keys.contains(&"nv.dl.world_size"));
    /// // This process's own keys, and those a child derives itself, are not inherited.
    /// assert!(!keys.contains(&"host.name") && !keys.contains(&"service.instance.id"));
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resource_attributes(&self) -> &[KeyValue] {
        &self.inner.built.handed_down.inheritable
    }

    /// An OpenTelemetry tracer for code that uses the OpenTelemetry API directly (a no-op
    /// tracer on a non-exporting rank). Spans made with it skip the lens layer (no span
    /// groups); those still open at shutdown are exported as truncated from their start data
    /// (see [`Telemetry::shutdown`]).
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
    /// [`InferenceMetrics`](crate::metrics::InferenceMetrics) and friends, [`Instruments::record`](crate::metrics::Instruments::record) and
    /// [`Telemetry::metrics_layer`].
    ///
    /// ```
    /// use nemo_lens::metrics::TrainingMetrics;
    /// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// TrainingMetrics { loss: Some(0.9), ..Default::default() }.record(telemetry.instruments());
    /// ```
    pub fn instruments(&self) -> &Instruments {
        &self.inner.instruments
    }

    /// A layer that records `histogram.*`, `gauge.*`, `counter.*` and `monotonic_counter.*`
    /// event fields as metrics (see [`EventMetricsLayer`](crate::metrics::EventMetricsLayer)). Inert (`Interest::never` for
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

    /// Exports everything queued, without closing live spans, waiting at most the export
    /// timeout (the longer of `OTEL_BSP_EXPORT_TIMEOUT` and `OTEL_BLRP_EXPORT_TIMEOUT`, 30 s by
    /// default) plus a moment.
    ///
    /// The flush runs on a helper thread: when a collector hangs, this call returns an error at
    /// that bound and the helper finishes (or gives up) in the background; what the hung
    /// exports held is counted in [`Telemetry::stats`] when they time out.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// t.force_flush().unwrap(); // nothing to flush on a disabled rank
    /// ```
    pub fn force_flush(&self) -> Result<()> {
        if self.inner.inherited() {
            return Ok(());
        }
        let tracer = self.inner.built.tracer_provider.clone();
        let meter = self.inner.built.meter_provider.clone();
        let logger = self
            .inner
            .built
            .logger_provider
            .as_ref()
            .map(|p| p.sdk().clone());
        if tracer.is_none() && meter.is_none() && logger.is_none() {
            return Ok(());
        }
        let flush = move || {
            let mut errors = Vec::new();
            if let Some(p) = tracer
                && let Err(e) = p.force_flush()
            {
                errors.push(format!("traces: {e}"));
            }
            if let Some(p) = meter
                && let Err(e) = p.force_flush()
            {
                errors.push(format!("metrics: {e}"));
            }
            if let Some(p) = logger
                && let Err(e) = p.force_flush()
            {
                errors.push(format!("logs: {e}"));
            }
            errors
        };
        let timeout = self.inner.flush_timeout;
        match run_bounded("flush", timeout + Duration::from_millis(500), flush) {
            Ok(errors) if errors.is_empty() => Ok(()),
            Ok(errors) => Err(LensError::Shutdown(errors.join("; "))),
            Err(Unanswered::NotStarted(e)) => Err(LensError::Shutdown(format!(
                "cannot start the flush thread: {e}"
            ))),
            Err(Unanswered::TimedOut) => Err(LensError::Shutdown(format!(
                "flush timed out after {timeout:?} (the export timeout): an exporter is stuck"
            ))),
        }
    }

    /// This telemetry's counters, read now: open spans, what was dropped, SDK spans the closer
    /// could not track, the flight recorder's drops (see [`Stats`]).
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// let stats = t.stats();
    /// assert_eq!((stats.open_spans, stats.dropped(), stats.untracked_sdk_spans), (0, 0, 0));
    /// assert!(!stats.inherited_from_parent);
    /// ```
    pub fn stats(&self) -> Stats {
        let inherited = self.inner.inherited();
        let dropped = self.inner.dropped.snapshot();
        Stats {
            open_spans: match &self.inner.built.pipeline {
                Some(p) if !inherited => p.open_spans(),
                _ => 0,
            },
            dropped_spans: dropped.spans,
            dropped_logs: dropped.logs,
            failed_metric_exports: dropped.metric_exports,
            untracked_sdk_spans: self.inner.built.span_processors.untracked(),
            recorder_dropped: self
                .inner
                .flight_recorder
                .as_ref()
                .map_or(0, |r| r.dropped()),
            detail_not_kept: self.detail().map_or(0, |d| d.dropped_by_decision()),
            detail_held_bytes: self.detail().map_or(0, |d| d.held_bytes()),
            inherited_from_parent: inherited,
            metric_export_interval: self.inner.built.metric_interval,
        }
    }
}

impl Telemetry {
    /// The per-step detail capture of this rank's pipeline, if on.
    fn detail(&self) -> Option<&crate::layer::detail::DetailCapture> {
        self.inner
            .built
            .pipeline
            .as_ref()
            .and_then(|p| p.detail.as_deref())
    }
}

impl Inner {
    /// `true` in a process forked (without exec) after the setup.
    #[inline]
    pub(super) fn inherited(&self) -> bool {
        self.generation != ids::fork_generation()
    }
}
