//! `nemo-lens emit-spans`: completed spans from epoch-second intervals.
//!
//! Each `--span NAME,START,END[,PARENT]` becomes one span, emitted with
//! [`nemo_lens::EmitSpan`] (so an end before the start is clamped and tagged
//! `inverted.*`). Parents may be listed before or after their children; intervals need not
//! nest. The input is checked as a whole first (field count, numbers, duplicate names, missing
//! parents, cycles): any problem emits nothing and exits 1.
//!
//! Export goes through the normal configuration: [`LensConfig::from_env`] (so
//! `NEMO_LENS_EXPORTER`, `NEMO_LENS_CONSOLE_PATH`, `OTEL_EXPORTER_OTLP_*`,
//! `OTEL_RESOURCE_ATTRIBUTES` apply) with telemetry switched on for this process regardless of
//! `NEMO_LENS_ENABLED`, export strategy `all_ranks`, no metrics, and `service.name` from
//! `--service`. A setup failure, an export failure or a flush timeout exits 2.
//!
//! # Identity
//!
//! The spans say where in the job they come from only as far as this process knows it:
//!
//! | attribute | from, first found |
//! |---|---|
//! | `dl.rank` | `--rank`; the launcher's rank variable: `RANK` (torchrun), `SLURM_PROCID` (srun), `OMPI_COMM_WORLD_RANK` (mpirun) |
//! | `dl.world_size` | `--world-size`; `WORLD_SIZE`, `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE` |
//! | `nemo.run.id` | `--run-id`; `NEMO_LENS_RUN_ID` (as the library reads it); `SLURM_JOB_ID` (the library's fallback) |
//! | `service.instance.id` | `{run id}-rank{rank}` when both are known (as the library derives it) |
//!
//! What is not known is not stamped: no `dl.rank` nor `service.instance.id` without a rank, no
//! `dl.world_size` without a world size, no run id without one (the library would draw a random
//! run id that no rank of the job shares). Values given in `OTEL_RESOURCE_ATTRIBUTES` are
//! inherited as they are. A launcher variable that is set but not a non-negative integer, or a
//! rank not below the world size, is an error naming the variable (exit 2). Blank and
//! non-UTF-8 variables count as unset, as in the library.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::anyhow;
use nemo_lens::{EmitSpan, EpochSeconds};
use nemo_lens::{LensConfig, Telemetry};
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt};

use crate::Failure;

const INVALID: &str = "nothing emitted: invalid span input";
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

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
        None if !config.run_id.is_empty() => Some(Found {
            value: config.run_id.clone(),
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

impl Identity {
    /// One line for stderr: what was stamped and from where.
    fn describe(&self) -> String {
        fn part<T: std::fmt::Display>(label: &str, f: &Option<Found<T>>) -> String {
            match f {
                Some(f) => format!("{label} {} (from {})", f.value, f.source),
                None => format!("{label} unknown (not stamped)"),
            }
        }
        format!(
            "identity: {}, {}, {}",
            part("rank", &self.rank),
            part("world size", &self.world_size),
            part("run id", &self.run_id)
        )
    }
}

/// One validated `--span`.
#[derive(Debug)]
struct SpanSpec {
    name: String,
    start: EpochSeconds,
    end: EpochSeconds,
    start_ns: i128,
    end_ns: i128,
    parent: Option<String>,
}

fn parse_one(arg: &str) -> Result<SpanSpec, String> {
    let fields: Vec<&str> = arg.split(',').map(str::trim).collect();
    if !(3..=4).contains(&fields.len()) {
        return Err(format!(
            "--span {arg:?}: expected NAME,START,END[,PARENT], got {} field(s)",
            fields.len()
        ));
    }
    let name = fields[0];
    if name.is_empty() {
        return Err(format!("--span {arg:?}: empty NAME"));
    }
    let time = |s: &str, label| -> Result<(EpochSeconds, i128), String> {
        let t: EpochSeconds = s
            .parse()
            .map_err(|e| format!("--span {arg:?}: {label}: {e}"))?;
        let ns = t
            .to_nanos(label)
            .map_err(|e| format!("--span {arg:?}: {e}"))?;
        Ok((t, ns))
    };
    let (start, start_ns) = time(fields[1], "START")?;
    let (end, end_ns) = time(fields[2], "END")?;
    let parent = match fields.get(3) {
        Some(&"") => return Err(format!("--span {arg:?}: empty PARENT")),
        Some(p) => Some((*p).to_owned()),
        None => None,
    };
    Ok(SpanSpec {
        name: name.to_owned(),
        start,
        end,
        start_ns,
        end_ns,
        parent,
    })
}

/// Parses and checks every `--span`; returns them parents-first, or every problem found.
fn plan(args: &[String]) -> Result<Vec<SpanSpec>, Vec<String>> {
    let mut problems = Vec::new();
    let mut specs = Vec::new();
    for arg in args {
        match parse_one(arg) {
            Ok(s) => specs.push(s),
            Err(e) => problems.push(e),
        }
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, s) in specs.iter().enumerate() {
        if index.insert(&s.name, i).is_some() {
            problems.push(format!("duplicate span name {:?}", s.name));
        }
    }
    for s in &specs {
        if let Some(p) = &s.parent
            && !index.contains_key(p.as_str())
        {
            problems.push(format!(
                "span {:?}: parent {p:?} is not one of the --span names",
                s.name
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // Depth-first, parents before children; a parent chain that comes back is a cycle.
    let mut order = Vec::with_capacity(specs.len());
    let mut state = vec![0u8; specs.len()]; // 0 new, 1 on the chain, 2 placed
    for i in 0..specs.len() {
        let mut chain = Vec::new();
        let mut cur = Some(i);
        while let Some(c) = cur {
            match state[c] {
                2 => break,
                1 => {
                    problems.push(format!("parent cycle through span {:?}", specs[c].name));
                    break;
                }
                _ => {
                    state[c] = 1;
                    chain.push(c);
                    cur = specs[c].parent.as_deref().map(|p| index[p]);
                }
            }
        }
        for &c in chain.iter().rev() {
            state[c] = 2;
            order.push(c);
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut slots: Vec<Option<SpanSpec>> = specs.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

fn seconds(ns: i128) -> f64 {
    ns as f64 / 1e9
}

/// Runs `nemo-lens emit-spans`.
pub fn run(service: &str, args: &[String], identity_args: &IdentityArgs) -> Result<(), Failure> {
    let specs = plan(args).map_err(|problems| {
        for p in &problems {
            eprintln!("error: {p}");
        }
        Failure {
            code: 1,
            error: anyhow!(INVALID),
        }
    })?;

    let mut config = LensConfig::from_env()
        .map_err(|e| Failure::setup(anyhow!(e).context("cannot read the configuration")))?;
    config.enabled = true;
    config.traces_enabled = true;
    config.metrics_enabled = false;
    config.sampler_enabled = false;
    config.export_strategy = "all_ranks".into();
    config.service_name = service.to_owned();
    let identity = identity(identity_args, &config, &process_env)
        .map_err(|e| Failure::setup(anyhow!(e).context("cannot tell the spans' identity")))?;
    config.run_id = identity
        .run_id
        .as_ref()
        .map_or_else(String::new, |f| f.value.clone());
    let mut builder = Telemetry::builder(config).no_random_run_id();
    builder = match &identity.rank {
        Some(r) => builder.rank(r.value),
        None => builder.unknown_rank(),
    };
    builder = match &identity.world_size {
        Some(w) => builder.world_size(w.value),
        None => builder.unknown_world_size(),
    };
    let telemetry = builder
        .build()
        .map_err(|e| Failure::setup(anyhow!(e).context("cannot set up the span exporter")))?;
    let tracer = telemetry.tracer();

    let mut contexts: HashMap<&str, SpanContext> = HashMap::new();
    for s in &specs {
        let parent = match s.parent.as_deref().and_then(|p| contexts.get(p)) {
            Some(sc) => Context::new().with_remote_span_context(sc.clone()),
            None => Context::new(),
        };
        let emitted = EmitSpan::new(s.name.clone(), s.start, s.end)
            .parent(&parent)
            .emit(&tracer)
            .map_err(|e| Failure::setup(anyhow!(e).context(format!("span {:?}", s.name))))?;
        if let Some(sc) = emitted {
            contexts.insert(&s.name, sc);
        }
    }
    telemetry
        .force_flush()
        .map_err(|e| Failure::setup(anyhow!(e).context("export failed")))?;
    telemetry
        .shutdown(FLUSH_TIMEOUT)
        .map_err(|e| Failure::setup(anyhow!(e).context("export failed")))?;

    let width = specs.iter().map(|s| s.name.len()).max().unwrap_or(4).max(4);
    eprintln!(
        "{:<width$}  {:>20}  {:>20}  {:>14}  parent",
        "span", "start", "end", "duration_s"
    );
    for s in &specs {
        let end_ns = s.end_ns.max(s.start_ns);
        eprintln!(
            "{:<width$}  {:>20}  {:>20}  {:>14.6}  {}{}",
            s.name,
            s.start,
            s.end,
            seconds(end_ns - s.start_ns),
            s.parent.as_deref().unwrap_or("-"),
            if s.end_ns < s.start_ns {
                "  (end before start: clamped, tagged inverted.*)"
            } else {
                ""
            }
        );
    }
    eprintln!("{}", identity.describe());
    eprintln!("emitted {} span(s) for service {service:?}", specs.len());
    Ok(())
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

    fn names(args: &[&str]) -> Result<Vec<String>, Vec<String>> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        plan(&args).map(|v| v.into_iter().map(|s| s.name).collect())
    }

    #[test]
    fn parents_come_first_whatever_the_order_given() {
        assert_eq!(
            names(&["c,1,2,b", "b,1,2,a", "a,1,2", "d,1,2"]).unwrap(),
            ["a", "b", "c", "d"]
        );
    }

    #[test]
    fn every_problem_is_reported() {
        let problems = names(&["a,1", "b,x,2", "c,1,2,zz", "c,1,2"]).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("got 2 field(s)"));
        assert!(problems[1].contains("START: 'x'"));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("duplicate span name \"c\""))
        );
        assert!(problems.iter().any(|p| p.contains("parent \"zz\"")));
    }
}
