//! Exporters: where finished spans and metrics go.
//!
//! * [`console`]: compact JSONL, the layout of the Python library's console output.
//! * [`console_logs`]: the same for log records, one JSON line each.
//! * [`console_metrics`]: the same for metrics, one line per export.
//! * [`counted`]: metric exporters whose failed exports are counted.
//! * [`otlp`]: OTLP over gRPC, HTTP/protobuf or HTTP/JSON.
//! * [`batch`]: the bounded queue and worker between the spans and the exporter, which counts
//!   what it drops.
pub mod batch;
pub mod console;
pub mod console_logs;
pub mod console_metrics;
pub mod counted;
pub mod otlp;
