//! `nemo-lens emit-spans`: the real binary exporting through the console exporter into a file,
//! all-or-nothing input checking (exit 1) and setup/export failures (exit 2).

mod cli_support;
mod common;

use std::path::Path;
use std::process::Output;

use cli_support::bin;
use serde_json::Value;

/// Runs emit-spans with the console exporter writing to `dir/spans-{rank}.jsonl`, with a clean
/// NEMO_LENS/OTEL environment.
fn emit(dir: &Path, extra_env: &[(&str, &str)], spans: &[&str]) -> Output {
    let mut cmd = bin();
    common::clear_telemetry_env(&mut cmd);
    cmd.env("NEMO_LENS_EXPORTER", "console")
        .env(
            "NEMO_LENS_CONSOLE_PATH",
            dir.join("spans-{rank}.jsonl").to_str().unwrap(),
        )
        .env("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-env,site=lab");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.args(["emit-spans", "--service", "launcher"]);
    for s in spans {
        cmd.args(["--span", s]);
    }
    cmd.output().unwrap()
}

fn lines(dir: &Path) -> Vec<Value> {
    match std::fs::read_to_string(dir.join("spans-0.jsonl")) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn emits_parent_and_children_with_exact_times() {
    let dir = tempfile::tempdir().unwrap();
    // Children before their parent; "pull" does not nest inside "job"; "skew" ends before it
    // starts.
    let out = emit(
        dir.path(),
        &[],
        &[
            "pull,1795989600.5,1795989612.25,job",
            "skew,1795989700.000002,1795989699.5,job",
            "job,1795989601,1795989900",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The per-span duration table.
    assert!(stderr.contains("duration_s"), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("pull") && l.contains("11.750000") && l.contains("job")),
        "{stderr}"
    );
    assert!(stderr.contains("emitted 3 span(s)"), "{stderr}");

    let spans = lines(dir.path());
    assert_eq!(spans.len(), 3, "{spans:?}");
    let by = |n: &str| spans.iter().find(|s| s["name"] == n).unwrap();
    let (job, pull, skew) = (by("job"), by("pull"), by("skew"));
    assert_eq!(job["parent_id"], Value::Null);
    assert_eq!(pull["parent_id"], job["context"]["span_id"]);
    assert_eq!(skew["parent_id"], job["context"]["span_id"]);
    assert_eq!(pull["context"]["trace_id"], job["context"]["trace_id"]);
    assert_eq!(pull["start_time"], "2026-11-29T22:00:00.500000Z");
    assert_eq!(pull["end_time"], "2026-11-29T22:00:12.250000Z");
    assert_eq!(job["start_time"], "2026-11-29T22:00:01.000000Z");
    // Clamped and tagged.
    assert_eq!(skew["start_time"], skew["end_time"]);
    assert_eq!(skew["attributes"]["inverted.skew"], true);
    assert_eq!(
        skew["attributes"]["inverted.start_epoch_seconds"],
        "1795989700.000002"
    );
    assert_eq!(
        skew["attributes"]["inverted.end_epoch_seconds"],
        "1795989699.5"
    );
    assert_eq!(skew["attributes"]["inverted.delta_seconds"], "0.500002");
    // --service wins over OTEL_RESOURCE_ATTRIBUTES; other env attributes are inherited.
    let resource = &job["resource"]["attributes"];
    assert_eq!(resource["service.name"], "launcher");
    assert_eq!(resource["site"], "lab");
}

#[test]
fn invalid_input_emits_nothing_and_exits_1() {
    let cases: &[(&[&str], &str)] = &[
        (&["a,1,two"], "END"),
        (&["a,1"], "expected NAME,START,END[,PARENT]"),
        (&["a,nan,2"], "must be finite"),
        (&["a,1,inf"], "must be finite"),
        (&["a,1,2", "a,3,4"], "duplicate span name \"a\""),
        (&["a,1,2,ghost"], "parent \"ghost\""),
        (&["a,1,2,b", "b,1,2,a"], "parent cycle"),
        (&["ok,1,2", "a,1,2,a"], "parent cycle"),
    ];
    for (spans, why) in cases {
        let dir = tempfile::tempdir().unwrap();
        let out = emit(dir.path(), &[], spans);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{spans:?}: {stderr}");
        assert!(
            stderr.contains("nothing emitted: invalid span input"),
            "{spans:?}: {stderr}"
        );
        assert!(
            stderr.contains(why),
            "{spans:?}: expected {why:?} in {stderr}"
        );
        assert!(lines(dir.path()).is_empty(), "{spans:?} emitted something");
    }
}

#[test]
fn setup_failure_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[("NEMO_LENS_EXPORTER", "carrier-pigeon")],
        &["a,1,2"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("NEMO_LENS_EXPORTER") && stderr.contains("carrier-pigeon"),
        "{stderr}"
    );
}

#[test]
fn export_failure_exits_2() {
    // An OTLP/HTTP endpoint on a loopback port nobody listens on: the export is refused.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ],
        &["a,1795989600,1795989601"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("export failed"), "{stderr}");
}

#[test]
fn help_documents_the_exit_codes() {
    let out = bin().args(["emit-spans", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NAME,START,END[,PARENT]"), "{text}");
    assert!(
        text.contains("nothing emitted: invalid span input"),
        "{text}"
    );
    assert!(text.contains("Exit codes:"), "{text}");
}

#[test]
fn emits_over_otlp_to_a_real_collector() {
    let collector = common::collector::Collector::start();
    let mut cmd = bin();
    common::clear_telemetry_env(&mut cmd);
    let out = cmd
        .env("NEMO_LENS_EXPORTER", "otlp")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            collector.endpoint("http/protobuf"),
        )
        .args(["emit-spans", "--service", "launcher-otlp"])
        .args(["--span", "stage_in,1795989601,1795989650,job"])
        .args(["--span", "job,1795989600,1795989900"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = collector.wait_for("2 spans", std::time::Duration::from_secs(30), |o| {
        common::collector::items(o, "Span #").len() >= 2
    });
    let spans = common::collector::items(&text, "Span #");
    let job = spans
        .iter()
        .find(|s| s.field("Name").as_deref() == Some("job"))
        .expect("job span");
    let stage = spans
        .iter()
        .find(|s| s.field("Name").as_deref() == Some("stage_in"))
        .expect("stage_in span");
    assert_eq!(stage.field("Parent ID"), job.field("ID"));
    assert_eq!(stage.field("Trace ID"), job.field("Trace ID"));
    assert_eq!(
        job.resource_attr("service.name").as_deref(),
        Some("Str(launcher-otlp)")
    );
    assert_eq!(
        job.field("Start time").as_deref(),
        Some("1795989600000000000")
    );
    assert_eq!(
        stage.field("End time").as_deref(),
        Some("1795989650000000000")
    );
}
