//! Exporters: where finished spans, metrics and log records go, and the queue before them.
//!
//! | type | what it does |
//! |---|---|
//! | [`ConsoleSpanExporter`], [`ConsoleMetricExporter`], [`ConsoleLogExporter`] | compact JSONL in the Python library's console layout, to stdout, a file or any writer |
//! | [`ConsoleWriter`] | the line sink those three share, so their lines interleave whole |
//! | [`LensBatchProcessor`], [`LensBatchLogProcessor`] ([`QueueConfig`]) | the bounded queue and worker between the layer and an exporter, which count what they drop |
//! | [`ByteBudget`] ([`ApproxSize`]) | the byte budget of those queues (`NEMO_LENS_QUEUE_MAX_BYTES`) |
//! | [`DeadlineExporter`] | runs a span or log exporter's exports on a helper thread, so the export timeout holds for every transport |
//! | [`MessageLimit`] | keeps OTLP span requests under the collector's 4 MiB limit: splits batches, drops (counted) a span too large alone |
//! | [`CountedMetricExporter`] | a metric exporter whose failed exports are counted |
//! | [`OtlpProtocol`], [`Signal`] | OTLP over gRPC (feature `otlp-grpc`), HTTP/protobuf or HTTP/JSON (feature `otlp-http`), chosen per signal from `OTEL_EXPORTER_OTLP_*` |
//!
//! [`Telemetry`](crate::Telemetry) wires these up from the configuration; use them directly
//! to build a pipeline of your own (a custom exporter behind the console layout, a test
//! writer).
//!
//! ```
//! use nemo_lens::export::ConsoleSpanExporter;
//! use opentelemetry::trace::{Tracer, TracerProvider};
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//!
//! let provider = SdkTracerProvider::builder()
//!     .with_simple_exporter(ConsoleSpanExporter::to_writer(std::io::sink()))
//!     .build();
//! provider.tracer("demo").in_span("train", |_cx| {});
//! provider.shutdown().unwrap();
//! ```

pub(crate) mod console;
mod counted;
mod deadline;
mod message_limit;
pub(crate) mod otlp;

pub use crate::queue::{
    ApproxSize, BatchExport, Batcher, ByteBudget, DEFAULT_QUEUE_MAX_BYTES, DropCounts,
    LensBatchLogProcessor, LensBatchProcessor, MAX_QUEUE_SIZE_LIMIT, MIN_QUEUE_MAX_BYTES,
    QUEUE_MAX_BYTES_VAR, QueueConfig,
};
pub(crate) use console::resolve_path;
pub use console::{ConsoleLogExporter, ConsoleMetricExporter, ConsoleSpanExporter, ConsoleWriter};
pub use counted::CountedMetricExporter;
pub use deadline::{DeadlineExporter, ExportAnswer, MAX_STUCK_HELPERS};
pub use message_limit::{MAX_MESSAGE_BYTES, MessageLimit};
pub use otlp::{OtlpProtocol, Signal};
