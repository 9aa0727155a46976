//! Linked spans, the counterpart of Python's `create_linked_span`: a pipeline stage links to the
//! step it serves (from a broadcast carrier) instead of becoming its child, and the link is
//! there when the span starts, so samplers and span processors see it. Both ways users make
//! one: `propagation::create_linked_span` on the OpenTelemetry tracer, and a `tracing` span with
//! `LensSpanExt::add_link` before it is entered.

use nemo_lens_test_support as common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::memory::named;
use nemo_lens::propagation::{
    create_linked_span, get_pp_trace_carrier, remote_span_context, set_pp_trace_carrier,
};
use nemo_lens::{LensSpanExt, Telemetry};
use opentelemetry::trace::Span as _;
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const STEP: &str = "b7ad6b7169203331";

/// A span's name and the span ids of its links, as a processor saw them at its start.
type Start = (String, Vec<String>);

/// What span processors saw when each span started.
#[derive(Clone, Debug, Default)]
struct StartLinks(Arc<Mutex<Vec<Start>>>);

impl SpanProcessor for StartLinks {
    fn on_start(&self, span: &mut Span, _cx: &Context) {
        if let Some(data) = span.exported_data() {
            let links = data
                .links
                .iter()
                .map(|l| l.span_context.span_id().to_string())
                .collect();
            self.0.lock().unwrap().push((data.name.to_string(), links));
        }
    }
    fn on_end(&self, _span: SpanData) {}
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

fn carrier() -> HashMap<String, String> {
    HashMap::from([("traceparent".to_string(), format!("00-{TRACE}-{STEP}-03"))])
}

/// Runs `f` under the lens layer of an exporting telemetry; returns the exported spans and what
/// span processors saw at each start.
fn run(f: impl FnOnce(&Telemetry)) -> (Vec<SpanData>, Vec<Start>) {
    let starts = StartLinks::default();
    let seen = starts.clone();
    let spans = common::memory::run_exporting(|b| b.span_processor(move || seen), f);
    let starts = starts.0.lock().unwrap().clone();
    (spans, starts)
}

#[test]
fn create_linked_span_links_at_start_parents_to_the_current_span_and_redacts() {
    let _slot = crate::pp_carrier_slot();
    let (spans, starts) = run(|telemetry| {
        set_pp_trace_carrier(Some(carrier()));
        tracing::info_span!("microbatch").in_scope(|| {
            let carrier = get_pp_trace_carrier().unwrap();
            let mut span = create_linked_span(
                &telemetry.tracer(),
                "pp.recv_forward.linked",
                None,
                Some(&carrier),
                [
                    KeyValue::new("pp.stage", 2_i64),
                    KeyValue::new("prompt", "the user's words"),
                ],
            );
            span.end();
        });
        set_pp_trace_carrier(None);
    });
    let linked = named(&spans, "pp.recv_forward.linked");
    let links: Vec<_> = linked.links.iter().collect();
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].span_context.trace_id().to_string(), TRACE);
    assert_eq!(links[0].span_context.span_id().to_string(), STEP);
    // Linked, not parented: its parent is the current (lens) span, in that span's trace.
    let microbatch = named(&spans, "microbatch");
    assert_eq!(linked.parent_span_id, microbatch.span_context.span_id());
    assert_eq!(
        linked.span_context.trace_id(),
        microbatch.span_context.trace_id()
    );
    let attr = |k: &str| {
        linked
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.clone())
    };
    assert_eq!(attr("pp.stage"), Some(Value::I64(2)));
    assert_eq!(attr("prompt"), Some(Value::from("[REDACTED]")));
    // The link was there when the span started.
    let at_start = starts
        .iter()
        .find(|(name, _)| name == "pp.recv_forward.linked")
        .expect("on_start saw the span");
    assert_eq!(at_start.1, vec![STEP.to_string()]);
}

#[test]
fn create_linked_span_without_a_valid_remote_span_is_unlinked() {
    let bad = HashMap::from([("traceparent".to_string(), "00-zz".to_string())]);
    let remote = Context::new(); // no span in it
    let (spans, _) = run(|telemetry| {
        let tracer = telemetry.tracer();
        create_linked_span(&tracer, "no_carrier", None, None, []).end();
        create_linked_span(&tracer, "empty_carrier", None, Some(&HashMap::new()), []).end();
        create_linked_span(&tracer, "bad_carrier", None, Some(&bad), []).end();
        // A context given explicitly wins over the carrier, as in Python: no span, no link.
        create_linked_span(
            &tracer,
            "empty_context",
            Some(&remote),
            Some(&carrier()),
            [],
        )
        .end();
    });
    for name in [
        "no_carrier",
        "empty_carrier",
        "bad_carrier",
        "empty_context",
    ] {
        assert_eq!(named(&spans, name).links.len(), 0, "{name}");
    }
}

#[test]
fn a_tracing_span_linked_before_its_first_enter_has_the_link_at_start() {
    let (spans, starts) = run(|_| {
        let remote = remote_span_context(&carrier()).unwrap();
        let stage = tracing::info_span!("pp.send_backward.linked", pp.stage = 1_i64);
        assert!(stage.add_link(remote));
        stage.in_scope(|| tracing::info_span!("p2p").in_scope(|| {}));
    });
    let stage = named(&spans, "pp.send_backward.linked");
    assert_eq!(stage.links.len(), 1);
    assert_eq!(
        stage
            .links
            .iter()
            .next()
            .unwrap()
            .span_context
            .span_id()
            .to_string(),
        STEP
    );
    // A root of its own trace, not the remote step's child.
    assert!(stage.parent_span_id == opentelemetry::trace::SpanId::INVALID);
    assert_ne!(stage.span_context.trace_id().to_string(), TRACE);
    let at_start = starts
        .iter()
        .find(|(name, _)| name == "pp.send_backward.linked")
        .expect("on_start saw the span");
    assert_eq!(at_start.1, vec![STEP.to_string()]);
}
