//! The open-span closer: spans still open at shutdown are ended as truncated.

use std::time::{Duration, Instant};

use nemo_lens::testing::SpanCapture;
use nemo_lens::{LensConfig, Telemetry};
use opentelemetry::Value;
use opentelemetry::trace::Status;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing_subscriber::prelude::*;

#[test]
fn open_spans_are_ended_innermost_first_with_their_data() {
    let capture = SpanCapture::new();
    let _guard = capture.set_default();
    let job = tracing::info_span!("job", model = "gpt").entered();
    let step = tracing::info_span!("step", step = 3_i64).entered();
    tracing::info!(path = "/x", "checkpoint.saved");
    tracing::info_span!("done").in_scope(|| {});
    assert_eq!(capture.telemetry().stats().open_spans, 2);

    let spans = capture.finish();
    let names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
    assert_eq!(
        names,
        ["done", "step", "job"],
        "innermost first after the closed ones"
    );

    for name in ["step", "job"] {
        let s = spans.iter().find(|s| s.name == name).unwrap();
        assert_eq!(
            SpanCapture::attribute(s, "nemo.span.truncated"),
            Some(Value::Bool(true))
        );
        assert_eq!(s.status, Status::Unset, "truncation is not an error");
        let ev = s
            .events
            .iter()
            .find(|e| e.name == "nemo.span.truncated")
            .unwrap();
        assert_eq!(ev.attributes[0].key.as_str(), "nemo.span.truncated.reason");
        assert_eq!(
            ev.attributes[0].value,
            Value::from("still open at telemetry shutdown")
        );
    }
    let step_span = spans.iter().find(|s| s.name == "step").unwrap();
    assert_eq!(
        SpanCapture::attribute(step_span, "step"),
        Some(Value::I64(3))
    );
    assert_eq!(
        step_span.events.events[0].name, "checkpoint.saved",
        "events recorded before shutdown are kept"
    );
    let job_span = spans.iter().find(|s| s.name == "job").unwrap();
    assert_eq!(
        SpanCapture::attribute(job_span, "model"),
        Some(Value::from("gpt"))
    );
    assert!(SpanCapture::attribute(&spans[0], "nemo.span.truncated").is_none());
    assert_eq!(capture.telemetry().stats().open_spans, 0);

    // Closing the guards afterwards neither panics nor exports the spans twice.
    drop(step);
    drop(job);
    assert_eq!(capture.spans().len(), 3);
}

#[test]
fn force_flush_never_closes_live_spans() {
    let capture = SpanCapture::new();
    let _guard = capture.set_default();
    let live = tracing::info_span!("live").entered();
    capture.telemetry().force_flush().unwrap();
    assert!(capture.span("live").is_none());
    assert_eq!(capture.telemetry().stats().open_spans, 1);
    drop(live);
    let span = capture.span("live").expect("exported when it closed");
    assert!(SpanCapture::attribute(&span, "nemo.span.truncated").is_none());
}

#[test]
fn shutdown_is_idempotent() {
    let capture = SpanCapture::new();
    let _guard = capture.set_default();
    let _open = tracing::info_span!("open").entered();
    capture
        .telemetry()
        .shutdown(Duration::from_secs(5))
        .unwrap();
    capture
        .telemetry()
        .shutdown(Duration::from_secs(5))
        .unwrap();
    assert_eq!(capture.spans().len(), 1);
}

/// An exporter whose export never returns in time (a collector that accepted the connection and
/// went silent).
#[derive(Debug)]
struct Stuck;
impl SpanExporter for Stuck {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        std::thread::sleep(Duration::from_secs(30));
        Ok(())
    }
}

#[test]
fn shutdown_returns_within_its_timeout_when_the_exporter_hangs() {
    let telemetry = Telemetry::builder(
        LensConfig::default()
            .with_enabled(true)
            .with(|c| c.export.strategy = "all_ranks".into()),
    )
    .span_exporter(Stuck)
    .allow_reinit_for_testing(true)
    .build()
    .unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    tracing::subscriber::with_default(subscriber, || {
        let _job = tracing::info_span!("job", nemo.group.job = tracing::field::Empty).entered();
        let started = Instant::now();
        let result = telemetry.shutdown(Duration::from_millis(300));
        // Bounded: far below the 30 s the exporter would take (a functional bound, not a timing).
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
        let err = result.expect_err("a hung exporter is reported");
        let text = err.to_string().to_lowercase();
        assert!(matches!(err, nemo_lens::LensError::Shutdown(_)), "{err}");
        assert!(
            text.contains("timeout") || text.contains("timed out"),
            "{err}"
        );
    });
}

#[test]
fn a_span_truncated_at_shutdown_and_closed_later_leaves_newer_spans_open() {
    let capture = SpanCapture::new();
    let _guard = capture.set_default();
    let old = tracing::info_span!("old").entered();
    capture.finish();
    // The table was emptied at shutdown: a new span may take the old one's slot.
    let new = tracing::info_span!("new").entered();
    assert_eq!(capture.telemetry().stats().open_spans, 1);
    drop(old);
    assert_eq!(
        capture.telemetry().stats().open_spans,
        1,
        "closing the truncated span must not remove the new one's entry"
    );
    drop(new);
    assert_eq!(capture.telemetry().stats().open_spans, 0);
}

/// A subscriber dropped while one of its spans is open ends that span as truncated, saying
/// why. Here the span was never closed because its last child closed on a thread where the
/// subscriber is not the default (the registry releases the parent through the thread's
/// default subscriber).
#[test]
fn a_span_left_open_when_its_subscriber_is_dropped_is_ended_as_truncated() {
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let telemetry = nemo_lens_test_support::memory::builder(&exporter)
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let child = tracing::subscriber::with_default(subscriber, || {
        let parent = tracing::info_span!("parent", nemo.group.job = tracing::field::Empty);
        tracing::info_span!(parent: &parent, "child", nemo.group.job = tracing::field::Empty)
    });
    assert_eq!(telemetry.stats().open_spans, 2);
    // Closed on a thread with no default subscriber: its parent is never released.
    std::thread::spawn(move || drop(child)).join().unwrap();
    assert_eq!(
        telemetry.stats().open_spans,
        0,
        "the subscriber is gone, and its open span ended"
    );
    telemetry.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let parent = nemo_lens_test_support::memory::named(&spans, "parent");
    let reason = &parent
        .events
        .iter()
        .find(|e| e.name == "nemo.span.truncated")
        .unwrap()
        .attributes[0];
    assert_eq!(
        reason.value,
        Value::from("dropped by the subscriber without being closed")
    );
    let child = nemo_lens_test_support::memory::named(&spans, "child");
    assert!(child.events.is_empty(), "the child closed normally");
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
}
