//! The closer of SDK spans, in real processes: a child opens a span through
//! `Telemetry::tracer()` (the OpenTelemetry API) and one through `Telemetry::opentelemetry_layer()`
//! (tracing-opentelemetry's layer), then shuts down, or is killed by SIGTERM with the signal
//! handlers installed; the console JSONL file it wrote holds both spans, truncated.
//!
//! The child is this test binary, run again for the same test (`nemo_lens_test_support::child`) with
//! `SDK_CLOSER_MODE` set to the mode: each test plays the parent, and the child in the child.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, Tracer as _};
use serde_json::Value;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::{self, Child};
use nemo_lens_test_support::console::{self, truncation_reason};

const MODE: &str = "SDK_CLOSER_MODE";
const READY: &str = "spans open";

/// The child: SDK spans left open (and one finished), then `mode`'s way out.
fn in_child(mode: &str) {
    let telemetry = Telemetry::builder(LensConfig::from_env().unwrap())
        .build()
        .unwrap();
    assert!(telemetry.is_exporting());
    if mode == "lens" {
        return lens_child(&telemetry);
    }
    let subscriber = tracing_subscriber::registry().with(telemetry.opentelemetry_layer());
    tracing::subscriber::set_global_default(subscriber).unwrap();
    if mode == "signal" {
        telemetry.install_signal_handlers().unwrap();
    }
    let tracer = telemetry.tracer();
    let mut done = tracer.start("api.done");
    done.end();
    let mut api = tracer
        .span_builder("api.open")
        .with_attributes([KeyValue::new("request", 7_i64)])
        .start(&tracer);
    // Entered: tracing-opentelemetry starts the SDK span at the first enter (context
    // activation is on by default).
    let layer_span = tracing::info_span!("layer.open", model = "gpt");
    let entered = layer_span.enter();
    tracing::info_span!("layer.done").in_scope(|| {});
    println!("{READY}");
    if mode == "signal" {
        // Until the signal ends the process.
        loop {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    // The real ends come after the shutdown: ignored, not exported twice.
    drop(entered);
    drop(layer_span);
    api.end();
    // A span ending after shutdown is refused and counted as dropped: not these.
    assert_eq!(telemetry.stats().dropped(), 0);
    let mut late = tracer.start("api.late");
    late.end();
    assert_eq!(
        telemetry.stats().dropped(),
        1,
        "a new span is still counted"
    );
}

/// The child with the lens layer: a lens span and a `tracer()` span open at shutdown, the
/// `tracer()` span a child of the lens span (context activation).
fn lens_child(telemetry: &Telemetry) {
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let lens = tracing::info_span!("lens.open", model = "gpt").entered();
    tracing::info_span!("lens.done").in_scope(|| {});
    let tracer = telemetry.tracer();
    let api = tracer.start("api.open");
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    drop(api);
    drop(lens);
    assert_eq!(telemetry.stats().dropped(), 0);
}

/// The running test in a child process, in `mode`, writing its spans to `out`.
fn child_in(mode: &str, out: &Path) -> Child {
    Child::this_test()
        .env(MODE, mode)
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_CONSOLE_PATH", out)
}

/// Plays the child, when this process is the running test's child.
fn as_child() -> bool {
    if child::is_child() {
        in_child(&std::env::var(MODE).unwrap());
    }
    child::is_child()
}

fn spans_in(path: &Path) -> Vec<Value> {
    console::spans(console::read(path))
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found: Vec<_> = spans.iter().filter(|s| s["name"] == name).collect();
    assert_eq!(found.len(), 1, "{name} once in {spans:#?}");
    found[0]
}

fn check(spans: &[Value], reason: &str) {
    for name in ["api.done", "layer.done"] {
        let s = one(spans, name);
        assert!(s["attributes"].get("nemo.span.truncated").is_none(), "{s}");
    }
    for name in ["api.open", "layer.open"] {
        let s = one(spans, name);
        assert_eq!(s["attributes"]["nemo.span.truncated"], true, "{s}");
        assert_eq!(truncation_reason(s), Some(reason), "{s}");
        assert_eq!(
            s["status"]["status_code"], "UNSET",
            "truncation is not an error: {s}"
        );
    }
    assert_eq!(one(spans, "api.open")["attributes"]["request"], 7);
    assert_eq!(one(spans, "layer.open")["attributes"]["model"], "gpt");
    // Innermost (latest started) first.
    let at = |name: &str| spans.iter().position(|s| s["name"] == name).unwrap();
    assert!(at("layer.open") < at("api.open"));
}

#[test]
fn sdk_spans_open_at_shutdown_are_exported_truncated_once() {
    if as_child() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let run = child_in("shutdown", &out).run_passing();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !stderr.contains("dropped"),
        "nothing counted as dropped: {stderr}"
    );
    check(&spans_in(&out), "still open at telemetry shutdown");
}

#[test]
fn sdk_spans_open_at_sigterm_are_exported_truncated() {
    if as_child() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let mut child = child_in("signal", &out)
        .timeout(Duration::from_secs(60))
        .spawn();
    child.wait_for_output("the line saying its spans are open", |stdout, _| {
        stdout.contains(READY)
    });
    child.signal(libc::SIGTERM);
    let status = child.wait().status;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    check(&spans_in(&out), "process received SIGTERM");
}

#[test]
fn lens_spans_are_truncated_once_beside_sdk_spans() {
    if as_child() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    child_in("lens", &out).run_passing();
    let spans = spans_in(&out);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let reason = "still open at telemetry shutdown";
    let done = one(&spans, "lens.done");
    assert!(done["attributes"].get("nemo.span.truncated").is_none());
    let lens = one(&spans, "lens.open");
    let api = one(&spans, "api.open");
    for s in [lens, api] {
        assert_eq!(s["attributes"]["nemo.span.truncated"], true, "{s}");
        assert_eq!(truncation_reason(s), Some(reason), "{s}");
    }
    // The lens span keeps its fields; the OpenTelemetry-API span nested under it.
    assert_eq!(lens["attributes"]["model"], "gpt");
    assert_eq!(api["parent_id"], lens["context"]["span_id"]);
}
