//! Exporters: where finished spans go.
//!
//! * [`console`]: compact JSONL, the layout of the Python library's console output.
//! * [`otlp`]: OTLP over gRPC, HTTP/protobuf or HTTP/JSON.
//! * [`batch`]: the bounded queue and worker between the spans and the exporter, which counts
//!   what it drops.
pub mod batch;
pub mod console;
pub mod otlp;
