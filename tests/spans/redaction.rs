//! Redaction as Python's: user redact keys (`TelemetryBuilder::redact_keys`) on span attributes,
//! span event fields and log attributes alike, replacing the default set; and the value length
//! limit applied after redaction (limit 8: `[REDACTE`, as Python's SDK writes it).
//!
//! Real console JSONL files (a temporary directory), one telemetry per scenario.

use std::time::Duration;

use nemo_lens_test_support as common;

use nemo_lens::{LensConfig, Place, TelemetryBuilder};
use serde_json::Value;
use tracing_subscriber::prelude::*;

/// What one scenario wrote: the `call` span's attributes, its `request sent` event's, and the
/// `request sent` log record's.
struct Written {
    span: Value,
    event: Value,
    log: Value,
}

/// Records a span with `api_key`, `token` and `model` fields, an event and a log record with
/// the same fields, under a telemetry made by `configure` and with `env` as its environment.
fn scenario(
    configure: impl FnOnce(TelemetryBuilder) -> TelemetryBuilder,
    env: &'static [(&'static str, &'static str)],
) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let builder = nemo_lens::Telemetry::builder(common::console::config(dir.path()))
        .allow_reinit_for_testing(true)
        .install_globals(false)
        .env_lookup(move |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        });
    let telemetry = configure(builder).build().unwrap();
    tracing::subscriber::with_default(
        tracing_subscriber::registry().with(telemetry.layer()),
        || {
            tracing::info_span!(
                "call",
                api_key = "sk-live-123",
                token = "tok-456",
                model = "m"
            )
            .in_scope(|| {
                tracing::info!(
                    api_key = "sk-live-123",
                    token = "tok-456",
                    model = "m",
                    "request sent"
                );
            });
        },
    );
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    let lines = common::console::lines(dir.path(), 0);
    let span = lines
        .iter()
        .find(|l| l["name"] == "call")
        .unwrap_or_else(|| panic!("no call span in {lines:#?}"));
    let log = lines
        .iter()
        .find(|l| l["body"] == "request sent")
        .unwrap_or_else(|| panic!("no log record in {lines:#?}"));
    Written {
        span: span["attributes"].clone(),
        event: span["events"][0]["attributes"].clone(),
        log: log["attributes"].clone(),
    }
}

impl Written {
    /// The value of `key` in the span, the event and the log record.
    fn all(&self, key: &str) -> [&Value; 3] {
        [&self.span[key], &self.event[key], &self.log[key]]
    }
}

#[test]
fn user_keys_replace_the_default_set_on_spans_events_and_logs() {
    let written = scenario(|b| b.redact_keys(["api_key"]), &[]);
    assert_eq!(written.all("api_key"), ["[REDACTED]"; 3]);
    assert_eq!(
        written.all("token"),
        ["tok-456"; 3],
        "a default key is no longer redacted once the set is replaced"
    );
    assert_eq!(written.all("model"), ["m"; 3]);
}

#[test]
fn the_default_set_applies_without_user_keys_and_can_be_extended() {
    let written = scenario(|b| b, &[]);
    assert_eq!(written.all("token"), ["[REDACTED]"; 3]);
    assert_eq!(written.all("api_key"), ["sk-live-123"; 3]);

    let written = scenario(
        |b| {
            b.redact_keys(
                TelemetryBuilder::DEFAULT_REDACT_KEYS
                    .iter()
                    .copied()
                    .chain(["api_key"]),
            )
        },
        &[],
    );
    assert_eq!(written.all("token"), ["[REDACTED]"; 3]);
    assert_eq!(written.all("api_key"), ["[REDACTED]"; 3]);
    assert_eq!(written.all("model"), ["m"; 3]);
}

#[test]
fn a_large_set_matches_exactly_as_a_small_one() {
    // 10,000 keys, `api_key` last: each key is matched exactly and case-sensitively, whatever
    // the set's size (`benches/redaction.rs` measures that the cost does not grow with it).
    let keys: Vec<String> = (0..9_999)
        .map(|i| format!("field_{i}"))
        .chain(["api_key".to_string()])
        .collect();
    let written = scenario(move |b| b.redact_keys(keys), &[]);
    assert_eq!(written.all("api_key"), ["[REDACTED]"; 3]);
    assert_eq!(written.all("token"), ["tok-456"; 3]);
    assert_eq!(written.all("model"), ["m"; 3]);
}

#[test]
fn an_empty_set_redacts_nothing() {
    let written = scenario(|b| b.redact_keys(Vec::<String>::new()), &[]);
    assert_eq!(written.all("token"), ["tok-456"; 3]);
}

#[test]
fn the_length_limit_cuts_the_redaction_marker_as_python_does() {
    // Python's SDK with OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=8: `[REDACTE` (the first 8
    // characters of `[REDACTED]`), on spans, span events and log records.
    let written = scenario(
        |b| b.redact_keys(["api_key"]),
        &[("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "8")],
    );
    assert_eq!(written.all("api_key"), ["[REDACTE"; 3]);
    assert_eq!(
        written.all("token"),
        ["tok-456"; 3],
        "shorter than the limit"
    );

    // Log records read Python's log limit first (`OTEL_LOGRECORD_…`), spans the span one.
    let written = scenario(
        |b| b,
        &[
            ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "3"),
            ("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT", "5"),
        ],
    );
    assert_eq!(written.all("token"), ["[RE", "[RE", "[REDA"]);
    assert_eq!(written.all("api_key"), ["sk-", "sk-", "sk-li"]);
}

#[test]
fn the_flight_recorder_redacts_the_user_keys_too() {
    // Rank 0 of 4 under `single_rank`: not exporting, recording into its flight recorder.
    let dir = tempfile::tempdir().unwrap();
    let mut config = LensConfig::default()
        .with_enabled(true)
        .with(|c| c.metrics_enabled = false);
    config.flight_recorder.capacity = 8;
    config.flight_recorder.dump_dir = Some(dir.path().to_path_buf());
    config.flight_recorder.hang_timeout = None;
    let telemetry = nemo_lens::Telemetry::builder(config)
        .place(Place::rank(0).of(4))
        .allow_reinit_for_testing(true)
        .redact_keys(["api_key"])
        .build()
        .unwrap();
    let recorder = telemetry.flight_recorder().expect("recorder on").clone();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(telemetry.layer())
            .with(telemetry.recorder_layer()),
    );
    let path = tracing::dispatcher::with_default(&dispatch, || {
        let step = tracing::info_span!(
            "train_step",
            nemo.group.step = tracing::field::Empty,
            api_key = "sk-live-123",
            token = "tok-456",
            detail = ?"debug-recorded"
        );
        let _step = step.enter();
        recorder.dump().unwrap()
    });
    let text = std::fs::read_to_string(path).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["name"], "train_step");
    assert_eq!(line["attributes"]["api_key"], "[REDACTED]");
    assert_eq!(line["attributes"]["token"], "tok-456");
    assert_eq!(line["attributes"]["detail"], "\"debug-recorded\"");
}
