//! LensLayer: how tracing spans and events become OpenTelemetry spans.

use std::sync::{Arc, Mutex};

use nemo_lens::LensSpanExt;
use nemo_lens::testing::SpanCapture;
use opentelemetry::Value;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt};
use tracing_subscriber::prelude::*;

fn attr(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<Value> {
    SpanCapture::attribute(span, key)
}

#[test]
fn fields_keep_their_types() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let _s = tracing::info_span!(
            "typed",
            i = -3_i64,
            u = 7_u64,
            big = u64::MAX,
            f = 0.5_f64,
            b = true,
            s = "text-value",
            d = ?vec![1, 2],
            shown = %"display",
        )
        .entered();
    });
    let span = capture.span("typed").expect("span exported");
    assert_eq!(attr(&span, "i"), Some(Value::I64(-3)));
    assert_eq!(attr(&span, "u"), Some(Value::I64(7)));
    assert_eq!(attr(&span, "big"), Some(Value::from(u64::MAX.to_string())));
    assert_eq!(attr(&span, "f"), Some(Value::F64(0.5)));
    assert_eq!(attr(&span, "b"), Some(Value::Bool(true)));
    assert_eq!(attr(&span, "s"), Some(Value::from("text-value")));
    assert_eq!(attr(&span, "d"), Some(Value::from("[1, 2]")));
    assert_eq!(attr(&span, "shown"), Some(Value::from("display")));
}

#[test]
fn recorded_values_become_attributes() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let s = tracing::info_span!("late", loss = tracing::field::Empty);
        s.record("loss", 1.25_f64);
    });
    let span = capture.span("late").unwrap();
    assert_eq!(attr(&span, "loss"), Some(Value::F64(1.25)));
}

#[test]
fn parents_follow_the_tracing_tree() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let outer = tracing::info_span!("outer");
        outer.in_scope(|| {
            tracing::info_span!("contextual").in_scope(|| {});
        });
        tracing::info_span!(parent: &outer, "explicit").in_scope(|| {});
        tracing::info_span!(parent: None, "root").in_scope(|| {});
    });
    let outer = capture.span("outer").unwrap();
    let contextual = capture.span("contextual").unwrap();
    let explicit = capture.span("explicit").unwrap();
    let root = capture.span("root").unwrap();
    let outer_id = outer.span_context.span_id();
    assert_eq!(contextual.parent_span_id, outer_id);
    assert_eq!(explicit.parent_span_id, outer_id);
    assert_eq!(
        contextual.span_context.trace_id(),
        outer.span_context.trace_id()
    );
    assert_eq!(root.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    assert_ne!(root.span_context.trace_id(), outer.span_context.trace_id());
    assert!(!contextual.parent_span_is_remote);
}

#[test]
fn events_become_span_events() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let _s = tracing::info_span!("train").entered();
        tracing::info!(path = "/x", "checkpoint.saved");
        tracing::warn!(rank = 3_i64, "slow");
    });
    // An event outside any span is not a span event (the log bridge covers those).
    capture.in_scope(|| tracing::info!("outside"));
    let span = capture.span("train").unwrap();
    let events = &span.events.events;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].name, "checkpoint.saved");
    assert_eq!(events[0].attributes[0].key.as_str(), "path");
    assert_eq!(events[0].attributes[0].value, Value::from("/x"));
    assert_eq!(events[1].name, "slow");
    assert_eq!(span.status, Status::Unset);
}

#[derive(Debug)]
struct NanLoss;
impl std::fmt::Display for NanLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("nan loss")
    }
}
impl std::error::Error for NanLoss {}

#[tracing::instrument(err)]
fn bad_step(step: i64) -> Result<(), NanLoss> {
    Err(NanLoss)
}

#[test]
fn instrument_err_sets_error_status_and_exception_event() {
    let capture = SpanCapture::new();
    capture.in_scope(|| bad_step(2).unwrap_err());
    let span = capture.span("bad_step").unwrap();
    assert_eq!(span.status, Status::error("nan loss"));
    let exception = span
        .events
        .iter()
        .find(|e| e.name == "exception")
        .expect("exception event");
    assert!(
        exception
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "exception.message" && kv.value == Value::from("nan loss"))
    );
    assert_eq!(attr(&span, "step"), Some(Value::I64(2)));
}

#[test]
fn error_events_set_status_with_their_message() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let _s = tracing::info_span!("step").entered();
        tracing::error!("optimizer diverged");
    });
    let span = capture.span("step").unwrap();
    assert_eq!(span.status, Status::error("optimizer diverged"));
    assert_eq!(span.events.events[0].name, "exception");
}

#[test]
fn redact_keys_hide_string_values_only() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let _s = tracing::info_span!(
            "gen",
            prompt = "my secret prompt",
            token = 42_i64,
            api_key = "visible"
        )
        .entered();
        tracing::info!(text = "user text", "generated");
    });
    let span = capture.span("gen").unwrap();
    assert_eq!(attr(&span, "prompt"), Some(Value::from("[REDACTED]")));
    // As in Python: only string values are redacted, and only exact keys.
    assert_eq!(attr(&span, "token"), Some(Value::I64(42)));
    assert_eq!(attr(&span, "api_key"), Some(Value::from("visible")));
    assert_eq!(
        span.events.events[0].attributes[0].value,
        Value::from("[REDACTED]")
    );
}

#[test]
fn reserved_otel_fields_set_name_kind_and_status() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let _s = tracing::info_span!(
            "generic",
            otel.name = "serve_request",
            otel.kind = "server",
            otel.status_code = "error",
            otel.status_description = "overloaded"
        )
        .entered();
    });
    let span = capture.span("serve_request").expect("renamed span");
    assert_eq!(span.span_kind, SpanKind::Server);
    assert_eq!(span.status, Status::error("overloaded"));
    assert!(
        span.attributes
            .iter()
            .all(|kv| !kv.key.as_str().starts_with("otel."))
    );
}

#[test]
fn follows_from_becomes_a_link() {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        let a = tracing::info_span!("stage0");
        let b = tracing::info_span!(parent: None, "stage1");
        b.follows_from(&a);
    });
    let a = capture.span("stage0").unwrap();
    let b = capture.span("stage1").unwrap();
    assert_eq!(b.links.links.len(), 1);
    assert_eq!(
        b.links.links[0].span_context.span_id(),
        a.span_context.span_id()
    );
}

#[test]
fn span_context_is_reachable_from_tracing_spans() {
    let capture = SpanCapture::new();
    let (id, trace) = capture.in_scope(|| {
        let s = tracing::info_span!("visible");
        let sc = s.span_context().expect("recorded by the lens layer");
        let cx = s.context();
        assert_eq!(cx.span().span_context().span_id(), sc.span_id());
        (sc.span_id(), sc.trace_id())
    });
    let span = capture.span("visible").unwrap();
    assert_eq!(span.span_context.span_id(), id);
    assert_eq!(span.span_context.trace_id(), trace);
}

#[test]
fn an_attached_remote_context_parents_root_spans() {
    let capture = SpanCapture::new();
    let carrier = std::collections::HashMap::from([(
        "traceparent".to_string(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
    )]);
    capture.in_scope(|| {
        let cx = nemo_lens::propagation::extract_context(&carrier);
        let _attached = cx.attach();
        tracing::info_span!("stage").in_scope(|| {});
    });
    let span = capture.span("stage").unwrap();
    assert_eq!(
        span.span_context.trace_id().to_string(),
        "0af7651916cd43dd8448eb211c80319c"
    );
    assert_eq!(span.parent_span_id.to_string(), "b7ad6b7169203331");
    assert!(span.parent_span_is_remote);
}

/// A `MakeWriter` over a shared buffer, to see what `fmt` printed.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn composes_with_fmt_and_leaves_its_callsites_alone() {
    // A disabled group is `never` for the lens layer only: fmt still sees the span's events.
    let capture = SpanCapture::with_config(
        nemo_lens::LensConfig::default().with(|c| c.groups.span_groups = "default".into()),
    )
    .unwrap();
    let out = Buffer::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::registry()
        .with(capture.telemetry().layer())
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone()),
        );
    tracing::subscriber::with_default(subscriber, || {
        let _job = tracing::info_span!("job", nemo.group.job = tracing::field::Empty).entered();
        let _step = tracing::info_span!("step", nemo.group.step = tracing::field::Empty).entered();
        tracing::info!("inside step");
    });
    let printed = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert!(printed.contains("inside step"), "fmt output: {printed}");
    assert!(
        printed.contains("step"),
        "fmt sees the gated span: {printed}"
    );
    let names: Vec<_> = capture.spans().iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["job"]);
    // The event inside the gated span lands on the nearest recorded ancestor.
    assert_eq!(
        capture.span("job").unwrap().events.events[0].name,
        "inside step"
    );
}

#[test]
fn spans_from_many_threads_are_all_exported_once() {
    let capture = SpanCapture::new();
    let dispatch = tracing::Dispatch::new(capture.subscriber());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let dispatch = dispatch.clone();
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for i in 0..250_i64 {
                        let _s = tracing::info_span!("work", thread = t, i).entered();
                    }
                })
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let spans = capture.spans();
    assert_eq!(spans.len(), 1000);
    let ids: std::collections::HashSet<_> =
        spans.iter().map(|s| s.span_context.span_id()).collect();
    assert_eq!(ids.len(), 1000);
}

#[test]
fn a_span_closed_on_another_thread_keeps_its_parent() {
    let capture = SpanCapture::new();
    let dispatch = tracing::Dispatch::new(capture.subscriber());
    let child = tracing::dispatcher::with_default(&dispatch, || {
        let parent = tracing::info_span!("parent");
        let child = tracing::info_span!(parent: &parent, "moved");
        drop(parent);
        child
    });
    std::thread::spawn(move || drop(child)).join().unwrap();
    drop(dispatch);
    let parent = capture.span("parent").unwrap();
    let moved = capture.span("moved").unwrap();
    assert_eq!(moved.parent_span_id, parent.span_context.span_id());
}
