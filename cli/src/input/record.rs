//! The records of a console file: spans, metric batches and log records, as parsed.
//!
//! [`parse_record`] reads one record's bytes (from [`super::framing`]) into a [`Record`]. Only the
//! keys the tools use are kept; resource attributes other than the rank and host are skipped while
//! parsing. A record that is none of the three shapes is an error naming what was expected.

use nemo_lens::semconv;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::timestamp::parse_time_us;

/// `{"trace_id": "0x…", "span_id": "0x…"}`.
#[derive(Debug, Deserialize)]
pub struct SpanContextLine {
    /// `0x` + 32 hex digits.
    pub trace_id: String,
    /// `0x` + 16 hex digits.
    pub span_id: String,
}

/// `{"status_code": "ERROR", "description": "…"}`.
#[derive(Debug, Default, Deserialize)]
pub struct StatusLine {
    /// `UNSET`, `OK` or `ERROR`.
    pub status_code: String,
    /// Present for `ERROR` with a message.
    #[serde(default)]
    pub description: Option<String>,
}

/// One span event.
#[derive(Debug, Deserialize)]
pub struct EventLine {
    /// Event name.
    pub name: String,
    /// RFC 3339 UTC timestamp.
    pub timestamp: String,
    /// Event attributes.
    #[serde(default)]
    pub attributes: Map<String, Value>,
}

/// One span link.
#[derive(Debug, Deserialize)]
pub struct LinkLine {
    /// The linked span.
    pub context: SpanContextLine,
    /// Link attributes.
    #[serde(default)]
    pub attributes: Map<String, Value>,
}

/// The only resource attributes the tools need; the rest is skipped while parsing.
#[derive(Debug, Default, Deserialize)]
pub struct ResourceAttributes {
    /// `dl.rank`.
    #[serde(rename = "dl.rank", default)]
    pub dl_rank: Option<Value>,
    /// `nv.dl.rank` (nightly Python).
    #[serde(rename = "nv.dl.rank", default)]
    pub nv_dl_rank: Option<Value>,
    /// `host.name`.
    #[serde(rename = "host.name", default)]
    pub host_name: Option<String>,
    /// `dl.world_size`.
    #[serde(rename = "dl.world_size", default)]
    pub dl_world_size: Option<Value>,
    /// `nv.dl.world_size` (nightly Python).
    #[serde(rename = "nv.dl.world_size", default)]
    pub nv_dl_world_size: Option<Value>,
}

impl ResourceAttributes {
    /// The rank, from `dl.rank`, else `nv.dl.rank` (numbers or numeric strings).
    pub fn rank(&self) -> Option<i64> {
        [&self.dl_rank, &self.nv_dl_rank]
            .into_iter()
            .flatten()
            .find_map(as_int)
    }

    /// The world size, from `dl.world_size`, else `nv.dl.world_size`.
    pub fn world_size(&self) -> Option<i64> {
        [&self.dl_world_size, &self.nv_dl_world_size]
            .into_iter()
            .flatten()
            .find_map(as_int)
    }
}

/// An integer attribute: a number or a numeric string.
pub(super) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `{"attributes": {...}, "schema_url": ""}`.
#[derive(Debug, Default, Deserialize)]
pub struct ResourceLine {
    /// The attributes the tools read.
    #[serde(default)]
    pub attributes: ResourceAttributes,
}

/// One metric data point (number or histogram).
#[derive(Debug, Deserialize)]
pub struct DataPoint {
    /// Point attributes.
    #[serde(default)]
    pub attributes: Map<String, Value>,
    /// Nanoseconds since the epoch.
    #[serde(default)]
    pub time_unix_nano: Option<f64>,
    /// Gauge and sum points.
    #[serde(default)]
    pub value: Option<f64>,
    /// Histogram points.
    #[serde(default)]
    pub sum: Option<f64>,
    /// Histogram points.
    #[serde(default)]
    pub count: Option<f64>,
}

/// One metric.
#[derive(Debug, Deserialize)]
pub struct Metric {
    /// Instrument name.
    pub name: String,
    /// Points.
    pub data: MetricData,
}

/// `{"data_points": [...]}`.
#[derive(Debug, Deserialize)]
pub struct MetricData {
    /// Points.
    #[serde(default)]
    pub data_points: Vec<DataPoint>,
}

/// `{"scope": ..., "metrics": [...]}`.
#[derive(Debug, Deserialize)]
pub struct ScopeMetrics {
    /// Metrics of one scope.
    #[serde(default)]
    pub metrics: Vec<Metric>,
}

/// One element of `resource_metrics`.
#[derive(Debug, Deserialize)]
pub struct ResourceMetrics {
    /// The producing resource.
    #[serde(default)]
    pub resource: ResourceLine,
    /// Metrics by scope.
    #[serde(default)]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// A span's start or end time, read straight from the string (no copy): µs since the epoch, or
/// the value quoted for the skip reason.
#[derive(Debug)]
struct Time(Result<i64, String>);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Time;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an RFC 3339 timestamp")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Time, E> {
                Ok(Time(parse_time_us(v).ok_or_else(|| quote(v))))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// A record as parsed: every key optional, classified afterwards (cheaper than an untagged enum,
/// which would buffer the whole record).
#[derive(Debug, Deserialize)]
struct RawRecord {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    context: Option<SpanContextLine>,
    #[serde(default)]
    parent_id: Option<String>,
    #[serde(default)]
    start_time: Option<Time>,
    #[serde(default)]
    end_time: Option<Time>,
    #[serde(default)]
    status: Option<StatusLine>,
    /// `null` in a log record without attributes.
    #[serde(default)]
    attributes: Option<Map<String, Value>>,
    #[serde(default)]
    events: Vec<EventLine>,
    #[serde(default)]
    links: Vec<LinkLine>,
    #[serde(default)]
    resource: Option<ResourceLine>,
    #[serde(default)]
    resource_metrics: Option<Vec<ResourceMetrics>>,
    // Log records.
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    severity_text: Option<String>,
    #[serde(default)]
    severity_number: Option<i64>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    observed_timestamp: Option<String>,
    #[serde(default)]
    trace_id: Option<String>,
    #[serde(default)]
    span_id: Option<String>,
}

/// A finished span, with its times in microseconds since the Unix epoch.
#[derive(Debug)]
pub struct Span {
    /// Span name.
    pub name: String,
    /// Trace and span id.
    pub context: SpanContextLine,
    /// Parent span id (`0x…`), `None` for a root.
    pub parent_id: Option<String>,
    /// Start, µs since the epoch.
    pub start_us: i64,
    /// End, µs since the epoch.
    pub end_us: i64,
    /// Status.
    pub status: StatusLine,
    /// Span attributes.
    pub attributes: Map<String, Value>,
    /// Span events.
    pub events: Vec<EventLine>,
    /// Span links.
    pub links: Vec<LinkLine>,
    /// Rank: the resource's `dl.rank`, else the file name's.
    pub rank: Option<i64>,
    /// The resource's `host.name`.
    pub host: Option<String>,
    /// The resource's `dl.world_size` (or `nv.dl.world_size`).
    pub world_size: Option<i64>,
}

impl Span {
    /// Duration in µs (never negative; timestamps are within years 0000–9999, so the difference
    /// cannot overflow).
    pub fn duration_us(&self) -> i64 {
        (self.end_us - self.start_us).max(0)
    }

    /// Whether the closer ended this span at shutdown (`nemo.span.truncated = true`).
    pub fn is_truncated(&self) -> bool {
        matches!(
            self.attributes.get(semconv::NEMO_SPAN_TRUNCATED),
            Some(Value::Bool(true))
        )
    }
}

/// A log record (Python `LogRecord.to_json` layout).
#[derive(Debug)]
pub struct LogRecord {
    /// The message (`null` when the record has none).
    pub body: Value,
    /// `INFO`, `WARN`, … as written.
    pub severity_text: Option<String>,
    /// OpenTelemetry severity number (9 = INFO, 13 = WARN, 17 = ERROR).
    pub severity_number: Option<i64>,
    /// `timestamp`, else `observed_timestamp`, µs since the epoch.
    pub time_us: i64,
    /// Record attributes.
    pub attributes: Map<String, Value>,
    /// Trace id of the span the record was written in (`None` outside any span).
    pub trace_id: Option<String>,
    /// Span id of the span the record was written in.
    pub span_id: Option<String>,
    /// Rank: the resource's `dl.rank`, else the file name's.
    pub rank: Option<i64>,
    /// The resource's `host.name`.
    pub host: Option<String>,
}

impl LogRecord {
    /// The severity as a label: the text, else the number, else `UNSPECIFIED`.
    pub fn severity(&self) -> String {
        match (&self.severity_text, self.severity_number) {
            (Some(t), _) if !t.is_empty() => t.clone(),
            (_, Some(n)) => format!("SEVERITY_{n}"),
            _ => "UNSPECIFIED".to_owned(),
        }
    }
}

/// What one record holds.
#[derive(Debug)]
pub enum Record {
    /// A finished span.
    Span(Box<Span>),
    /// A metric batch, with the rank resolved like a span's.
    Metrics {
        /// The batch.
        batch: Vec<ResourceMetrics>,
        /// The file name's rank, for resources without `dl.rank`.
        file_rank: Option<i64>,
    },
    /// A log record.
    Log(Box<LogRecord>),
}

/// At most this many characters of a bad value are quoted in a skip reason.
const QUOTE_CHARS: usize = 40;

/// `value` quoted for an error message, cut to [`QUOTE_CHARS`] characters.
fn quote(value: &str) -> String {
    match value.char_indices().nth(QUOTE_CHARS) {
        Some((cut, _)) => format!("{:?}…", &value[..cut]),
        None => format!("{value:?}"),
    }
}

/// An id that is absent: missing, empty, or all zeros (a Rust record outside any span).
fn present_id(id: Option<String>) -> Option<String> {
    id.filter(|s| s.trim_start_matches("0x").bytes().any(|b| b != b'0'))
}

/// Python's `json.dumps` writes non-finite floats as the bare tokens `NaN`, `Infinity` and
/// `-Infinity`, which are not JSON. Returns the line with those tokens (outside strings) quoted,
/// as this crate's console exporter writes them, or `None` when there is none.
fn quote_non_finite(line: &[u8]) -> Option<Vec<u8>> {
    const TOKENS: [&[u8]; 3] = [b"-Infinity", b"Infinity", b"NaN"];
    let mut out = Vec::with_capacity(line.len() + 16);
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
        } else if let Some(t) = TOKENS.iter().find(|t| line[i..].starts_with(t)) {
            out.push(b'"');
            out.extend_from_slice(t);
            out.push(b'"');
            i += t.len();
            changed = true;
            continue;
        }
        out.push(b);
        i += 1;
    }
    changed.then_some(out)
}

/// Parses one record; the error says why it was skipped.
pub fn parse_record(bytes: &[u8], file_rank: Option<i64>) -> Result<Record, String> {
    // One UTF-8 check of the whole record is cheaper than serde_json's check of each string
    // (most of a record is short strings); invalid UTF-8 goes the byte way, for its message.
    let parsed = match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    };
    let raw: RawRecord = match parsed {
        Ok(raw) => raw,
        // Only a record that fails pays for the rescan.
        Err(e) => match quote_non_finite(bytes) {
            Some(fixed) => serde_json::from_slice(&fixed).map_err(|_| e.to_string())?,
            None => return Err(e.to_string()),
        },
    };
    if let Some(batch) = raw.resource_metrics {
        return Ok(Record::Metrics { batch, file_rank });
    }
    let resource = raw.resource.unwrap_or_default().attributes;
    let rank = resource.rank().or(file_rank);
    let attributes = raw.attributes.unwrap_or_default();
    if let (Some(name), Some(context), Some(start), Some(end)) =
        (raw.name, raw.context, raw.start_time, raw.end_time)
    {
        let start_us = start.0.map_err(|bad| format!("bad start_time {bad}"))?;
        let end_us = end.0.map_err(|bad| format!("bad end_time {bad}"))?;
        return Ok(Record::Span(Box::new(Span {
            name,
            context,
            parent_id: raw.parent_id,
            start_us,
            end_us,
            status: raw.status.unwrap_or_default(),
            attributes,
            events: raw.events,
            links: raw.links,
            rank,
            world_size: resource.world_size(),
            host: resource.host_name,
        })));
    }
    if raw.observed_timestamp.is_some()
        || raw.severity_number.is_some()
        || raw.severity_text.is_some()
    {
        let time = [&raw.timestamp, &raw.observed_timestamp]
            .into_iter()
            .flatten()
            .find_map(|t| parse_time_us(t))
            .ok_or_else(|| {
                "log record without a valid timestamp or observed_timestamp".to_owned()
            })?;
        return Ok(Record::Log(Box::new(LogRecord {
            body: raw.body.unwrap_or(Value::Null),
            severity_text: raw.severity_text,
            severity_number: raw.severity_number,
            time_us: time,
            attributes,
            trace_id: present_id(raw.trace_id),
            span_id: present_id(raw.span_id),
            rank,
            host: resource.host_name,
        })));
    }
    Err(
        "neither a span (name, context, start_time, end_time), a metric batch \
         (resource_metrics) nor a log record (body, severity, observed_timestamp)"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_non_finite_tokens_are_quoted_outside_strings_only() {
        let fixed =
            quote_non_finite(br#"{"a": NaN, "b": [Infinity, -Infinity], "c": "NaN \" NaN"}"#)
                .unwrap();
        assert_eq!(
            String::from_utf8(fixed).unwrap(),
            r#"{"a": "NaN", "b": ["Infinity", "-Infinity"], "c": "NaN \" NaN"}"#
        );
        assert_eq!(quote_non_finite(br#"{"a": "NaN"}"#), None);
    }

    #[test]
    fn a_bad_time_or_bad_utf8_is_a_skip_reason() {
        let span = |start: &str| {
            format!(
                r#"{{"name": "s", "context": {{"trace_id": "0x1", "span_id": "0x2"}}, "start_time": "{start}", "end_time": "2026-01-01T00:00:01Z"}}"#
            )
        };
        let Ok(Record::Span(s)) = parse_record(span("2026-01-01T00:00:00.5Z").as_bytes(), None)
        else {
            panic!("not a span")
        };
        assert_eq!(s.duration_us(), 500_000);
        let err = parse_record(span("yesterday").as_bytes(), None).unwrap_err();
        assert_eq!(err, r#"bad start_time "yesterday""#);
        let mut bytes = span("2026-01-01T00:00:00Z").into_bytes();
        bytes[10] = 0xff; // inside the name
        let err = parse_record(&bytes, None).unwrap_err();
        assert!(err.contains("unicode"), "{err}");
    }

    #[test]
    fn log_records_in_the_python_layout_are_read() {
        let line = br#"{"body": "step 1 done", "severity_number": 9, "severity_text": "INFO", "attributes": null, "dropped_attributes": 0, "timestamp": null, "observed_timestamp": "2026-11-30T16:48:32.517393+01:00", "trace_id": "", "span_id": "0x0000000000000000", "trace_flags": 0, "resource": {"attributes": {"dl.rank": 5}, "schema_url": ""}, "event_name": ""}"#;
        let Ok(Record::Log(log)) = parse_record(line, None) else {
            panic!("not a log record")
        };
        assert_eq!(log.body, "step 1 done");
        assert_eq!(log.severity(), "INFO");
        assert_eq!(log.rank, Some(5));
        assert_eq!(log.trace_id, None);
        assert_eq!(log.span_id, None);
        assert_eq!(
            log.time_us,
            parse_time_us("2026-11-30T15:48:32.517393Z").unwrap()
        );
        assert!(log.attributes.is_empty());
    }
}
