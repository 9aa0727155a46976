//! Reading the environment: one lookup, one set of parsers, one error style.
//!
//! Every variable nemo-lens reads (`NEMO_LENS_*`, `OTEL_*`, `LOCAL_RANK`, `SLURM_*`, …) goes
//! through an [`Env`]: the process environment, or the closure given to
//! [`TelemetryBuilder::env_lookup`](crate::TelemetryBuilder::env_lookup). The rules are the
//! Python library's:
//!
//! * a value is stripped of surrounding white space, and an empty value means *unset*;
//! * a value that does not parse is a typed [`LensError`] naming the variable, the value (cut
//!   by [`shown`]) and what would have been accepted.

use std::time::Duration;

use crate::error::{LensError, Result};

pub(crate) use crate::text::shown;

/// Reads one variable from the process environment: `None` when unset or not UTF-8 (a
/// non-UTF-8 value cannot be any value nemo-lens accepts; the variables whose non-UTF-8 value is
/// an error are read with [`process_var_strict`]). The exception is
/// `OTEL_RESOURCE_ATTRIBUTES`, a list: bytes that are not UTF-8 become U+FFFD there, so that
/// one bad segment does not hide the launcher's other attributes.
///
/// A name that cannot be a variable name (empty, or containing `=` or NUL) yields `None`.
pub(crate) fn process_var(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return None;
    }
    match std::env::var(name) {
        Ok(value) => Some(value),
        // The carrier's variable, by name: the carrier module itself reads this one.
        Err(std::env::VarError::NotUnicode(value)) if name == "OTEL_RESOURCE_ATTRIBUTES" => {
            Some(value.to_string_lossy().into_owned())
        }
        Err(_) => None,
    }
}

/// Reads one variable from the process environment: `Ok(None)` when unset, an error naming it
/// when it is not UTF-8.
pub(crate) fn process_var_strict(name: &str) -> Result<Option<String>> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) => v
            .into_string()
            .map(Some)
            .map_err(|v| LensError::NotUnicode {
                var: name.to_string(),
                value: shown(&v.to_string_lossy()),
            }),
    }
}

/// A view of the environment through a lookup function.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Env<'a> {
    /// Reads through `lookup`.
    pub(crate) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Env { lookup }
    }

    /// The stripped value of `var`; `None` when unset or blank.
    pub(crate) fn get(&self, var: &str) -> Option<String> {
        (self.lookup)(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// The raw value of `var`, not stripped (`WANDB_*` are taken as they are, as in Python).
    pub(crate) fn raw(&self, var: &str) -> Option<String> {
        (self.lookup)(var)
    }

    /// Parses `var` with `parse`; `None` from `parse` is an [`LensError::InvalidValue`] that says
    /// `expected`.
    pub(crate) fn parse<T>(
        &self,
        var: &str,
        expected: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        let Some(value) = self.get(var) else {
            return Ok(None);
        };
        match parse(&value) {
            Some(v) => Ok(Some(v)),
            None => Err(invalid(var, &value, expected)),
        }
    }

    /// A positive number of milliseconds (`OTEL_METRIC_EXPORT_INTERVAL`, …).
    pub(crate) fn positive_millis(&self, var: &str) -> Result<Option<Duration>> {
        let Some(value) = self.get(var) else {
            return Ok(None);
        };
        match value.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Some(Duration::from_millis(ms))),
            _ => Err(LensError::InvalidMillis {
                var: var.into(),
                value: shown(&value),
            }),
        }
    }
}

/// The longest string attribute value, in characters, from
/// `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` (unset or
/// blank: no limit). Anything but a non-negative integer is an error naming the variable.
pub(crate) fn value_length_limit(env: Env<'_>) -> Result<Option<usize>> {
    const EXPECTED: &str = "a non-negative integer (characters)";
    for var in [
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    ] {
        if let Some(limit) = env.parse(var, EXPECTED, |v| v.parse::<usize>().ok())? {
            return Ok(Some(limit));
        }
    }
    Ok(None)
}

/// The longest string value of a log record attribute, in characters, from
/// `OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` (as
/// Python's `LogLimits`; unset or blank: no limit).
pub(crate) fn log_value_length_limit(env: Env<'_>) -> Result<Option<usize>> {
    const EXPECTED: &str = "a non-negative integer (characters)";
    for var in [
        "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    ] {
        if let Some(limit) = env.parse(var, EXPECTED, |v| v.parse::<usize>().ok())? {
            return Ok(Some(limit));
        }
    }
    Ok(None)
}

/// The error for a value of `var` outside what it accepts.
pub(crate) fn invalid(var: &str, value: &str, expected: &str) -> LensError {
    LensError::InvalidValue {
        var: var.to_string(),
        value: shown(value),
        expected: expected.to_string(),
    }
}

/// Parses the boolean vocabulary of the Python library: `1/0`, `true/false`, `yes/no`,
/// `on/off`, in any case.
pub(crate) fn parse_bool(var: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(LensError::InvalidBool {
            var: var.to_string(),
            value: shown(value),
        }),
    }
}

/// Parses an integer as Python's `int()` does for plain decimal text (surrounding white space,
/// an optional sign, `_` between digits).
pub(crate) fn parse_int(var: &str, value: &str) -> Result<i64> {
    let err = || LensError::InvalidInt {
        var: var.to_string(),
        value: shown(value),
    };
    let t = value.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return Err(err());
    }
    t.replace('_', "").parse::<i64>().map_err(|_| err())
}

/// Parses a finite float (Python's `float()` also accepts `inf`/`nan`; they are rejected here
/// because no field can use them).
pub(crate) fn parse_float(var: &str, value: &str) -> Result<f64> {
    match value.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(LensError::InvalidFloat {
            var: var.to_string(),
            value: shown(value),
        }),
    }
}

/// Parses a log level threshold: `trace`, `debug`, `info`, `warn` (or Python's `warning`),
/// `error` or `off`, in any case.
pub(crate) fn parse_level(var: &str, value: &str) -> Result<tracing_core::LevelFilter> {
    use tracing_core::LevelFilter;
    Ok(match value.trim().to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::TRACE,
        "debug" => LevelFilter::DEBUG,
        "info" => LevelFilter::INFO,
        "warn" | "warning" => LevelFilter::WARN,
        "error" => LevelFilter::ERROR,
        "off" => LevelFilter::OFF,
        _ => {
            return Err(LensError::InvalidLevel {
                var: var.to_string(),
                value: shown(value),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_follow_python() {
        assert!(parse_bool("V", " ON ").unwrap());
        assert!(!parse_bool("V", "0").unwrap());
        assert!(parse_bool("V", "2").is_err());
    }

    #[test]
    fn integers_follow_python_int() {
        assert_eq!(parse_int("V", " -1 ").unwrap(), -1);
        assert_eq!(parse_int("V", "1_000").unwrap(), 1000);
        for bad in ["1.5", "_1", "1_", "1__0", "", "+", "0x10"] {
            assert!(parse_int("V", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn floats_are_finite() {
        assert_eq!(parse_float("V", "0.25").unwrap(), 0.25);
        assert!(parse_float("V", "nan").is_err());
        assert!(parse_float("V", "inf").is_err());
    }

    #[test]
    fn levels_accept_python_warning() {
        use tracing_core::LevelFilter;
        assert_eq!(parse_level("V", "WARNING").unwrap(), LevelFilter::WARN);
        let err = parse_level("V", "loud").unwrap_err().to_string();
        assert!(err.contains("'debug'"), "{err}");
    }

    #[test]
    fn errors_show_a_readable_part_of_a_huge_value() {
        let huge = "x".repeat(128 * 1024);
        let err = parse_bool("NEMO_LENS_ENABLED", &huge)
            .unwrap_err()
            .to_string();
        assert!(err.contains("NEMO_LENS_ENABLED"));
        assert!(err.len() < 300, "{} bytes", err.len());
        assert!(err.contains('…'));
    }

    #[test]
    fn process_var_reads_the_environment() {
        assert!(process_var("PATH").is_some());
        assert_eq!(process_var("NEMO_LENS_SURELY_UNSET_VARIABLE"), None);
        assert_eq!(process_var("A=B"), None);
        assert_eq!(process_var(""), None);
    }

    #[test]
    fn the_span_value_limit_wins_over_the_general_one() {
        let both = |k: &str| match k {
            "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT" => Some("100".to_string()),
            "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT" => Some(" 8 ".to_string()),
            _ => None,
        };
        assert_eq!(value_length_limit(Env::new(&both)).unwrap(), Some(8));
        assert_eq!(value_length_limit(Env::new(&|_| None)).unwrap(), None);
        let bad = |k: &str| (k == "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT").then(|| "long".to_string());
        let err = value_length_limit(Env::new(&bad)).unwrap_err().to_string();
        assert!(err.contains("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"), "{err}");
    }

    #[test]
    fn blank_is_unset() {
        let lookup = |k: &str| (k == "A").then(|| "  ".to_string());
        let env = Env::new(&lookup);
        assert_eq!(env.get("A"), None);
        assert_eq!(env.positive_millis("A").unwrap(), None);
        let lookup = |_: &str| Some("0".to_string());
        let env = Env::new(&lookup);
        assert!(env.positive_millis("A").is_err());
        assert_eq!(
            env.parse("A", "a count", |v| v.parse::<u32>().ok())
                .unwrap(),
            Some(0)
        );
    }
}
