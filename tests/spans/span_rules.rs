//! Spans of other crates in span groups by target (`NEMO_LENS_SPAN_GROUP_RULES`), and the level
//! of spans in no group (`NEMO_LENS_SPAN_LEVEL`): what is exported, the callsite interest
//! (decided once), the flight recorder on a non-exporting rank, and the errors that name the
//! variable.

use std::collections::HashMap;

use nemo_lens::{LensConfig, LensError, Place, Telemetry};
use tracing::field::Empty;
use tracing::{Dispatch, Level};
use tracing_core::{Interest, LevelFilter, Metadata};
use tracing_subscriber::prelude::*;

fn config(groups: &str) -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = groups.into();
        c.metrics_enabled = false;
    })
}

fn telemetry(config: LensConfig) -> (Telemetry, opentelemetry_sdk::trace::InMemorySpanExporter) {
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let t = Telemetry::builder(config)
        .span_exporter(exporter.clone())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    (t, exporter)
}

/// The spans of a framework's all-reduce as burn-collective emits them, one user span and
/// spans of other crates at every level; returns their callsites by name.
fn emit() -> HashMap<&'static str, &'static Metadata<'static>> {
    let mut metas = HashMap::new();
    let mut keep = |s: &tracing::Span, name| {
        if let Some(m) = s.metadata() {
            metas.insert(name, m);
        }
    };
    let step = tracing::info_span!("train_step", nemo.group.step = Empty);
    keep(&step, "train_step");
    let _step = step.enter();
    let client =
        tracing::span!(target: "burn_collective::local::client", Level::TRACE, "all_reduce");
    keep(&client, "all_reduce");
    client.in_scope(|| {
        let global = tracing::span!(target: "burn_collective::local::all_reduce::base", Level::INFO, "global_all_reduce");
        keep(&global, "global_all_reduce");
        global.in_scope(|| {});
        let block_on = tracing::span!(target: "cubecl_common::future", Level::TRACE, "block_on");
        keep(&block_on, "block_on");
        block_on.in_scope(|| {});
    });
    let lookalike = tracing::span!(target: "burn_collectives", Level::INFO, "lookalike");
    keep(&lookalike, "lookalike");
    lookalike.in_scope(|| {});
    let debug = tracing::debug_span!(target: "candle_core::cpu", "matmul");
    keep(&debug, "matmul");
    debug.in_scope(|| {});
    let warn = tracing::warn_span!(target: "candle_core::cpu", "fallback");
    keep(&warn, "fallback");
    warn.in_scope(|| {});
    metas
}

/// The names exported when `emit` runs under `config`.
fn exported(config: LensConfig) -> Vec<String> {
    let (t, exporter) = telemetry(config);
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(t.layer()));
    tracing::dispatcher::with_default(&dispatch, emit);
    t.force_flush().unwrap();
    let mut names: Vec<String> = exporter
        .get_finished_spans()
        .unwrap()
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn the_default_rules_put_burn_collective_in_collective_whatever_the_level() {
    assert_eq!(
        exported(config("step,collective")),
        [
            "all_reduce",
            "fallback",
            "global_all_reduce",
            "lookalike",
            "train_step"
        ]
    );
    // Group collective off: burn's spans are out, the others unchanged.
    assert_eq!(
        exported(config("step")),
        ["fallback", "lookalike", "train_step"]
    );
}

#[test]
fn the_span_level_decides_spans_in_no_group() {
    let trace = config("step").with(|c| c.groups.span_level = LevelFilter::TRACE);
    assert_eq!(
        exported(trace),
        ["block_on", "fallback", "lookalike", "matmul", "train_step"]
    );
    let warn = config("step").with(|c| c.groups.span_level = LevelFilter::WARN);
    assert_eq!(exported(warn), ["fallback", "train_step"]);
    // Grouped spans are decided by their group alone, even with the level off.
    let off = config("step,collective").with(|c| c.groups.span_level = LevelFilter::OFF);
    assert_eq!(
        exported(off),
        ["all_reduce", "global_all_reduce", "train_step"]
    );
}

#[test]
fn rules_narrowed_by_name_and_replacing_the_defaults() {
    let ops = config("step,ops").with(|c| {
        c.groups.rules = "candle_core:matmul=ops, burn_collective::local::client=collective".into();
    });
    // `matmul` (DEBUG) is in `ops`; `fallback` is not narrowed in; the defaults are replaced,
    // so only the client's `all_reduce` is in (disabled) `collective`.
    assert_eq!(
        exported(ops),
        [
            "fallback",
            "global_all_reduce",
            "lookalike",
            "matmul",
            "train_step"
        ]
    );
    let none = config("step,collective").with(|c| c.groups.rules = "none".into());
    assert_eq!(
        exported(none),
        ["fallback", "global_all_reduce", "lookalike", "train_step"]
    );
    let added = config("step,ops").with(|c| c.groups.rules = "default,candle_core=ops".into());
    assert_eq!(
        exported(added),
        ["fallback", "lookalike", "matmul", "train_step"]
    );
}

#[test]
fn out_of_level_and_disabled_rule_callsites_are_never() {
    let (t, _exporter) = telemetry(config("step"));
    let all = Dispatch::new(
        tracing_subscriber::registry().with(
            telemetry(config("all").with(|c| c.groups.span_level = LevelFilter::TRACE))
                .0
                .layer(),
        ),
    );
    let metas = tracing::dispatcher::with_default(&all, emit);
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(t.layer()));
    let interest = |name: &str| -> Interest { dispatch.register_callsite(metas[name]) };
    assert!(interest("all_reduce").is_never(), "a disabled rule's group");
    assert!(interest("matmul").is_never(), "below the span level");
    assert!(interest("block_on").is_never(), "below the span level");
    assert!(interest("train_step").is_always());
    assert!(interest("fallback").is_always());
    assert!(interest("global_all_reduce").is_never());
}

#[test]
fn the_flight_recorder_records_rule_groups_on_a_non_exporting_rank() {
    let dir = tempfile::tempdir().unwrap();
    let c = LensConfig::default().with_enabled(true).with(|c| {
        c.metrics_enabled = false;
        c.flight_recorder.capacity = 64;
        c.flight_recorder.dump_dir = Some(dir.path().to_path_buf());
        c.flight_recorder.hang_timeout = None;
    });
    let t = Telemetry::builder(c)
        .place(Place::rank(0).of(2))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(!t.is_exporting());
    let recorder = t.flight_recorder().expect("recorder on").clone();
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(t.layer())
            .with(t.recorder_layer()),
    );
    let path = tracing::dispatcher::with_default(&dispatch, || {
        let step = tracing::info_span!("train_step", nemo.group.step = Empty, step = 3_i64);
        let _step = step.enter();
        let client =
            tracing::span!(target: "burn_collective::local::client", Level::TRACE, "all_reduce");
        let _client = client.enter();
        tracing::span!(target: "cubecl_common::future", Level::TRACE, "block_on").in_scope(|| {});
        recorder.dump().unwrap()
    });
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["train_step", "all_reduce"]);
    assert_eq!(lines[1]["attributes"]["nemo.group"], "collective");
    assert_eq!(lines[1]["attributes"]["nemo.span.open"], true);
}

#[test]
fn rule_and_level_errors_name_the_variable() {
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let cfg = LensConfig::from_lookup(
        "NEMO_LENS",
        None,
        lookup(&[
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_SPAN_GROUP_RULES", "burn_collective=colective"),
        ]),
    )
    .unwrap();
    let err =
        Telemetry::builder(cfg.with(|c| c.export.exporter = nemo_lens::ExporterKind::Console))
            .allow_reinit_for_testing(true)
            .build()
            .unwrap_err();
    match &err {
        LensError::UnknownSpanGroup { var, name, valid } => {
            assert_eq!(var, "NEMO_LENS_SPAN_GROUP_RULES");
            assert_eq!(name, "colective");
            assert!(valid.contains(&"collective".to_string()), "{valid:?}");
        }
        other => panic!("{other}"),
    }
    assert!(
        err.to_string().contains("NEMO_LENS_SPAN_GROUP_RULES"),
        "{err}"
    );

    let err = LensConfig::from_lookup(
        "NEMO_LENS",
        None,
        lookup(&[("NEMO_LENS_SPAN_LEVEL", "verbose")]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, LensError::InvalidLevel { var, .. } if var == "NEMO_LENS_SPAN_LEVEL"),
        "{err}"
    );
    let cfg = LensConfig::from_lookup(
        "NEMO_LENS",
        None,
        lookup(&[("NEMO_LENS_SPAN_LEVEL", "Debug")]),
    )
    .unwrap();
    assert_eq!(cfg.groups.span_level, LevelFilter::DEBUG);
}
