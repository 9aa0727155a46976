//! W3C Trace Context Level 2 on the wire: the `traceparent` and `tracestate` headers, read and
//! written by the rules of the specification (<https://www.w3.org/TR/trace-context-2/>).
//!
//! A `traceparent` that does not follow them is ignored, so the trace restarts, and the
//! `tracestate` beside it is not read. A `tracestate` list that does not follow them is dropped
//! whole (as the W3C test suite and the Python SDK do); a valid one is kept, in order.
//!
//! OpenTelemetry's `TraceState` refuses some keys the specification allows (more than one `@`,
//! more than 13 characters after it). A list holding such a key travels whole in the extracted
//! context beside the span context ([`CarriedTraceState`]), and is what is sent on for that
//! trace while the span context's `TraceState` is the part of it OpenTelemetry holds. A span
//! made while the extracted context was attached keeps only its span context, so the list is
//! also kept here, the last [`MAX_REMEMBERED`] of them: injecting a context that does not carry
//! the extraction finds it by trace id and held part.

use std::collections::VecDeque;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::Context;
use opentelemetry::propagation::text_map_propagator::FieldIter;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use parking_lot::Mutex;

use crate::ids::RANDOM_FLAG;

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// The header names, for [`TextMapPropagator::fields`].
static FIELDS: LazyLock<[String; 2]> =
    LazyLock::new(|| [TRACEPARENT.to_string(), TRACESTATE.to_string()]);

/// The trace flags this version of the specification defines, `sampled` and Level 2's
/// `random`: the others are cleared, on extraction and injection.
const KEPT_FLAGS: u8 = 0x01 | RANDOM_FLAG;

/// Optional whitespace (`OWS`): spaces and horizontal tabs.
const OWS: [char; 2] = [' ', '\t'];

/// Length of a version `00` `traceparent`: `version-trace_id-parent_id-flags`.
const TRACEPARENT_LEN: usize = 2 + 1 + 32 + 1 + 16 + 1 + 2;

/// At most this many members in a `tracestate` list.
const MAX_MEMBERS: usize = 32;

/// The most lists OpenTelemetry's `TraceState` cannot hold that are kept for injection from a
/// context without the extraction (each at most 32 members of 513 bytes).
const MAX_REMEMBERED: usize = 64;

/// Those lists, oldest first (see the [module docs](self)).
static REMEMBERED: Mutex<VecDeque<CarriedTraceState>> = Mutex::new(VecDeque::new());
/// Whether a list was ever kept in [`REMEMBERED`]: until then no injection or extraction
/// takes its lock.
static ANY_REMEMBERED: AtomicBool = AtomicBool::new(false);

/// nemo-lens's W3C Trace Context propagator: `traceparent` and `tracestate` read and written by
/// the rules of Trace Context Level 2, with the `random` trace flag.
///
/// * **`traceparent`**: lowercase hex fields of exactly 2, 32, 16 and 2 digits; trace and parent
///   ids not all zero; version `ff` refused; version `00` with nothing after the flags; a later
///   version read by the `00` layout, with more fields allowed after a dash (the header written
///   is version `00`). Spaces and tabs around the value are ignored. Two `traceparent` headers
///   (an [`Extractor`] whose `get_all` gives two) are refused. Anything else starts a new trace,
///   and the `tracestate` beside it is not read.
/// * **Flags**: `sampled` and `random` (Level 2: the trace id is random) are kept from the
///   parent, the other bits cleared. A trace started by nemo-lens has random trace ids and
///   says so with flags `03` (see [`ChaChaIdGenerator`](crate::ChaChaIdGenerator)), as the
///   Python SDK does; the OpenTelemetry SDK's `TraceContextPropagator` would clear `random`.
/// * **`tracestate`**: several headers form one list, in order; spaces and tabs around members
///   and empty members are skipped; a key is 1 to 256 of `a-z 0-9 _ - * / @`, starting with a
///   letter or digit (so `tenant@system` keys); a value is 1 to 256 printable ASCII characters
///   but `,` and `=`, not ending in a space (leading spaces are kept). A list with an invalid
///   member or more than 32 members is dropped whole; of duplicate keys the first is kept.
///   OpenTelemetry's `TraceState` cannot hold every key the specification allows (it takes one
///   `@` followed by at most 13 characters, the first a letter or digit): the span context
///   holds the members it can, and the whole list goes in the extracted context beside it
///   ([`CarriedTraceState`]); injecting a context of the same trace whose `TraceState` is
///   still that part sends the whole list on. A span created while the extracted context was
///   attached, and its children, carry only their span context: injecting theirs finds the
///   list among the last [`MAX_REMEMBERED`] kept, the one extracted last for that trace and
///   held part (an extraction of that trace and part whose list `TraceState` holds whole
///   forgets it).
///
/// Setup installs it globally (`install_global_propagator`); [`extract_context`](super::extract_context)
/// and the launcher's `TRACEPARENT` use it too.
#[derive(Clone, Debug, Default)]
pub(crate) struct W3cTraceContextPropagator {
    _private: (),
}

impl W3cTraceContextPropagator {
    /// The propagator.
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

impl TextMapPropagator for W3cTraceContextPropagator {
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        let span = cx.span();
        let sc = span.span_context();
        // A lens span's context left current on this thread after the span exited on another
        // (see `layer/activation.rs`) is never injected; this thread drops it now.
        let stale = crate::layer::activation::is_stale(sc.span_id());
        crate::layer::activation::clear_stale();
        if !sc.is_valid() || stale {
            return;
        }
        injector.set(
            TRACEPARENT,
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8() & KEPT_FLAGS
            ),
        );
        let whole = match cx.get::<CarriedTraceState>() {
            Some(carried) if carried.is_of(sc) => carried.header.clone(),
            _ => recall(sc),
        };
        let state = whole.unwrap_or_else(|| sc.trace_state().header());
        if !state.is_empty() {
            injector.set(TRACESTATE, state);
        }
    }

    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        match extract_span_context(extractor) {
            Some((sc, carried)) => {
                remember(&carried);
                cx.with_remote_span_context(sc).with_value(carried)
            }
            None => cx.clone(),
        }
    }

    fn fields(&self) -> FieldIter<'_> {
        FieldIter::new(FIELDS.as_slice())
    }
}

/// The `tracestate` list extracted with a remote span context, carried in the extracted
/// context beside it: `header` is the whole list when OpenTelemetry's `TraceState` cannot hold
/// it, `None` when the span context's `TraceState` is all of it.
#[derive(Clone, Debug)]
struct CarriedTraceState {
    trace_id: TraceId,
    /// The members the span context's `TraceState` holds.
    held: TraceState,
    /// The whole list, as sent on, when `held` is not all of it.
    header: Option<String>,
}

impl CarriedTraceState {
    /// Whether this list is the trace state of `sc`: the same trace, and a `TraceState` still
    /// the part of the list it held (a span that changed its `TraceState` sends that instead).
    fn is_of(&self, sc: &SpanContext) -> bool {
        self.trace_id == sc.trace_id() && self.held == *sc.trace_state()
    }
}

/// Keeps `carried` for injections from contexts without it ([`REMEMBERED`]), replacing the
/// list kept for its trace and held part; an extraction whose `TraceState` holds its whole list
/// forgets that one.
fn remember(carried: &CarriedTraceState) {
    if carried.header.is_none() && !ANY_REMEMBERED.load(Ordering::Relaxed) {
        return;
    }
    let mut kept = REMEMBERED.lock();
    kept.retain(|k| !(k.trace_id == carried.trace_id && k.held == carried.held));
    if carried.header.is_some() {
        if kept.len() == MAX_REMEMBERED {
            kept.pop_front();
        }
        kept.push_back(carried.clone());
        ANY_REMEMBERED.store(true, Ordering::Relaxed);
    }
}

/// The whole list kept for `sc`'s trace and `TraceState`, if there is one.
fn recall(sc: &SpanContext) -> Option<String> {
    if !ANY_REMEMBERED.load(Ordering::Relaxed) {
        return None;
    }
    REMEMBERED
        .lock()
        .iter()
        .rev()
        .find(|k| k.is_of(sc))
        .and_then(|k| k.header.clone())
}

/// The remote span context in `extractor`'s headers, when its one `traceparent` is valid, and
/// the `tracestate` list extracted with it.
fn extract_span_context(extractor: &dyn Extractor) -> Option<(SpanContext, CarriedTraceState)> {
    let parents = extractor.get_all(TRACEPARENT)?;
    let [parent] = parents.as_slice() else {
        return None;
    };
    let (trace_id, span_id, flags) = parse_traceparent(parent)?;
    // Read only once the `traceparent` is known to be valid, as the specification asks.
    let members = extractor
        .get_all(TRACESTATE)
        .map(|headers| parse_tracestate(&headers))
        .unwrap_or_default();
    let (held, whole) = holdable(&members);
    let carried = CarriedTraceState {
        trace_id,
        held: held.clone(),
        header: (!whole).then(|| {
            members
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        }),
    };
    Some((
        SpanContext::new(trace_id, span_id, flags, true, held),
        carried,
    ))
}

/// The ids and kept flags of a `traceparent` value; `None` when it breaks a rule (see
/// [`W3cTraceContextPropagator`]).
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let v = value.trim_matches(OWS).as_bytes();
    if v.len() < TRACEPARENT_LEN || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = lower_hex(&v[..2])?;
    let trace_id = lower_hex(&v[3..35])?;
    let span_id = lower_hex(&v[36..52])?;
    let flags = lower_hex(&v[53..TRACEPARENT_LEN])?;
    let rest = &v[TRACEPARENT_LEN..];
    let layout = match version {
        0x00 => rest.is_empty(),
        0xff => false,
        // A later version: its own fields may follow, after a dash; they are not read.
        _ => rest.first().is_none_or(|&b| b == b'-'),
    };
    if !layout || trace_id == 0 || span_id == 0 {
        return None;
    }
    // The fields are 32, 16 and 2 digits long: the casts keep every bit.
    Some((
        TraceId::from(trace_id),
        SpanId::from(span_id as u64),
        TraceFlags::new(flags as u8 & KEPT_FLAGS),
    ))
}

/// The number `digits` spell in lowercase hex (at most 32 of them), if they all are
/// lowercase hex digits.
fn lower_hex(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0_u128, |n, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u128::from(digit))
    })
}

/// The members of the `tracestate` header values `headers` (one list, in order); none when the
/// list breaks a rule (see [`W3cTraceContextPropagator`]).
fn parse_tracestate<'a>(headers: &[&'a str]) -> Vec<(&'a str, &'a str)> {
    let mut members: Vec<(&str, &str)> = Vec::new();
    let mut count = 0;
    for member in headers.iter().flat_map(|h| h.split(',')) {
        let member = member.trim_matches(OWS);
        if member.is_empty() {
            continue;
        }
        count += 1;
        if count > MAX_MEMBERS {
            return Vec::new();
        }
        let Some((key, value)) = member.split_once('=') else {
            return Vec::new();
        };
        if !valid_key(key) || !valid_value(value) {
            return Vec::new();
        }
        // The specification lets a vendor drop duplicate keys: the first is kept.
        if !members.iter().any(|&(k, _)| k == key) {
            members.push((key, value));
        }
    }
    members
}

/// `key = ( lcalpha / DIGIT ) 0*255 ( lcalpha / DIGIT / "_" / "-" / "*" / "/" / "@" )`.
fn valid_key(key: &str) -> bool {
    let b = key.as_bytes();
    (1..=256).contains(&b.len())
        && matches!(b[0], b'a'..=b'z' | b'0'..=b'9')
        && b.iter()
            .all(|&c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/' | b'@'))
}

/// `value = 0*255( %x20 / nblk-chr ) nblk-chr`, `nblk-chr` any printable ASCII character but
/// `,`, `=` and the space.
fn valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    (1..=256).contains(&b.len())
        && b.last() != Some(&b' ')
        && b.iter()
            .all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

/// The `TraceState` of valid `members`, without those whose keys OpenTelemetry's `TraceState`
/// refuses (see [`W3cTraceContextPropagator`]), and whether it holds them all.
fn holdable(members: &[(&str, &str)]) -> (TraceState, bool) {
    if members.is_empty() {
        return (TraceState::default(), true);
    }
    match TraceState::from_key_value(members.iter().copied()) {
        Ok(state) => (state, true),
        Err(_) => {
            let held = members
                .iter()
                .copied()
                .filter(|&member| TraceState::from_key_value([member]).is_ok());
            (TraceState::from_key_value(held).unwrap_or_default(), false)
        }
    }
}
