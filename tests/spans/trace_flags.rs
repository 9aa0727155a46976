//! The W3C Trace Context Level 2 `random` flag, as the Python SDK sets it: a trace started by
//! nemo-lens has flags `03` (sampled + random) on its exported spans, on its log records, on
//! the span contexts children and propagation see, and in the `traceparent` it sends; a trace
//! continued from a parent without the flag keeps that parent's flags.

use nemo_lens_test_support as common;

use std::collections::HashMap;
use std::time::Duration;

use common::memory::named;
use nemo_lens::propagation::{extract_context, inject_context};
use nemo_lens::{LensSpanExt, Telemetry};
use opentelemetry::trace::{Span as _, TraceContextExt, Tracer as _};
use opentelemetry_sdk::trace::SpanData;
use tracing_subscriber::prelude::*;

const TRACE: &str = "4bf92f3577b34e0ea36b9a0f8e1c6a2d";
const PARENT: &str = "00f067aa0ba902b7";

fn flags(span: &SpanData) -> u8 {
    span.span_context.trace_flags().to_u8()
}

/// Runs `f` under the lens layer of an exporting telemetry; returns the exported spans.
fn run(f: impl FnOnce(&Telemetry)) -> Vec<SpanData> {
    common::memory::run_exporting(|b| b, f)
}

#[test]
fn a_trace_started_here_is_sampled_and_random_on_every_span() {
    let mut seen = Vec::new();
    let spans = run(|_| {
        let job = tracing::info_span!("job");
        seen.push(job.span_context().unwrap().trace_flags().to_u8());
        job.in_scope(|| {
            let step = tracing::info_span!("step");
            seen.push(step.span_context().unwrap().trace_flags().to_u8());
            step.in_scope(|| tracing::info_span!("forward").in_scope(|| {}));
        });
    });
    assert_eq!(
        seen,
        [0x03, 0x03],
        "span contexts seen by children and propagation"
    );
    for name in ["job", "step", "forward"] {
        assert_eq!(flags(named(&spans, name)), 0x03, "exported {name}");
    }
}

#[test]
fn a_trace_continued_from_a_parent_keeps_its_flags() {
    for (incoming, expected) in [("01", 0x01), ("03", 0x03)] {
        let carrier = HashMap::from([(
            "traceparent".to_string(),
            format!("00-{TRACE}-{PARENT}-{incoming}"),
        )]);
        let spans = run(|_| {
            let request = tracing::info_span!("handle");
            request.set_parent(extract_context(&carrier)).unwrap();
            request.in_scope(|| tracing::info_span!("inner").in_scope(|| {}));
        });
        for name in ["handle", "inner"] {
            let span = named(&spans, name);
            assert_eq!(span.span_context.trace_id().to_string(), TRACE);
            assert_eq!(flags(span), expected, "{name} under a {incoming} parent");
        }
    }
}

#[test]
fn root_spans_of_the_opentelemetry_tracer_are_exported_random() {
    let spans = run(|telemetry| {
        let tracer = telemetry.tracer();
        let mut span = tracer.start("otel_api_root");
        span.end();
    });
    assert_eq!(flags(named(&spans, "otel_api_root")), 0x03);
}

#[test]
fn the_propagator_sends_and_receives_the_random_flag() {
    // The capture installs the global propagator that `inject_context` writes through.
    let capture = nemo_lens::testing::SpanCapture::new();
    let mut injected = HashMap::new();
    capture.in_scope(|| {
        tracing::info_span!("step").in_scope(|| inject_context(&mut injected));
    });
    let traceparent = &injected["traceparent"];
    assert!(traceparent.ends_with("-03"), "{traceparent}");
    // Unknown flags are cleared, as the W3C specification asks; sampled and random are kept.
    for (sent, kept) in [("ff", 0x03), ("02", 0x02), ("00", 0x00), ("01", 0x01)] {
        let carrier = HashMap::from([(
            "traceparent".to_string(),
            format!("00-{TRACE}-{PARENT}-{sent}"),
        )]);
        let cx = extract_context(&carrier);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_remote());
        assert_eq!(sc.trace_flags().to_u8(), kept, "traceparent flags {sent}");
    }
    // A header the SDK rejects stays rejected.
    let bad = HashMap::from([("traceparent".to_string(), format!("00-{TRACE}-{PARENT}-zz"))]);
    assert!(!extract_context(&bad).span().span_context().is_valid());
}

#[test]
fn log_records_in_a_console_file_carry_flags_3_as_pythons() {
    let dir = tempfile::tempdir().unwrap();
    let telemetry = Telemetry::builder(common::console::config(dir.path()))
        .install_globals(false)
        .build()
        .unwrap();
    tracing::subscriber::with_default(
        tracing_subscriber::registry().with(telemetry.layer()),
        || {
            tracing::info_span!("train_step").in_scope(|| tracing::info!("step 1 done"));
        },
    );
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
    let log = common::console::lines(dir.path(), 0)
        .into_iter()
        .find(|v| v.get("body").is_some())
        .expect("a log record line");
    assert_eq!(log["trace_flags"], 3, "{log}");
    // The same field and value as the Python fixture's log records.
    let python = include_str!("../fixtures/python-lens-logs-rank5.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v.get("body").is_some())
        .unwrap();
    assert_eq!(python["trace_flags"], log["trace_flags"]);
}
