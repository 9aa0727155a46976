//! Configuration: one [`LensConfig`], read from `NEMO_LENS_*` variables ([`env`] has the
//! parsers every variable goes through), and the resource that says who produced the telemetry
//! ([`resource`]).

pub(crate) mod env;
pub(crate) mod flight_recorder;
pub(crate) mod named_file;
mod read;
pub(crate) mod resource;
mod sections;

pub use sections::{ExportConfig, GroupsConfig, IdentityConfig};

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
/// [`LensConfig::from_env_with_fallback`], or start from [`LensConfig::default`]. The settings
/// are public fields, grouped in sections: [`export`](LensConfig::export) (which ranks export
/// and where to), [`groups`](LensConfig::groups) (which spans record),
/// [`identity`](LensConfig::identity) (service, run, user, W&B) and
/// [`flight_recorder`](LensConfig::flight_recorder), beside the switches of the pipelines and of
/// the GPU. The structs are `#[non_exhaustive]` (a setting added later is not a breaking
/// change), so a config built in code starts from `default()` and sets fields, in place or in
/// one expression with [`LensConfig::with`]:
///
/// ```
/// use nemo_lens::{ExporterKind, LensConfig};
/// let cfg = LensConfig::default().with_enabled(true).with(|c| {
///     c.export.strategy = "all_ranks".into();
///     c.export.exporter = ExporterKind::Console;
/// });
/// assert_eq!(cfg.identity.service_name, "nemo");
/// assert_eq!(cfg.groups.span_groups, "default");
/// assert_eq!(cfg.export.strategy, "all_ranks");
///
/// let mut cfg = LensConfig::default();
/// cfg.metrics_enabled = false;
/// cfg.identity.run_id = "exp-1".into();
/// ```
///
/// # Parsing rules
///
/// The settings, defaults, variable names and parsing rules are those of the Python
/// `NemoLensConfig` (NeMo Lens 0.1.0 / main), so one set of environment variables configures a
/// job that mixes Python and Rust processes:
///
/// * every key is read from `<PREFIX>_<KEY>`, stripped of surrounding white space; an empty value
///   means *unset*; with a fallback prefix (`MEGATRON_OTEL` falling back to `NEMO_LENS`) an unset
///   primary variable is looked up under the fallback prefix;
/// * booleans accept `1/0`, `true/false`, `yes/no`, `on/off` in any case;
/// * `identity.service_name` comes from the bare `OTEL_SERVICE_NAME`, `identity.wandb_*` from
///   the bare `WANDB_ENTITY` / `WANDB_PROJECT`, and the user from `<PREFIX>_USER_ID`.
///
/// Unlike Python, a bad value is rejected when the environment is read (a typed [`LensError`]
/// that names the variable), so a job fails at start-up rather than on its exporting rank only.
/// The exception is what only the exporting rank uses: an unknown `<P>_EXPORTER` leaves
/// `export.exporter` at its default here and fails [`Telemetry::builder`](crate::Telemetry::builder)'s
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
/// assert_eq!(cfg.export.exporter, ExporterKind::Console);
/// assert_eq!(cfg.export.strategy, "single_rank");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LensConfig {
    /// Master switch (`<P>_ENABLED`, default `false`).
    pub enabled: bool,
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
    /// Which ranks export, and where to.
    pub export: ExportConfig,
    /// Which spans record, and which start traces of their own.
    pub groups: GroupsConfig,
    /// The service, run, user and W&B project the resource names.
    pub identity: IdentityConfig,
    /// Rust only: the flight recorder, watchdog and control file (`<P>_FLIGHT_RECORDER`,
    /// `<P>_FLIGHT_RECORDER_GROUPS`, `<P>_DUMP_DIR`, `<P>_HANG_TIMEOUT`, `<P>_CONTROL_FILE`); see
    /// [`crate::flight_recorder`].
    pub flight_recorder: flight_recorder::RecorderConfig,
    /// Rust only: the exporting rank's resource names its GPU, read through NVML (`nv.gpu.*`;
    /// `<P>_DETECT_GPU`, default `false`; feature `nvml`).
    pub detect_gpu: bool,
    /// Rust only: spans are also NVTX ranges, on every enabled rank (`<P>_NVTX`, default
    /// `false`; feature `nvtx`; [`Telemetry::nvtx_layer`](crate::Telemetry::nvtx_layer)).
    pub nvtx: bool,
    /// Which variables the settings validated at setup were read from (for error messages);
    /// empty for a config built in code.
    pub(crate) sources: ConfigSources,
}

/// The environment variables that setup-validated settings were read from, with the value read,
/// so that an error at setup names the variable to fix (and the setting's name once code has
/// changed the value).
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct ConfigSources {
    /// The variable `export.strategy` came from, and its value.
    pub(crate) export_strategy: Option<(String, String)>,
    /// The variable `groups.span_groups` came from, and its value.
    pub(crate) span_groups: Option<(String, String)>,
    /// The variable `groups.trace_per` came from, and its value.
    pub(crate) trace_per: Option<(String, String)>,
    /// The variable `groups.detail_groups` came from, and its value.
    pub(crate) detail_groups: Option<(String, String)>,
    /// The variable `groups.rules` came from, and its value.
    pub(crate) span_group_rules: Option<(String, String)>,
    /// An exporter name that is not one (variable, value): an error on the exporting rank only,
    /// the one rank that builds an exporter, unless code set `export.exporter` since.
    pub(crate) bad_exporter: Option<(String, String)>,
}

/// Two configurations are equal when their settings are, wherever they were read from.
impl PartialEq for LensConfig {
    fn eq(&self, other: &Self) -> bool {
        let LensConfig {
            enabled,
            traces_enabled,
            metrics_enabled,
            logs_enabled,
            logs_level,
            export,
            groups,
            identity,
            flight_recorder,
            detect_gpu,
            nvtx,
            sources: _,
        } = self;
        *enabled == other.enabled
            && *traces_enabled == other.traces_enabled
            && *metrics_enabled == other.metrics_enabled
            && *logs_enabled == other.logs_enabled
            && *logs_level == other.logs_level
            && *export == other.export
            && *groups == other.groups
            && *identity == other.identity
            && *flight_recorder == other.flight_recorder
            && *detect_gpu == other.detect_gpu
            && *nvtx == other.nvtx
    }
}

impl Default for LensConfig {
    fn default() -> Self {
        LensConfig {
            enabled: false,
            traces_enabled: true,
            metrics_enabled: true,
            logs_enabled: false,
            logs_level: tracing_core::LevelFilter::INFO,
            export: ExportConfig::default(),
            groups: GroupsConfig::default(),
            identity: IdentityConfig::default(),
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
    /// A config with `enabled` set (`<P>_ENABLED`), the rest as `self`.
    ///
    /// ```
    /// assert!(nemo_lens::LensConfig::default().with_enabled(true).enabled);
    /// ```
    #[must_use]
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// A config changed by `change`: sets any settings in one expression, where a
    /// `#[non_exhaustive]` struct cannot be written as a literal.
    ///
    /// ```
    /// use nemo_lens::LensConfig;
    /// let cfg = LensConfig::default().with_enabled(true).with(|c| {
    ///     c.export.strategy = "all_ranks".into();
    ///     c.groups.trace_per = "step".into();
    ///     c.metrics_enabled = false;
    /// });
    /// assert_eq!(cfg.groups.trace_per, "step");
    /// assert!(!cfg.metrics_enabled);
    /// ```
    #[must_use]
    pub fn with(mut self, change: impl FnOnce(&mut LensConfig)) -> Self {
        let exporter = self.export.exporter;
        change(&mut self);
        if self.export.exporter != exporter {
            self.sources.bad_exporter = None;
        }
        self
    }

    /// Checks the invariants a directly constructed config may break (the sample rate range).
    ///
    /// ```
    /// use nemo_lens::LensConfig;
    /// let bad = LensConfig::default().with(|c| c.export.sample_rate = 1.5);
    /// assert!(bad.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        check_rate("export.sample_rate", self.export.sample_rate)?;
        Ok(())
    }

    /// The variable (or setting) the export strategy came from, for error messages.
    pub(crate) fn strategy_origin(&self) -> String {
        origin(
            &self.sources.export_strategy,
            &self.export.strategy,
            "export.strategy",
        )
    }

    /// The variable (or setting) the trace-per spec came from, for warnings.
    pub(crate) fn trace_per_origin(&self) -> String {
        origin(
            &self.sources.trace_per,
            &self.groups.trace_per,
            "groups.trace_per",
        )
    }

    /// The variable (or setting) the detail-group spec came from, for warnings.
    pub(crate) fn detail_groups_origin(&self) -> String {
        origin(
            &self.sources.detail_groups,
            &self.groups.detail_groups,
            "groups.detail_groups",
        )
    }

    /// The variable (or setting) the span-group rules came from, for error messages.
    pub(crate) fn span_group_rules_origin(&self) -> String {
        origin(
            &self.sources.span_group_rules,
            &self.groups.rules,
            "groups.rules",
        )
    }

    /// The variable (or setting) the span-group spec came from, for error messages.
    pub(crate) fn span_groups_origin(&self) -> String {
        origin(
            &self.sources.span_groups,
            &self.groups.span_groups,
            "groups.span_groups",
        )
    }
}

/// The variable a value was read from while it still holds that value, else the setting's name.
fn origin(source: &Option<(String, String)>, value: &str, setting: &str) -> String {
    match source {
        Some((var, read)) if read == value => var.clone(),
        _ => setting.to_string(),
    }
}
