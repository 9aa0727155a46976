//! [`RecorderConfig`]: the flight recorder's settings.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{LensError, Result};

/// The most closed spans a recorder keeps (about 25 MB of slots).
pub(crate) const MAX_CAPACITY: usize = 100_000;

/// The recorder's groups when `NEMO_LENS_FLIGHT_RECORDER_GROUPS` is unset.
pub(super) const DEFAULT_GROUPS: &str = "job,step,checkpoint,collective";

/// The watchdog's timeout when `NEMO_LENS_HANG_TIMEOUT` is unset.
pub(super) const DEFAULT_HANG_TIMEOUT: Duration = Duration::from_secs(600);

/// Flight-recorder settings (part of [`LensConfig`](crate::LensConfig)).
///
/// The recorder's settings, read from `NEMO_LENS_*` with the crate's configuration rules
/// (trimmed values, empty means unset, typed errors naming the variable and what it accepts).
///
/// | variable | default | meaning |
/// |---|---|---|
/// | `NEMO_LENS_FLIGHT_RECORDER` | `0` (off) | closed spans kept (ring slots), `0`..=`100000` |
/// | `NEMO_LENS_FLIGHT_RECORDER_GROUPS` | `job,step,checkpoint,collective` | span groups recorded |
/// | `NEMO_LENS_DUMP_DIR` | the working directory | where dumps are written |
/// | `NEMO_LENS_HANG_TIMEOUT` | `600` | seconds without a recorded span closing before the watchdog dumps; `0` = no watchdog |
/// | `NEMO_LENS_CONTROL_FILE` | unset | file re-read on `SIGUSR2` (see [`crate::flight_recorder`]) |
///
/// ```
/// use nemo_lens::LensConfig;
/// let env = [("NEMO_LENS_FLIGHT_RECORDER", "4096"), ("NEMO_LENS_HANG_TIMEOUT", "2.5")];
/// let cfg = LensConfig::from_lookup("NEMO_LENS", None, |k| {
///     env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
/// }).unwrap();
/// assert_eq!(cfg.flight_recorder.capacity, 4096);
/// assert_eq!(cfg.flight_recorder.hang_timeout, Some(std::time::Duration::from_millis(2500)));
///
/// let bad = LensConfig::from_lookup("NEMO_LENS", None, |k| {
///     (k == "NEMO_LENS_FLIGHT_RECORDER").then(|| "lots".to_string())
/// }).unwrap_err().to_string();
/// assert!(bad.contains("NEMO_LENS_FLIGHT_RECORDER") && bad.contains("0 (off) to 100000"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RecorderConfig {
    /// Closed spans kept in the ring (`<P>_FLIGHT_RECORDER`; 0 = the recorder is off).
    pub capacity: usize,
    /// Group spec of the recorded spans (`<P>_FLIGHT_RECORDER_GROUPS`), resolved at setup.
    pub groups: String,
    /// Dump directory (`<P>_DUMP_DIR`; `None` = the working directory).
    pub dump_dir: Option<PathBuf>,
    /// Watchdog timeout (`<P>_HANG_TIMEOUT`, seconds; `None` = no watchdog).
    pub hang_timeout: Option<Duration>,
    /// Control file re-read on `SIGUSR2` (`<P>_CONTROL_FILE`).
    pub control_file: Option<PathBuf>,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            capacity: 0,
            groups: DEFAULT_GROUPS.into(),
            dump_dir: None,
            hang_timeout: Some(DEFAULT_HANG_TIMEOUT),
            control_file: None,
        }
    }
}

impl RecorderConfig {
    /// Whether anything of the recorder runs: a ring (`capacity > 0`) or a control file.
    pub fn is_active(&self) -> bool {
        self.capacity > 0 || self.control_file.is_some()
    }

    /// Reads the keys through `get` (`key` → `(variable, trimmed non-empty value)`); errors name
    /// `primary(key)`.
    pub(crate) fn read(
        mut get: impl FnMut(&str) -> Option<(String, String)>,
        primary: impl Fn(&str) -> String,
    ) -> Result<Self> {
        let mut cfg = RecorderConfig::default();
        if let Some((_, v)) = get("FLIGHT_RECORDER") {
            cfg.capacity = match v.replace('_', "").parse::<usize>() {
                Ok(n) if n <= MAX_CAPACITY => n,
                _ => {
                    return Err(invalid(
                        primary("FLIGHT_RECORDER"),
                        &v,
                        format!("an integer from 0 (off) to {MAX_CAPACITY} (closed spans kept)"),
                    ));
                }
            };
        }
        if let Some((_, v)) = get("FLIGHT_RECORDER_GROUPS") {
            cfg.groups = v;
        }
        if let Some((_, v)) = get("DUMP_DIR") {
            cfg.dump_dir = Some(PathBuf::from(v));
        }
        if let Some((_, v)) = get("HANG_TIMEOUT") {
            cfg.hang_timeout = match v.parse::<f64>() {
                Ok(0.0) => None,
                Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Some(Duration::from_secs_f64(s)),
                _ => {
                    return Err(invalid(
                        primary("HANG_TIMEOUT"),
                        &v,
                        "a number of seconds such as '600' or '2.5' (0 = no watchdog)".into(),
                    ));
                }
            };
        }
        if let Some((_, v)) = get("CONTROL_FILE") {
            cfg.control_file = Some(PathBuf::from(v));
        }
        Ok(cfg)
    }
}

fn invalid(var: String, value: &str, expected: String) -> LensError {
    LensError::InvalidValue {
        var,
        value: value.chars().take(64).collect(),
        expected,
    }
}
