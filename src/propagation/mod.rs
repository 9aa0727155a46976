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
//!
//! The four functions:
//!
//! | function | what it does |
//! |---|---|
//! | [`inject_context`] | writes the current span's context into a string map (`traceparent`, `tracestate`, `baggage`) |
//! | [`extract_context`] | reads a context back from such a map |
//! | [`serialize_context`] | the current context as JSON bytes, for a side channel (MPI, NCCL) |
//! | [`extract_bytes`] | reads a context back from such bytes |
//!
//! Propagation uses W3C Trace Context (keeping the Level 2 `random` flag, which the SDK's
//! `TraceContextPropagator` clears) and W3C Baggage. Setup installs that composite propagator
//! globally on an exporting rank, so other OpenTelemetry code injecting through
//! `opentelemetry::global` writes the same headers.
//!
//! # Across ranks: bytes and links
//!
//! The Python library broadcasts rank 0's step context over NCCL as JSON bytes
//! (`serialize_context` / `deserialize_context`). [`serialize_context`] and [`extract_bytes`] do
//! the same here, with the same JSON, so a Rust rank and a Python rank understand each other's
//! payload; the transport (your collective) is yours. Pipeline stages run concurrently, so a
//! stage *links* to the step it serves instead of becoming its child: the span context of the
//! extracted context, given to [`LensSpanExt::add_link`] (Python's
//! `create_linked_span`).
//!
//! ```
//! use nemo_lens::LensSpanExt;
//! use nemo_lens::propagation::extract_bytes;
//! use opentelemetry::trace::TraceContextExt;
//!
//! // On the source rank: `let payload = nemo_lens::propagation::serialize_context();` inside
//! // the step span, then broadcast `payload` with your collective. Here, a payload from rank 0:
//! let payload = br#"{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#;
//! // On every other rank:
//! let remote = extract_bytes(payload).span().span_context().clone();
//! assert!(remote.is_valid());
//! let stage = tracing::info_span!("pp.recv_forward.linked");
//! stage.add_link(remote); // true when the lens layer records `stage`
//! ```
//!
//! Deep code that cannot be handed the payload (Python's `set_pp_trace_carrier` /
//! `get_pp_trace_carrier` slot) keeps it where the rest of the program keeps per-iteration
//! state: a field of the schedule, or a `static` of its own.

mod w3c;

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::global;
use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::BaggagePropagator;

use self::w3c::W3cTraceContextPropagator;
use crate::layer::span_ext::LensSpanExt;

/// Installs the global TraceContext + Baggage propagator (TraceContext through
/// [`W3cTraceContextPropagator`], which keeps the W3C `random` flag).
pub(crate) fn install_global_propagator() {
    global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(W3cTraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
}

/// The OpenTelemetry context of the current `tracing` span when the lens layer records it,
/// else the current OpenTelemetry context.
fn current_context() -> Context {
    let span = tracing::Span::current();
    span.context()
}

/// Writes the context of the current span (the current `tracing` span when the lens layer
/// records it, else the current OpenTelemetry context) into `carrier` through the global
/// propagator: `traceparent`, plus `tracestate` / `baggage` when present.
///
/// ```
/// let mut carrier = std::collections::HashMap::new();
/// nemo_lens::propagation::inject_context(&mut carrier); // nothing current: stays empty
/// assert!(!carrier.contains_key("traceparent"));
/// ```
pub fn inject_context(carrier: &mut HashMap<String, String>) {
    let cx = current_context();
    global::get_text_map_propagator(|p| p.inject_context(&cx, carrier));
    // The SDK's propagator (if the application installed it) writes an empty `tracestate`;
    // Python writes it only when present.
    if carrier.get("tracestate").is_some_and(|v| v.is_empty()) {
        carrier.remove("tracestate");
    }
}

/// Reads a context from `carrier` with the W3C propagators (whatever the global one is); an
/// invalid or missing `traceparent` gives an empty context.
///
/// ```
/// use std::collections::HashMap;
/// use opentelemetry::trace::TraceContextExt;
/// let carrier = HashMap::from([(
///     "traceparent".to_string(),
///     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
/// )]);
/// let cx = nemo_lens::propagation::extract_context(&carrier);
/// assert_eq!(cx.span().span_context().span_id().to_string(), "b7ad6b7169203331");
/// assert!(!nemo_lens::propagation::extract_context(&HashMap::new()).has_active_span());
/// ```
pub fn extract_context(carrier: &HashMap<String, String>) -> Context {
    let trace = W3cTraceContextPropagator::new();
    let baggage = BaggagePropagator::new();
    let cx = trace.extract(carrier);
    baggage.extract_with_context(&cx, carrier)
}

/// Encodes a carrier as JSON bytes (UTF-8), the payload format of the Python library's
/// `serialize_context`.
fn encode_carrier(carrier: &HashMap<String, String>) -> Vec<u8> {
    let sorted: std::collections::BTreeMap<&String, &String> = carrier.iter().collect();
    // A map of strings always serialises.
    serde_json::to_vec(&sorted).unwrap_or_default()
}

/// Decodes a payload made by [`encode_carrier`] (or by Python's `serialize_context`): `None` when
/// it is not UTF-8 JSON holding an object of strings (the Python helper also returns `None`).
fn decode_carrier(bytes: &[u8]) -> Option<HashMap<String, String>> {
    serde_json::from_slice(bytes).ok()
}

/// The current context (the current lens span) as JSON bytes, ready to broadcast: the map
/// [`inject_context`] writes, as a JSON object with sorted keys (`{"traceparent": …}`), which
/// Python's `deserialize_context` reads; `{}` when nothing is current or this rank does not
/// export.
///
/// ```
/// assert_eq!(nemo_lens::propagation::serialize_context(), b"{}");
/// ```
pub fn serialize_context() -> Vec<u8> {
    let mut carrier = HashMap::new();
    inject_context(&mut carrier);
    encode_carrier(&carrier)
}

/// The context in a payload from [`serialize_context`] (or Python's `serialize_context`): a
/// JSON object of strings, read as [`extract_context`] reads a map. The current context when
/// the payload cannot be decoded (not UTF-8 JSON holding an object of strings: as Python's
/// `extract_nccl_context`), an empty one when it holds no valid `traceparent`.
///
/// ```
/// use opentelemetry::trace::TraceContextExt;
/// let cx = nemo_lens::propagation::extract_bytes(
///     br#"{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#);
/// assert!(cx.span().span_context().is_remote());
/// // Not a payload: the current context (here none).
/// assert!(!nemo_lens::propagation::extract_bytes(b"\xff not json").has_active_span());
/// ```
pub fn extract_bytes(bytes: &[u8]) -> Context {
    match decode_carrier(bytes) {
        Some(carrier) => extract_context(&carrier),
        None => Context::current(),
    }
}

/// The parent context a launcher passed in `TRACEPARENT` / `TRACESTATE`, if valid.
pub(crate) fn env_parent(lookup: &dyn Fn(&str) -> Option<String>) -> Option<Context> {
    let traceparent = lookup("TRACEPARENT")?;
    let mut carrier = HashMap::from([("traceparent".to_string(), traceparent)]);
    if let Some(state) = lookup("TRACESTATE") {
        carrier.insert("tracestate".into(), state);
    }
    let cx = W3cTraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_read_pythons() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let carrier = HashMap::from([
            ("traceparent".to_string(), tp.to_string()),
            ("tracestate".to_string(), "vendor=abc".to_string()),
        ]);
        assert_eq!(
            decode_carrier(&encode_carrier(&carrier)),
            Some(carrier.clone())
        );
        // What Python's `json.dumps(carrier).encode()` sends (spaces after separators).
        let python = format!(r#"{{"traceparent": "{tp}", "tracestate": "vendor=abc"}}"#);
        assert_eq!(decode_carrier(python.as_bytes()), Some(carrier));
        for garbage in [
            &b"\xff\xfe"[..],
            b"not json",
            b"[1]",
            br#"{"traceparent": 7}"#,
        ] {
            assert!(decode_carrier(garbage).is_none(), "{garbage:?}");
        }
    }
}
