//! Log records as Python writes them: the user's attributes first, then `code.file.path`,
//! `code.function.name` and `code.line.number` (no `code.namespace`, `code.filepath`,
//! `code.filename`, `code.lineno`), and `"event_name": ""` unless the event was named.
//!
//! Compared with the Python fixture (`tests/fixtures/python-lens-logs-rank5.jsonl`, written by
//! Python NeMo Lens 0.1.0 with `logs_enabled=True`), whose `loss spike` record carries one
//! user attribute (`dl.loss`) as `examples/failing_step`'s does. The trainer-like program runs as
//! a real process writing console JSONL to a file (build the examples first when running this
//! file alone: `cargo build --examples --all-features`).

use std::time::Duration;

use nemo_lens::Telemetry;
use serde_json::Value;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::console::{self, keys};

/// The log records of the Python fixture, by body.
fn python_record(body: &str) -> Value {
    include_str!("../fixtures/python-lens-logs-rank5.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["body"] == body)
        .unwrap_or_else(|| panic!("no record {body:?} in the fixture"))
}

/// The log records of rank 0's console file in `dir`.
fn records_in(dir: &std::path::Path) -> Vec<Value> {
    console::lines(dir, 0)
        .into_iter()
        .filter(console::is_log_record)
        .collect()
}

/// The log records `failing_step` writes.
fn failing_step_records() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let status = Child::example("failing_step")
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_LOGS_ENABLED", "1"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
        ])
        .env(
            "NEMO_LENS_CONSOLE_PATH",
            dir.path().join("rank{rank}.jsonl"),
        )
        .run()
        .status;
    assert!(status.success(), "{status}");
    records_in(dir.path())
}

fn record<'a>(records: &'a [Value], body: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["body"] == body)
        .unwrap_or_else(|| panic!("no record {body:?} in {records:#?}"))
}

/// The line of `body`'s call in `examples/failing_step.rs`.
fn line_of(body: &str) -> u64 {
    let source = include_str!("../../examples/failing_step.rs");
    let index = source
        .lines()
        .position(|l| l.contains(&format!("\"{body}\"")) && l.contains("tracing::"))
        .unwrap_or_else(|| panic!("no call with {body:?}"));
    index as u64 + 1
}

#[test]
fn a_log_record_has_pythons_keys_order_and_code_attributes() {
    let py = python_record("loss spike");
    let records = failing_step_records();
    let rust = record(&records, "loss spike");
    assert_eq!(keys(rust), keys(&py), "the record's keys, in order");
    assert_eq!(
        keys(&rust["attributes"]),
        keys(&py["attributes"]),
        "the user's attribute, then code.file.path, code.function.name, code.line.number"
    );
    let (a, p) = (&rust["attributes"], &py["attributes"]);
    assert_eq!(a["dl.loss"], p["dl.loss"]);
    assert!(a["code.file.path"].is_string() && p["code.file.path"].is_string());
    assert!(a["code.function.name"].is_string() && p["code.function.name"].is_string());
    assert!(a["code.line.number"].is_u64() && p["code.line.number"].is_u64());
    assert_eq!(a["code.file.path"], "examples/failing_step.rs");
    assert_eq!(
        a["code.function.name"], "failing_step",
        "the module path: a tracing callsite knows no function"
    );
    assert_eq!(a["code.line.number"], line_of("loss spike"));
    assert_eq!(rust["event_name"], py["event_name"]);
    assert_eq!(rust["event_name"], "");
    assert_eq!(rust["severity_text"], py["severity_text"]);
    assert_eq!(rust["severity_number"], py["severity_number"]);

    // A record without fields: only the code attributes, as Python's `step 1 done`.
    let py = python_record("step 1 done");
    let rust = record(&records, "step 1 done");
    assert_eq!(keys(&rust["attributes"]), keys(&py["attributes"]));
    assert_eq!(rust["event_name"], "");
}

#[test]
fn a_named_event_keeps_its_name() {
    let records = failing_step_records();
    let saved = record(&records, "checkpoint saved");
    assert_eq!(saved["event_name"], "ckpt.saved");
    assert_eq!(
        keys(&saved["attributes"]),
        [
            "step",
            "code.file.path",
            "code.function.name",
            "code.line.number"
        ]
    );
    for r in &records {
        if r["body"] != "checkpoint saved" {
            assert_eq!(r["event_name"], "", "{r}");
        }
    }
}

/// Runs `body` under a console-exporting telemetry with logs on, in this process, and returns
/// the log records of its file.
fn in_process_records(body: impl FnOnce()) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let telemetry = Telemetry::builder(console::config(dir.path()))
        .allow_reinit_for_testing(true)
        .install_globals(false)
        .env_lookup(|_| None)
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(telemetry.layer()), body);
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    records_in(dir.path())
}

#[test]
fn fields_named_like_the_old_code_attributes_are_the_users_own() {
    let records = in_process_records(|| {
        tracing::info!(
            code.lineno = 5_i64,
            code.filename = "mine.py",
            "user fields"
        );
    });
    let r = record(&records, "user fields");
    assert_eq!(
        keys(&r["attributes"]),
        [
            "code.lineno",
            "code.filename",
            "code.file.path",
            "code.function.name",
            "code.line.number"
        ]
    );
    assert_eq!(r["attributes"]["code.lineno"], 5);
    assert_eq!(r["attributes"]["code.filename"], "mine.py");
    assert_eq!(r["attributes"]["code.function.name"], "logs::log_records");
    assert_eq!(
        r["attributes"]["code.file.path"],
        "tests/logs/log_records.rs"
    );
}

#[test]
fn log_crate_records_carry_their_own_location_and_no_event_name() {
    // `log` records reach `tracing` through tracing-log (`LogTracer`), under its callsite
    // named `log event`: that is no name the user gave.
    let _ = tracing_log::LogTracer::init();
    let records = in_process_records(|| {
        log::warn!(target: "trainer", "from the log crate");
    });
    let r = record(&records, "from the log crate");
    assert_eq!(r["event_name"], "");
    assert_eq!(
        r["attributes"]["code.file.path"],
        "tests/logs/log_records.rs"
    );
    assert_eq!(r["attributes"]["code.function.name"], "logs::log_records");
    assert!(r["attributes"]["code.line.number"].is_u64(), "{r}");
    assert!(r["attributes"].get("code.lineno").is_none(), "{r}");
}
