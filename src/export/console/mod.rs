//! Console exporters: one JSON object per finished span, metric batch or log record, one per
//! line (JSONL), in the layout of the Python library's console output.
//!
//! # Layout of this module
//!
//! * `writer`: [`ConsoleWriter`], the line sink every console exporter of a process shares;
//! * `spans`, `metrics`, `logs`: one exporter per signal and the record layout it writes;
//!
//! The JSON codec that writes bytes the way Python's `json.dumps` does (separators,
//! `ensure_ascii`, `repr(float)` digits, microsecond UTC times) is `crate::pyjson`, which the
//! carrier and the flight recorder use too.

mod logs;
mod metrics;
mod spans;
mod writer;

pub use logs::ConsoleLogExporter;
pub use metrics::ConsoleMetricExporter;
pub use spans::ConsoleSpanExporter;
pub use writer::ConsoleWriter;
pub(crate) use writer::resolve_path;

/// Resource JSON used until the SDK hands an exporter its resource.
const EMPTY_RESOURCE_JSON: &str = r#"{"attributes": {}, "schema_url": ""}"#;
