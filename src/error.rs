//! Typed errors.
//!
//! Every error that comes from configuration names the environment variable (or config field) it
//! came from, the offending value, and what would have been accepted, so that a bad value on one
//! rank of a thousand-rank job is fixed from the first log line.

use std::io;

/// Errors returned by configuration parsing, setup and the registries.
///
/// ```
/// use nemo_lens::LensError;
/// let err = LensError::InvalidBool { var: "NEMO_LENS_ENABLED".into(), value: "maybe".into() };
/// assert!(err.to_string().contains("NEMO_LENS_ENABLED"));
/// assert!(err.to_string().contains("'yes'/'no'"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LensError {
    /// A boolean variable holds something outside the accepted vocabulary.
    #[error(
        "Invalid boolean for {var}: '{value}'. Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
    )]
    InvalidBool {
        /// The variable (primary prefix, as the Python library reports it).
        var: String,
        /// The value found.
        value: String,
    },
    /// An integer variable does not parse as a (signed, 64-bit) integer.
    #[error(
        "Invalid integer for {var}: '{value}'. Expected a base-10 integer such as '-1' or '7'."
    )]
    InvalidInt {
        /// The variable.
        var: String,
        /// The value found.
        value: String,
    },
    /// A float variable does not parse as a finite number.
    #[error("Invalid float for {var}: '{value}'. Expected a finite number such as '0.25'.")]
    InvalidFloat {
        /// The variable.
        var: String,
        /// The value found.
        value: String,
    },
    /// A variable is set but is not valid UTF-8.
    #[error("{var} is not valid UTF-8 (value {value:?}). Expected a UTF-8 string.")]
    NotUnicode {
        /// The variable.
        var: String,
        /// A lossy rendering of the value.
        value: String,
    },
    /// A log level variable names no level.
    #[error(
        "Invalid log level for {var}: '{value}'. Expected one of 'trace', 'debug', 'info', 'warn' (or 'warning'), 'error', 'off'."
    )]
    InvalidLevel {
        /// The variable.
        var: String,
        /// The value found.
        value: String,
    },
    /// A millisecond interval (`OTEL_METRIC_EXPORT_INTERVAL`) is not a positive integer.
    #[error(
        "Invalid value for {var}: '{value}'. Expected a positive integer number of milliseconds such as '10000'."
    )]
    InvalidMillis {
        /// The variable.
        var: String,
        /// The value found.
        value: String,
    },
    /// A variable holds a value outside what it accepts (a count or duration out of range, …).
    #[error("Invalid value for {var}: '{value}'. Expected {expected}.")]
    InvalidValue {
        /// The variable.
        var: String,
        /// The value found (its first 64 characters).
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// `export_sample_rate` outside `[0.0, 1.0]`.
    #[error("export_sample_rate must be in [0.0, 1.0], got {value} (from {var}).")]
    SampleRateOutOfRange {
        /// Where the rate came from (`NEMO_LENS_EXPORT_SAMPLE_RATE` or `export_sample_rate`).
        var: String,
        /// The rate.
        value: f64,
    },
    /// `exporter` is neither `otlp` nor `console`.
    #[error("Unknown exporter type: '{value}' (from {var}). Expected one of: ('otlp', 'console')")]
    UnknownExporter {
        /// Where the value came from.
        var: String,
        /// The value found.
        value: String,
    },
    /// The export strategy is not registered.
    #[error(
        "Unknown export_strategy '{name}' (from {var}). Registered strategies: {registered:?}."
    )]
    UnknownStrategy {
        /// Where the name came from.
        var: String,
        /// The name.
        name: String,
        /// Every registered strategy, sorted.
        registered: Vec<String>,
    },
    /// A span-group spec names something that is neither a group nor a preset.
    #[error("Unknown span group or preset: '{name}' (from {var}). Valid options: {valid:?}")]
    UnknownSpanGroup {
        /// Where the spec came from.
        var: String,
        /// The unknown entry (lower-cased).
        name: String,
        /// Every registered group and preset, sorted.
        valid: Vec<String>,
    },
    /// `LOCAL_RANK` (read by `first_rank_per_node`) is not an integer.
    #[error(
        "Invalid integer for LOCAL_RANK: '{value}'. Expected a base-10 integer (read by the first_rank_per_node strategy)."
    )]
    InvalidLocalRank {
        /// The value found.
        value: String,
    },
    /// A registry was asked to do something it refuses (duplicate name, built-in removal, …).
    #[error("{0}")]
    Registry(String),
    /// An argument is out of its domain (rank ≥ world size, world size 0, …).
    #[error("{0}")]
    InvalidArgument(String),
    /// A second enabled setup in the same process.
    #[error(
        "nemo-lens telemetry has already been initialised for this process. Set it up once at startup \
         (TelemetryBuilder::allow_reinit_for_testing(true) overrides this, for tests only)."
    )]
    AlreadyInitialized,
    /// Flushing or shutting down did not complete cleanly (timeout or exporter error).
    #[error("telemetry flush/shutdown incomplete: {0}")]
    Shutdown(String),
    /// The console exporter could not open its output file.
    #[error("cannot open console output file '{path}' (from {var}): {source}")]
    OutputFile {
        /// The variable or option that named the file.
        var: String,
        /// The resolved path.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A backdated span's time is NaN or infinite ([`crate::EmitSpan`]).
    #[error("{label} must be finite, got {value}")]
    NonFiniteTime {
        /// Which time (`start_epoch_seconds`, `end_epoch_seconds`, …).
        label: &'static str,
        /// The value as given.
        value: String,
    },
    /// The SIGTERM/SIGINT handlers could not be installed.
    #[error("cannot install the nemo-lens signal handlers: {0}")]
    Signals(String),
    /// A certificate variable (`OTEL_EXPORTER_OTLP_CERTIFICATE`, `…_CLIENT_CERTIFICATE`,
    /// `…_CLIENT_KEY`, or a per-signal one) names a file that cannot be used.
    #[error("Invalid {var}: cannot use '{path}': {reason}")]
    Certificate {
        /// The variable that named the file.
        var: String,
        /// The file's path (cut to 64 characters).
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An exporter or provider could not be built.
    #[error("cannot build the {signal} exporter: {message}")]
    Exporter {
        /// `traces`, `metrics` or `logs`.
        signal: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// Shorthand for `Result<T, LensError>`.
pub type Result<T, E = LensError> = std::result::Result<T, E>;
