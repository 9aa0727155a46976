//! Exporters: where finished spans go.
//!
//! * [`console`]: compact JSONL, the layout of the Python library's console output.
//! * [`console_logs`]: the same for log records, one JSON line each.
//! * [`otlp`]: OTLP over gRPC, HTTP/protobuf or HTTP/JSON.
pub mod console;
pub mod console_logs;
pub mod otlp;
