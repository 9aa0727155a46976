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
//! # Across ranks: bytes and links
//!
//! The Python library broadcasts rank 0's step context over NCCL as JSON bytes
//! (`serialize_context` / `deserialize_context`). [`serialize_context`] and
//! [`decode_carrier`] / [`extract_bytes`] do the same here, with the same JSON, so a Rust rank and
//! a Python rank understand each other's payload; the transport (your collective) is yours.
//! Pipeline stages run concurrently, so a stage *links* to the step it serves instead of becoming
//! its child: [`remote_span_context`] + [`LensSpanExt::add_link`].
//!
//! ```
//! use nemo_lens::LensSpanExt;
//! use nemo_lens::propagation::{decode_carrier, encode_carrier, remote_span_context};
//! use std::collections::HashMap;
//!
//! // On the source rank: `let payload = nemo_lens::propagation::serialize_context();` inside
//! // the step span, then broadcast `payload` with your collective. Here, a payload from rank 0:
//! let payload = encode_carrier(&HashMap::from([(
//!     "traceparent".to_string(),
//!     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
//! )]));
//! // On every other rank:
//! let carrier = decode_carrier(&payload).expect("valid payload");
//! let remote = remote_span_context(&carrier).expect("valid traceparent");
//! let stage = tracing::info_span!("pp.recv_forward.linked");
//! stage.add_link(remote); // true when the lens layer records `stage`
//! ```
//!
//! Deep code that cannot be handed the carrier reads it from the process's slot, as in Python:
//! [`set_pp_trace_carrier`] once per iteration after the broadcast, [`get_pp_trace_carrier`] in
//! the pipeline schedule.

mod w3c;

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry::Context;
use opentelemetry::global;
use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::BaggagePropagator;

use opentelemetry::trace::{Link, Span, SpanBuilder, SpanContext, Tracer};
use opentelemetry::{KeyValue, Value};

pub use self::w3c::W3cTraceContextPropagator;
use crate::layer::span_ext::LensSpanExt;

/// Installs the global TraceContext + Baggage propagator (TraceContext through
/// [`W3cTraceContextPropagator`], which keeps the W3C `random` flag).
pub fn install_global_propagator() {
    global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(W3cTraceContextPropagator::new()),
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
    // The SDK's propagator (if the application installed it) writes an empty `tracestate`;
    // Python writes it only when present.
    if carrier.get("tracestate").is_some_and(|v| v.is_empty()) {
        carrier.remove("tracestate");
    }
}

/// Reads a context from `carrier` with the W3C propagators (whatever the global one is); an
/// invalid or missing `traceparent` gives an empty context.
pub fn extract_context(carrier: &HashMap<String, String>) -> Context {
    let trace = W3cTraceContextPropagator::new();
    let baggage = BaggagePropagator::new();
    let cx = trace.extract(carrier);
    baggage.extract_with_context(&cx, carrier)
}

/// Encodes a carrier as JSON bytes (UTF-8), the payload format of the Python library's
/// `serialize_context`.
///
/// ```
/// use std::collections::HashMap;
/// let bytes = nemo_lens::propagation::encode_carrier(&HashMap::from([("traceparent".into(), "00-ab".into())]));
/// assert_eq!(bytes, br#"{"traceparent":"00-ab"}"#);
/// ```
pub fn encode_carrier(carrier: &HashMap<String, String>) -> Vec<u8> {
    let sorted: std::collections::BTreeMap<&String, &String> = carrier.iter().collect();
    // A map of strings always serialises.
    serde_json::to_vec(&sorted).unwrap_or_default()
}

/// Decodes a payload made by [`encode_carrier`] (or by Python's `serialize_context`): `None` when
/// it is not UTF-8 JSON holding an object of strings (the Python helper also returns `None`).
///
/// ```
/// use nemo_lens::propagation::decode_carrier;
/// assert_eq!(decode_carrier(br#"{"traceparent": "00-ab"}"#).unwrap()["traceparent"], "00-ab");
/// assert!(decode_carrier(b"\xff not json").is_none());
/// assert!(decode_carrier(b"[1, 2]").is_none());
/// ```
pub fn decode_carrier(bytes: &[u8]) -> Option<HashMap<String, String>> {
    serde_json::from_slice(bytes).ok()
}

/// The current context (the current lens span) as JSON bytes, ready to broadcast; `{}` when
/// nothing is current or this rank does not export.
///
/// ```
/// assert_eq!(nemo_lens::propagation::serialize_context(), b"{}");
/// ```
pub fn serialize_context() -> Vec<u8> {
    let mut carrier = HashMap::new();
    inject_context(&mut carrier);
    encode_carrier(&carrier)
}

/// The context in a payload from [`serialize_context`]; the current context when the payload
/// cannot be decoded (as Python's `extract_nccl_context`), an empty one when it holds no valid
/// `traceparent`.
///
/// ```
/// use opentelemetry::trace::TraceContextExt;
/// let cx = nemo_lens::propagation::extract_bytes(
///     br#"{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#);
/// assert!(cx.span().span_context().is_remote());
/// ```
pub fn extract_bytes(bytes: &[u8]) -> Context {
    match decode_carrier(bytes) {
        Some(carrier) => extract_context(&carrier),
        None => Context::current(),
    }
}

/// The remote span context in `carrier`, if its `traceparent` is valid: what a linked span
/// links to.
///
/// ```
/// use std::collections::HashMap;
/// use nemo_lens::propagation::remote_span_context;
/// assert!(remote_span_context(&HashMap::new()).is_none());
/// ```
pub fn remote_span_context(carrier: &HashMap<String, String>) -> Option<SpanContext> {
    let cx = extract_context(carrier);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// Starts a span linked (not parented) to a remote span: the counterpart of Python's
/// `create_linked_span(tracer, name, remote_context=None, remote_carrier=None, **attributes)`,
/// for code that uses the OpenTelemetry API (e.g. [`Telemetry::tracer`](crate::Telemetry::tracer)).
///
/// As in Python:
/// * the remote span is `remote_context`'s span, else the one in `remote_carrier` (extracted
///   with [`extract_context`]); when it is valid the span gets one **link** to it, set when the
///   span starts, so samplers and span processors see it. No remote span, an empty carrier or an
///   invalid `traceparent` give an unlinked span.
/// * the parent is the current context (inside a lens span, with context activation on, that
///   span);
/// * `attributes` are set after the start (samplers do not see them), string values under
///   [`TelemetryBuilder::DEFAULT_REDACT_KEYS`](crate::TelemetryBuilder::DEFAULT_REDACT_KEYS) become `[REDACTED]`;
/// * the span is started, not made current; end it yourself (`span.end()`, or drop it).
///
/// Pipeline stages run concurrently, so a stage links to the step it serves rather than
/// becoming its child. `tracing` users get the same with a span and
/// [`LensSpanExt::add_link`] before its first enter (the lens layer hands links to the SDK when
/// it builds the span, so they too are there at its start).
///
/// ```
/// use std::collections::HashMap;
/// use opentelemetry::KeyValue;
/// use opentelemetry::trace::{Span, TracerProvider};
/// use nemo_lens::propagation::create_linked_span;
///
/// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
/// let tracer = provider.tracer("nemo.lens");
/// let carrier = HashMap::from([(
///     "traceparent".to_string(),
///     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03".to_string(),
/// )]);
/// let mut span = create_linked_span(
///     &tracer,
///     "pp.recv_forward.linked",
///     None,
///     Some(&carrier),
///     [KeyValue::new("microbatch", 3_i64), KeyValue::new("prompt", "secret words")],
/// );
/// span.end();
/// ```
pub fn create_linked_span<T>(
    tracer: &T,
    name: impl Into<std::borrow::Cow<'static, str>>,
    remote_context: Option<&Context>,
    remote_carrier: Option<&HashMap<String, String>>,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> T::Span
where
    T: Tracer,
{
    let extracted;
    let remote = match (remote_context, remote_carrier) {
        (Some(cx), _) => Some(cx),
        (None, Some(carrier)) if !carrier.is_empty() => {
            extracted = extract_context(carrier);
            Some(&extracted)
        }
        _ => None,
    };
    let links = remote
        .map(|cx| cx.span().span_context().clone())
        .filter(SpanContext::is_valid)
        .map(|sc| vec![Link::with_context(sc)])
        .unwrap_or_default();
    let mut span = tracer.build(SpanBuilder::from_name(name).with_links(links));
    for kv in attributes {
        let redact = matches!(kv.value, Value::String(_))
            && crate::record::attributes::DEFAULT_REDACT_KEYS.contains(&kv.key.as_str());
        if redact {
            span.set_attribute(KeyValue::new(kv.key, crate::record::attributes::REDACTED));
        } else {
            span.set_attribute(kv);
        }
    }
    span
}

/// The pipeline-parallel carrier slot of this process (Python's `_PP_TRACE_CARRIER`).
static PP_TRACE_CARRIER: parking_lot::RwLock<Option<Arc<HashMap<String, String>>>> =
    parking_lot::RwLock::new(None);

/// Stores the pipeline-parallel trace carrier for cross-stage linking, or clears it with
/// `None`: the counterpart of Python's `set_pp_trace_carrier`.
///
/// The training loop calls it once per iteration, after the carrier of the step was broadcast
/// ([`decode_carrier`] of the payload); code deep in the pipeline schedule reads it back with
/// [`get_pp_trace_carrier`] instead of having it threaded through every call. The slot is one
/// per process, shared by every thread, and holds the carrier until it is replaced or cleared.
///
/// ```
/// use std::collections::HashMap;
/// use nemo_lens::propagation::{get_pp_trace_carrier, remote_span_context, set_pp_trace_carrier};
///
/// // In the training loop, after the broadcast:
/// set_pp_trace_carrier(Some(HashMap::from([(
///     "traceparent".to_string(),
///     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
/// )])));
/// // Deep in the pipeline schedule:
/// let carrier = get_pp_trace_carrier().expect("set above");
/// let remote = remote_span_context(&carrier).expect("valid traceparent");
/// assert_eq!(remote.span_id().to_string(), "b7ad6b7169203331");
/// set_pp_trace_carrier(None);
/// assert!(get_pp_trace_carrier().is_none());
/// ```
pub fn set_pp_trace_carrier(carrier: Option<HashMap<String, String>>) {
    *PP_TRACE_CARRIER.write() = carrier.map(Arc::new);
}

/// The carrier last stored by [`set_pp_trace_carrier`], or `None` (never set, or cleared): the
/// counterpart of Python's `get_pp_trace_carrier`. Shared, not copied: reading it costs a
/// reference count.
pub fn get_pp_trace_carrier() -> Option<Arc<HashMap<String, String>>> {
    PP_TRACE_CARRIER.read().clone()
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
