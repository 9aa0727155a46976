//! `LensSpanExt` as a user meets it: the methods of tracing-opentelemetry's
//! `OpenTelemetrySpanExt` on spans of the real lens layer, exported through the lens pipeline
//! into an in-memory exporter.

use nemo_lens_test_support as common;

use std::collections::HashMap;

use common::memory::named;
use nemo_lens::{LensSpanExt, SetParentError};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, SpanId, Status, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SpanData;

const TRACE: &str = "4bf92f3577b34e0ea36b9a0f8e1c6a2d";
const PARENT: &str = "00f067aa0ba902b7";

/// Runs `f` under the lens layer of an exporting telemetry, then returns the exported spans.
fn run(f: impl FnOnce()) -> Vec<SpanData> {
    common::memory::run_exporting(|b| b, |_| f())
}

/// A context extracted from a W3C `traceparent` header, as a server's middleware gets it.
fn extracted() -> Context {
    let carrier = HashMap::from([("traceparent".to_string(), format!("00-{TRACE}-{PARENT}-01"))]);
    TraceContextPropagator::new().extract(&carrier)
}

#[test]
fn set_parent_from_an_extracted_carrier_moves_the_span_into_the_callers_trace() {
    let mut seen = None;
    let spans = run(|| {
        let request = tracing::info_span!("handle_request");
        assert_eq!(request.set_parent(extracted()), Ok(()));
        // The span's identity follows the new parent at once (before it is entered).
        seen = request.span_context();
        let _entered = request.enter();
        tracing::info_span!("inner").in_scope(|| {});
    });
    let request = named(&spans, "handle_request");
    let trace = TraceId::from_hex(TRACE).unwrap();
    assert_eq!(request.span_context.trace_id(), trace);
    assert_eq!(request.parent_span_id, SpanId::from_hex(PARENT).unwrap());
    assert_eq!(seen.unwrap().trace_id(), trace);
    // Its children follow it into that trace.
    let inner = named(&spans, "inner");
    assert_eq!(inner.span_context.trace_id(), trace);
    assert_eq!(inner.parent_span_id, request.span_context.span_id());
}

#[test]
fn set_parent_after_enter_or_with_children_or_context_changes_nothing() {
    let mut before = Vec::new();
    let spans = run(|| {
        let entered = tracing::info_span!("entered");
        entered.in_scope(|| {});
        let with_child = tracing::info_span!("with_child");
        let _child = tracing::info_span!(parent: &with_child, "child");
        let handed_out = tracing::info_span!("handed_out");
        let _cx = handed_out.context();
        for span in [&entered, &with_child, &handed_out] {
            before.push(span.span_context().unwrap());
            assert_eq!(
                span.set_parent(extracted()),
                Err(SetParentError::AlreadyStarted)
            );
        }
        let after: Vec<SpanContext> = [&entered, &with_child, &handed_out]
            .iter()
            .map(|s| s.span_context().unwrap())
            .collect();
        assert_eq!(before, after);
    });
    let trace = TraceId::from_hex(TRACE).unwrap();
    for (name, sc) in ["entered", "with_child", "handed_out"].iter().zip(&before) {
        let exported = named(&spans, name);
        assert_ne!(exported.span_context.trace_id(), trace, "{name}");
        assert_eq!(exported.span_context.trace_id(), sc.trace_id(), "{name}");
        assert_eq!(exported.parent_span_id, SpanId::INVALID, "{name}");
    }
}

#[test]
fn without_the_lens_layer_nothing_is_recorded() {
    let span = tracing::info_span!("plain");
    assert_eq!(
        span.set_parent(extracted()),
        Err(SetParentError::NotRecorded)
    );
    assert!(!span.set_attribute("k", 1_i64));
    assert!(!span.set_status(Status::Ok));
    // The error names what happened.
    assert!(
        SetParentError::AlreadyStarted
            .to_string()
            .contains("already entered")
    );
}

#[test]
fn context_attribute_status_and_links_reach_the_exported_span() {
    let remote = extracted().span().span_context().clone();
    let mut cx_span = None;
    let spans = run(|| {
        let span = tracing::info_span!("call_reward");
        assert!(span.set_attribute("http.response.status_code", 503_i64));
        assert!(span.set_attribute("http.response.status_code", 200_i64));
        assert!(span.set_status(Status::error("reward server unreachable")));
        assert!(span.add_link(remote.clone()));
        assert!(
            span.add_link_with_attributes(remote.clone(), vec![KeyValue::new("pp.stage", 1_i64)])
        );
        assert!(!span.add_link(SpanContext::empty_context()));
        let cx = span.context();
        cx_span = Some(cx.span().span_context().clone());
        assert_eq!(Some(cx.span().span_context().clone()), span.span_context());
    });
    let exported = named(&spans, "call_reward");
    assert_eq!(cx_span.unwrap(), exported.span_context);
    let codes: Vec<&Value> = exported
        .attributes
        .iter()
        .filter(|kv| kv.key.as_str() == "http.response.status_code")
        .map(|kv| &kv.value)
        .collect();
    assert_eq!(codes, [&Value::I64(200)]);
    assert_eq!(exported.status, Status::error("reward server unreachable"));
    assert_eq!(exported.links.links.len(), 2);
    assert!(
        exported
            .links
            .links
            .iter()
            .all(|l| l.span_context == remote)
    );
    assert_eq!(
        exported.links.links[1].attributes,
        [KeyValue::new("pp.stage", 1_i64)]
    );
}

#[test]
fn a_reparented_span_keeps_its_fields_and_is_truncated_at_shutdown() {
    let capture = nemo_lens::testing::SpanCapture::new();
    let _guard = capture.set_default();
    let request = tracing::info_span!("handle_request", route = "/reward");
    request.set_parent(extracted()).unwrap();
    let _entered = request.enter();
    // The re-parented span is still the one open at shutdown.
    assert_eq!(capture.telemetry().stats().open_spans, 1);
    let spans = capture.finish();
    let exported = named(&spans, "handle_request");
    assert_eq!(
        exported.span_context.trace_id(),
        TraceId::from_hex(TRACE).unwrap()
    );
    assert_eq!(
        nemo_lens::testing::SpanCapture::attribute(exported, "route"),
        Some(Value::from("/reward"))
    );
    assert_eq!(
        nemo_lens::testing::SpanCapture::attribute(exported, "nemo.span.truncated"),
        Some(Value::Bool(true))
    );
}
