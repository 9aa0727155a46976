//! Reading a [`LensConfig`] from `NEMO_LENS_*` (or another prefix, with a fallback prefix), with
//! the parsing rules of [`env`](super::env).

use super::env::{self, parse_bool, parse_float, parse_int, parse_level};
use super::{DEFAULT_PREFIX, LensConfig, check_rate};
use crate::error::{LensError, Result};

/// The variables of other tools the configuration reads: a non-UTF-8 value means unset.
const BARE_VARS: [&str; 3] = ["OTEL_SERVICE_NAME", "WANDB_ENTITY", "WANDB_PROJECT"];

impl LensConfig {
    /// Reads the configuration from `NEMO_LENS_*` (and the bare `OTEL_SERVICE_NAME`,
    /// `WANDB_ENTITY`, `WANDB_PROJECT`).
    ///
    /// ```
    /// let cfg = nemo_lens::LensConfig::from_env().unwrap();
    /// # let _ = cfg;
    /// ```
    pub fn from_env() -> Result<Self> {
        Self::from_env_with_fallback(DEFAULT_PREFIX, None)
    }

    /// Reads `<prefix>_*`, falling back to `<fallback>_*` for keys the primary prefix leaves
    /// empty, as `from_env(prefix="MEGATRON_OTEL", fallback_prefix="NEMO_LENS")` does.
    ///
    /// ```
    /// let cfg = nemo_lens::LensConfig::from_env_with_fallback("MEGATRON_OTEL", Some("NEMO_LENS")).unwrap();
    /// # let _ = cfg;
    /// ```
    pub fn from_env_with_fallback(prefix: &str, fallback: Option<&str>) -> Result<Self> {
        // Read through `var_os` so that a non-UTF-8 `<prefix>_*` value is an error that names
        // the variable. The bare variables of other tools (`OTEL_SERVICE_NAME`, `WANDB_*`) are
        // not nemo-lens's to reject: a non-UTF-8 one means unset, with a warning.
        let mut first_err = None;
        let cfg = Self::from_lookup(prefix, fallback, |k| match env::process_var_strict(k) {
            Ok(v) => v,
            Err(e) if BARE_VARS.contains(&k) => {
                eprintln!("nemo-lens: warning: {e} Treated as unset.");
                None
            }
            Err(e) => {
                first_err.get_or_insert(e);
                None
            }
        });
        match first_err {
            Some(e) => Err(e),
            None => cfg,
        }
    }

    /// Reads the configuration through `lookup` instead of the process environment (tests, or
    /// configuration forwarded from a launcher). Same rules as [`LensConfig::from_env`].
    pub fn from_lookup(
        prefix: &str,
        fallback: Option<&str>,
        mut lookup: impl FnMut(&str) -> Option<String>,
    ) -> Result<Self> {
        let mut get = |key: &str| -> Option<(String, String)> {
            let primary = format!("{prefix}_{key}");
            if let Some(v) = lookup(&primary).map(|v| v.trim().to_string())
                && !v.is_empty()
            {
                return Some((primary, v));
            }
            let fb = fallback?;
            let name = format!("{fb}_{key}");
            lookup(&name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .map(|v| (name, v))
        };
        // Errors name the primary variable, as the Python library does.
        let primary = |key: &str| format!("{prefix}_{key}");
        let mut cfg = LensConfig::default();
        let mut boolean = |key: &str, slot: &mut bool| -> Result<()> {
            if let Some((_, v)) = get(key) {
                *slot = parse_bool(&primary(key), &v)?;
            }
            Ok(())
        };
        boolean("ENABLED", &mut cfg.enabled)?;
        boolean("SAMPLER_ENABLED", &mut cfg.export.sampler)?;
        boolean("TRACES_ENABLED", &mut cfg.traces_enabled)?;
        boolean("METRICS_ENABLED", &mut cfg.metrics_enabled)?;
        boolean("LOGS_ENABLED", &mut cfg.logs_enabled)?;
        boolean("DETECT_GPU", &mut cfg.detect_gpu)?;
        boolean("NVTX", &mut cfg.nvtx)?;
        boolean("THREAD_ATTRIBUTES", &mut cfg.groups.thread_attributes)?;
        if let Some((var, v)) = get("EXPORT_STRATEGY") {
            cfg.sources.export_strategy = Some((var, v.clone()));
            cfg.export.strategy = v;
        }
        if let Some((_, v)) = get("EXPORT_RANK") {
            cfg.export.rank = export_rank(&primary("EXPORT_RANK"), &v)?;
        }
        if let Some((_, v)) = get("EXPORT_SAMPLE_RATE") {
            let var = primary("EXPORT_SAMPLE_RATE");
            cfg.export.sample_rate = check_rate(&var, parse_float(&var, &v)?)?;
        }
        if let Some((var, v)) = get("SPAN_GROUPS") {
            cfg.sources.span_groups = Some((var, v.clone()));
            cfg.groups.span_groups = v;
        }
        if let Some((var, v)) = get("SPAN_GROUP_RULES") {
            cfg.sources.span_group_rules = Some((var, v.clone()));
            cfg.groups.rules = v;
        }
        if let Some((_, v)) = get("SPAN_LEVEL") {
            cfg.groups.span_level = parse_level(&primary("SPAN_LEVEL"), &v)?;
        }
        if let Some((var, v)) = get("TRACE_PER") {
            cfg.sources.trace_per = Some((var, v.clone()));
            cfg.groups.trace_per = v;
        }
        if let Some((var, v)) = get("DETAIL_GROUPS") {
            cfg.sources.detail_groups = Some((var, v.clone()));
            cfg.groups.detail_groups = v;
        }
        if let Some((_, v)) = get("DETAIL_SLOW_FACTOR") {
            let var = primary("DETAIL_SLOW_FACTOR");
            cfg.groups.detail_slow_factor = match parse_float(&var, &v)? {
                f if (1.0..=1000.0).contains(&f) => f,
                _ => {
                    return Err(env::invalid(
                        &var,
                        &v,
                        "a number from 1 to 1000 such as '2.0'",
                    ));
                }
            };
        }
        if let Some((_, v)) = get("DETAIL_WINDOW") {
            let var = primary("DETAIL_WINDOW");
            cfg.groups.detail_window = match parse_int(&var, &v)? {
                n @ 1..=100_000 => n as usize,
                _ => return Err(env::invalid(&var, &v, "a number of steps from 1 to 100000")),
            };
        }
        if let Some((_, v)) = get("DETAIL_MAX_BYTES") {
            let var = primary("DETAIL_MAX_BYTES");
            cfg.groups.detail_max_bytes = match parse_int(&var, &v)? {
                n @ 1..=0x4000_0000 => n as usize,
                _ => {
                    return Err(env::invalid(
                        &var,
                        &v,
                        "a number of bytes from 1 to 1073741824 such as '4194304'",
                    ));
                }
            };
        }
        if let Some((var, v)) = get("EXPORTER") {
            match v.parse() {
                Ok(kind) => cfg.export.exporter = kind,
                // Only the exporting rank builds an exporter: the error waits for it.
                Err(_) => cfg.sources.bad_exporter = Some((var, env::shown(&v))),
            }
        }
        if let Some((_, v)) = get("RUN_ID") {
            cfg.identity.run_id = v;
        }
        if let Some((_, v)) = get("USER_ID") {
            cfg.identity.user = v;
        }
        if let Some((_, v)) = get("LOGS_LEVEL") {
            cfg.logs_level = parse_level(&primary("LOGS_LEVEL"), &v)?;
        }
        if let Some((_, v)) = get("CONSOLE_PATH") {
            cfg.export.console_path = Some(v);
        }
        cfg.flight_recorder = super::flight_recorder::RecorderConfig::read(&mut get, primary)?;
        if let Some(v) = lookup("OTEL_SERVICE_NAME").map(|v| v.trim().to_string())
            && !v.is_empty()
        {
            cfg.identity.service_name = v;
        }
        // Bare and not stripped, as in the reference.
        cfg.identity.wandb_entity = lookup("WANDB_ENTITY").unwrap_or_default();
        cfg.identity.wandb_project = lookup("WANDB_PROJECT").unwrap_or_default();
        Ok(cfg)
    }
}

/// `<P>_EXPORT_RANK`: a rank, or any negative number (Python's `-1`) for the last rank.
fn export_rank(var: &str, value: &str) -> Result<Option<u32>> {
    let n = parse_int(var, value)?;
    if n < 0 {
        return Ok(None);
    }
    u32::try_from(n)
        .map(Some)
        .map_err(|_| LensError::InvalidValue {
            var: var.to_string(),
            value: env::shown(value),
            expected: format!("a rank up to {}, or -1 for the last rank", u32::MAX),
        })
}
