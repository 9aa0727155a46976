//! Attribute values: long strings are cut to `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT` (else
//! `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) characters on a character boundary, and redaction
//! applies, on spans and on events alike.

use std::time::Duration;

use nemo_lens::testing::CollectingExporter;
use nemo_lens::{LensConfig, Telemetry};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;
use tracing_subscriber::prelude::*;

/// Runs `f` under a lens layer whose environment is `env`; returns the exported spans.
fn spans_with_env(env: &'static [(&'static str, &'static str)], f: impl FnOnce()) -> Vec<SpanData> {
    let exporter = CollectingExporter::default();
    let telemetry = Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.metrics_enabled = false;
    }))
    .span_exporter(exporter.clone())
    .export_mode(nemo_lens::ExportMode::Synchronous)
    .allow_reinit_for_testing(true)
    .env_lookup(|k| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
    .build()
    .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(telemetry.layer()), f);
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
    exporter.spans()
}

fn get<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(attributes: &[KeyValue], key: &str) -> String {
    match get(attributes, key) {
        Some(Value::String(s)) => s.as_str().to_string(),
        other => panic!("{key}: {other:?}"),
    }
}

fn record_everything() {
    let long = "a".repeat(100);
    let wide = "é".repeat(30); // two bytes per character
    let span = tracing::info_span!(
        "step",
        long = %long,
        wide = %wide,
        short = "ok",
        debug = ?vec![7u8; 40],
        count = 123456789_i64,
        late = tracing::field::Empty,
    );
    span.in_scope(|| {
        tracing::Span::current().record("late", "b".repeat(50).as_str());
        tracing::info!(detail = %"c".repeat(60), tiny = "x", "event one");
        tracing::error!(error = %"d".repeat(70), "{}", "e".repeat(80));
    });
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

#[test]
fn string_values_are_cut_on_character_boundaries_on_spans_and_events() {
    let spans = spans_with_env(
        &[("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "10")],
        record_everything,
    );
    let step = &spans[0];
    let a = &step.attributes;
    assert_eq!(text(a, "long"), "a".repeat(10));
    assert_eq!(
        text(a, "wide"),
        "é".repeat(10),
        "10 characters, 20 bytes, valid UTF-8"
    );
    assert_eq!(text(a, "short"), "ok");
    assert_eq!(chars(&text(a, "debug")), 10);
    assert_eq!(
        get(a, "count"),
        Some(&Value::I64(123456789)),
        "numbers are not cut"
    );
    assert_eq!(text(a, "late"), "b".repeat(10), "recorded later: cut too");

    let events = &step.events.events;
    assert_eq!(events[0].name, "event one");
    assert_eq!(text(&events[0].attributes, "detail"), "c".repeat(10));
    assert_eq!(text(&events[0].attributes, "tiny"), "x");
    let exception = &events[1];
    assert_eq!(exception.name, "exception");
    assert_eq!(text(&exception.attributes, "error"), "d".repeat(10));
    assert_eq!(
        get(&exception.attributes, "message"),
        None,
        "the message is exception.message only, as in Python"
    );
    assert_eq!(
        text(&exception.attributes, "exception.message"),
        "e".repeat(10)
    );
}

#[test]
fn the_span_specific_limit_wins_and_no_limit_keeps_everything() {
    let spans = spans_with_env(
        &[
            ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "50"),
            ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", " 3 "),
        ],
        record_everything,
    );
    assert_eq!(text(&spans[0].attributes, "wide"), "ééé");
    assert_eq!(text(&spans[0].events.events[0].attributes, "detail"), "ccc");

    // A blank span-specific value is unset: the general one applies.
    let spans = spans_with_env(
        &[
            ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4"),
            ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "  "),
        ],
        record_everything,
    );
    assert_eq!(text(&spans[0].attributes, "long"), "aaaa");

    let spans = spans_with_env(&[], record_everything);
    assert_eq!(text(&spans[0].attributes, "long"), "a".repeat(100));
    assert_eq!(text(&spans[0].attributes, "wide"), "é".repeat(30));

    let spans = spans_with_env(
        &[("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "0")],
        record_everything,
    );
    assert_eq!(text(&spans[0].attributes, "long"), "");
}

#[test]
fn a_bad_limit_is_an_error_naming_the_variable() {
    for (var, value) in [
        ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "ten"),
        ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "-1"),
        ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "1.5"),
    ] {
        let err = Telemetry::builder(
            LensConfig::default()
                .with_enabled(true)
                .with(|c| c.export.strategy = "all_ranks".into()),
        )
        .span_exporter(CollectingExporter::default())
        .allow_reinit_for_testing(true)
        .env_lookup(move |k| (k == var).then(|| value.to_string()))
        .build()
        .unwrap_err()
        .to_string();
        assert!(err.contains(var) && err.contains(value), "{err}");
    }
}

#[test]
fn redaction_applies_to_spans_and_events_alike() {
    let spans = spans_with_env(&[("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "200")], || {
        let span = tracing::info_span!(
            "generate",
            prompt = "tell me the secret",
            token = %"sk-live-123",
            model = "llama",
            password = tracing::field::Empty,
        );
        span.in_scope(|| {
            tracing::Span::current().record("password", "hunter2");
            tracing::info!(
                text = "user text",
                secret = ?"s3cr3t",
                key = "k",
                input_text = "in",
                output_text = "out",
                tokens = 12_i64,
                "generated"
            );
            tracing::warn!(password = "hunter2", "retry");
        });
    });
    let span = &spans[0];
    for key in ["prompt", "token", "password"] {
        assert_eq!(
            text(&span.attributes, key),
            "[REDACTED]",
            "span field {key}"
        );
    }
    assert_eq!(text(&span.attributes, "model"), "llama");
    let generated = &span.events.events[0].attributes;
    for key in ["text", "secret", "key", "input_text", "output_text"] {
        assert_eq!(text(generated, key), "[REDACTED]", "event field {key}");
    }
    assert_eq!(get(generated, "tokens"), Some(&Value::I64(12)));
    assert_eq!(
        text(&span.events.events[1].attributes, "password"),
        "[REDACTED]"
    );
    let all = format!("{spans:?}");
    for secret in [
        "tell me the secret",
        "sk-live-123",
        "hunter2",
        "s3cr3t",
        "user text",
    ] {
        assert!(!all.contains(secret), "{secret} leaked");
    }
}
