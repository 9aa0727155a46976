//! `nemo_lens::emit`: backdated spans through a real SDK pipeline.
//!
//! `group_gate_decides_before_any_work` runs in a process of its own (the span-group gate is per
//! process, and other tests of this binary install telemetries), and only
//! `end_before_start_is_clamped_tagged_and_warned_once` emits inverted spans (the warning is
//! once per process).

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use nemo_lens::testing::{CollectingExporter, SpanCapture};
use nemo_lens::{EmitSpan, EpochSeconds, emit_span};
use nemo_lens::{LensConfig, LensError, semconv};
use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::common::child;

fn pipeline() -> (SdkTracerProvider, SdkTracer, CollectingExporter) {
    let exporter = CollectingExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("nemo.lens");
    (provider, tracer, exporter)
}

fn attr(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<Value> {
    SpanCapture::attribute(span, key)
}

#[test]
fn group_gate_decides_before_any_work() {
    child::run_alone(group_gate_decides_before_any_work_in_a_fresh_process);
}

fn group_gate_decides_before_any_work_in_a_fresh_process() {
    let (_p, tracer, exporter) = pipeline();
    // No telemetry set up yet: every group is disabled, and a disabled group returns before
    // the (non-finite) times are even looked at.
    let out = emit_span(&tracer, "x", f64::NAN, 1.0, None, [], Some("step"));
    assert!(matches!(out, Ok(None)), "{out:?}");
    assert!(exporter.spans().is_empty());

    // With the real telemetry and `step` enabled, the same call emits through its tracer.
    let capture = SpanCapture::with_config(LensConfig::default().with_span_groups("step")).unwrap();
    let tracer = capture.telemetry().tracer();
    let cx = EmitSpan::new("prefetch", 100.0, 101.5)
        .group("step")
        .emit(&tracer)
        .unwrap()
        .expect("enabled group emits");
    assert!(cx.is_valid());
    let gated = EmitSpan::new("gated", 100.0, 101.0)
        .group("optimizer")
        .emit(&tracer)
        .unwrap();
    assert!(gated.is_none());
    let spans = capture.spans();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].name, "prefetch");
    assert_eq!(spans[0].span_context.span_id(), cx.span_id());
    assert_eq!(
        spans[0]
            .end_time
            .duration_since(spans[0].start_time)
            .unwrap(),
        Duration::from_millis(1500)
    );
}

#[test]
fn non_finite_times_are_a_typed_error_and_emit_nothing() {
    let (_p, tracer, exporter) = pipeline();
    let err = EmitSpan::new("a", f64::INFINITY, 1.0)
        .emit(&tracer)
        .unwrap_err();
    assert!(
        matches!(
            err,
            LensError::NonFiniteTime {
                label: "start_epoch_seconds",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "start_epoch_seconds must be finite, got inf"
    );
    let err = EmitSpan::new("a", 1.0, f64::NAN).emit(&tracer).unwrap_err();
    assert!(matches!(
        err,
        LensError::NonFiniteTime {
            label: "end_epoch_seconds",
            ..
        }
    ));
    assert!(matches!(
        "-Infinity".parse::<EpochSeconds>(),
        Err(LensError::NonFiniteTime { .. })
    ));
    assert!(exporter.spans().is_empty());
}

/// Collects formatted `tracing` output.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn end_before_start_is_clamped_tagged_and_warned_once() {
    let (_p, tracer, exporter) = pipeline();
    let log = Buf::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..2 {
            EmitSpan::new(
                "skewed",
                "1700000000.25".parse::<EpochSeconds>().unwrap(),
                "1699999999.75".parse::<EpochSeconds>().unwrap(),
            )
            .attribute(KeyValue::new("host", "b"))
            .attribute(KeyValue::new(semconv::INVERTED_SKEW, false))
            .emit(&tracer)
            .unwrap();
        }
    });
    let spans = exporter.spans();
    assert_eq!(spans.len(), 2);
    let s = &spans[0];
    assert_eq!(s.start_time, s.end_time);
    assert_eq!(
        s.start_time,
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_250)
    );
    assert_eq!(attr(s, "host"), Some("b".into()));
    assert_eq!(attr(s, semconv::INVERTED_SKEW), Some(Value::Bool(true)));
    assert_eq!(
        attr(s, semconv::INVERTED_START_EPOCH_SECONDS),
        Some("1700000000.25".into())
    );
    assert_eq!(
        attr(s, semconv::INVERTED_END_EPOCH_SECONDS),
        Some("1699999999.75".into())
    );
    assert_eq!(attr(s, semconv::INVERTED_DELTA_SECONDS), Some("0.5".into()));
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("end precedes start").count(), 1, "{text}");
    assert!(text.contains("WARN"), "{text}");
}

#[test]
fn exact_decimals_equal_times_and_redaction() {
    let (_p, tracer, exporter) = pipeline();
    let start: EpochSeconds = "1700000000.123456789".parse().unwrap();
    EmitSpan::new("marker", start, start)
        .attributes([
            KeyValue::new("password", "hunter2"),
            KeyValue::new("api_key", "kept"),
        ])
        .emit(&tracer)
        .unwrap();
    let s = &exporter.spans()[0];
    assert_eq!(
        s.start_time,
        UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789)
    );
    assert_eq!(
        s.end_time, s.start_time,
        "equal times: a zero-duration marker"
    );
    assert_eq!(attr(s, "password"), Some("[REDACTED]".into()));
    assert_eq!(attr(s, "api_key"), Some("kept".into()));
    assert_eq!(attr(s, semconv::INVERTED_SKEW), None);
}

#[test]
fn parent_is_the_current_context_unless_given_and_never_becomes_current() {
    let (_p, tracer, exporter) = pipeline();
    let outer = tracer.start("outer");
    let outer_cx = Context::current_with_span(outer);
    let outer_id = outer_cx.span().span_context().span_id();
    {
        let _guard = outer_cx.clone().attach();
        EmitSpan::new("child", 10.0, 11.0).emit(&tracer).unwrap();
        EmitSpan::new("root", 10.0, 11.0)
            .parent(&Context::new())
            .emit(&tracer)
            .unwrap();
        // Still the outer span: the emitted ones were never made current.
        assert_eq!(Context::current().span().span_context().span_id(), outer_id);
    }
    let spans = exporter.spans();
    let by = |n: &str| spans.iter().find(|s| s.name == n).unwrap();
    assert_eq!(by("child").parent_span_id, outer_id);
    assert_eq!(
        by("child").span_context.trace_id(),
        outer_cx.span().span_context().trace_id()
    );
    assert_eq!(
        by("root").parent_span_id,
        opentelemetry::trace::SpanId::INVALID
    );
}
