//! `NEMO_LENS_NVTX`: the spans of a real trainer as NVTX ranges, as an NVTX tool receives them
//! (the recorder of `nvtx_recorder.c`, loaded through `NVTX_INJECTION64_PATH` as Nsight
//! Systems is).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use nemo_lens_test_support::child::{self, Child};

/// The absolute path of the recorder (NVTX loads a path without a slash from the library path).
fn recorder() -> PathBuf {
    crate::c_library("nvtx_recorder.c", "libnvtx_recorder.so", "nvtx", &[])
}

/// What the recorder wrote (none when NVTX was never initialised: no NVTX call was made).
fn records(path: &Path) -> Vec<Value> {
    nemo_lens_test_support::console::read_if_any(path)
}

/// A range or mark as a tool sees it: the names of the ranges open around it on its thread,
/// its own name, its category's name and its colour.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    path: Vec<String>,
    name: String,
    category: Option<String>,
    color: Option<String>,
}

/// The records of one process, checked and read: exactly one domain, `NeMo Lens`, which every
/// range and mark belongs to; pushes and pops nest on each thread (the levels NVTX reports
/// agree) and none is left open. Returns the pushes and the marks, in order, per thread.
fn timeline(records: &[Value]) -> (Vec<Seen>, Vec<Seen>) {
    assert!(
        records.iter().any(|r| r["op"] == "init"),
        "the tool was not initialised: {records:?}"
    );
    let domains: Vec<&Value> = records
        .iter()
        .filter(|r| r["op"] == "domain_create")
        .collect();
    assert_eq!(domains.len(), 1, "{domains:?}");
    assert_eq!(domains[0]["name"], "NeMo Lens");
    let domain = &domains[0]["domain"];
    let categories: BTreeMap<u64, String> = records
        .iter()
        .filter(|r| r["op"] == "name_category")
        .map(|r| {
            assert_eq!(&r["domain"], domain, "{r}");
            (
                r["category"].as_u64().unwrap(),
                r["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut stacks: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let (mut pushes, mut marks) = (Vec::new(), Vec::new());
    let mut ordered: Vec<&Value> = records.iter().collect();
    ordered.sort_by_key(|r| r["seq"].as_u64());
    for r in ordered {
        let op = r["op"].as_str().unwrap();
        if !["push", "pop", "mark", "start", "end"].contains(&op) {
            continue;
        }
        assert_eq!(
            &r["domain"], domain,
            "every range is in the lens domain: {r}"
        );
        let stack = stacks.entry(r["tid"].as_u64().unwrap()).or_default();
        let seen = || Seen {
            path: stack.clone(),
            name: r["message"].as_str().unwrap_or_default().to_string(),
            category: match r["category"].as_u64().unwrap() {
                0 => None,
                id => Some(categories[&id].clone()),
            },
            color: r["color"].as_str().map(str::to_string),
        };
        match op {
            "push" => {
                assert_eq!(r["level"], stack.len(), "{r}");
                pushes.push(seen());
                stack.push(r["message"].as_str().unwrap().to_string());
            }
            "pop" => {
                assert!(stack.pop().is_some(), "a pop with nothing pushed: {r}");
                assert_eq!(r["level"], stack.len(), "{r}");
            }
            "mark" => marks.push(seen()),
            _ => panic!("no start/end range is used: {r}"),
        }
    }
    for (tid, stack) in stacks {
        assert!(stack.is_empty(), "thread {tid} left {stack:?} open");
    }
    (pushes, marks)
}

fn seen(
    path: &[&str],
    name: &str,
    category: Option<&str>,
) -> (Vec<String>, String, Option<String>) {
    (
        path.iter().map(|s| s.to_string()).collect(),
        name.to_string(),
        category.map(str::to_string),
    )
}

fn without_colour(seen: &[Seen]) -> Vec<(Vec<String>, String, Option<String>)> {
    seen.iter()
        .map(|s| (s.path.clone(), s.name.clone(), s.category.clone()))
        .collect()
}

/// The colour of each category, checked to be one per category and opaque.
fn colours(seen: &[Seen]) -> BTreeMap<String, String> {
    let mut colours = BTreeMap::new();
    for s in seen {
        match &s.category {
            Some(category) => {
                let colour = s.color.clone().expect("a group has a colour");
                assert!(colour.starts_with("FF"), "opaque: {colour}");
                let first = colours.entry(category.clone()).or_insert(colour.clone());
                assert_eq!(*first, colour, "one colour per group");
            }
            None => assert_eq!(s.color, None, "no group, no colour: {s:?}"),
        }
    }
    colours
}

/// Runs the trainer (two steps, a checkpoint after each) under the recorder with ranges on,
/// as rank `rank` of 2 (`single_rank`: rank 1 exports, rank 0 does not).
fn profile(rank: u32, envs: &[(&str, &str)]) -> (Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nvtx.jsonl");
    let out = crate::trainer(dir.path())
        .env("NVTX_INJECTION64_PATH", recorder())
        .env("NVTX_RECORDER_PATH", &file)
        .env("NEMO_LENS_NVTX", "1")
        .env("NEMO_LENS_SPAN_GROUPS", "per_step")
        .envs(envs.iter().copied())
        .args(["--steps", "2", "--checkpoint-every", "1"])
        .args(["--rank", &rank.to_string(), "--world-size", "2"])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (records(&file), stderr)
}

/// A build without the `nvtx` feature: no NVTX call at all, one warning.
#[track_caller]
fn assert_feature_off(records: &[Value], stderr: &str) {
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("`nvtx` feature"), "{stderr}");
}

#[test]
fn every_rank_shows_its_spans_as_ranges_with_their_groups() {
    let (records, stderr) = profile(0, &[]);
    if !cfg!(feature = "nvtx") {
        return assert_feature_off(&records, &stderr);
    }
    assert_eq!(stderr, "");
    let (pushes, marks) = timeline(&records);
    let train = ["train"];
    let step = ["train", "train_step"];
    let mut want = Vec::new();
    let mut want_marks = Vec::new();
    want.push(seen(&[], "train", Some("job")));
    for _ in 0..2 {
        want.push(seen(&train, "train_step", Some("step")));
        want.push(seen(&step, "forward_backward", Some("forward_backward")));
        want.push(seen(&step, "optimizer_step", Some("optimizer")));
        want.push(seen(&train, "save_checkpoint", Some("checkpoint")));
        want_marks.push(seen(&train, "step finished", Some("job")));
        want_marks.push(seen(
            &["train", "save_checkpoint"],
            "checkpoint saved",
            Some("checkpoint"),
        ));
    }
    assert_eq!(without_colour(&pushes), want);
    assert_eq!(without_colour(&marks), want_marks);
    // Span names are registered once each; the texts of marks never are (NVTX and the tool keep
    // every registered string for the life of the process).
    let registered: Vec<&str> = records
        .iter()
        .filter(|r| r["op"] == "register_string")
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    let names = [
        "train",
        "train_step",
        "forward_backward",
        "optimizer_step",
        "save_checkpoint",
    ];
    assert_eq!(registered.len(), names.len(), "{registered:?}");
    assert!(
        registered.iter().all(|r| names.contains(r)),
        "{registered:?}"
    );
    let mut all = pushes.clone();
    all.extend(marks);
    let colours = colours(&all);
    let distinct: BTreeSet<&String> = colours.values().collect();
    assert_eq!(
        distinct.len(),
        colours.len(),
        "a colour per group: {colours:?}"
    );

    // Another process (the exporting rank) names and colours the groups alike.
    let (other, _) = profile(1, &[]);
    let (other_pushes, _) = timeline(&other);
    assert_eq!(without_colour(&other_pushes), want);
    assert_eq!(crate::nvtx::colours(&other_pushes), colours);
}

#[test]
fn disabled_groups_push_nothing() {
    let (records, stderr) = profile(0, &[("NEMO_LENS_SPAN_GROUPS", "default")]);
    if !cfg!(feature = "nvtx") {
        return assert_feature_off(&records, &stderr);
    }
    let (pushes, marks) = timeline(&records);
    let mut want = vec![seen(&[], "train", Some("job"))];
    want.extend([
        seen(&["train"], "save_checkpoint", Some("checkpoint")),
        seen(&["train"], "save_checkpoint", Some("checkpoint")),
    ]);
    assert_eq!(without_colour(&pushes), want);
    assert_eq!(marks.len(), 4, "{marks:?}");
}

#[test]
fn no_nvtx_call_when_off_or_disabled() {
    for envs in [
        &[("NEMO_LENS_NVTX", "0")][..],
        &[("NEMO_LENS_NVTX", "")][..],
        &[("NEMO_LENS_ENABLED", "0")][..],
        &[("OTEL_SDK_DISABLED", "true")][..],
    ] {
        let (records, stderr) = profile(0, envs);
        assert!(records.is_empty(), "{envs:?}: {records:?}");
        assert_eq!(stderr, "", "{envs:?}");
    }
}

/// The child of [`guards_dropped_out_of_order_threads_and_hostile_events`].
fn scenario() {
    use tracing::field::Empty;
    use tracing_subscriber::prelude::*;

    let config = nemo_lens::LensConfig::default()
        .with_enabled(true)
        .with(|c| {
            c.nvtx = true;
            c.groups.span_groups = "per_step".into();
        });
    let telemetry = nemo_lens::Telemetry::builder(config)
        .place(nemo_lens::Place::rank(0).of(2))
        .build()
        .unwrap();
    assert!(!telemetry.is_exporting());
    let layer = telemetry.nvtx_layer();
    assert_eq!(layer.is_inert(), !cfg!(feature = "nvtx"));
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .with(layer)
        .init();

    let a = tracing::info_span!("a", nemo.group.step = Empty);
    let b = tracing::info_span!("b", nemo.group.forward_backward = Empty);
    let entered_a = a.enter();
    let entered_b = b.enter();
    drop(entered_a); // before b's guard: a's range lasts until b's ends
    tracing::info_span!("c").in_scope(|| {
        tracing::info!("größer als ✓");
        tracing::info!("{}", "x".repeat(100_000));
        tracing::info!(loss = 0.5);
    });
    drop(entered_b);
    tracing::info!("outside every span");
    tracing::info_span!("not recorded", nemo.group.collective = Empty).in_scope(|| {
        tracing::info!("in a disabled group only");
    });
    tracing::info_span!(target: "tonic::transport", "exporter internals").in_scope(|| {});
    let d = tracing::info_span!("d", nemo.group.step = Empty);
    std::thread::spawn(move || {
        d.in_scope(|| tracing::info!("on another thread"));
    })
    .join()
    .unwrap();
    nemo_lens::groups::set_enabled_span_groups("default").unwrap();
    tracing::info_span!("e", nemo.group.step = Empty).in_scope(|| {});
}

#[test]
fn guards_dropped_out_of_order_threads_and_hostile_events() {
    if child::is_child() {
        return scenario();
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nvtx.jsonl");
    let out = Child::this_test()
        .env("NVTX_INJECTION64_PATH", recorder())
        .env("NVTX_RECORDER_PATH", &file)
        .run_passing();
    let records = records(&file);
    if !cfg!(feature = "nvtx") {
        assert!(records.is_empty(), "{records:?}");
        return assert!(String::from_utf8_lossy(&out.stderr).contains("`nvtx` feature"));
    }
    let (pushes, marks) = timeline(&records);
    assert_eq!(
        without_colour(&pushes),
        [
            seen(&[], "a", Some("step")),
            seen(&["a"], "b", Some("forward_backward")),
            seen(&["a", "b"], "c", None),
            seen(&[], "d", Some("step")),
        ]
    );
    let long = "x".repeat(1024);
    assert_eq!(
        without_colour(&marks),
        [
            seen(&["a", "b", "c"], "größer als ✓", None),
            seen(&["a", "b", "c"], &long, None),
            seen(&["a", "b", "c"], marks[2].name.as_str(), None),
            seen(&["d"], "on another thread", Some("step")),
        ]
    );
    assert!(
        marks[2].name.starts_with("event tests/gpu/nvtx.rs:"),
        "{marks:?}"
    );
    let threads: BTreeSet<u64> = records
        .iter()
        .filter(|r| r["op"] == "push")
        .map(|r| r["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        threads.len(),
        2,
        "d is pushed on the thread that entered it"
    );
}

/// The interest `tracing` caches for a callsite under registry + lens layer + NVTX layer.
fn interest(
    rank: u32,
    nvtx: bool,
    meta: &'static tracing_core::Metadata<'static>,
) -> tracing_core::Interest {
    use tracing_subscriber::prelude::*;
    let config = nemo_lens::LensConfig::default()
        .with_enabled(true)
        .with(|c| {
            c.metrics_enabled = false;
            c.groups.span_groups = "per_step".into();
            c.nvtx = nvtx;
        });
    let t = nemo_lens::Telemetry::builder(config)
        .place(nemo_lens::Place::rank(rank).of(2)) // `single_rank`: rank 1 exports, rank 0 does not
        .install_globals(false)
        .span_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(t.layer())
            .with(t.nvtx_layer()),
    );
    dispatch.register_callsite(meta)
}

/// The static metadata of a span of group `step` (enabled), of `collective` (disabled) and of
/// an exporter's own target.
fn callsites() -> [&'static tracing_core::Metadata<'static>; 3] {
    use tracing::field::Empty;
    let meta = |span: tracing::Span| span.metadata().expect("a recorded span");
    let all = tracing::Dispatch::new(tracing_subscriber::registry());
    tracing::dispatcher::with_default(&all, || {
        [
            meta(tracing::info_span!("step", nemo.group.step = Empty)),
            meta(tracing::info_span!(
                "all_reduce",
                nemo.group.collective = Empty
            )),
            meta(tracing::info_span!(target: "tonic::transport", "send")),
        ]
    })
}

#[test]
fn off_the_layer_changes_no_callsite_interest_on_it_decides_per_callsite() {
    let [step, collective, exporter] = callsites();
    // Off: what the lens layer alone decides (exported: `always`; not exported: `never`).
    assert!(interest(1, false, step).is_always());
    assert!(interest(1, false, collective).is_never());
    assert!(interest(0, false, step).is_never());
    // On, exporting: both layers agree.
    assert!(interest(1, true, step).is_always());
    assert!(interest(1, true, collective).is_never());
    assert!(interest(1, true, exporter).is_never());
    // On, not exporting: a disabled group and the exporters' targets stay `never`; a span of an
    // enabled group is recorded for the NVTX layer alone (`sometimes`: the lens layer says
    // `never` for it, so `tracing` asks both filters per span).
    assert!(interest(0, true, collective).is_never());
    assert!(interest(0, true, exporter).is_never());
    if cfg!(feature = "nvtx") {
        assert!(interest(0, true, step).is_sometimes());
    } else {
        assert!(interest(0, true, step).is_never());
    }
}
