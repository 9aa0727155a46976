//! Linked spans, the counterpart of Python's `create_linked_span`: a pipeline stage links to the
//! step it serves (from a broadcast carrier) instead of becoming its child, and the link is
//! there when the span starts, so samplers and span processors see it: a `tracing` span with
//! `LensSpanExt::add_link` before it is entered.

use nemo_lens_test_support as common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::memory::named;
use nemo_lens::propagation::extract_context;
use nemo_lens::{LensSpanExt, Telemetry};
use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
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
fn a_tracing_span_linked_before_its_first_enter_has_the_link_at_start() {
    let (spans, starts) = run(|_| {
        let remote = extract_context(&carrier()).span().span_context().clone();
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
