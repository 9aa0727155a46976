//! OTLP/JSON requests, as the OpenTelemetry Collector's `file` exporter writes them (`format:
//! json`): one `ExportTraceServiceRequest`, `ExportMetricsServiceRequest` or
//! `ExportLogsServiceRequest` per line.
//!
//! [`parse_request`] reads a line; a trace request's spans are turned into records of the console
//! layout ([`console_span`]) that [`super::parse_record`] reads like any rank's file. The OTLP
//! JSON mapping: keys in lowerCamelCase (snake_case accepted too), trace and span ids in hex,
//! times as nanoseconds since the epoch in a string (a number accepted), attributes as
//! `{"key", "value": AnyValue}` lists, enums as numbers or names. Metric and log requests are
//! recognised and not read.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};

/// What one line holds.
#[derive(Debug)]
pub enum Request {
    /// The resources of a trace request, with their spans.
    Traces(Vec<ResourceSpans>),
    /// A metric request (not read).
    Metrics,
    /// A log request (not read).
    Logs,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRequest {
    #[serde(default, alias = "resource_spans")]
    resource_spans: Option<Vec<ResourceSpans>>,
    #[serde(default, alias = "resource_metrics")]
    resource_metrics: Option<IgnoredAny>,
    #[serde(default, alias = "resource_logs")]
    resource_logs: Option<IgnoredAny>,
}

/// One resource and its spans.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSpans {
    /// The producing process.
    #[serde(default)]
    pub resource: Resource,
    /// Spans by instrumentation scope.
    #[serde(default, alias = "scope_spans")]
    pub scope_spans: Vec<ScopeSpans>,
}

/// `{"attributes": [...]}`.
#[derive(Debug, Default, Deserialize)]
pub struct Resource {
    /// Resource attributes.
    #[serde(default)]
    pub attributes: Vec<KeyValue>,
}

/// The spans of one scope.
#[derive(Debug, Deserialize)]
pub struct ScopeSpans {
    /// Spans.
    #[serde(default)]
    pub spans: Vec<OtlpSpan>,
}

/// `{"key": ..., "value": AnyValue}`.
#[derive(Debug, Deserialize)]
pub struct KeyValue {
    key: String,
    #[serde(default)]
    value: AnyValue,
}

/// An OTLP `AnyValue`: one of its fields is set.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyValue {
    #[serde(default, alias = "string_value")]
    string_value: Option<String>,
    #[serde(default, alias = "bool_value")]
    bool_value: Option<bool>,
    /// A string in OTLP/JSON (64-bit integers), a number accepted.
    #[serde(default, alias = "int_value")]
    int_value: Option<Value>,
    /// A number, or `"NaN"`, `"Infinity"`, `"-Infinity"`.
    #[serde(default, alias = "double_value")]
    double_value: Option<Value>,
    #[serde(default, alias = "array_value")]
    array_value: Option<Values>,
    #[serde(default, alias = "kvlist_value")]
    kvlist_value: Option<KeyValues>,
    /// Base64, kept as the string.
    #[serde(default, alias = "bytes_value")]
    bytes_value: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Values {
    #[serde(default)]
    values: Vec<AnyValue>,
}

#[derive(Debug, Deserialize)]
struct KeyValues {
    #[serde(default)]
    values: Vec<KeyValue>,
}

impl AnyValue {
    /// The value as the console layout writes it: numbers, strings, booleans, arrays and maps;
    /// non-finite doubles as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
    fn into_json(self) -> Value {
        if let Some(s) = self.string_value {
            Value::String(s)
        } else if let Some(b) = self.bool_value {
            Value::Bool(b)
        } else if let Some(v) = self.int_value {
            match &v {
                Value::String(s) => s.parse::<i64>().map_or(v, Value::from),
                _ => v,
            }
        } else if let Some(v) = self.double_value {
            v
        } else if let Some(a) = self.array_value {
            Value::Array(a.values.into_iter().map(AnyValue::into_json).collect())
        } else if let Some(kv) = self.kvlist_value {
            Value::Object(attributes(kv.values))
        } else if let Some(b) = self.bytes_value {
            Value::String(b)
        } else {
            Value::Null
        }
    }
}

/// An attribute list as a map (a repeated key: the last one wins).
pub fn attributes(list: Vec<KeyValue>) -> Map<String, Value> {
    list.into_iter()
        .map(|kv| (kv.key, kv.value.into_json()))
        .collect()
}

/// Nanoseconds since the epoch, `None` when the value is not one.
#[derive(Debug, Default)]
struct Nanos(Option<u64>);

impl<'de> Deserialize<'de> for Nanos {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Nanos(match Value::deserialize(deserializer)? {
            Value::String(s) => s.trim().parse().ok(),
            Value::Number(n) => n.as_u64(),
            _ => None,
        }))
    }
}

/// One OTLP span.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OtlpSpan {
    #[serde(default, alias = "trace_id")]
    trace_id: String,
    #[serde(default, alias = "span_id")]
    span_id: String,
    #[serde(default, alias = "parent_span_id")]
    parent_span_id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default, alias = "start_time_unix_nano")]
    start_time_unix_nano: Nanos,
    #[serde(default, alias = "end_time_unix_nano")]
    end_time_unix_nano: Nanos,
    #[serde(default)]
    attributes: Vec<KeyValue>,
    #[serde(default)]
    events: Vec<OtlpEvent>,
    #[serde(default)]
    links: Vec<OtlpLink>,
    #[serde(default)]
    status: Option<OtlpStatus>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OtlpEvent {
    #[serde(default, alias = "time_unix_nano")]
    time_unix_nano: Nanos,
    #[serde(default)]
    name: String,
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OtlpLink {
    #[serde(default, alias = "trace_id")]
    trace_id: String,
    #[serde(default, alias = "span_id")]
    span_id: String,
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Debug, Deserialize)]
struct OtlpStatus {
    #[serde(default)]
    message: Option<String>,
    /// `0`/`1`/`2` or `STATUS_CODE_UNSET`/`_OK`/`_ERROR`.
    #[serde(default)]
    code: Option<Value>,
}

/// Whether a decoded stream starts with an OTLP/JSON request: `{` then a `resourceSpans`,
/// `resourceMetrics` or `resourceLogs` key (blanks allowed between).
pub fn starts_request(head: &[u8]) -> bool {
    let rest = head.trim_ascii_start();
    let Some(rest) = rest.strip_prefix(b"{") else {
        return false;
    };
    let rest = rest.trim_ascii_start();
    [
        &b"\"resourceSpans\""[..],
        b"\"resourceMetrics\"",
        b"\"resourceLogs\"",
        b"\"resource_spans\"",
        b"\"resource_metrics\"",
        b"\"resource_logs\"",
    ]
    .iter()
    .any(|key| rest.starts_with(key))
}

/// Parses one line; the error says why it was skipped.
pub fn parse_request(bytes: &[u8]) -> Result<Request, String> {
    let raw: RawRequest = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    match raw {
        RawRequest {
            resource_spans: Some(spans),
            ..
        } => Ok(Request::Traces(spans)),
        RawRequest {
            resource_metrics: Some(_),
            ..
        } => Ok(Request::Metrics),
        RawRequest {
            resource_logs: Some(_),
            ..
        } => Ok(Request::Logs),
        _ => Err("not an OTLP request (resourceSpans, resourceMetrics or resourceLogs)".into()),
    }
}

/// `0x` + the hex id, lowercase; `None` when empty or all zeros.
fn hex_id(id: &str) -> Option<String> {
    let id = id.trim();
    (!id.is_empty() && id.bytes().any(|b| b != b'0')).then(|| format!("0x{}", id.to_lowercase()))
}

/// Nanoseconds since the epoch as RFC 3339 UTC with nine fraction digits.
pub fn rfc3339(nanos: u64) -> String {
    let secs = nanos / 1_000_000_000;
    let frac = nanos % 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The console status code of an OTLP status.
fn status_code(code: Option<&Value>) -> &'static str {
    match code {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(1) => "OK",
            Some(2) => "ERROR",
            _ => "UNSET",
        },
        Some(Value::String(s)) => match s.trim_start_matches("STATUS_CODE_") {
            "OK" => "OK",
            "ERROR" => "ERROR",
            _ => "UNSET",
        },
        _ => "UNSET",
    }
}

/// The span as a record of the console layout (the keys [`super::parse_record`] reads), under
/// `resource` (`{"attributes": {...}}`); the error says why it was skipped.
pub fn console_span(span: OtlpSpan, resource: &Value) -> Result<Value, String> {
    let (Some(start), Some(end)) = (span.start_time_unix_nano.0, span.end_time_unix_nano.0) else {
        return Err(format!(
            "span {:?} without a valid startTimeUnixNano and endTimeUnixNano",
            span.name
        ));
    };
    let trace_id = hex_id(&span.trace_id).unwrap_or_default();
    let status = span.status.unwrap_or(OtlpStatus {
        message: None,
        code: None,
    });
    let events: Vec<Value> = span
        .events
        .into_iter()
        .filter_map(|e| {
            Some(json!({
                "name": e.name,
                "timestamp": rfc3339(e.time_unix_nano.0?),
                "attributes": attributes(e.attributes),
            }))
        })
        .collect();
    let links: Vec<Value> = span
        .links
        .into_iter()
        .map(|l| {
            json!({
                "context": {
                    "trace_id": hex_id(&l.trace_id).unwrap_or_default(),
                    "span_id": hex_id(&l.span_id).unwrap_or_default(),
                },
                "attributes": attributes(l.attributes),
            })
        })
        .collect();
    Ok(json!({
        "name": span.name,
        "context": { "trace_id": trace_id, "span_id": hex_id(&span.span_id).unwrap_or_default() },
        "parent_id": span.parent_span_id.as_deref().and_then(hex_id),
        "start_time": rfc3339(start),
        "end_time": rfc3339(end),
        "status": {
            "status_code": status_code(status.code.as_ref()),
            "description": status.message.filter(|m| !m.is_empty()),
        },
        "attributes": attributes(span.attributes),
        "events": events,
        "links": links,
        "resource": resource,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{Record, parse_record, parse_time_us};

    #[test]
    fn times_print_as_rfc3339_that_reads_back() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        let t = 1_795_989_600_123_456_789;
        assert_eq!(rfc3339(t), "2026-11-29T22:00:00.123456789Z");
        assert_eq!(parse_time_us(&rfc3339(t)), Some(1_795_989_600_123_456));
        assert_eq!(
            rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
    }

    #[test]
    fn a_trace_request_becomes_console_spans_with_typed_attributes() {
        let line = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"dl.rank","value":{"intValue":"3"}}]},"scopeSpans":[{"scope":{"name":"x"},"spans":[{"traceId":"0AF7651916CD43DD8448EB211C80319C","spanId":"b7ad6b7169203331","parentSpanId":"","name":"train_step","kind":1,"startTimeUnixNano":"1795989600000000000","endTimeUnixNano":"1795989600100000000","attributes":[{"key":"step","value":{"intValue":"7"}},{"key":"loss","value":{"doubleValue":0.5}},{"key":"ok","value":{"boolValue":true}},{"key":"dims","value":{"arrayValue":{"values":[{"intValue":"1"},{"stringValue":"a"}]}}}],"events":[{"timeUnixNano":"1795989600050000000","name":"e","attributes":[]}],"status":{"code":2,"message":"boom"}}]}]}]}"#;
        let Ok(Request::Traces(rs)) = parse_request(line) else {
            panic!("not a trace request")
        };
        let mut rs = rs.into_iter().next().unwrap();
        let resource = json!({ "attributes": attributes(rs.resource.attributes) });
        let span = rs.scope_spans.remove(0).spans.remove(0);
        let v = console_span(span, &resource).unwrap();
        let Ok(Record::Span(s)) = parse_record(v.to_string().as_bytes(), None) else {
            panic!("{v}")
        };
        assert_eq!(s.name, "train_step");
        assert_eq!(s.rank, Some(3));
        assert_eq!(s.context.trace_id, "0x0af7651916cd43dd8448eb211c80319c");
        assert_eq!(s.parent_id, None);
        assert_eq!(s.duration_us(), 100_000);
        assert_eq!(s.attributes["step"], 7);
        assert_eq!(s.attributes["loss"], 0.5);
        assert_eq!(s.attributes["dims"], json!([1, "a"]));
        assert_eq!(s.status.status_code, "ERROR");
        assert_eq!(s.status.description.as_deref(), Some("boom"));
        assert_eq!(s.events.len(), 1);

        assert!(matches!(
            parse_request(br#"{"resourceMetrics":[]}"#),
            Ok(Request::Metrics)
        ));
        assert!(matches!(
            parse_request(br#"{"resourceLogs":[]}"#),
            Ok(Request::Logs)
        ));
        assert!(parse_request(br#"{"name":"x"}"#).is_err());
        assert!(starts_request(b" { \"resourceLogs\": []}"));
        assert!(!starts_request(b"{\"name\": \"resourceSpans\"}"));
    }
}
