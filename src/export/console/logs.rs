//! Console log exporter: one compact JSON line per log record, in the layout of the Python SDK's
//! `LogRecord.to_json(indent=None)` that NeMo Lens's console exporter writes.

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use opentelemetry::Key;
use opentelemetry::logs::AnyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter, SdkLogRecord};
use parking_lot::Mutex;

use super::EMPTY_RESOURCE_JSON;
use super::writer::ConsoleWriter;
use crate::pyjson::resource_json;
use crate::pyjson::{write_bool, write_f64, write_i64, write_json_str, write_time};

/// OpenTelemetry log exporter writing Python-compatible JSON lines; see the
/// layout below.
///
/// # Layout
///
/// ```text
/// {"body": "loss spiked", "severity_number": 13, "severity_text": "WARN",
///  "attributes": {"loss": 7.5, "code.file.path": "src/main.rs", "code.function.name": "trainer",
///  "code.line.number": 42}, "dropped_attributes": 0,
///  "timestamp": "2026-11-29T23:59:01.123456Z", "observed_timestamp": "2026-11-29T23:59:01.123460Z",
///  "trace_id": "0x5b8e…", "span_id": "0x0e1f…", "trace_flags": 3,
///  "resource": {"attributes": {...}, "schema_url": ""}, "event_name": ""}
/// ```
/// (one line in the output; wrapped here). As in Python, a record outside any span has the
/// all-zero trace and span ids and `trace_flags` 0, `attributes` is `null` when empty, and a record
/// without a timestamp has `"timestamp": null`. Bytes values are base64 strings (Python's
/// `BytesEncoder`); floats, strings and times are written exactly like span lines (see
/// [`ConsoleSpanExporter`](super::ConsoleSpanExporter)).
///
/// Lines go to stdout or a per-rank file. Set up from the configuration, spans, metric batches
/// and log records share one [`ConsoleWriter`] (one lock, whole lines per write), so their lines
/// never split each other.
///
/// ```
/// use nemo_lens::export::{ConsoleLogExporter, ConsoleWriter};
/// use opentelemetry::logs::{Logger, LoggerProvider, LogRecord, Severity};
/// use opentelemetry_sdk::logs::SdkLoggerProvider;
///
/// let dir = tempfile::tempdir()?;
/// let template = dir.path().join("rank{rank}.jsonl");
/// let provider = SdkLoggerProvider::builder()
///     .with_simple_exporter(ConsoleLogExporter::new(ConsoleWriter::to_path(template.to_str().unwrap(), 2)?))
///     .build();
/// let logger = provider.logger("demo");
/// let mut record = logger.create_log_record();
/// record.set_severity_number(Severity::Warn);
/// record.set_severity_text("WARN");
/// record.set_body("loss spiked".into());
/// logger.emit(record);
/// provider.shutdown()?;
/// let text = std::fs::read_to_string(dir.path().join("rank2.jsonl"))?;
/// assert!(text.starts_with(r#"{"body": "loss spiked", "severity_number": 13, "severity_text": "WARN""#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ConsoleLogExporter {
    buf: Mutex<Vec<u8>>,
    writer: ConsoleWriter,
    resource_json: String,
    is_shutdown: AtomicBool,
}

impl fmt::Debug for ConsoleLogExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleLogExporter")
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

impl ConsoleLogExporter {
    /// Writes through `writer`, which span and metric exporters may share (lines never split).
    ///
    /// ```
    /// use nemo_lens::export::{ConsoleLogExporter, ConsoleWriter};
    /// let exporter = ConsoleLogExporter::new(ConsoleWriter::to_writer(std::io::sink()));
    /// # let _ = exporter;
    /// ```
    pub fn new(writer: ConsoleWriter) -> Self {
        ConsoleLogExporter {
            buf: Mutex::new(Vec::with_capacity(4096)),
            writer,
            resource_json: EMPTY_RESOURCE_JSON.to_owned(),
            is_shutdown: AtomicBool::new(false),
        }
    }

    /// The file written to, or `None` for stdout and custom writers.
    pub fn path(&self) -> Option<&Path> {
        self.writer.path()
    }

    fn export_batch(&self, batch: &LogBatch<'_>) -> OTelSdkResult {
        if self.is_shutdown.load(Ordering::Acquire) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        self.writer.write_rendered(&self.buf, "log", |buf| {
            for (record, _scope) in batch.iter() {
                write_log_json(record, &self.resource_json, buf);
                buf.push(b'\n');
            }
        })
    }
}

impl LogExporter for ConsoleLogExporter {
    fn export(&self, batch: LogBatch<'_>) -> impl Future<Output = OTelSdkResult> + Send {
        std::future::ready(self.export_batch(&batch))
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        if self.is_shutdown.swap(true, Ordering::AcqRel) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        self.writer.flush().map_err(|e| {
            OTelSdkError::InternalFailure(format!(
                "console log exporter ({}): flush failed: {e}",
                self.writer.label()
            ))
        })
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource_json = resource_json(resource);
    }
}

/// Writes one record in the Python `LogRecord.to_json(indent=None)` layout (no newline).
pub(crate) fn write_log_json(record: &SdkLogRecord, resource_json: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"body\": ");
    match record.body() {
        Some(body) => write_any(out, body),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"severity_number\": ");
    match record.severity_number() {
        Some(s) => write_i64(out, s as i64),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"severity_text\": ");
    match record.severity_text() {
        Some(t) => write_json_str(out, t),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"attributes\": ");
    let attributes: Vec<&(Key, AnyValue)> = record.attributes_iter().collect();
    if attributes.is_empty() {
        out.extend_from_slice(b"null");
    } else {
        write_map(out, attributes.iter().map(|(k, v)| (k.as_str(), v)));
    }
    out.extend_from_slice(b", \"dropped_attributes\": 0, \"timestamp\": ");
    match record.timestamp() {
        Some(t) => write_time(out, t),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"observed_timestamp\": ");
    match record.observed_timestamp().or(record.timestamp()) {
        Some(t) => write_time(out, t),
        None => out.extend_from_slice(b"null"),
    }
    let (trace_id, span_id, flags) = match record.trace_context() {
        Some(cx) => (
            format!("{}", cx.trace_id),
            format!("{}", cx.span_id),
            cx.trace_flags.map_or(0, |f| f.to_u8()),
        ),
        None => ("0".repeat(32), "0".repeat(16), 0),
    };
    out.extend_from_slice(b", \"trace_id\": \"0x");
    out.extend_from_slice(trace_id.as_bytes());
    out.extend_from_slice(b"\", \"span_id\": \"0x");
    out.extend_from_slice(span_id.as_bytes());
    out.extend_from_slice(b"\", \"trace_flags\": ");
    write_i64(out, i64::from(flags));
    out.extend_from_slice(b", \"resource\": ");
    out.extend_from_slice(resource_json.as_bytes());
    out.extend_from_slice(b", \"event_name\": ");
    write_json_str(out, record.event_name().unwrap_or(""));
    out.push(b'}');
}

fn write_map<'a>(out: &mut Vec<u8>, entries: impl Iterator<Item = (&'a str, &'a AnyValue)>) {
    out.push(b'{');
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        write_json_str(out, k);
        out.extend_from_slice(b": ");
        write_any(out, v);
    }
    out.push(b'}');
}

fn write_any(out: &mut Vec<u8>, value: &AnyValue) {
    match value {
        AnyValue::Int(n) => write_i64(out, *n),
        AnyValue::Double(f) => write_f64(out, *f),
        AnyValue::String(s) => write_json_str(out, s.as_str()),
        AnyValue::Boolean(b) => write_bool(out, *b),
        AnyValue::Bytes(bytes) => write_json_str(
            out,
            &base64::engine::general_purpose::STANDARD.encode(&**bytes),
        ),
        AnyValue::ListAny(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                write_any(out, item);
            }
            out.push(b']');
        }
        AnyValue::Map(map) => write_map(out, map.iter().map(|(k, v)| (k.as_str(), v))),
        // Future kinds: their debug text.
        other => write_json_str(out, &format!("{other:?}")),
    }
}
