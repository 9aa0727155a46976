//! Configuration: one [`LensConfig`], read from `NEMO_LENS_*` variables ([`env`] has the
//! parsers every variable goes through), and the resource that says who produced the telemetry
//! ([`resource`]).

pub(crate) mod env;
pub(crate) mod flight_recorder;
pub(crate) mod named_file;
mod read;
pub(crate) mod resource;

use std::fmt;
use std::str::FromStr;

use crate::error::{LensError, Result};

/// The default environment prefix.
pub(crate) const DEFAULT_PREFIX: &str = "NEMO_LENS";

/// Where finished spans (and later metrics and logs) go.
///
/// ```
/// use nemo_lens::ExporterKind;
/// assert_eq!("Console".parse::<ExporterKind>().unwrap(), ExporterKind::Console);
/// assert!("zipkin".parse::<ExporterKind>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExporterKind {
    /// OTLP to a collector (the default).
    #[default]
    Otlp,
    /// Compact JSONL, one object per line, to stdout or a file.
    Console,
}

impl ExporterKind {
    /// The name used in configuration (`otlp`, `console`).
    pub fn as_str(self) -> &'static str {
        match self {
            ExporterKind::Otlp => "otlp",
            ExporterKind::Console => "console",
        }
    }
}

impl fmt::Display for ExporterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExporterKind {
    type Err = LensError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "otlp" => Ok(ExporterKind::Otlp),
            "console" => Ok(ExporterKind::Console),
            _ => Err(LensError::UnknownExporter {
                var: "exporter".into(),
                value: crate::config::env::shown(s),
            }),
        }
    }
}

/// The configuration of one process, as the Python `NemoLensConfig`.
///
/// Read it from the environment with [`LensConfig::from_env`] /
/// [`LensConfig::from_env_with_fallback`], or start from [`LensConfig::default`] and use the
/// `with_*` setters. The fields are public to read and to change; the struct is
/// `#[non_exhaustive]`, so a field added later is not a breaking change (build it with the
/// setters, not a struct literal).
///
/// ```
/// use nemo_lens::{ExporterKind, LensConfig};
/// let cfg = LensConfig::default()
///     .with_enabled(true)
///     .with_export_strategy("all_ranks")
///     .with_exporter(ExporterKind::Console);
/// assert_eq!(cfg.service_name, "nemo");
/// assert_eq!(cfg.span_groups, "default");
/// assert_eq!(cfg.export_strategy, "all_ranks");
/// ```
///
/// # Parsing rules
///
/// The fields, defaults, variable names and parsing rules are those of the Python
/// `NemoLensConfig` (NeMo Lens 0.1.0 / main), so one set of environment variables configures a
/// job that mixes Python and Rust processes:
///
/// * every key is read from `<PREFIX>_<KEY>`, stripped of surrounding white space; an empty value
///   means *unset*; with a fallback prefix (`MEGATRON_OTEL` falling back to `NEMO_LENS`) an unset
///   primary variable is looked up under the fallback prefix;
/// * booleans accept `1/0`, `true/false`, `yes/no`, `on/off` in any case;
/// * `service_name` comes from the bare `OTEL_SERVICE_NAME`, `wandb_*` from the bare
///   `WANDB_ENTITY` / `WANDB_PROJECT`, and the user from `<PREFIX>_USER_ID`.
///
/// Unlike Python, a bad value is rejected when the environment is read (a typed [`LensError`]
/// that names the variable), so a job fails at start-up rather than on its exporting rank only.
/// The exception is what only the exporting rank uses: an unknown `<P>_EXPORTER` leaves
/// `exporter` at its default here and fails [`Telemetry::builder`](crate::Telemetry::builder)'s
/// `build` on the exporting rank alone (the OTLP protocol, endpoint and certificate variables
/// are likewise read there only).
///
/// ```
/// use nemo_lens::{ExporterKind, LensConfig};
/// let env = [("NEMO_LENS_ENABLED", "yes"), ("NEMO_LENS_EXPORTER", "console")];
/// let cfg = LensConfig::from_lookup("NEMO_LENS", None, |k| {
///     env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
/// })
/// .unwrap();
/// assert!(cfg.enabled);
/// assert_eq!(cfg.exporter, ExporterKind::Console);
/// assert_eq!(cfg.export_strategy, "single_rank");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LensConfig {
    /// Master switch (`<P>_ENABLED`, default `false`).
    pub enabled: bool,
    /// `service.name` (bare `OTEL_SERVICE_NAME`, default `nemo`).
    pub service_name: String,
    /// Name of the export strategy (`<P>_EXPORT_STRATEGY`, default `single_rank`); looked up in
    /// the [strategy registry](crate::strategy) at setup.
    pub export_strategy: String,
    /// Rank that exports under `single_rank` (`<P>_EXPORT_RANK`, default `-1` = last rank).
    pub export_rank: i64,
    /// Fraction of ranks that export under `sampled` and under the rank sampler
    /// (`<P>_EXPORT_SAMPLE_RATE`, default `1.0`, must lie in `[0, 1]`).
    pub export_sample_rate: f64,
    /// Apply rank-aware sampling (`<P>_SAMPLER_ENABLED`, default `false`).
    pub sampler_enabled: bool,
    /// Build the trace pipeline (`<P>_TRACES_ENABLED`, default `true`).
    pub traces_enabled: bool,
    /// Build the metric pipeline (`<P>_METRICS_ENABLED`, default `true`).
    pub metrics_enabled: bool,
    /// Build the log pipeline (`<P>_LOGS_ENABLED`, default `false`).
    pub logs_enabled: bool,
    /// Rust only: the least severe `tracing` level bridged into log records
    /// (`<P>_LOGS_LEVEL`, default `info`, as the Python `setup_logging_bridge(level=INFO)`).
    /// Accepts `trace`, `debug`, `info`, `warn`/`warning`, `error` (any case) and `off`.
    pub logs_level: tracing_core::LevelFilter,
    /// Comma-separated, case-insensitive span groups and presets (`<P>_SPAN_GROUPS`, default
    /// `default`).
    pub span_groups: String,
    /// Rust only: span groups whose spans each start a trace of their own, linked to the span
    /// that would have been their parent (`<P>_TRACE_PER`, comma-separated, case-insensitive;
    /// default empty: off, as in Python). `step` gives one small trace per step per rank
    /// instead of one job-long trace that trace stores refuse past their size limits (see
    /// `docs/at-scale.md`).
    pub trace_per: String,
    /// Exporter (`<P>_EXPORTER`, default `otlp`).
    pub exporter: ExporterKind,
    /// Run id (`<P>_RUN_ID`); empty means `SLURM_JOB_ID`, else 12 random hex characters, chosen
    /// at setup.
    pub run_id: String,
    /// `nemo.user.id` (`<P>_USER_ID`).
    pub user: String,
    /// `wandb.entity` (bare `WANDB_ENTITY`).
    pub wandb_entity: String,
    /// `wandb.project` (bare `WANDB_PROJECT`).
    pub wandb_project: String,
    /// Rust only: with `exporter = console`, write JSONL to this file instead of stdout
    /// (`<P>_CONSOLE_PATH`); `{rank}` is replaced by the rank, so ranks never interleave.
    pub console_path: Option<String>,
    /// Rust only: the flight recorder, watchdog and control file (`<P>_FLIGHT_RECORDER`,
    /// `<P>_FLIGHT_RECORDER_GROUPS`, `<P>_DUMP_DIR`, `<P>_HANG_TIMEOUT`, `<P>_CONTROL_FILE`); see
    /// [`crate::flight_recorder`].
    pub flight_recorder: crate::config::flight_recorder::RecorderConfig,
    /// Rust only: the exporting rank's resource names its GPU, read through NVML (`nv.gpu.*`;
    /// `<P>_DETECT_GPU`, default `false`; feature `nvml`).
    pub detect_gpu: bool,
    /// Rust only: spans are also NVTX ranges, on every enabled rank (`<P>_NVTX`, default
    /// `false`; feature `nvtx`; [`Telemetry::nvtx_layer`](crate::Telemetry::nvtx_layer)).
    pub nvtx: bool,
    /// Which variables the fields validated at setup were read from (for error messages);
    /// empty for a config built in code.
    pub(crate) sources: ConfigSources,
}

/// The environment variables that setup-validated fields were read from, so that an error at
/// setup names the variable to fix.
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct ConfigSources {
    /// The variable `export_strategy` came from.
    pub(crate) export_strategy: Option<String>,
    /// The variable `span_groups` came from.
    pub(crate) span_groups: Option<String>,
    /// The variable `trace_per` came from.
    pub(crate) trace_per: Option<String>,
    /// An exporter name that is not one (variable, value): an error on the exporting rank only,
    /// the one rank that builds an exporter.
    pub(crate) bad_exporter: Option<(String, String)>,
}

/// Two configurations are equal when their settings are, wherever they were read from.
impl PartialEq for LensConfig {
    fn eq(&self, other: &Self) -> bool {
        let LensConfig {
            enabled,
            service_name,
            export_strategy,
            export_rank,
            export_sample_rate,
            sampler_enabled,
            traces_enabled,
            metrics_enabled,
            logs_enabled,
            logs_level,
            span_groups,
            trace_per,
            exporter,
            run_id,
            user,
            wandb_entity,
            wandb_project,
            console_path,
            flight_recorder,
            detect_gpu,
            nvtx,
            sources: _,
        } = self;
        *enabled == other.enabled
            && *service_name == other.service_name
            && *export_strategy == other.export_strategy
            && *export_rank == other.export_rank
            && *export_sample_rate == other.export_sample_rate
            && *sampler_enabled == other.sampler_enabled
            && *traces_enabled == other.traces_enabled
            && *metrics_enabled == other.metrics_enabled
            && *logs_enabled == other.logs_enabled
            && *logs_level == other.logs_level
            && *span_groups == other.span_groups
            && *trace_per == other.trace_per
            && *exporter == other.exporter
            && *run_id == other.run_id
            && *user == other.user
            && *wandb_entity == other.wandb_entity
            && *wandb_project == other.wandb_project
            && *console_path == other.console_path
            && *flight_recorder == other.flight_recorder
            && *detect_gpu == other.detect_gpu
            && *nvtx == other.nvtx
    }
}

impl Default for LensConfig {
    fn default() -> Self {
        LensConfig {
            enabled: false,
            service_name: "nemo".into(),
            export_strategy: "single_rank".into(),
            export_rank: -1,
            export_sample_rate: 1.0,
            sampler_enabled: false,
            traces_enabled: true,
            metrics_enabled: true,
            logs_enabled: false,
            logs_level: tracing_core::LevelFilter::INFO,
            span_groups: "default".into(),
            trace_per: String::new(),
            exporter: ExporterKind::Otlp,
            run_id: String::new(),
            user: String::new(),
            wandb_entity: String::new(),
            wandb_project: String::new(),
            console_path: None,
            flight_recorder: Default::default(),
            detect_gpu: false,
            nvtx: false,
            sources: ConfigSources::default(),
        }
    }
}

/// Checks a sample rate: in `[0, 1]` and not NaN.
pub(crate) fn check_rate(var: &str, rate: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&rate) {
        Ok(rate)
    } else {
        Err(LensError::SampleRateOutOfRange {
            var: var.to_string(),
            value: rate,
        })
    }
}

impl LensConfig {
    // Setters, one per field, for a config built in code (`LensConfig` is `#[non_exhaustive]`).

    /// Sets the master switch (`<P>_ENABLED`).
    #[must_use]
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Sets `service.name` (`OTEL_SERVICE_NAME`).
    #[must_use]
    pub fn with_service_name(mut self, service_name: impl Into<String>) -> Self {
        self.service_name = service_name.into();
        self
    }

    /// Sets the export strategy's name (`<P>_EXPORT_STRATEGY`).
    #[must_use]
    pub fn with_export_strategy(mut self, export_strategy: impl Into<String>) -> Self {
        self.export_strategy = export_strategy.into();
        self.sources.export_strategy = None;
        self
    }

    /// Sets the rank that exports under `single_rank`; `-1` = last (`<P>_EXPORT_RANK`).
    #[must_use]
    pub fn with_export_rank(mut self, export_rank: i64) -> Self {
        self.export_rank = export_rank;
        self
    }

    /// Sets the fraction of ranks that export under `sampled` (`<P>_EXPORT_SAMPLE_RATE`); checked at setup.
    #[must_use]
    pub fn with_export_sample_rate(mut self, export_sample_rate: f64) -> Self {
        self.export_sample_rate = export_sample_rate;
        self
    }

    /// Sets rank-aware sampling (`<P>_SAMPLER_ENABLED`).
    #[must_use]
    pub fn with_sampler_enabled(mut self, sampler_enabled: bool) -> Self {
        self.sampler_enabled = sampler_enabled;
        self
    }

    /// Sets the trace pipeline (`<P>_TRACES_ENABLED`).
    #[must_use]
    pub fn with_traces_enabled(mut self, traces_enabled: bool) -> Self {
        self.traces_enabled = traces_enabled;
        self
    }

    /// Sets the metric pipeline (`<P>_METRICS_ENABLED`).
    #[must_use]
    pub fn with_metrics_enabled(mut self, metrics_enabled: bool) -> Self {
        self.metrics_enabled = metrics_enabled;
        self
    }

    /// Sets the log bridge (`<P>_LOGS_ENABLED`).
    #[must_use]
    pub fn with_logs_enabled(mut self, logs_enabled: bool) -> Self {
        self.logs_enabled = logs_enabled;
        self
    }

    /// Sets the least severe level bridged into log records (`<P>_LOGS_LEVEL`).
    #[must_use]
    pub fn with_logs_level(mut self, logs_level: tracing_core::LevelFilter) -> Self {
        self.logs_level = logs_level;
        self
    }

    /// Sets the span-group spec (`<P>_SPAN_GROUPS`).
    #[must_use]
    pub fn with_span_groups(mut self, span_groups: impl Into<String>) -> Self {
        self.span_groups = span_groups.into();
        self.sources.span_groups = None;
        self
    }

    /// Sets the span groups whose spans each start a trace of their own (`<P>_TRACE_PER`),
    /// linked to the span that would have been their parent.
    ///
    /// ```
    /// use nemo_lens::LensConfig;
    /// let config = LensConfig::default().with_enabled(true).with_trace_per("step");
    /// assert_eq!(config.trace_per, "step");
    /// ```
    #[must_use]
    pub fn with_trace_per(mut self, trace_per: impl Into<String>) -> Self {
        self.trace_per = trace_per.into();
        self.sources.trace_per = None;
        self
    }

    /// Sets the exporter (`<P>_EXPORTER`).
    #[must_use]
    pub fn with_exporter(mut self, exporter: ExporterKind) -> Self {
        self.exporter = exporter;
        self.sources.bad_exporter = None;
        self
    }

    /// Sets the run id (`<P>_RUN_ID`); empty = chosen at setup.
    #[must_use]
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = run_id.into();
        self
    }

    /// Sets `nemo.user.id` (`<P>_USER_ID`).
    #[must_use]
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = user.into();
        self
    }

    /// Sets `wandb.entity` (`WANDB_ENTITY`).
    #[must_use]
    pub fn with_wandb_entity(mut self, wandb_entity: impl Into<String>) -> Self {
        self.wandb_entity = wandb_entity.into();
        self
    }

    /// Sets `wandb.project` (`WANDB_PROJECT`).
    #[must_use]
    pub fn with_wandb_project(mut self, wandb_project: impl Into<String>) -> Self {
        self.wandb_project = wandb_project.into();
        self
    }

    /// Sets the flight recorder's configuration (`<P>_FLIGHT_RECORDER*`, `<P>_DUMP_DIR`,
    /// `<P>_HANG_TIMEOUT`, `<P>_CONTROL_FILE`).
    #[must_use]
    pub fn with_flight_recorder(
        mut self,
        flight_recorder: crate::config::flight_recorder::RecorderConfig,
    ) -> Self {
        self.flight_recorder = flight_recorder;
        self
    }

    /// Sets GPU identity detection (`<P>_DETECT_GPU`; feature `nvml`).
    ///
    /// ```
    /// let config = nemo_lens::LensConfig::default().with_detect_gpu(true).with_nvtx(true);
    /// assert!(config.detect_gpu && config.nvtx);
    /// ```
    #[must_use]
    pub fn with_detect_gpu(mut self, detect_gpu: bool) -> Self {
        self.detect_gpu = detect_gpu;
        self
    }

    /// Sets NVTX ranges (`<P>_NVTX`; feature `nvtx`).
    #[must_use]
    pub fn with_nvtx(mut self, nvtx: bool) -> Self {
        self.nvtx = nvtx;
        self
    }

    /// Sets the JSONL file of the console exporter (`<P>_CONSOLE_PATH`; `{rank}` is replaced by
    /// the rank); `None` = stdout.
    #[must_use]
    pub fn with_console_path(mut self, console_path: Option<String>) -> Self {
        self.console_path = console_path;
        self
    }

    /// Checks the invariants a directly constructed config may break (the sample rate range).
    ///
    /// ```
    /// use nemo_lens::LensConfig;
    /// let bad = LensConfig::default().with_export_sample_rate(1.5);
    /// assert!(bad.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        check_rate("export_sample_rate", self.export_sample_rate)?;
        Ok(())
    }

    /// The variable (or field) the export strategy came from, for error messages.
    pub(crate) fn strategy_origin(&self) -> String {
        self.sources
            .export_strategy
            .clone()
            .unwrap_or_else(|| "export_strategy".into())
    }

    /// The variable (or field) the trace-per spec came from, for warnings.
    pub(crate) fn trace_per_origin(&self) -> String {
        self.sources
            .trace_per
            .clone()
            .unwrap_or_else(|| "trace_per".into())
    }

    /// The variable (or field) the span-group spec came from, for error messages.
    pub(crate) fn span_groups_origin(&self) -> String {
        self.sources
            .span_groups
            .clone()
            .unwrap_or_else(|| "span_groups".into())
    }
}
