//! Console JSONL as a test reads it: configurations that write a file, the file's lines, and the
//! span lines, log records and metric batches among them.

use std::path::Path;

use nemo_lens::{ExporterKind, LensConfig};
use serde_json::Value;

/// Every rank exports spans and log records (no metrics) to the console exporter, into
/// `dir/rank{rank}.jsonl`.
pub fn config(dir: &Path) -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.logs_enabled = true;
        c.metrics_enabled = false;
        c.export.exporter = ExporterKind::Console;
        c.export.strategy = "all_ranks".into();
        c.export.console_path = Some(dir.join("rank{rank}.jsonl").display().to_string());
    })
}

/// Every rank exports spans (no metrics, no logs) to the console exporter, into `path`.
pub fn config_to(path: &Path) -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.export.exporter = ExporterKind::Console;
        c.export.console_path = Some(path.display().to_string());
        c.metrics_enabled = false;
    })
}

/// The JSON records of rank `rank`'s file in `dir` (as [`config`] names it).
pub fn lines(dir: &Path, rank: u32) -> Vec<Value> {
    read(&dir.join(format!("rank{rank}.jsonl")))
}

/// The JSON records of a console file; fails naming the file when it cannot be read.
pub fn read(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse(&text)
}

/// The JSON records of a console file, none when it was never written (a process that died or
/// exported nothing).
pub fn read_if_any(path: &Path) -> Vec<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// One JSON record per line (a file's text, or what a process printed).
pub fn parse(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Whether a record is a span line.
pub fn is_span(v: &Value) -> bool {
    v.get("context").is_some()
}

/// Whether a record is a log record.
pub fn is_log_record(v: &Value) -> bool {
    v.get("body").is_some()
}

/// Whether a record is a metric batch.
pub fn is_metric_batch(v: &Value) -> bool {
    v.get("resource_metrics").is_some()
}

/// The span lines among `records`.
pub fn spans(records: Vec<Value>) -> Vec<Value> {
    records.into_iter().filter(is_span).collect()
}

/// The names of the spans, in file order.
pub fn names(spans: &[Value]) -> Vec<&str> {
    spans.iter().filter_map(|s| s["name"].as_str()).collect()
}

/// Every span named `name`.
pub fn all_named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// The first span named `name`; fails listing the spans when there is none.
#[track_caller]
pub fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:#?}"))
}

/// Whether the span was ended as truncated (`nemo.span.truncated`).
pub fn truncated(span: &Value) -> bool {
    span["attributes"]["nemo.span.truncated"] == true
}

/// The reason of the span's truncation event, if it has one.
pub fn truncation_reason(span: &Value) -> Option<&str> {
    span["events"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "nemo.span.truncated")?["attributes"]["nemo.span.truncated.reason"]
        .as_str()
}

/// The keys of a JSON object, in the order of the file.
pub fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}
