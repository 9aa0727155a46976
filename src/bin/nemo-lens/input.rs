//! Streaming reader for per-rank console JSONL (plain or gzip).
//!
//! Every line of a console file is one JSON object: a finished span (the layout of
//! `nemo_lens::export::console`, shared with Python NeMo Lens) or a metric batch
//! (`{"resource_metrics": [...]}`, written by a Python rank's console metric exporter).
//! [`for_each_record`] reads the files one line at a time through a reused buffer, parses the line
//! into a [`Record`] and hands it to a callback, so memory does not grow with the input.
//!
//! Bad input is never fatal: a line that is not valid JSON, not UTF-8, or neither a span nor a
//! metric batch is skipped and counted in [`Stats`] (with the first few locations kept for the
//! report); a gzip stream cut short ends its file early and is reported the same way. Only a file
//! that cannot be opened at all is an error.
//!
//! Python ranks write non-finite floats as bare `NaN` / `Infinity` tokens (not JSON); a line that
//! fails to parse is rescanned and those tokens are read as the strings `"NaN"`, `"Infinity"`,
//! `"-Infinity"`, as this crate's console exporter writes them, so a span with a NaN loss is kept.
//!
//! Gzip is recognised by its magic bytes (`1f 8b`), whatever the file name; concatenated gzip
//! members (what `cat a.gz b.gz` gives) are read as one stream.

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

/// A line as parsed: every key optional, classified afterwards (cheaper than an untagged enum,
/// which would buffer the whole line).
#[derive(Debug, Deserialize)]
struct RawLine {
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
    #[serde(default)]
    attributes: Map<String, Value>,
    #[serde(default)]
    events: Vec<EventLine>,
    #[serde(default)]
    links: Vec<LinkLine>,
    #[serde(default)]
    resource: Option<ResourceLine>,
    #[serde(default)]
    resource_metrics: Option<Vec<ResourceMetrics>>,
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
    /// Duration in µs (never negative).
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

/// What one line holds.
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
}

/// Parses an RFC 3339 UTC timestamp into µs since the epoch.
pub fn parse_time_us(s: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(s).ok()?;
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).ok(),
        Err(e) => i64::try_from(e.duration().as_micros()).ok().map(|v| -v),
    }
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

/// Parses one line; the error says why it was skipped.
pub fn parse_line(line: &[u8], file_rank: Option<i64>) -> Result<Record, String> {
    let raw: RawLine = match serde_json::from_slice(line) {
        Ok(raw) => raw,
        // Only a line that fails pays for the rescan.
        Err(e) => match quote_non_finite(line) {
            Some(fixed) => serde_json::from_slice(&fixed).map_err(|_| e.to_string())?,
            None => return Err(e.to_string()),
        },
    };
    if let Some(batch) = raw.resource_metrics {
        return Ok(Record::Metrics { batch, file_rank });
    }
    let (Some(name), Some(context), Some(start), Some(end)) =
        (raw.name, raw.context, raw.start_time, raw.end_time)
    else {
        return Err(
            "neither a span (name, context, start_time, end_time) nor a metric batch \
                    (resource_metrics)"
                .into(),
        );
    };
    let start_us = parse_time_us(&start).ok_or_else(|| format!("bad start_time {start:?}"))?;
    let end_us = parse_time_us(&end).ok_or_else(|| format!("bad end_time {end:?}"))?;
    let resource = raw.resource.unwrap_or_default().attributes;
    Ok(Record::Span(Box::new(Span {
        name,
        context,
        parent_id: raw.parent_id,
        start_us,
        end_us,
        status: raw.status.unwrap_or_default(),
        attributes: raw.attributes,
        events: raw.events,
        links: raw.links,
        rank: resource.rank().or(file_rank),
        host: resource.host_name,
    })))
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
    /// Non-empty lines read.
    pub lines: u64,
    /// Span lines.
    pub spans: u64,
    /// Metric-batch lines.
    pub metric_batches: u64,
    /// Lines skipped (malformed, truncated, not UTF-8, unknown shape).
    pub skipped: u64,
    /// Files cut short by a read or decompression error.
    pub truncated_files: u64,
    /// `file:line: reason` of the first skipped lines and cut files.
    pub examples: Vec<String>,
}

impl Stats {
    fn note(&mut self, what: String) {
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(what);
        }
    }

    /// Prints the skipped-line report to stderr (nothing when nothing was skipped).
    pub fn report(&self) {
        if self.skipped == 0 && self.truncated_files == 0 {
            return;
        }
        eprintln!(
            "warning: skipped {} malformed line(s) of {}; {} file(s) ended early",
            self.skipped, self.lines, self.truncated_files
        );
        for e in &self.examples {
            eprintln!("  {e}");
        }
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
    progress: &ProgressBar,
    mut f: impl FnMut(&Source, Record) -> Result<()>,
) -> Result<Stats> {
    let mut stats = Stats::default();
    let mut buf = Vec::with_capacity(64 * 1024);
    for (index, path) in paths.iter().enumerate() {
        let source = Source {
            index,
            file_rank: rank_from_file_name(path),
        };
        let mut reader = open(path, progress)?;
        let mut line_no = 0u64;
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    stats.truncated_files += 1;
                    stats.note(format!(
                        "{}: stopped after line {line_no}: {e}",
                        path.display()
                    ));
                    break;
                }
            }
            line_no += 1;
            let line = buf.trim_ascii();
            if line.is_empty() {
                continue;
            }
            stats.lines += 1;
            match parse_line(line, source.file_rank) {
                Ok(record) => {
                    match &record {
                        Record::Span(_) => stats.spans += 1,
                        Record::Metrics { .. } => stats.metric_batches += 1,
                    }
                    f(&source, record)?;
                }
                Err(reason) => {
                    stats.skipped += 1;
                    stats.note(format!("{}:{line_no}: {reason}", path.display()));
                }
            }
        }
        // Shrink a buffer that one huge line blew up.
        if buf.capacity() > 4 << 20 {
            buf = Vec::with_capacity(64 * 1024);
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
    fn times_parse_to_microseconds() {
        assert_eq!(
            parse_time_us("2026-11-29T22:09:34.298704Z"),
            Some(1_795_990_174_298_704)
        );
        assert_eq!(parse_time_us("yesterday"), None);
    }
}
