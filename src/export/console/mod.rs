//! Console exporters: one JSON object per finished span, metric batch or log record, one per
//! line (JSONL), in the layout of the Python library's console output.
//!
//! # Layout of this module
//!
//! * `writer`: [`ConsoleWriter`], the line sink every console exporter of a process shares;
//! * `spans`, `metrics`, `logs`: one exporter per signal and the record layout it writes;
//! * `python_json`: the JSON codec that writes bytes the way Python's `json.dumps` does
//!   (separators, `ensure_ascii`, `repr(float)` digits, microsecond UTC times).

mod logs;
mod metrics;
mod python_json;
mod spans;
mod writer;

pub use logs::ConsoleLogExporter;
pub use metrics::ConsoleMetricExporter;
pub(crate) use python_json::{write_attributes, write_f64, write_json_str, write_time};
pub use spans::ConsoleSpanExporter;
pub(crate) use spans::resource_json;
#[cfg(test)]
pub(crate) use spans::write_span_json;
pub use writer::ConsoleWriter;
pub(crate) use writer::resolve_path;

/// Resource JSON used until the SDK hands an exporter its resource.
const EMPTY_RESOURCE_JSON: &str = r#"{"attributes": {}, "schema_url": ""}"#;
