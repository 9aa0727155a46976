//! The log bridge: `tracing` events become OTel log records with the Python console layout,
//! carrying the ids of the span they happened in, filtered by level, redacted.

use std::time::Duration;

use nemo_lens::{LensConfig, Place, Telemetry};
use serde_json::Value;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::console;

/// The console file of `dir`, logs on, exported by the rank the strategy picks (single_rank).
fn console_config(dir: &tempfile::TempDir) -> LensConfig {
    console::config(dir.path()).with(|c| c.export.strategy = "single_rank".into())
}

/// Runs `body` under a console-exporting telemetry on rank 2 of 4 (exporting with
/// `export_rank = 2`) and returns the parsed lines of its file.
fn run(config: LensConfig, dir: &tempfile::TempDir, body: impl FnOnce()) -> Vec<Value> {
    let config = config.with(|c| c.export.rank = Some(2));
    let telemetry = Telemetry::builder(config)
        .place(Place::rank(2).of(4))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(
        telemetry
            .layer::<tracing_subscriber::Registry>()
            .bridges_logs()
    );
    {
        let _guard = tracing_subscriber::registry()
            .with(telemetry.layer())
            .set_default();
        body();
    }
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    console::lines(dir.path(), 2)
}

fn logs(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| console::is_log_record(l)).collect()
}

#[test]
fn records_have_the_python_layout_and_the_span_ids() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run(console_config(&dir), &dir, || {
        tracing::info_span!("train_step", step = 3_i64).in_scope(|| {
            tracing::warn!(loss = 7.5_f64, retries = 2_i64, "loss spiked");
        });
        tracing::error!("outside any span");
    });
    let logs = logs(&lines);
    assert_eq!(logs.len(), 2, "{lines:#?}");
    let warn = logs[0];
    let keys: Vec<&str> = warn
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "body",
            "severity_number",
            "severity_text",
            "attributes",
            "dropped_attributes",
            "timestamp",
            "observed_timestamp",
            "trace_id",
            "span_id",
            "trace_flags",
            "resource",
            "event_name"
        ]
    );
    assert_eq!(warn["body"], "loss spiked");
    assert_eq!(warn["severity_number"], 13);
    assert_eq!(warn["severity_text"], "WARN");
    assert_eq!(warn["attributes"]["loss"], 7.5);
    assert_eq!(warn["attributes"]["retries"], 2);
    // The module path, under Python's `code.function.name` (see log_records.rs).
    assert_eq!(warn["attributes"]["code.function.name"], "logs::logs");
    assert_eq!(warn["event_name"], "");
    assert_eq!(warn["trace_flags"], 3); // sampled + W3C random, as Python
    assert_eq!(warn["resource"]["attributes"]["dl.rank"], 2);
    let ts = warn["timestamp"].as_str().unwrap();
    assert!(
        ts.ends_with('Z') && ts.len() == "2026-11-29T23:59:01.123456Z".len(),
        "{ts}"
    );
    let step = console::named(&lines, "train_step");
    assert_eq!(warn["trace_id"], step["context"]["trace_id"]);
    assert_eq!(warn["span_id"], step["context"]["span_id"]);

    let outside = logs[1];
    assert_eq!(outside["severity_text"], "ERROR");
    assert_eq!(outside["trace_id"], format!("0x{}", "0".repeat(32)));
    assert_eq!(outside["span_id"], format!("0x{}", "0".repeat(16)));
    assert_eq!(outside["trace_flags"], 0);
}

#[test]
fn level_threshold_defaults_to_info_and_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run(console_config(&dir), &dir, || {
        tracing::debug!("debug detail");
        tracing::info!("info line");
    });
    let bodies: Vec<&Value> = logs(&lines).iter().map(|l| &l["body"]).collect();
    assert_eq!(bodies, ["info line"]);

    let dir = tempfile::tempdir().unwrap();
    let config = LensConfig::from_lookup("NEMO_LENS", None, |k| {
        (k == "NEMO_LENS_LOGS_LEVEL").then(|| "error".to_string())
    })
    .unwrap();
    let config = console_config(&dir).with(|c| c.logs_level = config.logs_level);
    let lines = run(config, &dir, || {
        tracing::warn!("warn line");
        tracing::error!("error line");
    });
    let bodies: Vec<&Value> = logs(&lines).iter().map(|l| &l["body"]).collect();
    assert_eq!(bodies, ["error line"]);
}

#[test]
fn redact_keys_apply_to_log_records() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run(console_config(&dir), &dir, || {
        tracing::info!(
            token = "hunter2",
            api_key = "visible",
            prompt = "secret prompt",
            "request"
        );
    });
    let record = logs(&lines)[0];
    assert_eq!(record["attributes"]["token"], "[REDACTED]");
    assert_eq!(record["attributes"]["prompt"], "[REDACTED]");
    assert_eq!(record["attributes"]["api_key"], "visible");
    assert!(!lines.iter().any(|l| l.to_string().contains("hunter2")));
}

#[test]
fn exporter_stack_targets_are_never_bridged() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run(console_config(&dir), &dir, || {
        tracing::warn!(target: "opentelemetry_sdk", "sdk says");
        tracing::warn!(target: "opentelemetry-otlp", "otlp says");
        tracing::error!(target: "tonic::transport", "tonic says");
        tracing::error!(target: "hyper_util::client", "hyper says");
        tracing::error!(target: "h2::proto", "h2 says");
        tracing::error!(target: "reqwest::connect", "reqwest says");
        tracing::error!(target: "tower::buffer", "tower says");
        tracing::warn!(target: "hyperparameters", "user target sharing a prefix");
        tracing::warn!(target: "hyper_tune::search", "user crate hyper_tune");
        tracing::warn!(target: "tower_defense", "user crate tower_defense");
        tracing::warn!(target: "nemo_lens_trainer::step", "user crate nemo_lens_trainer");
    });
    let bodies: Vec<&Value> = logs(&lines).iter().map(|l| &l["body"]).collect();
    assert_eq!(
        bodies,
        [
            "user target sharing a prefix",
            "user crate hyper_tune",
            "user crate tower_defense",
            "user crate nemo_lens_trainer"
        ]
    );
}

#[test]
fn no_log_bridge_without_logs_enabled_or_on_a_non_exporting_rank() {
    let dir = tempfile::tempdir().unwrap();
    let off = Telemetry::builder(console_config(&dir).with(|c| c.logs_enabled = false))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(!off.layer::<tracing_subscriber::Registry>().bridges_logs());
    let other_rank = Telemetry::builder(console_config(&dir).with(|c| c.export.rank = Some(0)))
        .place(Place::rank(1).of(2))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(
        !other_rank
            .layer::<tracing_subscriber::Registry>()
            .bridges_logs()
    );
    assert!(!dir.path().join("rank1.jsonl").exists());
}
