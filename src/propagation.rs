//! W3C Trace Context and Baggage propagation.
//!
//! On an exporting rank setup installs the composite TraceContext + Baggage propagator globally
//! (as the Python library does, overriding `OTEL_PROPAGATORS`). [`inject_context`] writes the
//! current span's context into a map carrier (`traceparent`, plus `tracestate` / `baggage` when
//! present); [`extract_context`] reads one back.
//!
//! A remote parent is given to spans made by the lens layer by attaching the extracted context
//! while the span is created: a span without a `tracing` parent takes the current OpenTelemetry
//! context as its parent.
//!
//! ```
//! use std::collections::HashMap;
//! let carrier = HashMap::from([(
//!     "traceparent".to_string(),
//!     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
//! )]);
//! let cx = nemo_lens::propagation::extract_context(&carrier);
//! let _guard = cx.attach();
//! let span = tracing::info_span!("stage"); // child of b7ad6b7169203331 in trace 0af76519…
//! # drop(span);
//! ```
//!
//! A launcher can make every rank join one trace: `TRACEPARENT` (and `TRACESTATE`) in the
//! environment become the parent of each rank's root spans.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::global;
use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

use crate::span_ext::LensSpanExt;

/// Installs the global TraceContext + Baggage propagator.
pub fn install_global_propagator() {
    global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
}

/// The OpenTelemetry context of the current `tracing` span when the lens layer records it,
/// else the current OpenTelemetry context.
pub fn current_context() -> Context {
    let span = tracing::Span::current();
    span.context()
}

/// Writes the current context into `carrier` through the global propagator.
///
/// ```
/// let mut carrier = std::collections::HashMap::new();
/// nemo_lens::propagation::inject_context(&mut carrier); // nothing current: stays empty
/// assert!(!carrier.contains_key("traceparent"));
/// ```
pub fn inject_context(carrier: &mut HashMap<String, String>) {
    let cx = current_context();
    global::get_text_map_propagator(|p| p.inject_context(&cx, carrier));
}

/// Reads a context from `carrier` with the W3C propagators (whatever the global one is); an
/// invalid or missing `traceparent` gives an empty context.
pub fn extract_context(carrier: &HashMap<String, String>) -> Context {
    let trace = TraceContextPropagator::new();
    let baggage = BaggagePropagator::new();
    let cx = trace.extract(carrier);
    baggage.extract_with_context(&cx, carrier)
}

/// The parent context a launcher passed in `TRACEPARENT` / `TRACESTATE`, if valid.
pub(crate) fn env_parent(lookup: &dyn Fn(&str) -> Option<String>) -> Option<Context> {
    let traceparent = lookup("TRACEPARENT")?;
    let mut carrier = HashMap::from([("traceparent".to_string(), traceparent)]);
    if let Some(state) = lookup("TRACESTATE") {
        carrier.insert("tracestate".into(), state);
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}
