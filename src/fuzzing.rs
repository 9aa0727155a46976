//! Entry points for the fuzz targets in `fuzz/`, compiled only with `--cfg fuzzing` (never in
//! the documented API): each runs one reader of outside input on the fuzzer's bytes through the
//! crate's internal functions, and panics where a property of its result does not hold.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::BaggagePropagator;

use crate::config::env::{self, Env};
use crate::config::resource::{self, participant};
use crate::propagation::w3c::W3cTraceContextPropagator;
use crate::queue::{budget, config::QueueConfig};
use crate::rank::{groups, strategy};
use crate::{LensConfig, carrier};

/// `NAME=VALUE` lines as an environment (a later line wins; bytes that are not UTF-8 become
/// U+FFFD, as a lookup hands over only strings).
pub fn environment(data: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(data)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every variable reader of setup on `vars`: the `NEMO_LENS_*` configuration (also as
/// `MEGATRON_OTEL_*` over `NEMO_LENS_*`), its checks, the span groups, export strategy and
/// flight recorder it names, the queues, limits, OTLP destinations, the resource's variables
/// (with `OTEL_RESOURCE_ATTRIBUTES` and the launcher's; nothing detected on the host, so an
/// input costs its parsing only) and the launcher's `TRACEPARENT`. Errors are expected; a
/// panic is the finding.
pub fn configuration(vars: &HashMap<String, String>) {
    let lookup = |k: &str| vars.get(k).cloned();
    let _ = LensConfig::from_lookup("MEGATRON_OTEL", Some("NEMO_LENS"), lookup);
    if let Ok(config) = LensConfig::from_lookup("NEMO_LENS", None, lookup) {
        let _ = config.validate();
        let _ = strategy::get_export_strategy(&config.export.strategy, "NEMO_LENS_EXPORT_STRATEGY");
        let _ = groups::resolve_known(&config.groups.span_groups);
        let _ = groups::resolve(&config.groups.trace_per, "NEMO_LENS_TRACE_PER");
        let _ = crate::flight_recorder::Plan::new(&config);
        let (rank, world_size) =
            participant::resolve((None, false, None), (None, false, None), &lookup);
        let who = participant::Participant {
            rank: rank.value,
            world_size: world_size.value,
            legacy_rank_keys: false,
            run_id_configured: !config.identity.run_id.is_empty(),
        };
        let _ = resource::resolve_run_id(&config.identity.run_id, &lookup);
        let _ = resource::read_variables(&config, &who, &lookup);
    }
    let _ = QueueConfig::from_env("OTEL_BSP", &lookup);
    let _ = QueueConfig::from_env_over("OTEL_BLRP", QueueConfig::logs_default(), &lookup);
    let env = Env::new(&lookup);
    let _ = env::value_length_limit(env);
    let _ = env::log_value_length_limit(env);
    let _ = budget::queue_max_bytes(env);
    let _ = env.positive_millis("OTEL_METRIC_EXPORT_INTERVAL");
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    {
        use crate::export::otlp::{Signal, endpoint::Destination, protocol_for};
        for signal in [Signal::Traces, Signal::Metrics, Signal::Logs] {
            if let Ok(protocol) = protocol_for(signal, env) {
                let _ = Destination::from_env(signal, protocol, env);
            }
        }
    }
    let _ = crate::propagation::env_parent(&lookup);
}

/// `OTEL_RESOURCE_ATTRIBUTES` read, written and read again: the second reading gives what the
/// first did (the format keeps every key and value that [`carrier::parse`] can give). Extending
/// `text` with its own attributes keeps them (in another order).
pub fn resource_attributes(text: &str) {
    let first = carrier::parse(text);
    let written = carrier::format(&first);
    let again = carrier::parse(&written);
    assert_eq!(first, again, "{text:?} read back from {written:?}");
    // Extending moves the keys it sets to the end: the same attributes, in another order.
    let extended =
        String::from_utf8_lossy(&carrier::extend_bytes(text.as_bytes(), &first, true)).into_owned();
    let sorted = |mut kvs: Vec<opentelemetry::KeyValue>| {
        kvs.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        kvs
    };
    assert_eq!(
        sorted(carrier::parse(&extended)),
        sorted(first.clone()),
        "{text:?} extended to {extended:?}"
    );
    let _ = carrier::extend_bytes(text.as_bytes(), &first, false);
}

/// The carrier in `data`: a JSON payload as ranks exchange it, else three lines: `traceparent`,
/// `tracestate`, `baggage`.
pub fn carrier(data: &[u8]) -> HashMap<String, String> {
    crate::propagation::decode_carrier(data).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(data);
        ["traceparent", "tracestate", "baggage"]
            .into_iter()
            .zip(text.split('\n'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

/// Extracts `carrier` with nemo-lens's propagators and injects the context again: what is
/// written must be valid W3C Trace Context and Baggage, and extracting it must give the same
/// span context.
pub fn propagation(carrier: &HashMap<String, String>) {
    let cx = crate::propagation::extract_context(carrier);
    let out = inject(&cx);
    let sc = cx.span().span_context().clone();
    match out.get("traceparent") {
        Some(parent) => {
            assert!(sc.is_valid());
            assert!(valid_traceparent(parent), "traceparent {parent:?}");
        }
        None => assert!(!sc.is_valid(), "a valid context was not injected"),
    }
    if let Some(state) = out.get("tracestate") {
        assert!(valid_tracestate(state), "tracestate {state:?}");
    }
    if let Some(baggage) = out.get("baggage") {
        assert!(valid_baggage(baggage), "baggage {baggage:?}");
    }
    let again = crate::propagation::extract_context(&out);
    let sc2 = again.span().span_context().clone();
    assert_eq!(sc.trace_id(), sc2.trace_id());
    assert_eq!(sc.span_id(), sc2.span_id());
    assert_eq!(sc.trace_flags(), sc2.trace_flags());
    assert_eq!(sc.trace_state().header(), sc2.trace_state().header());
}

fn inject(cx: &Context) -> HashMap<String, String> {
    let mut out = HashMap::new();
    W3cTraceContextPropagator::new().inject_context(cx, &mut out);
    BaggagePropagator::new().inject_context(cx, &mut out);
    out
}

/// `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, ids not all zero.
fn valid_traceparent(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0')
        && parts[2].bytes().any(|b| b != b'0')
}

/// At most 32 `key=value` members, keys as Trace Context Level 2's,
/// values printable ASCII but `,` and `=`, not ending in a space; no key twice.
fn valid_tracestate(v: &str) -> bool {
    let mut keys = Vec::new();
    for member in v.split(',') {
        let Some((key, value)) = member.split_once('=') else {
            return false;
        };
        // Trace Context Level 2: `@` anywhere after the first character.
        let kb = key.as_bytes();
        let key_ok = (1..=256).contains(&kb.len())
            && matches!(kb[0], b'a'..=b'z' | b'0'..=b'9')
            && kb.iter().all(
                |&c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/' | b'@'),
            );
        let vb = value.as_bytes();
        let value_ok = (1..=256).contains(&vb.len())
            && vb.last() != Some(&b' ')
            && vb
                .iter()
                .all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=');
        if !key_ok || !value_ok || keys.contains(&key) {
            return false;
        }
        keys.push(key);
    }
    !keys.is_empty() && keys.len() <= 32
}

/// W3C Baggage: `key=value` members (properties after `;`) separated by `,`; keys are tokens,
/// values `baggage-octet`s or percent escapes; at most 180 members and 8192 bytes.
fn valid_baggage(v: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let octets = |s: &str| {
        s.bytes()
            .all(|b| matches!(b, 0x21 | 0x23..=0x2b | 0x2d..=0x3a | 0x3c..=0x5b | 0x5d..=0x7e))
    };
    let members: Vec<&str> = v.split(',').collect();
    v.len() <= 8192
        && members.len() <= 180
        && members.iter().all(|member| {
            let mut parts = member.split(';');
            let first = parts.next().unwrap_or_default();
            let Some((key, value)) = first.split_once('=') else {
                return false;
            };
            token(key.trim_matches([' ', '\t']))
                && octets(value.trim_matches([' ', '\t']))
                && parts.all(|p| {
                    let p = p.trim_matches([' ', '\t']);
                    match p.split_once('=') {
                        Some((k, v)) => {
                            token(k.trim_matches([' ', '\t']))
                                && octets(v.trim_matches([' ', '\t']))
                        }
                        None => token(p),
                    }
                })
        })
}

/// The flight recorder's control file: the group spec and step count it gives, and the groups
/// they resolve to. A count is never zero and the spec never holds an empty name.
pub fn control_file(text: &str) {
    let (spec, count) = crate::flight_recorder::control::parse(text);
    assert_ne!(count, Some(0));
    assert!(
        spec.is_empty() || spec.split(',').all(|w| !w.is_empty()),
        "{spec:?}"
    );
    let _ = groups::resolve(&spec, "NEMO_LENS_CONTROL_FILE");
    let _ = groups::resolve_known(&spec);
}

/// An epoch-seconds value (`emit_span`, `emit-spans --span`): parsed, and converted to
/// nanoseconds when it parses.
pub fn epoch_seconds(text: &str) {
    if let Ok(t) = text.parse::<crate::EpochSeconds>() {
        let _ = t.to_nanos("START");
    }
}

/// A collector's answer to an OTLP trace export: the spans its partial success says it rejected
/// (none when the answer is not an `ExportTraceServiceResponse`). Never more than the answer's
/// bytes could count.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub fn export_response(data: &[u8]) {
    let rejected = crate::export::otlp::rejected_spans(data);
    assert!(rejected == 0 || !data.is_empty());
}
