//! Spans a panic unwinds through end `ERROR` (as Python's `start_as_current_span` marks every
//! span an exception propagates through), whether the panic is caught or not: the innermost
//! with the `exception` event of the panic hook, the outer ones with the panic's message as
//! their status description. Spans the unwinding does not leave end as they would otherwise:
//! spans that ended before the panic, a span a destructor runs during the unwinding, and the
//! spans above the `catch_unwind` that stops it. The fatal case runs on the real trainer
//! (`tests/lifecycle/exit.rs`).
//!
//! Each case runs in a child process: the panic hook is process-wide.

use std::panic::{AssertUnwindSafe, catch_unwind};

use nemo_lens::testing::SpanCapture;
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;

use nemo_lens_test_support::child;

/// A value whose destructor runs an instrumented cleanup step of its own.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        tracing::info_span!("cleanup").in_scope(|| {
            tracing::info_span!("cleanup_inner").in_scope(|| {});
        });
    }
}

/// Runs the panicking program with `capture`'s subscriber; returns the spans.
fn run(capture: &SpanCapture) -> Vec<SpanData> {
    let _default = capture.set_default();
    let above = tracing::info_span!("above_catch").entered();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let _outer = tracing::info_span!("unwound_outer").entered();
        let _cleanup = Cleanup;
        let _middle = tracing::info_span!("unwound_middle").entered();
        tracing::info_span!("ended_before").in_scope(|| {});
        tracing::info_span!("unwound_inner").in_scope(|| panic!("boom in the step"));
    }));
    assert!(caught.is_err());
    tracing::info_span!("after").in_scope(|| {});
    drop(above);
    capture.finish()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:#?}"))
}

fn has_exception(span: &SpanData) -> bool {
    span.events.iter().any(|e| e.name == "exception")
}

fn description(span: &SpanData) -> &str {
    match &span.status {
        Status::Error { description } => description,
        other => panic!("{} is not ERROR: {other:?}", span.name),
    }
}

/// The spans the unwinding does not leave: unset, no exception.
fn assert_untouched(spans: &[SpanData]) {
    for name in [
        "above_catch",
        "ended_before",
        "cleanup",
        "cleanup_inner",
        "after",
    ] {
        let span = named(spans, name);
        assert_eq!(span.status, Status::Unset, "{name}");
        assert!(!has_exception(span), "{name}");
    }
}

#[test]
fn a_caught_panic_marks_the_spans_it_unwinds_through_and_no_other() {
    child::run_alone(|| {
        let capture = SpanCapture::new();
        capture.telemetry().install_panic_hook();
        let spans = run(&capture);
        let inner = named(&spans, "unwound_inner");
        assert!(has_exception(inner), "{inner:?}");
        let message = description(inner);
        assert!(
            message.contains("boom in the step") && message.contains("unwinding.rs"),
            "{message}"
        );
        for name in ["unwound_middle", "unwound_outer"] {
            let span = named(&spans, name);
            assert_eq!(description(span), message, "{name}");
            assert!(
                !has_exception(span),
                "{name}: the exception is on the innermost only"
            );
        }
        assert_untouched(&spans);
    });
}

/// Without the panic hook the message is unknown: the spans unwound through are `ERROR`
/// described `panic`, and no span has an exception event.
#[test]
fn without_the_panic_hook_the_spans_unwound_through_are_error_described_panic() {
    child::run_alone(|| {
        let capture = SpanCapture::new();
        let spans = run(&capture);
        for name in ["unwound_inner", "unwound_middle", "unwound_outer"] {
            let span = named(&spans, name);
            assert_eq!(description(span), "panic", "{name}");
            assert!(!has_exception(span), "{name}");
        }
        assert_untouched(&spans);
    });
}

/// A status the program set before the panic stays.
#[test]
fn a_status_set_before_the_panic_is_kept() {
    child::run_alone(|| {
        use nemo_lens::LensSpanExt;
        let capture = SpanCapture::new();
        capture.telemetry().install_panic_hook();
        let _default = capture.set_default();
        let caught = catch_unwind(|| {
            let ok = tracing::info_span!("set_ok").entered();
            ok.set_status(Status::Ok);
            let failed = tracing::info_span!("set_error").entered();
            failed.set_status(Status::error("nan loss"));
            tracing::info_span!("inner").in_scope(|| panic!("after the status"));
        });
        assert!(caught.is_err());
        let spans = capture.finish();
        assert_eq!(named(&spans, "set_ok").status, Status::Ok);
        assert_eq!(description(named(&spans, "set_error")), "nan loss");
        assert!(description(named(&spans, "inner")).contains("after the status"));
    });
}
