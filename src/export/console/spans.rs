//! [`ConsoleSpanExporter`]: one line per finished span, in the layout of the OTel Python SDK's
//! `ReadableSpan.to_json(indent=None)`.

use std::fmt;
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use parking_lot::Mutex;

use super::EMPTY_RESOURCE_JSON;
use super::writer::ConsoleWriter;
use crate::pyjson::{resource_json, write_attributes, write_json_str, write_time};

/// OpenTelemetry span exporter writing Python-NeMo-Lens-compatible JSON lines.
///
/// The line format is below. Hand it to the SDK like any other
/// exporter; the SDK passes it the provider's resource, which is then embedded in every line.
///
/// ```
/// use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
/// use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
///
/// let exporter = ConsoleSpanExporter::new(ConsoleWriter::stdout());
/// let provider = SdkTracerProvider::builder()
///     .with_span_processor(BatchSpanProcessor::builder(exporter).build())
///     .build();
/// # provider.shutdown().unwrap();
/// ```
///
/// # Line format
///
/// [`ConsoleSpanExporter`] is an OpenTelemetry [`SpanExporter`] that writes every finished span
/// as a single compact JSON line, to stdout (the default) or to a file. The layout is the one
/// Python NeMo Lens writes with its `console` exporter (the OTel Python SDK's
/// `ReadableSpan.to_json(indent=None)`), so the tools that read a Python rank's output (for
/// example the JSON → Perfetto converter, `jq` scripts, notebooks) read a Rust rank's output too.
///
/// # What a line looks like
///
/// One line per span (wrapped here for reading; on disk it is a single line):
///
/// ```text
/// {"name": "train_step", "context": {"trace_id": "0x63290d2b92b5151d4dc22e1ff80342c6",
///  "span_id": "0x96d0fda2eef0203a", "trace_state": "[]"}, "kind": "SpanKind.INTERNAL",
///  "parent_id": "0x92ddb2cf23499824", "start_time": "2026-11-29T22:09:34.298704Z",
///  "end_time": "2026-11-29T22:09:34.298741Z", "status": {"status_code": "UNSET"},
///  "attributes": {"iteration": 1}, "events": [], "links": [],
///  "resource": {"attributes": {"service.name": "nemo", "dl.rank": 3}, "schema_url": ""}}
/// ```
///
/// Field by field, exactly as Python writes them:
///
/// | key | value |
/// |---|---|
/// | `name` | span name |
/// | `context` | `{"trace_id": "0x<32 hex>", "span_id": "0x<16 hex>", "trace_state": "[]"}` |
/// | `kind` | `"SpanKind.INTERNAL"`, `"SpanKind.SERVER"`, `"SpanKind.CLIENT"`, `"SpanKind.PRODUCER"`, `"SpanKind.CONSUMER"` |
/// | `parent_id` | `"0x<16 hex>"`, or `null` for a root span |
/// | `start_time`, `end_time` | UTC, microseconds: `"2026-11-29T22:09:34.298704Z"` |
/// | `status` | `{"status_code": "UNSET"}`, `{"status_code": "OK"}`, `{"status_code": "ERROR", "description": "nan loss"}` (no `description` when it is empty) |
/// | `attributes` | `{"key": value, ...}`: bool → `true`/`false`, int → number, float → number, string → string, array → JSON array |
/// | `events` | `[{"name": ..., "timestamp": ..., "attributes": {...}}, ...]` |
/// | `links` | `[{"context": {...same as above...}, "attributes": {...}}, ...]` |
/// | `resource` | `{"attributes": {...}, "schema_url": ""}` |
///
/// Byte-level details follow Python's `json.dumps` defaults too: separators `", "` and `": "`,
/// non-ASCII characters escaped as `\uXXXX` (`ensure_ascii=True`), floats written like Python's
/// `repr` (`1.0`, `0.5`, `1e-05`, `1e+16`). Where this crate has to differ it says so:
///
/// - Non-finite floats: Python writes the bare tokens `NaN`, `Infinity`, `-Infinity`, which are not
///   JSON and break strict parsers. This exporter writes them as the strings `"NaN"`,
///   `"Infinity"`, `"-Infinity"` so every line stays valid JSON.
/// - Resource attributes are written sorted by key (the Rust SDK keeps them in a hash map, so
///   there is no insertion order to reproduce; sorting keeps the output stable).
/// - A non-empty `trace_state` is rendered like Python's `repr(TraceState)`:
///   `"['{key=vendor, value=abc}']"`.
/// - Times are rounded to the nearest microsecond, as Python's `datetime.fromtimestamp` does;
///   instants before 1970 or after 9999 are clamped to those bounds.
///
/// # Picking stdout or a file
///
/// The [`ConsoleWriter`] given to [`ConsoleSpanExporter::new`] decides where lines go:
///
/// - [`ConsoleWriter::stdout()`]: what Python Lens does. Spans of every rank land on the
///   process's stdout.
/// - [`ConsoleWriter::to_path`]`("spans-{rank}.jsonl", rank)`: one file per rank, so ranks never
///   interleave; `{rank}` in the template is replaced by the rank, parent directories are
///   created, and the file is appended to.
/// - [`ConsoleWriter::to_writer`]: any [`std::io::Write`] (a socket, a pipe, a test buffer).
/// - a clone of the writer of the [metric exporter](crate::export::ConsoleMetricExporter), so span
///   lines and metric lines go, each whole, into one stream (what `Telemetry` does with
///   `NEMO_LENS_EXPORTER=console`).
///
/// ```
/// use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
/// use opentelemetry::trace::{Tracer, TracerProvider};
/// use opentelemetry_sdk::trace::SdkTracerProvider;
///
/// let dir = tempfile::tempdir()?;
/// let template = dir.path().join("spans-{rank}.jsonl");
/// let exporter = ConsoleSpanExporter::new(ConsoleWriter::to_path(template.to_str().unwrap(), 3)?);
/// let provider = SdkTracerProvider::builder()
///     .with_simple_exporter(exporter)
///     .build();
/// provider.tracer("demo").in_span("train", |_cx| {});
/// provider.shutdown()?;
///
/// let text = std::fs::read_to_string(dir.path().join("spans-3.jsonl"))?;
/// assert!(text.starts_with(r#"{"name": "train", "context": {"trace_id": "0x"#));
/// assert_eq!(text.lines().count(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Performance
///
/// Lines are written straight into a reused byte buffer (no intermediate JSON tree), the resource
/// JSON is rendered once when the SDK hands the exporter its resource, and each export call does a
/// single `write_all` plus one `flush` for the whole batch. Pair it with a batching span processor
/// to get few, large writes.
pub struct ConsoleSpanExporter {
    buf: Mutex<Vec<u8>>,
    writer: ConsoleWriter,
    resource_json: String,
    is_shutdown: AtomicBool,
}

impl fmt::Debug for ConsoleSpanExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleSpanExporter")
            .field("writer", &self.writer)
            .field("resource_json", &self.resource_json)
            .field("is_shutdown", &self.is_shutdown.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl ConsoleSpanExporter {
    /// Writes to `writer`, which may be shared with a
    /// [`ConsoleMetricExporter`](crate::export::ConsoleMetricExporter) so that
    /// spans and metric batches land, line by line, in one stream.
    ///
    /// ```
    /// use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
    /// use nemo_lens::export::ConsoleMetricExporter;
    ///
    /// let writer = ConsoleWriter::stdout();
    /// let spans = ConsoleSpanExporter::new(writer.clone());
    /// let metrics = ConsoleMetricExporter::new(writer);
    /// # let _ = (spans, metrics);
    /// ```
    pub fn new(writer: ConsoleWriter) -> Self {
        Self {
            buf: Mutex::new(Vec::with_capacity(8 * 1024)),
            writer,
            resource_json: EMPTY_RESOURCE_JSON.to_owned(),
            is_shutdown: AtomicBool::new(false),
        }
    }

    /// The file this exporter appends to, or `None` for stdout and custom writers.
    ///
    /// ```
    /// use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
    ///
    /// assert_eq!(ConsoleSpanExporter::new(ConsoleWriter::stdout()).path(), None);
    /// ```
    pub fn path(&self) -> Option<&Path> {
        self.writer.path()
    }

    /// Writes one line per span and flushes; the synchronous body of [`SpanExporter::export`].
    fn export_batch(&self, batch: &[SpanData]) -> OTelSdkResult {
        if self.is_shutdown.load(Ordering::Acquire) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.writer.write_rendered(&self.buf, "span", |buf| {
            for span in batch {
                write_span_json(span, &self.resource_json, buf);
                buf.push(b'\n');
            }
        })
    }

    fn flush_sink(&self) -> OTelSdkResult {
        self.writer.flush().map_err(|e| {
            OTelSdkError::InternalFailure(format!(
                "console span exporter ({}): flush failed: {e}",
                self.writer.label()
            ))
        })
    }
}

impl SpanExporter for ConsoleSpanExporter {
    /// Writes the batch (one line per span) with a single `write_all`, then flushes.
    ///
    /// The work happens during the call; the returned future is already complete. Write errors
    /// come back as [`OTelSdkError::InternalFailure`]; after shutdown the result is
    /// [`OTelSdkError::AlreadyShutdown`].
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        std::future::ready(self.export_batch(&batch))
    }

    /// Flushes the writer and refuses further exports.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        if self.is_shutdown.swap(true, Ordering::AcqRel) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        self.flush_sink()
    }

    /// Flushes the writer.
    fn force_flush(&self) -> OTelSdkResult {
        self.flush_sink()
    }

    /// Renders the resource JSON once; it is spliced into every line.
    fn set_resource(&mut self, resource: &Resource) {
        self.resource_json = resource_json(resource);
    }
}

/// Appends one span as a JSON object (no trailing newline) to `out`.
///
/// `resource_json` is spliced in verbatim as the `"resource"` value; pass the output of
/// [`resource_json`]. This is the formatter [`ConsoleSpanExporter`] uses for every line.
pub(crate) fn write_span_json(span: &SpanData, resource_json: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"name\": ");
    write_json_str(out, &span.name);
    out.extend_from_slice(b", \"context\": ");
    write_context(out, &span.span_context);
    out.extend_from_slice(b", \"kind\": \"SpanKind.");
    out.extend_from_slice(match span.span_kind {
        SpanKind::Internal => b"INTERNAL\"".as_slice(),
        SpanKind::Server => b"SERVER\"",
        SpanKind::Client => b"CLIENT\"",
        SpanKind::Producer => b"PRODUCER\"",
        SpanKind::Consumer => b"CONSUMER\"",
    });
    out.extend_from_slice(b", \"parent_id\": ");
    if span.parent_span_id == SpanId::INVALID {
        out.extend_from_slice(b"null");
    } else {
        let _ = write!(out, "\"0x{}\"", span.parent_span_id);
    }
    out.extend_from_slice(b", \"start_time\": ");
    write_time(out, span.start_time);
    out.extend_from_slice(b", \"end_time\": ");
    write_time(out, span.end_time);
    out.extend_from_slice(b", \"status\": {\"status_code\": ");
    match &span.status {
        Status::Unset => out.extend_from_slice(b"\"UNSET\"}"),
        Status::Ok => out.extend_from_slice(b"\"OK\"}"),
        Status::Error { description } => {
            out.extend_from_slice(b"\"ERROR\"");
            if !description.is_empty() {
                out.extend_from_slice(b", \"description\": ");
                write_json_str(out, description);
            }
            out.push(b'}');
        }
    }
    out.extend_from_slice(b", \"attributes\": ");
    write_attributes(out, &span.attributes);
    out.extend_from_slice(b", \"events\": [");
    for (i, event) in span.events.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(b"{\"name\": ");
        write_json_str(out, &event.name);
        out.extend_from_slice(b", \"timestamp\": ");
        write_time(out, event.timestamp);
        out.extend_from_slice(b", \"attributes\": ");
        write_attributes(out, &event.attributes);
        out.push(b'}');
    }
    out.extend_from_slice(b"], \"links\": [");
    for (i, link) in span.links.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(b"{\"context\": ");
        write_context(out, &link.span_context);
        out.extend_from_slice(b", \"attributes\": ");
        write_attributes(out, &link.attributes);
        out.push(b'}');
    }
    out.extend_from_slice(b"], \"resource\": ");
    out.extend_from_slice(resource_json.as_bytes());
    out.push(b'}');
}

fn write_context(out: &mut Vec<u8>, cx: &SpanContext) {
    // Writing into a Vec cannot fail. The ids' Display is zero-padded lowercase hex.
    let _ = write!(
        out,
        "{{\"trace_id\": \"0x{}\", \"span_id\": \"0x{}\", \"trace_state\": ",
        cx.trace_id(),
        cx.span_id()
    );
    let mut entries = cx.trace_state().into_iter().peekable();
    if entries.peek().is_none() {
        out.extend_from_slice(b"\"[]\"");
    } else {
        // Python: `str([f"{{key={k}, value={v}}}" for k, v in items])`.
        let mut repr = String::from("[");
        for (i, (key, value)) in entries.enumerate() {
            if i > 0 {
                repr.push_str(", ");
            }
            push_py_str_repr(&mut repr, &format!("{{key={key}, value={value}}}"));
        }
        repr.push(']');
        write_json_str(out, &repr);
    }
    out.push(b'}');
}

/// Python's `repr(str)` for the characters a trace state can hold.
fn push_py_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::time::UNIX_EPOCH;

    #[test]
    fn write_span_json_example() -> Result<(), Box<dyn std::error::Error>> {
        use std::borrow::Cow;
        use std::time::{Duration, UNIX_EPOCH};

        use opentelemetry::trace::{
            SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
        };
        use opentelemetry::{InstrumentationScope, KeyValue};
        use opentelemetry_sdk::Resource;
        use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

        let span = SpanData {
            span_context: SpanContext::new(
                TraceId::from(0x63290d2b92b5151d4dc22e1ff80342c6),
                SpanId::from(0x96d0fda2eef0203a),
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: SpanId::from(0x92ddb2cf23499824),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed("train_step"),
            start_time: UNIX_EPOCH + Duration::from_nanos(1_795_990_174_298_704_000),
            end_time: UNIX_EPOCH + Duration::from_nanos(1_795_990_174_298_741_000),
            attributes: vec![KeyValue::new("iteration", 1)],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("demo").build(),
        };
        let resource = Resource::builder_empty()
            .with_attributes([KeyValue::new("dl.rank", 3)])
            .build();

        let mut out = Vec::new();
        write_span_json(&span, &resource_json(&resource), &mut out);
        assert_eq!(
            String::from_utf8(out)?,
            concat!(
                r#"{"name": "train_step", "context": {"trace_id": "0x63290d2b92b5151d4dc22e1ff80342c6", "#,
                r#""span_id": "0x96d0fda2eef0203a", "trace_state": "[]"}, "kind": "SpanKind.INTERNAL", "#,
                r#""parent_id": "0x92ddb2cf23499824", "start_time": "2026-11-29T22:09:34.298704Z", "#,
                r#""end_time": "2026-11-29T22:09:34.298741Z", "status": {"status_code": "UNSET"}, "#,
                r#""attributes": {"iteration": 1}, "events": [], "links": [], "#,
                r#""resource": {"attributes": {"dl.rank": 3}, "schema_url": ""}}"#,
            )
        );
        Ok::<(), Box<dyn std::error::Error>>(())
    }

    #[test]
    fn trace_state_like_python_repr() {
        use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};
        let state =
            TraceState::from_key_value([("rojo", "00f067aa0ba902b7"), ("congo", "t61'x")]).unwrap();
        let cx = SpanContext::new(
            TraceId::from(1),
            SpanId::from(2),
            TraceFlags::SAMPLED,
            false,
            state,
        );
        let mut out = Vec::new();
        write_context(&mut out, &cx);
        // Python: repr(TraceState([("rojo", "00f067aa0ba902b7"), ("congo", "t61'x")])), as JSON.
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                r#"{"trace_id": "0x00000000000000000000000000000001", "span_id": "0x0000000000000002", "#,
                r#""trace_state": "['{key=rojo, value=00f067aa0ba902b7}', \"{key=congo, value=t61'x}\"]"}"#
            )
        );
    }

    #[test]
    fn export_after_shutdown_is_refused_and_write_errors_are_reported() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk on fire"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let span = SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "x".into(),
            start_time: UNIX_EPOCH,
            end_time: UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        };
        let exporter = ConsoleSpanExporter::new(ConsoleWriter::to_writer(Broken));
        match exporter.export_batch(std::slice::from_ref(&span)) {
            Err(OTelSdkError::InternalFailure(msg)) => assert!(msg.contains("disk on fire")),
            other => panic!("expected InternalFailure, got {other:?}"),
        }
        assert!(exporter.shutdown().is_ok());
        assert!(matches!(
            exporter.export_batch(&[span]),
            Err(OTelSdkError::AlreadyShutdown)
        ));
    }
}
