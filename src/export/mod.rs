//! Exporters: where finished spans, metrics and log records go, and the queue before them.
//!
//! | type | what it does |
//! |---|---|
//! | [`ConsoleSpanExporter`], [`ConsoleMetricExporter`], [`ConsoleLogExporter`] | compact JSONL in the Python library's console layout, to stdout, a file or any writer |
//! | [`ConsoleWriter`] | the line sink those three share, so their lines interleave whole |
//!
//! [`Telemetry`](crate::Telemetry) puts every exporter (these, OTLP, or your own given to
//! [`TelemetryBuilder::span_exporter`](crate::TelemetryBuilder::span_exporter) and
//! [`log_exporter`](crate::TelemetryBuilder::log_exporter)) behind a bounded queue and worker
//! thread, sized by `OTEL_BSP_*` / `OTEL_BLRP_*` and `NEMO_LENS_QUEUE_MAX_BYTES`, that never
//! blocks the thread ending a span and counts what it drops
//! ([`Telemetry::stats`](crate::Telemetry::stats)). OTLP goes over gRPC (feature
//! `otlp-grpc`), HTTP/protobuf or HTTP/JSON (feature `otlp-http`), chosen per signal from
//! `OTEL_EXPORTER_OTLP_*`.
//!
//! Behind the OTLP exporters that setup builds, `OTEL_EXPORTER_OTLP_TIMEOUT` bounds every
//! export (transient failures are retried within it), span requests are kept under the
//! collector's 4 MiB message limit (a batch is split; a span too large alone is dropped and
//! counted), and failed metric exports are counted with the dropped spans and log records.
//!
//! [`Telemetry`](crate::Telemetry) wires these up from the configuration; use them directly
//! to build a pipeline of your own (a custom exporter behind the console layout, a test
//! writer).
//!
//! ```
//! use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
//! use opentelemetry::trace::{Tracer, TracerProvider};
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//!
//! let provider = SdkTracerProvider::builder()
//!     .with_simple_exporter(ConsoleSpanExporter::new(ConsoleWriter::to_writer(std::io::sink())))
//!     .build();
//! provider.tracer("demo").in_span("train", |_cx| {});
//! provider.shutdown().unwrap();
//! ```

pub(crate) mod console;
mod counted;
mod deadline;
mod message_limit;
pub(crate) mod otlp;

pub(crate) use console::resolve_path;
pub use console::{ConsoleLogExporter, ConsoleMetricExporter, ConsoleSpanExporter, ConsoleWriter};
pub(crate) use counted::CountedMetricExporter;
pub(crate) use deadline::DeadlineExporter;
pub(crate) use message_limit::MessageLimit;
