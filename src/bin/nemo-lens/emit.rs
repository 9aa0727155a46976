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
pub fn run(service: &str, args: &[String]) -> Result<(), Failure> {
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
    let telemetry = Telemetry::builder(config)
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
    eprintln!("emitted {} span(s) for service {service:?}", specs.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
