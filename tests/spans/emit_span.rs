//! `nemo_lens::emit`: backdated spans through a real SDK pipeline.
//!
//! `group_gate_decides_before_any_work` runs in a process of its own (the span-group gate is per
//! process, and other tests of this binary install telemetries). Clock inversions follow the
//! values of Python's `test_span_utilities.py`, and Python's `decimal` module checks the
//! `inverted.delta_seconds` of hostile times.

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use nemo_lens::testing::{CollectingExporter, SpanCapture};
use nemo_lens::{EmitSpan, EpochSeconds};
use nemo_lens::{LensConfig, LensError, semconv};
use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use nemo_lens_test_support::child;

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
    let out = EmitSpan::new("x", f64::NAN, 1.0)
        .group("step")
        .emit(&tracer);
    assert!(matches!(out, Ok(None)), "{out:?}");
    assert!(exporter.spans().is_empty());

    // With the real telemetry and `step` enabled, the same call emits through its tracer.
    let capture = SpanCapture::with_config(
        LensConfig::default().with(|c| c.groups.span_groups = "step".into()),
    )
    .unwrap();
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

/// Python's inverted pairs: (start, end, the nanoseconds both ends get, `inverted.*` strings).
#[test]
fn end_before_start_is_clamped_tagged_and_warned_each_time() {
    let (_p, tracer, exporter) = pipeline();
    let log = Buf::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let t = |s: &str| s.parse::<EpochSeconds>().unwrap();
    let cases: Vec<(EpochSeconds, EpochSeconds, i128, &str, &str, &str)> = vec![
        (
            1.0000000002.into(),
            1.0000000001.into(),
            1_000_000_000,
            "1.0000000002",
            "1.0000000001",
            "1E-10",
        ),
        (
            1.004.into(),
            1.0.into(),
            1_004_000_000,
            "1.004",
            "1.0",
            "0.004",
        ),
        (
            1.03.into(),
            1.0.into(),
            1_030_000_000,
            "1.03",
            "1.0",
            "0.03",
        ),
        (
            1.05.into(),
            1.0.into(),
            1_050_000_000,
            "1.05",
            "1.0",
            "0.05",
        ),
        (2.0.into(), 1.0.into(), 2_000_000_000, "2.0", "1.0", "1.0"),
        (
            1.0300000001.into(),
            1.0.into(),
            1_030_000_000,
            "1.0300000001",
            "1.0",
            "0.0300000001",
        ),
        (t("3600"), t("0"), 3_600_000_000_000, "3600", "0", "3600"),
        (
            t("1790038547.061741440"),
            t("1790038547.061741439"),
            1_790_038_547_061_741_440,
            "1790038547.061741440",
            "1790038547.061741439",
            "1E-9",
        ),
    ];
    tracing::subscriber::with_default(subscriber, || {
        for (start, end, ..) in &cases {
            EmitSpan::new("skewed", start.clone(), end.clone())
                .attribute(KeyValue::new("phase", "launch"))
                .attribute(KeyValue::new(semconv::INVERTED_SKEW, false))
                .emit(&tracer)
                .unwrap();
        }
    });
    let spans = exporter.spans();
    assert_eq!(spans.len(), cases.len());
    for (s, (_, _, ns, start, end, delta)) in spans.iter().zip(&cases) {
        let at = UNIX_EPOCH + Duration::from_nanos(*ns as u64);
        assert_eq!((s.start_time, s.end_time), (at, at), "{start}");
        assert_eq!(attr(s, "phase"), Some("launch".into()));
        assert_eq!(attr(s, semconv::INVERTED_SKEW), Some(Value::Bool(true)));
        assert_eq!(
            attr(s, semconv::INVERTED_START_EPOCH_SECONDS),
            Some((*start).into())
        );
        assert_eq!(
            attr(s, semconv::INVERTED_END_EPOCH_SECONDS),
            Some((*end).into())
        );
        assert_eq!(
            attr(s, semconv::INVERTED_DELTA_SECONDS),
            Some((*delta).into())
        );
        // The caller's `inverted.skew = false` is left out: the evidence wins.
        assert_eq!(
            s.attributes
                .iter()
                .filter(|kv| kv.key.as_str() == semconv::INVERTED_SKEW)
                .count(),
            1
        );
    }
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), cases.len(), "{text}");
    assert!(
        warnings[7].contains(
            "Span skewed has inverted timestamps: start_epoch_seconds=1790038547.061741440, \
             end_epoch_seconds=1790038547.061741439, inversion=1E-9 seconds; possible clock \
             skew; clamping end to start (zero duration), inverted.skew=true"
        ),
        "{text}"
    );

    // A span whose end is not before its start carries no evidence and logs nothing.
    let (_p, tracer, exporter) = pipeline();
    EmitSpan::new("fine", 1_700_000_000.25, 1_700_000_001.5)
        .emit(&tracer)
        .unwrap();
    let s = &exporter.spans()[0];
    assert_eq!(
        s.start_time,
        UNIX_EPOCH + Duration::from_nanos(1_700_000_000_250_000_000)
    );
    assert_eq!(
        s.end_time,
        UNIX_EPOCH + Duration::from_nanos(1_700_000_001_500_000_000)
    );
    assert_eq!(attr(s, semconv::INVERTED_SKEW), None);
}

/// Hostile but valid decimals: the `inverted.*` strings are Python's `str(Decimal)`, checked by
/// Python's own `decimal` module.
#[test]
fn inverted_evidence_is_python_s_decimal_for_hostile_times() {
    let pairs = [
        ("1e3", "1"),
        ("1_000.5", " 999.25 "),
        ("-1e-7", "-0.5"),
        ("0.0000001", "-0"),
        (".5", "-5."),
        ("1E+2", "9.99999999999999999999999999999e1"),
        ("1.9999999999999999999999999999999", "0.1"),
        ("1.0000000000000000000000000000005", "1"),
        ("1", "-1e-5000"),
        ("+1790038547.000000001", "1790038547"),
    ];
    let (_p, tracer, exporter) = pipeline();
    for (start, end) in pairs {
        EmitSpan::new(
            "x",
            start.parse::<EpochSeconds>().unwrap(),
            end.parse::<EpochSeconds>().unwrap(),
        )
        .emit(&tracer)
        .unwrap();
    }
    let lines: Vec<String> = pairs.iter().map(|(a, b)| format!("{a}|{b}")).collect();
    let python = nemo_lens_test_support::python::map_lines(
        "from decimal import Decimal as D",
        "'|'.join([str(D(line.split('|')[0])), str(D(line.split('|')[1])), \
         str(D(line.split('|')[0]) - D(line.split('|')[1])), \
         str(int(D(line.split('|')[0]) * 1000000000))])",
        &lines,
    );
    let spans = exporter.spans();
    for (s, want) in spans.iter().zip(&python) {
        let got = format!(
            "{}|{}|{}|{}",
            attr(s, semconv::INVERTED_START_EPOCH_SECONDS).unwrap(),
            attr(s, semconv::INVERTED_END_EPOCH_SECONDS).unwrap(),
            attr(s, semconv::INVERTED_DELTA_SECONDS).unwrap(),
            s.start_time
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as i128)
                .unwrap_or_else(|e| -(e.duration().as_nanos() as i128))
        );
        assert_eq!(&got, want);
        assert_eq!(s.start_time, s.end_time);
    }
}

#[test]
fn exact_decimals_equal_times_and_redaction() {
    let (_p, tracer, exporter) = pipeline();
    let start: EpochSeconds = "1700000000.123456789".parse().unwrap();
    EmitSpan::new("marker", start.clone(), start)
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
