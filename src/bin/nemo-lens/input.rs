//! Streaming reader for per-rank console output (plain or gzip).
//!
//! A console file is a stream of JSON records: finished spans (the layout of
//! `nemo_lens::export::console`, shared with Python NeMo Lens), metric batches
//! (`{"resource_metrics": [...]}`) and log records (the Python SDK's `LogRecord.to_json` layout,
//! also written by `nemo_lens::export::console_logs`). Records are one per line (compact JSONL)
//! or pretty-printed over many lines (Python Lens 0.1.0 writes `to_json(indent=4)`), mixed freely;
//! [`framing`] splits the stream. [`for_each_record`] parses each record into a [`Record`] and
//! hands it to a callback, so memory does not grow with the input: at most
//! [`ReadOptions::max_record_bytes`] of one record are held, and a longer record is skipped
//! unread and counted.
//!
//! Bad input is never fatal: a record that is not valid JSON, not UTF-8, cut short, too long, or
//! neither a span, a metric batch nor a log record is skipped and counted in [`Stats`] (with the
//! first few locations kept for the report); a gzip stream cut short ends its file early and is
//! reported the same way. Only a file that cannot be opened at all is an error.
//!
//! Python ranks write non-finite floats as bare `NaN` / `Infinity` tokens (not JSON); a record
//! that fails to parse is rescanned and those tokens are read as the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"`, as this crate's console exporter writes them, so a span with a
//! NaN loss is kept. Timestamps are RFC 3339 with any offset ([`timestamp`]).
//!
//! Gzip is recognised by its magic bytes (`1f 8b`), whatever the file name; concatenated gzip
//! members (what `cat a.gz b.gz` gives) are read as one stream.

mod framing;
mod timestamp;

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use flate2::read::MultiGzDecoder;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nemo_lens::semconv;
use serde::Deserialize;
use serde_json::{Map, Value};

/// How many skipped-line locations the report quotes.
const MAX_EXAMPLES: usize = 5;

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
}

impl ResourceAttributes {
    /// The rank, from `dl.rank`, else `nv.dl.rank` (numbers or numeric strings).
    pub fn rank(&self) -> Option<i64> {
        [&self.dl_rank, &self.nv_dl_rank]
            .into_iter()
            .flatten()
            .find_map(|v| match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s.trim().parse().ok(),
                _ => None,
            })
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
    start_time: Option<String>,
    #[serde(default)]
    end_time: Option<String>,
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

pub use timestamp::parse_time_us;

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
    let raw: RawRecord = match serde_json::from_slice(bytes) {
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
        let start_us =
            parse_time_us(&start).ok_or_else(|| format!("bad start_time {}", quote(&start)))?;
        let end_us = parse_time_us(&end).ok_or_else(|| format!("bad end_time {}", quote(&end)))?;
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

/// The rank in a file name: the digits after the last `rank` (`spans-rank3.jsonl`,
/// `rank_12.jsonl.gz`, `job.rank-7.jsonl`), case-insensitive.
pub fn rank_from_file_name(path: &Path) -> Option<i64> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    name.rmatch_indices("rank").find_map(|(i, _)| {
        let rest = name[i + 4..].trim_start_matches(['-', '_', '.', '=']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// Counts of what was read and skipped.
#[derive(Debug, Default)]
pub struct Stats {
    /// Records read (every frame: parsed, malformed, cut or too long).
    pub records: u64,
    /// Span records.
    pub spans: u64,
    /// Metric batches.
    pub metric_batches: u64,
    /// Log records.
    pub log_records: u64,
    /// Records skipped as malformed (not JSON, cut short, not UTF-8, unknown shape).
    pub skipped: u64,
    /// Records skipped unread because they exceed [`ReadOptions::max_record_bytes`].
    pub too_long: u64,
    /// Bytes of the records skipped for their length.
    pub too_long_bytes: u64,
    /// Files cut short by a read or decompression error.
    pub truncated_files: u64,
    /// `file:line: reason` of the first skipped records and cut files.
    pub examples: Vec<String>,
}

impl Stats {
    fn note(&mut self, what: String) {
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(what);
        }
    }

    /// Prints the skipped-record report to stderr (nothing when nothing was skipped).
    pub fn report(&self) {
        if self.skipped == 0 && self.too_long == 0 && self.truncated_files == 0 {
            return;
        }
        eprintln!(
            "warning: skipped {} malformed record(s) and {} record(s) over the size limit \
             ({} bytes) of {} read; {} file(s) ended early",
            self.skipped, self.too_long, self.too_long_bytes, self.records, self.truncated_files
        );
        for e in &self.examples {
            eprintln!("  {e}");
        }
    }

    /// The counts as JSON (for `otherData` and `summary --json`).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "records": self.records,
            "spans": self.spans,
            "metric_batches": self.metric_batches,
            "log_records": self.log_records,
            "skipped_records": self.skipped,
            "too_long_records": self.too_long,
            "too_long_bytes": self.too_long_bytes,
            "truncated_files": self.truncated_files,
        })
    }
}

/// How input is read (shared by `perfetto` and `summary`).
#[derive(Debug, Clone, clap::Args)]
pub struct ReadOptions {
    /// Longest record read, in bytes (suffix K, M or G for KiB, MiB, GiB). Longer records (a
    /// line with no end, a span with huge attributes) are skipped unread and counted.
    #[arg(long, value_name = "BYTES", default_value = "16M", value_parser = parse_bytes)]
    pub max_record_bytes: usize,
}

/// Parses `--max-record-bytes` (`65536`, `64K`, `16M`, `1G`; at least 1 KiB).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (digits, unit) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("expected a byte count such as 65536, 64K or 16M, got {s:?}"))?;
    match n.checked_mul(unit) {
        Some(v) if v >= 1024 => Ok(v),
        _ => Err(format!(
            "expected a byte count from 1K to the address space, got {s:?}"
        )),
    }
}

/// A file being read, as the callback sees it.
#[derive(Debug)]
pub struct Source {
    /// Position on the command line.
    pub index: usize,
    /// Rank from the file name, if any.
    pub file_rank: Option<i64>,
}

/// Counts the bytes read from the file (before decompression) into the progress bar.
struct Counting<R> {
    inner: R,
    progress: ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.inc(n as u64);
        Ok(n)
    }
}

fn open(path: &Path, progress: &ProgressBar) -> Result<Box<dyn BufRead>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut raw = BufReader::with_capacity(
        256 * 1024,
        Counting {
            inner: file,
            progress: progress.clone(),
        },
    );
    let head = raw
        .fill_buf()
        .with_context(|| format!("cannot read {}", path.display()))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            256 * 1024,
            MultiGzDecoder::new(raw),
        )))
    } else {
        Ok(Box::new(raw))
    }
}

/// A progress bar over the input bytes on stderr, drawn only when stderr is a terminal.
pub fn progress_bar(paths: &[PathBuf], enabled: bool) -> ProgressBar {
    if !enabled || !io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    }
    let total = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Reads every file in order and calls `f` for each record.
///
/// Returns what was read and skipped. An error from `f`, or a file that cannot be opened, stops
/// the reading and is returned.
pub fn for_each_record(
    paths: &[PathBuf],
    options: &ReadOptions,
    progress: &ProgressBar,
    mut f: impl FnMut(&Source, Record) -> Result<()>,
) -> Result<Stats> {
    let mut stats = Stats::default();
    for (index, path) in paths.iter().enumerate() {
        let source = Source {
            index,
            file_rank: rank_from_file_name(path),
        };
        let mut framer = framing::Framer::new(open(path, progress)?, options.max_record_bytes);
        loop {
            let frame = match framer.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    stats.truncated_files += 1;
                    stats.note(format!(
                        "{}: stopped at line {}: {e}",
                        path.display(),
                        framer.line()
                    ));
                    break;
                }
            };
            stats.records += 1;
            let at = || format!("{}:{}", path.display(), framer.start_line());
            let reason = match frame {
                framing::Frame::Record => match parse_record(framer.record(), source.file_rank) {
                    Ok(record) => {
                        match &record {
                            Record::Span(_) => stats.spans += 1,
                            Record::Metrics { .. } => stats.metric_batches += 1,
                            Record::Log(_) => stats.log_records += 1,
                        }
                        f(&source, record)?;
                        continue;
                    }
                    Err(reason) => reason,
                },
                framing::Frame::TooLong { bytes } => {
                    stats.too_long += 1;
                    stats.too_long_bytes += bytes;
                    stats.note(format!(
                        "{}: record of {bytes} bytes skipped (over --max-record-bytes {})",
                        at(),
                        options.max_record_bytes
                    ));
                    continue;
                }
                framing::Frame::Cut => "record cut short".to_owned(),
                framing::Frame::NotJson => "not a JSON object".to_owned(),
            };
            stats.skipped += 1;
            stats.note(format!("{}: {reason}", at()));
        }
    }
    progress.finish_and_clear();
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_from_file_names() {
        let r = |s: &str| rank_from_file_name(Path::new(s));
        assert_eq!(r("spans-rank3.jsonl"), Some(3));
        assert_eq!(r("/x/rank7/job.RANK_12.jsonl.gz"), Some(12));
        assert_eq!(r("job.rank-7.jsonl"), Some(7));
        assert_eq!(r("ranking.jsonl"), None);
        assert_eq!(r("spans.jsonl"), None);
    }

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
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("16M"), Ok(16 << 20));
        assert_eq!(parse_bytes(" 64k "), Ok(64 << 10));
        assert_eq!(parse_bytes("2048"), Ok(2048));
        assert!(parse_bytes("12").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999G").is_err());
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
