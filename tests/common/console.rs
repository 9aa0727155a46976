//! Console JSONL files as a test reads them: a configuration that writes one, its lines, and
//! the keys of a record in file order.

use std::path::Path;

use nemo_lens::{ExporterKind, LensConfig};
use serde_json::Value;

/// Every rank exports spans and log records (no metrics) to the console exporter, into
/// `dir/rank{rank}.jsonl`.
pub fn config(dir: &Path) -> LensConfig {
    LensConfig::default()
        .with_enabled(true)
        .with_logs_enabled(true)
        .with_metrics_enabled(false)
        .with_exporter(ExporterKind::Console)
        .with_export_strategy("all_ranks")
        .with_console_path(Some(dir.join("rank{rank}.jsonl").display().to_string()))
}

/// The JSON records of rank `rank`'s file in `dir`.
pub fn lines(dir: &Path, rank: u32) -> Vec<Value> {
    let path = dir.join(format!("rank{rank}.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The keys of a JSON object, in the order of the file.
pub fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}
