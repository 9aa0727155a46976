//! W3C propagation: inject/extract over map carriers, baggage, payload bytes shared with the
//! Python library, remote parents and linked spans (the span context of an extracted context).

use std::collections::HashMap;

use nemo_lens::LensSpanExt;
use nemo_lens::propagation::{extract_bytes, extract_context, inject_context, serialize_context};
use nemo_lens::testing::SpanCapture;
use opentelemetry::baggage::BaggageExt;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, KeyValue};

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[test]
fn inject_then_extract_round_trips_the_current_span_and_baggage() {
    let capture = SpanCapture::new();
    let mut carrier = HashMap::new();
    capture.in_scope(|| {
        let _baggage = Context::current()
            .with_baggage([KeyValue::new("job", "pretrain")])
            .attach();
        let _step = tracing::info_span!("step").entered();
        inject_context(&mut carrier);
    });
    let step = capture.span("step").unwrap();
    assert_eq!(
        carrier["traceparent"],
        // Sampled + W3C random, as the Python SDK sends it.
        format!(
            "00-{}-{}-03",
            step.span_context.trace_id(),
            step.span_context.span_id()
        )
    );
    assert_eq!(carrier["baggage"], "job=pretrain");
    assert!(!carrier.contains_key("tracestate"), "only when present");

    let cx = extract_context(&carrier);
    assert_eq!(
        cx.span().span_context().span_id(),
        step.span_context.span_id()
    );
    assert!(cx.span().span_context().is_remote());
    assert_eq!(
        cx.baggage().get("job").map(|v| v.to_string()),
        Some("pretrain".into())
    );
}

#[test]
fn an_extracted_context_attached_while_creating_a_span_is_its_remote_parent() {
    let capture = SpanCapture::new();
    let carrier = HashMap::from([("traceparent".to_string(), TRACEPARENT.to_string())]);
    capture.in_scope(|| {
        let _remote = extract_context(&carrier).attach();
        tracing::info_span!("worker_step")
            .in_scope(|| tracing::info_span!("inner").in_scope(|| {}));
    });
    let step = capture.span("worker_step").unwrap();
    assert_eq!(
        step.span_context.trace_id().to_string(),
        "0af7651916cd43dd8448eb211c80319c"
    );
    assert_eq!(step.parent_span_id.to_string(), "b7ad6b7169203331");
    assert!(step.parent_span_is_remote);
    let inner = capture.span("inner").unwrap();
    assert_eq!(inner.parent_span_id, step.span_context.span_id());
}

#[test]
fn invalid_or_missing_traceparent_gives_an_empty_context() {
    for bad in [
        "",
        "00-zz-yy-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    ] {
        let carrier = HashMap::from([("traceparent".to_string(), bad.to_string())]);
        assert!(
            !extract_context(&carrier).span().span_context().is_valid(),
            "{bad:?}"
        );
    }
    assert!(!extract_context(&HashMap::new()).has_active_span());
}

#[test]
fn payload_bytes_from_python_are_read() {
    // What Python's `json.dumps(carrier).encode()` sends (spaces after separators).
    let python = format!(r#"{{"traceparent": "{TRACEPARENT}", "tracestate": "vendor=abc"}}"#);
    let cx = extract_bytes(python.as_bytes());
    assert_eq!(
        cx.span().span_context().span_id().to_string(),
        "b7ad6b7169203331"
    );
    assert_eq!(
        cx.span().span_context().trace_state().get("vendor"),
        Some("abc")
    );
    for garbage in [
        &b"\xff\xfe"[..],
        b"not json",
        b"[1]",
        br#"{"traceparent": 7}"#,
    ] {
        // Undecodable: the current context (empty here), never a panic.
        assert!(!extract_bytes(garbage).has_active_span());
    }
}

#[test]
fn serialize_context_inside_a_span_carries_it() {
    let capture = SpanCapture::new();
    let payload = capture.in_scope(|| {
        let _step = tracing::info_span!("step").entered();
        serialize_context()
    });
    let step = capture.span("step").unwrap();
    let text = std::str::from_utf8(&payload).unwrap();
    assert!(text.starts_with(r#"{"traceparent":"00-"#), "{text}");
    assert_eq!(
        extract_bytes(&payload).span().span_context().span_id(),
        step.span_context.span_id()
    );
}

#[test]
fn a_pipeline_stage_links_to_the_remote_step_instead_of_becoming_its_child() {
    let capture = SpanCapture::new();
    let carrier = HashMap::from([("traceparent".to_string(), TRACEPARENT.to_string())]);
    let remote = extract_context(&carrier).span().span_context().clone();
    let linked = capture.in_scope(|| {
        let stage = tracing::info_span!("pp.recv_forward.linked");
        let linked =
            stage.add_link_with_attributes(remote.clone(), vec![KeyValue::new("pp.stage", 1_i64)]);
        drop(stage);
        linked
    });
    assert!(linked);
    let stage = capture.span("pp.recv_forward.linked").unwrap();
    assert_ne!(
        stage.span_context.trace_id(),
        remote.trace_id(),
        "a link, not a parent"
    );
    assert_eq!(stage.links.links.len(), 1);
    let link = &stage.links.links[0];
    assert_eq!(link.span_context.span_id(), remote.span_id());
    assert_eq!(link.attributes, vec![KeyValue::new("pp.stage", 1_i64)]);
    // An invalid remote context links nothing.
    let none = capture.in_scope(|| {
        tracing::info_span!("x").add_link(opentelemetry::trace::SpanContext::empty_context())
    });
    assert!(!none);
}
