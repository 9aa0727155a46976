//! `nemo-lens emit-spans`: completed spans from epoch-second intervals, as Python NeMo Lens's
//! command of the same name.
//!
//! Each `--span NAME,START,END[,PARENT]` becomes one span, emitted with
//! [`nemo_lens::EmitSpan`] (so an end before the start is clamped, warned about and tagged
//! `inverted.*`). Times are decimals read as Python's `Decimal` (`1e3`, `.5`, `1_000`).
//! Parents may be listed before or after their children; intervals need not nest. The input is
//! checked as a whole first, with Python's messages on stderr: a malformed `--span`
//! (`error: skipping 'x': ...`: field count, empty name, missing, unparseable or non-finite
//! timestamp), duplicate names, missing or duplicated parents, parent cycles
//! (`error: invalid span ...`). Any problem emits nothing: `nothing emitted: invalid span input`,
//! exit 1. A start or end OTLP cannot carry (before 1970, after 2554-07-21: epoch milliseconds
//! given as seconds) is refused naming the span, exit 2, nothing emitted. Spans are emitted
//! parents first (in rounds, each in input order, ordered in linear time); on success stderr
//! has one line per span, `  NAME (34 wide) DURATION (8.3f)s[  -> PARENT]`.
//!
//! Export goes through the normal configuration: [`LensConfig::from_env`] (so
//! `NEMO_LENS_EXPORTER`, `NEMO_LENS_CONSOLE_PATH`, `OTEL_EXPORTER_OTLP_*`,
//! `OTEL_RESOURCE_ATTRIBUTES` apply) with telemetry switched on for this process regardless of
//! `NEMO_LENS_ENABLED`, export strategy `all_ranks`, no metrics, and `service.name` from
//! `--service`. Spans go to the exporter in chunks of half the span queue (at most 512), each
//! flushed before the next, so any number of spans fits the queue and none is dropped for
//! room. A setup failure (`error: ...`), an export failure (`error: failed to export
//! spans`) or a flush timeout (`error: timed out while flushing spans`) exits 2.
//!
//! # Identity
//!
//! The spans say where in the job they come from only as far as this process knows it:
//!
//! | attribute | from, first found |
//! |---|---|
//! | `nv.dl.rank`, `dl.rank` | `--rank`; the launcher's rank variable: `RANK` (torchrun), `SLURM_PROCID` (srun), `OMPI_COMM_WORLD_RANK` (mpirun); `nv.dl.rank` in `OTEL_RESOURCE_ATTRIBUTES` (as the library reads it) |
//! | `nv.dl.world_size`, `dl.world_size` | `--world-size`; `WORLD_SIZE`, `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE`; `nv.dl.world_size` in `OTEL_RESOURCE_ATTRIBUTES` |
//! | `nemo.run.id` | `--run-id`; `NEMO_LENS_RUN_ID` (as the library reads it); `SLURM_JOB_ID` (the library's fallback) |
//! | `service.instance.id` | `{run id}-rank{rank}` when both are known (as the library derives it) |
//!
//! What is not known is not stamped: no rank nor `service.instance.id` without a rank, no
//! world size without one, no run id without one (the library would draw a random run id that
//! no rank of the job shares). The job's identity (Slurm attributes, `nv.dl.job.uuid`,
//! `nv.dl.run.uuid`) is the library's, and the other values of `OTEL_RESOURCE_ATTRIBUTES` are
//! inherited. A launcher variable that is set but not a non-negative integer, or a
//! rank not below the world size, is an error naming the variable (exit 2). Blank and
//! non-UTF-8 variables count as unset, as in the library.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::anyhow;
use nemo_lens::EmitSpan;
use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt};

use crate::Failure;
use spans::{duration, out_of_range, plan};

mod spans;

const INVALID: &str = "nothing emitted: invalid span input";
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// The span queue's size when `OTEL_BSP_MAX_QUEUE_SIZE` does not say (the library's default).
const DEFAULT_QUEUE_SIZE: usize = 2048;
/// Spans handed to the exporter between two flushes, at most: well within the queue, which
/// drops what does not fit.
const MAX_SPANS_PER_FLUSH: usize = 512;

/// Rank and world-size variables of the launchers, in order of preference.
const LAUNCHERS: [(&str, &str); 3] = [
    ("RANK", "WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
];

/// `--rank`, `--world-size`, `--run-id` (see the module documentation for the defaults).
#[derive(Debug, Default, clap::Args)]
pub struct IdentityArgs {
    /// Rank stamped as `dl.rank` [default: RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK; none:
    /// no dl.rank and no service.instance.id].
    #[arg(long, value_name = "N")]
    pub rank: Option<u32>,
    /// World size stamped as `dl.world_size` [default: WORLD_SIZE, SLURM_NTASKS or
    /// OMPI_COMM_WORLD_SIZE; none: no dl.world_size].
    #[arg(long, value_name = "N")]
    pub world_size: Option<u32>,
    /// Run id stamped as `nemo.run.id` [default: NEMO_LENS_RUN_ID, then SLURM_JOB_ID; none: no
    /// run id].
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
}

/// Where a value of the identity came from, for the stderr summary.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found<T> {
    value: T,
    source: String,
}

/// The identity of the emitted spans.
#[derive(Debug, PartialEq, Eq)]
struct Identity {
    rank: Option<Found<u32>>,
    world_size: Option<Found<u32>>,
    run_id: Option<Found<String>>,
}

/// A variable read like the library reads them: blank and non-UTF-8 mean unset.
fn var(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn parse_count(name: &str, value: &str) -> Result<u32, String> {
    value.parse().map_err(|_| {
        format!(
            "{name}={value:?} is not a valid value: expected a non-negative integer \
             (or pass --rank / --world-size)"
        )
    })
}

/// Resolves the identity from the flags, then the environment (see the module documentation).
fn identity(
    args: &IdentityArgs,
    config: &LensConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Identity, String> {
    let from_env = |pick: fn(&(&'static str, &'static str)) -> &'static str| {
        LAUNCHERS.iter().map(pick).find_map(|name| {
            var(lookup, name).map(|v| {
                parse_count(name, &v).map(|value| Found {
                    value,
                    source: name.to_owned(),
                })
            })
        })
    };
    let rank = match args.rank {
        Some(value) => Some(Found {
            value,
            source: "--rank".into(),
        }),
        None => from_env(|l| l.0).transpose()?,
    };
    let world_size = match args.world_size {
        Some(value) => Some(Found {
            value,
            source: "--world-size".into(),
        }),
        None => from_env(|l| l.1).transpose()?,
    };
    if let (Some(r), Some(w)) = (&rank, &world_size)
        && r.value >= w.value
    {
        return Err(format!(
            "rank {} ({}) must be below the world size {} ({})",
            r.value, r.source, w.value, w.source
        ));
    }
    let run_id = match args.run_id.as_deref().map(str::trim) {
        Some("") => return Err("--run-id must not be empty".into()),
        Some(id) => Some(Found {
            value: id.to_owned(),
            source: "--run-id".into(),
        }),
        None if !config.identity.run_id.is_empty() => Some(Found {
            value: config.identity.run_id.clone(),
            source: "NEMO_LENS_RUN_ID".into(),
        }),
        None => var(lookup, "SLURM_JOB_ID").map(|value| Found {
            value,
            source: "SLURM_JOB_ID".into(),
        }),
    };
    Ok(Identity {
        rank,
        world_size,
        run_id,
    })
}

/// Runs `nemo-lens emit-spans`.
pub fn run(service: &str, args: &[String], identity_args: &IdentityArgs) -> Result<(), Failure> {
    let specs = match plan(args) {
        Ok(specs) => specs,
        Err(problems) => {
            for p in &problems {
                eprintln!("error: {p}");
            }
            // Python's last line, without the `error: ` prefix `main` would add; nothing was
            // set up, so nothing needs to be flushed.
            eprintln!("{INVALID}");
            std::process::exit(1);
        }
    };

    out_of_range(&specs).map_err(Failure::setup)?;

    let mut config = LensConfig::from_env().map_err(|e| Failure::setup(anyhow!(e)))?;
    config.enabled = true;
    config.traces_enabled = true;
    config.metrics_enabled = false;
    config.export.sampler = false;
    config.export.strategy = "all_ranks".into();
    config.identity.service_name = service.to_owned();
    let identity = identity(identity_args, &config, &process_env)
        .map_err(|e| Failure::setup(anyhow!(e).context("cannot tell the spans' identity")))?;
    config.identity.run_id = identity
        .run_id
        .as_ref()
        .map_or_else(String::new, |f| f.value.clone());
    // What the tool was not told it does not know: no random run id, no guessed rank.
    let place = match &identity.rank {
        Some(r) => Place::rank(r.value),
        None => Place::unknown(),
    }
    .of(identity.world_size.as_ref().map(|w| w.value));
    let telemetry = Telemetry::builder(config)
        .place(place)
        .random_run_id(false)
        .build()
        .map_err(|e| Failure::setup(anyhow!(e)))?;
    let tracer = telemetry.tracer();

    let mut contexts: HashMap<&str, SpanContext> = HashMap::new();
    let per_flush = spans_per_flush(&process_env);
    for (i, s) in specs.iter().enumerate() {
        // A batch tool waits for the exporter rather than letting the queue drop spans.
        if i > 0 && i % per_flush == 0 {
            telemetry.force_flush().map_err(|e| {
                Failure::setup(anyhow!(e).context(format!(
                    "failed to export spans ({i} of {} handed over)",
                    specs.len()
                )))
            })?;
        }
        let parent = match s.parent.as_deref().and_then(|p| contexts.get(p)) {
            Some(sc) => Context::new().with_remote_span_context(sc.clone()),
            None => Context::new(),
        };
        let emitted = EmitSpan::new(s.name.clone(), s.start.clone(), s.end.clone())
            .parent(&parent)
            .emit(&tracer)
            .map_err(|e| Failure::setup(anyhow!(e).context(format!("span {:?}", s.name))))?;
        if let Some(sc) = emitted {
            contexts.insert(&s.name, sc);
        }
    }
    let flushed = telemetry.force_flush();
    let dropped = telemetry.stats();
    let shut = telemetry.shutdown(FLUSH_TIMEOUT);
    match flushed {
        Err(e) if e.to_string().contains("timed out") => {
            return Err(Failure::setup(
                anyhow!(e).context("timed out while flushing spans"),
            ));
        }
        Err(e) => return Err(Failure::setup(anyhow!(e).context("failed to export spans"))),
        Ok(()) if dropped.dropped_spans > 0 => {
            return Err(Failure::setup(anyhow!(
                "failed to export spans: {} span(s) dropped",
                dropped.dropped_spans
            )));
        }
        Ok(()) => {}
    }
    shut.map_err(|e| Failure::setup(anyhow!(e).context("failed to export spans")))?;

    for s in &specs {
        eprintln!(
            "  {:<34} {}s{}",
            s.name,
            duration(s.start_ns, s.end_ns),
            s.parent
                .as_deref()
                .map_or_else(String::new, |p| format!("  -> {p}"))
        );
    }
    Ok(())
}

/// How many spans go to the exporter between two flushes: half the span queue
/// (`OTEL_BSP_MAX_QUEUE_SIZE`, read as the library reads it), at most [`MAX_SPANS_PER_FLUSH`].
fn spans_per_flush(lookup: &dyn Fn(&str) -> Option<String>) -> usize {
    let queue = var(lookup, "OTEL_BSP_MAX_QUEUE_SIZE")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_QUEUE_SIZE);
    (queue / 2).clamp(1, MAX_SPANS_PER_FLUSH)
}

/// One variable of the process environment; non-UTF-8 values count as unset, as in the library.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(args: &IdentityArgs, env: &[(&str, &str)]) -> Result<Identity, String> {
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        identity(args, &LensConfig::default(), &lookup)
    }

    #[test]
    fn identity_comes_from_flags_then_launchers_and_is_never_made_up() {
        let none = resolve(&IdentityArgs::default(), &[("RANK", "  ")]).unwrap();
        assert_eq!(
            (none.rank, none.world_size, none.run_id),
            (None, None, None)
        );

        let slurm = resolve(
            &IdentityArgs::default(),
            &[
                ("SLURM_PROCID", "3"),
                ("SLURM_NTASKS", "8"),
                ("SLURM_JOB_ID", "77"),
            ],
        )
        .unwrap();
        assert_eq!(slurm.rank.unwrap().value, 3);
        assert_eq!(slurm.world_size.unwrap().source, "SLURM_NTASKS");
        assert_eq!(slurm.run_id.unwrap().value, "77");

        // torchrun's variables come before SLURM's; flags before both.
        let env = [("RANK", "1"), ("WORLD_SIZE", "2"), ("SLURM_PROCID", "5")];
        assert_eq!(
            resolve(&IdentityArgs::default(), &env)
                .unwrap()
                .rank
                .unwrap()
                .value,
            1
        );
        let flags = IdentityArgs {
            rank: Some(0),
            world_size: Some(4),
            run_id: Some("exp".into()),
        };
        let id = resolve(&flags, &env).unwrap();
        assert_eq!(id.rank.unwrap().source, "--rank");
        assert_eq!(id.run_id.unwrap().value, "exp");
    }

    #[test]
    fn bad_launcher_values_name_the_variable() {
        let err = resolve(&IdentityArgs::default(), &[("SLURM_PROCID", "x3")]).unwrap_err();
        assert!(err.contains("SLURM_PROCID=\"x3\""), "{err}");
        let err = resolve(
            &IdentityArgs::default(),
            &[("RANK", "4"), ("WORLD_SIZE", "4")],
        )
        .unwrap_err();
        assert!(
            err.contains("rank 4 (RANK) must be below the world size 4 (WORLD_SIZE)"),
            "{err}"
        );
    }

    #[test]
    fn spans_per_flush_stay_within_the_queue() {
        let with =
            |v: &'static str| move |k: &str| (k == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| v.to_owned());
        assert_eq!(spans_per_flush(&|_| None), 512);
        assert_eq!(spans_per_flush(&with("100")), 50);
        assert_eq!(spans_per_flush(&with("1")), 1);
        assert_eq!(spans_per_flush(&with("junk")), 512);
    }
}
