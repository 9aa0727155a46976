//! Exporters: where finished spans go.
//!
//! * [`console`]: compact JSONL, the layout of the Python library's console output.
//! * [`otlp`]: OTLP over gRPC, HTTP/protobuf or HTTP/JSON.
pub mod console;
pub mod otlp;
