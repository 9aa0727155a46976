//! Console exporter: one JSON object per finished span, one span per line (JSONL).
//!
//! [`ConsoleSpanExporter`] is an OpenTelemetry [`SpanExporter`] that writes every finished span
//! as a single compact JSON line, to stdout (the default) or to a file. The layout is the one
//! Python NeMo Lens writes with its `console` exporter (the OTel Python SDK's
//! `ReadableSpan.to_json(indent=None)`), so the tools that read a Python rank's output (for
//! example the JSON → Perfetto converter, `jq` scripts, notebooks) read a Rust rank's output too.
//!
//! # What a line looks like
//!
//! One line per span (wrapped here for reading; on disk it is a single line):
//!
//! ```text
//! {"name": "train_step", "context": {"trace_id": "0x63290d2b92b5151d4dc22e1ff80342c6",
//!  "span_id": "0x96d0fda2eef0203a", "trace_state": "[]"}, "kind": "SpanKind.INTERNAL",
//!  "parent_id": "0x92ddb2cf23499824", "start_time": "2026-11-29T22:09:34.298704Z",
//!  "end_time": "2026-11-29T22:09:34.298741Z", "status": {"status_code": "UNSET"},
//!  "attributes": {"iteration": 1}, "events": [], "links": [],
//!  "resource": {"attributes": {"service.name": "nemo", "dl.rank": 3}, "schema_url": ""}}
//! ```
//!
//! Field by field, exactly as Python writes them:
//!
//! | key | value |
//! |---|---|
//! | `name` | span name |
//! | `context` | `{"trace_id": "0x<32 hex>", "span_id": "0x<16 hex>", "trace_state": "[]"}` |
//! | `kind` | `"SpanKind.INTERNAL"`, `"SpanKind.SERVER"`, `"SpanKind.CLIENT"`, `"SpanKind.PRODUCER"`, `"SpanKind.CONSUMER"` |
//! | `parent_id` | `"0x<16 hex>"`, or `null` for a root span |
//! | `start_time`, `end_time` | UTC, microseconds: `"2026-11-29T22:09:34.298704Z"` |
//! | `status` | `{"status_code": "UNSET"}`, `{"status_code": "OK"}`, `{"status_code": "ERROR", "description": "nan loss"}` (no `description` when it is empty) |
//! | `attributes` | `{"key": value, ...}`: bool → `true`/`false`, int → number, float → number, string → string, array → JSON array |
//! | `events` | `[{"name": ..., "timestamp": ..., "attributes": {...}}, ...]` |
//! | `links` | `[{"context": {...same as above...}, "attributes": {...}}, ...]` |
//! | `resource` | `{"attributes": {...}, "schema_url": ""}` |
//!
//! Byte-level details follow Python's `json.dumps` defaults too: separators `", "` and `": "`,
//! non-ASCII characters escaped as `\uXXXX` (`ensure_ascii=True`), floats written like Python's
//! `repr` (`1.0`, `0.5`, `1e-05`, `1e+16`). Where this crate has to differ it says so:
//!
//! - Non-finite floats: Python writes the bare tokens `NaN`, `Infinity`, `-Infinity`, which are not
//!   JSON and break strict parsers. This exporter writes them as the strings `"NaN"`,
//!   `"Infinity"`, `"-Infinity"` so every line stays valid JSON.
//! - Resource attributes are written sorted by key (the Rust SDK keeps them in a hash map, so
//!   there is no insertion order to reproduce; sorting keeps the output stable).
//! - A non-empty `trace_state` is rendered like Python's `repr(TraceState)`:
//!   `"['{key=vendor, value=abc}']"`.
//! - Times are rounded to the nearest microsecond, as Python's `datetime.fromtimestamp` does;
//!   instants before 1970 or after 9999 are clamped to those bounds.
//!
//! # Picking stdout or a file
//!
//! - [`ConsoleSpanExporter::stdout()`] (also [`Default`]): what Python Lens does. Spans of every
//!   rank land on the process's stdout.
//! - [`ConsoleSpanExporter::to_path`]`("spans-{rank}.jsonl", rank)`: one file per rank, so ranks
//!   never interleave; `{rank}` in the template is replaced by the rank, parent directories are
//!   created, and the file is appended to.
//! - [`ConsoleSpanExporter::to_writer`]: any [`std::io::Write`] (a socket, a pipe, a test buffer).
//! - [`ConsoleSpanExporter::with_writer`]: a [`ConsoleWriter`] shared with the
//!   [metric exporter](crate::export::console_metrics), so span lines and metric lines go, each
//!   whole, into one stream (what `Telemetry` does with `NEMO_LENS_EXPORTER=console`).
//!
//! ```
//! use nemo_lens::export::console::ConsoleSpanExporter;
//! use opentelemetry::trace::{Tracer, TracerProvider};
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//!
//! let dir = tempfile::tempdir()?;
//! let template = dir.path().join("spans-{rank}.jsonl");
//! let exporter = ConsoleSpanExporter::to_path(template.to_str().unwrap(), 3)?;
//! let provider = SdkTracerProvider::builder()
//!     .with_simple_exporter(exporter)
//!     .build();
//! provider.tracer("demo").in_span("train", |_cx| {});
//! provider.shutdown()?;
//!
//! let text = std::fs::read_to_string(dir.path().join("spans-3.jsonl"))?;
//! assert!(text.starts_with(r#"{"name": "train", "context": {"trace_id": "0x"#));
//! assert_eq!(text.lines().count(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Performance
//!
//! Lines are written straight into a reused byte buffer (no intermediate JSON tree), the resource
//! JSON is rendered once when the SDK hands the exporter its resource, and each export call does a
//! single `write_all` plus one `flush` for the whole batch. Pair it with a batching span processor
//! to get few, large writes.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use parking_lot::Mutex;

/// Resource JSON used until the SDK calls [`SpanExporter::set_resource`].
const EMPTY_RESOURCE_JSON: &str = r#"{"attributes": {}, "schema_url": ""}"#;

/// A batch buffer that grew past this is shrunk back after the write, so one huge batch does not
/// pin its memory for the rest of the run.
pub(crate) const MAX_RETAINED_BUFFER: usize = 4 << 20;

/// Where the lines go; kept for `Debug` and [`ConsoleWriter::path`].
#[derive(Debug, Clone)]
enum Target {
    Stdout,
    Writer,
    File(PathBuf),
}

/// A line sink shared by the console exporters of one process.
///
/// Spans ([`ConsoleSpanExporter`]) and metric batches
/// ([`ConsoleMetricExporter`](crate::export::console_metrics::ConsoleMetricExporter)) built on
/// clones of one `ConsoleWriter` write into the same stream through one lock: every export
/// writes its whole buffer (complete lines only) with one `write_all` and flushes while holding
/// it, so lines from the two exporters interleave whole, never mid-line. Cloning is cheap.
///
/// ```
/// use nemo_lens::export::console::ConsoleWriter;
///
/// let dir = tempfile::tempdir()?;
/// let template = dir.path().join("lens-{rank}.jsonl");
/// let writer = ConsoleWriter::to_path(template.to_str().unwrap(), 2)?;
/// assert_eq!(writer.path(), Some(dir.path().join("lens-2.jsonl").as_path()));
/// assert_eq!(writer.clone().path(), writer.path()); // clones share the open file
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct ConsoleWriter {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
    target: Target,
}

impl fmt::Debug for ConsoleWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleWriter")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl ConsoleWriter {
    fn new(out: Box<dyn Write + Send>, target: Target) -> Self {
        Self {
            out: Arc::new(Mutex::new(out)),
            target,
        }
    }

    /// The process's stdout (what Python NeMo Lens's `console` exporter writes to).
    ///
    /// ```
    /// assert!(nemo_lens::export::console::ConsoleWriter::stdout().path().is_none());
    /// ```
    pub fn stdout() -> Self {
        Self::new(Box::new(io::stdout()), Target::Stdout)
    }

    /// Any [`Write`] implementation (a pipe, a socket, an in-memory buffer).
    ///
    /// ```
    /// let writer = nemo_lens::export::console::ConsoleWriter::to_writer(std::io::sink());
    /// assert!(writer.path().is_none());
    /// ```
    pub fn to_writer(w: impl Write + Send + 'static) -> Self {
        Self::new(Box::new(w), Target::Writer)
    }

    /// Appends to the file named by `template` with `{rank}` replaced by `rank` (see
    /// [`resolve_path`]), creating the file and its parent directories as needed. The file is
    /// opened once; clones of the writer share it.
    ///
    /// ```
    /// use nemo_lens::export::console::ConsoleWriter;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let writer = ConsoleWriter::to_path(dir.path().join("a/b-{rank}.jsonl").to_str().unwrap(), 1)?;
    /// assert!(dir.path().join("a/b-1.jsonl").exists());
    /// # let _ = writer;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Any I/O error from creating the directories or opening the file.
    pub fn to_path(template: &str, rank: u32) -> io::Result<Self> {
        let path = resolve_path(template, rank);
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)?;
            }
        }
        let file: File = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self::new(Box::new(file), Target::File(path)))
    }

    /// The file this writer appends to, or `None` for stdout and custom writers.
    ///
    /// ```
    /// assert_eq!(nemo_lens::export::console::ConsoleWriter::stdout().path(), None);
    /// ```
    pub fn path(&self) -> Option<&Path> {
        match &self.target {
            Target::File(p) => Some(p),
            Target::Stdout | Target::Writer => None,
        }
    }

    /// Writes `lines` (whole lines only) with one `write_all` and flushes, under the shared lock.
    pub(crate) fn write_lines(&self, lines: &[u8]) -> io::Result<()> {
        let mut out = self.out.lock();
        out.write_all(lines).and_then(|()| out.flush())
    }

    pub(crate) fn flush(&self) -> io::Result<()> {
        self.out.lock().flush()
    }

    /// Renders lines into `buf` (reused between calls) with `render`, then writes them whole and
    /// flushes; nothing is written when `render` adds nothing. `kind` (`span`, `metric`, `log`)
    /// names the exporter in the error.
    pub(crate) fn write_rendered(
        &self,
        buf: &Mutex<Vec<u8>>,
        kind: &str,
        render: impl FnOnce(&mut Vec<u8>),
    ) -> OTelSdkResult {
        let mut buf = buf.lock();
        buf.clear();
        render(&mut buf);
        if buf.is_empty() {
            return Ok(());
        }
        let result = self.write_lines(&buf);
        if buf.capacity() > MAX_RETAINED_BUFFER {
            buf.clear();
            buf.shrink_to(64 * 1024);
        }
        result.map_err(|e| {
            OTelSdkError::InternalFailure(format!(
                "console {kind} exporter ({}): write failed: {e}",
                self.label()
            ))
        })
    }

    /// `stdout`, `writer` or the file's path, for error messages.
    pub(crate) fn label(&self) -> String {
        match &self.target {
            Target::Stdout => "stdout".to_owned(),
            Target::Writer => "writer".to_owned(),
            Target::File(p) => p.display().to_string(),
        }
    }
}

/// OpenTelemetry span exporter writing Python-NeMo-Lens-compatible JSON lines.
///
/// See the [module documentation](self) for the line format. Hand it to the SDK like any other
/// exporter; the SDK passes it the provider's resource, which is then embedded in every line.
///
/// ```
/// use nemo_lens::export::console::ConsoleSpanExporter;
/// use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
///
/// let provider = SdkTracerProvider::builder()
///     .with_span_processor(BatchSpanProcessor::builder(ConsoleSpanExporter::stdout()).build())
///     .build();
/// # provider.shutdown().unwrap();
/// ```
pub struct ConsoleSpanExporter {
    buf: Mutex<Vec<u8>>,
    writer: ConsoleWriter,
    resource_json: String,
    is_shutdown: AtomicBool,
}

impl fmt::Debug for ConsoleSpanExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleSpanExporter")
            .field("target", &self.writer.target)
            .field("resource_json", &self.resource_json)
            .field("is_shutdown", &self.is_shutdown.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for ConsoleSpanExporter {
    /// Same as [`ConsoleSpanExporter::stdout()`].
    ///
    /// ```
    /// use nemo_lens::export::console::ConsoleSpanExporter;
    ///
    /// let exporter = ConsoleSpanExporter::default();
    /// assert!(exporter.path().is_none());
    /// ```
    fn default() -> Self {
        Self::stdout()
    }
}

impl ConsoleSpanExporter {
    /// Writes to `writer`, which may be shared with a
    /// [`ConsoleMetricExporter`](crate::export::console_metrics::ConsoleMetricExporter) so that
    /// spans and metric batches land, line by line, in one stream.
    ///
    /// ```
    /// use nemo_lens::export::console::{ConsoleSpanExporter, ConsoleWriter};
    /// use nemo_lens::export::console_metrics::ConsoleMetricExporter;
    ///
    /// let writer = ConsoleWriter::stdout();
    /// let spans = ConsoleSpanExporter::with_writer(writer.clone());
    /// let metrics = ConsoleMetricExporter::new(writer);
    /// # let _ = (spans, metrics);
    /// ```
    pub fn with_writer(writer: ConsoleWriter) -> Self {
        Self {
            buf: Mutex::new(Vec::with_capacity(8 * 1024)),
            writer,
            resource_json: EMPTY_RESOURCE_JSON.to_owned(),
            is_shutdown: AtomicBool::new(false),
        }
    }

    /// Writes to the process's stdout, like Python NeMo Lens's `console` exporter.
    ///
    /// ```
    /// use nemo_lens::export::console::ConsoleSpanExporter;
    /// use opentelemetry_sdk::trace::SdkTracerProvider;
    ///
    /// let provider = SdkTracerProvider::builder()
    ///     .with_simple_exporter(ConsoleSpanExporter::stdout())
    ///     .build();
    /// # provider.shutdown().unwrap();
    /// ```
    pub fn stdout() -> Self {
        Self::with_writer(ConsoleWriter::stdout())
    }

    /// Writes to any [`Write`] implementation (a pipe, a socket, an in-memory buffer).
    ///
    /// Each export call writes its whole batch with one `write_all` and then calls `flush`, so a
    /// [`std::io::BufWriter`] in front of the writer is unnecessary.
    ///
    /// ```
    /// use std::io::Write;
    /// use std::sync::{Arc, Mutex};
    ///
    /// use nemo_lens::export::console::ConsoleSpanExporter;
    /// use opentelemetry::trace::{Tracer, TracerProvider};
    /// use opentelemetry_sdk::trace::SdkTracerProvider;
    ///
    /// /// A writer whose bytes stay readable after the exporter took ownership of it.
    /// #[derive(Clone, Default)]
    /// struct Shared(Arc<Mutex<Vec<u8>>>);
    /// impl Write for Shared {
    ///     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
    ///         self.0.lock().unwrap().write(b)
    ///     }
    ///     fn flush(&mut self) -> std::io::Result<()> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let out = Shared::default();
    /// let provider = SdkTracerProvider::builder()
    ///     .with_simple_exporter(ConsoleSpanExporter::to_writer(out.clone()))
    ///     .build();
    /// provider.tracer("demo").in_span("step", |_cx| {});
    /// provider.shutdown()?;
    ///
    /// let text = String::from_utf8(out.0.lock().unwrap().clone())?;
    /// let line: serde_json::Value = serde_json::from_str(text.trim_end())?;
    /// assert_eq!(line["name"], "step");
    /// assert_eq!(line["parent_id"], serde_json::Value::Null);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_writer(w: impl Write + Send + 'static) -> Self {
        Self::with_writer(ConsoleWriter::to_writer(w))
    }

    /// Appends to the file named by `template` with `{rank}` replaced by `rank` (see
    /// [`resolve_path`]), creating the file and its parent directories as needed.
    ///
    /// Giving every rank its own file keeps lines from different processes from interleaving.
    /// A template without `{rank}` is used as is (all ranks then share one file).
    ///
    /// ```
    /// use nemo_lens::export::console::ConsoleSpanExporter;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let template = dir.path().join("run-42/spans-rank{rank}.jsonl");
    /// let exporter = ConsoleSpanExporter::to_path(template.to_str().unwrap(), 7)?;
    /// assert_eq!(exporter.path(), Some(dir.path().join("run-42/spans-rank7.jsonl").as_path()));
    /// assert!(dir.path().join("run-42/spans-rank7.jsonl").exists());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Any I/O error from creating the directories or opening the file.
    pub fn to_path(template: &str, rank: u32) -> io::Result<Self> {
        ConsoleWriter::to_path(template, rank).map(Self::with_writer)
    }

    /// The file this exporter appends to, or `None` for stdout and custom writers.
    ///
    /// ```
    /// use nemo_lens::export::console::ConsoleSpanExporter;
    ///
    /// assert_eq!(ConsoleSpanExporter::stdout().path(), None);
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

/// Replaces every `{rank}` in `template` with `rank`.
///
/// ```
/// use std::path::PathBuf;
///
/// use nemo_lens::export::console::resolve_path;
///
/// assert_eq!(resolve_path("out/spans-{rank}.jsonl", 3), PathBuf::from("out/spans-3.jsonl"));
/// assert_eq!(resolve_path("spans.jsonl", 3), PathBuf::from("spans.jsonl"));
/// ```
pub fn resolve_path(template: &str, rank: u32) -> PathBuf {
    PathBuf::from(template.replace("{rank}", &rank.to_string()))
}

/// Renders a resource the way Python's `Resource.to_json()` lays it out:
/// `{"attributes": {...}, "schema_url": "..."}` (attributes sorted by key, `schema_url` is `""`
/// when unset).
///
/// ```
/// use nemo_lens::export::console::resource_json;
/// use opentelemetry::KeyValue;
/// use opentelemetry_sdk::Resource;
///
/// let resource = Resource::builder_empty()
///     .with_attributes([KeyValue::new("service.name", "nemo"), KeyValue::new("dl.rank", 3)])
///     .build();
/// assert_eq!(
///     resource_json(&resource),
///     r#"{"attributes": {"dl.rank": 3, "service.name": "nemo"}, "schema_url": ""}"#
/// );
/// ```
pub fn resource_json(resource: &Resource) -> String {
    let mut attrs: Vec<(&str, &Value)> = resource.iter().map(|(k, v)| (k.as_str(), v)).collect();
    attrs.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"attributes\": {");
    for (i, (key, value)) in attrs.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        write_json_str(&mut out, key);
        out.extend_from_slice(b": ");
        write_value(&mut out, value);
    }
    out.extend_from_slice(b"}, \"schema_url\": ");
    write_json_str(&mut out, resource.schema_url().unwrap_or(""));
    out.push(b'}');
    // Only ASCII JSON is ever written (see `write_json_str`).
    String::from_utf8(out).expect("console JSON is ASCII")
}

/// Appends one span as a JSON object (no trailing newline) to `out`.
///
/// `resource_json` is spliced in verbatim as the `"resource"` value; pass the output of
/// [`resource_json`]. This is the formatter [`ConsoleSpanExporter`] uses for every line.
///
/// ```
/// use std::borrow::Cow;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// use nemo_lens::export::console::{resource_json, write_span_json};
/// use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
/// use opentelemetry::{InstrumentationScope, KeyValue};
/// use opentelemetry_sdk::Resource;
/// use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
///
/// let span = SpanData {
///     span_context: SpanContext::new(
///         TraceId::from(0x63290d2b92b5151d4dc22e1ff80342c6),
///         SpanId::from(0x96d0fda2eef0203a),
///         TraceFlags::SAMPLED,
///         false,
///         TraceState::NONE,
///     ),
///     parent_span_id: SpanId::from(0x92ddb2cf23499824),
///     parent_span_is_remote: false,
///     span_kind: SpanKind::Internal,
///     name: Cow::Borrowed("train_step"),
///     start_time: UNIX_EPOCH + Duration::from_nanos(1_795_990_174_298_704_000),
///     end_time: UNIX_EPOCH + Duration::from_nanos(1_795_990_174_298_741_000),
///     attributes: vec![KeyValue::new("iteration", 1)],
///     dropped_attributes_count: 0,
///     events: SpanEvents::default(),
///     links: SpanLinks::default(),
///     status: Status::Unset,
///     instrumentation_scope: InstrumentationScope::builder("demo").build(),
/// };
/// let resource = Resource::builder_empty()
///     .with_attributes([KeyValue::new("dl.rank", 3)])
///     .build();
///
/// let mut out = Vec::new();
/// write_span_json(&span, &resource_json(&resource), &mut out);
/// assert_eq!(
///     String::from_utf8(out)?,
///     concat!(
///         r#"{"name": "train_step", "context": {"trace_id": "0x63290d2b92b5151d4dc22e1ff80342c6", "#,
///         r#""span_id": "0x96d0fda2eef0203a", "trace_state": "[]"}, "kind": "SpanKind.INTERNAL", "#,
///         r#""parent_id": "0x92ddb2cf23499824", "start_time": "2026-11-29T22:09:34.298704Z", "#,
///         r#""end_time": "2026-11-29T22:09:34.298741Z", "status": {"status_code": "UNSET"}, "#,
///         r#""attributes": {"iteration": 1}, "events": [], "links": [], "#,
///         r#""resource": {"attributes": {"dl.rank": 3}, "schema_url": ""}}"#,
///     )
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_span_json(span: &SpanData, resource_json: &str, out: &mut Vec<u8>) {
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

/// Writes a JSON object of attributes. A key set twice keeps its first position and its last
/// value, like the Python dict the SDK fills.
pub(crate) fn write_attributes(out: &mut Vec<u8>, attrs: &[KeyValue]) {
    out.push(b'{');
    let mut first = true;
    for (i, kv) in attrs.iter().enumerate() {
        let key = kv.key.as_str();
        if attrs[..i].iter().any(|p| p.key.as_str() == key) {
            continue;
        }
        let value = attrs[i + 1..]
            .iter()
            .rev()
            .find(|p| p.key.as_str() == key)
            .map_or(&kv.value, |p| &p.value);
        if !first {
            out.extend_from_slice(b", ");
        }
        first = false;
        write_json_str(out, key);
        out.extend_from_slice(b": ");
        write_value(out, value);
    }
    out.push(b'}');
}

pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(b) => write_bool(out, *b),
        Value::I64(n) => write_i64(out, *n),
        Value::F64(f) => write_f64(out, *f),
        Value::String(s) => write_json_str(out, s.as_str()),
        Value::Array(array) => match array {
            Array::Bool(v) => write_array(out, v, |o, b| write_bool(o, *b)),
            Array::I64(v) => write_array(out, v, |o, n| write_i64(o, *n)),
            Array::F64(v) => write_array(out, v, |o, f| write_f64(o, *f)),
            Array::String(v) => write_array(out, v, |o, s| write_json_str(o, s.as_str())),
            // Future array kinds: fall back to their text form.
            other => write_json_str(out, &other.to_string()),
        },
        // Future value kinds: fall back to their text form.
        other => write_json_str(out, &other.as_str()),
    }
}

fn write_array<T>(out: &mut Vec<u8>, items: &[T], mut item: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        item(out, x);
    }
    out.push(b']');
}

pub(crate) fn write_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

pub(crate) fn write_i64(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Writes a float the way Python's `repr(float)` (and so `json.dumps`) does: shortest round-trip
/// digits, positional notation for decimal exponents in `-5..16`, otherwise `1e-05` / `1.5e+16`.
/// Non-finite values become the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
pub(crate) fn write_f64(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
        return;
    }
    if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 {
            b"\"Infinity\"".as_slice()
        } else {
            b"\"-Infinity\""
        });
        return;
    }
    // serde_json (ryu) gives the shortest round-trip digits, laid out as `1.0`, `0.0001`,
    // `1e-5`, `1.2345678901234568e17`; take the digits and decimal exponent from that.
    let mut raw = [0u8; 40];
    let len = {
        let mut w: &mut [u8] = &mut raw;
        // Cannot fail: the longest f64 rendering is 24 bytes.
        let _ = serde_json::to_writer(&mut w, &f);
        40 - w.len()
    };
    let text = &raw[..len];
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let e_pos = text.iter().position(|&b| b == b'e').unwrap_or(text.len());
    let mut exp10 = 0i32;
    let mut exp_negative = false;
    for &b in text.get(e_pos + 1..).unwrap_or_default() {
        match b {
            b'-' => exp_negative = true,
            b'0'..=b'9' => exp10 = exp10 * 10 + i32::from(b - b'0'),
            _ => {}
        }
    }
    if exp_negative {
        exp10 = -exp10;
    }
    // Significant digits, without the point and without leading/trailing zeros; `point` is
    // how many of them stand before the decimal point (negative: zeros after the point).
    let mut digits = [0u8; 24];
    let mut n_digits = 0;
    let mut point = 0i32;
    let mut seen_point = false;
    for &b in &text[..e_pos] {
        if b == b'.' {
            seen_point = true;
        } else if n_digits == 0 && b == b'0' {
            if seen_point {
                point -= 1;
            }
        } else {
            digits[n_digits] = b;
            n_digits += 1;
            if !seen_point {
                point += 1;
            }
        }
    }
    while n_digits > 0 && digits[n_digits - 1] == b'0' {
        n_digits -= 1;
    }
    if n_digits == 0 {
        out.extend_from_slice(if negative { b"-0.0".as_slice() } else { b"0.0" });
        return;
    }
    // The value is d.ddd × 10^exp.
    let exp = point + exp10 - 1;
    // A tie between two shortest candidates needs at least 16 digits (the candidates' spacing
    // must fit inside one ulp), and Python's pick differs from Rust's only if Rust's is odd.
    if n_digits >= 16 && (digits[n_digits - 1] - b'0') % 2 == 1 {
        prefer_even_on_tie(f.abs(), &mut digits[..n_digits], exp);
    }
    let digits = &digits[..n_digits];
    if negative {
        out.push(b'-');
    }
    // Python's rule (float_repr_style 'short'): with `decpt = exp + 1`, positional notation
    // when -4 < decpt <= 16.
    let decpt = exp + 1;
    if decpt > -4 && decpt <= 16 {
        if decpt <= 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', decpt.unsigned_abs() as usize));
            out.extend_from_slice(digits);
        } else {
            let decpt = decpt as usize;
            if decpt >= digits.len() {
                out.extend_from_slice(digits);
                out.extend(std::iter::repeat_n(b'0', decpt - digits.len()));
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..decpt]);
                out.push(b'.');
                out.extend_from_slice(&digits[decpt..]);
            }
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        if exp.unsigned_abs() < 10 {
            out.push(b'0');
        }
        write_i64(out, i64::from(exp.unsigned_abs()));
    }
}

/// Python's `repr` breaks a tie between two equally near shortest digit strings towards the
/// even last digit (David Gay's `dtoa`, round-half-even); Rust's shortest formatting rounds such
/// ties up. `digits` (shortest, from Rust) are `d.ddd × 10^exp`; replace the last digit with its
/// even neighbour when `value` lies exactly halfway between the two and the neighbour also
/// reads back as `value`.
fn prefer_even_on_tie(value: f64, digits: &mut [u8], exp: i32) {
    let n = digits.len();
    let last = digits[n - 1];
    // Exact decimal expansion to n + 21 significant digits: a double that is not exactly the
    // midpoint differs from it within far fewer digits than that.
    let mut exact = StackBuf::<72>::new();
    if fmt::write(&mut exact, format_args!("{value:.prec$e}", prec = n + 20)).is_err() {
        return;
    }
    let text = exact.as_bytes();
    let Some(e_pos) = text.iter().position(|&b| b == b'e') else {
        return;
    };
    let exact_exp: Option<i32> = std::str::from_utf8(&text[e_pos + 1..])
        .ok()
        .and_then(|s| s.parse().ok());
    if exact_exp != Some(exp) {
        return;
    }
    let exact_digits = text[..e_pos].iter().copied().filter(|&b| b != b'.');
    // Midpoint with the lower neighbour is `...(last-1)5`, with the upper one `...last5`.
    let mut midpoint_lower = true;
    let mut midpoint_upper = true;
    for (i, b) in exact_digits.enumerate() {
        let (want_lower, want_upper) = match i {
            i if i < n - 1 => (digits[i], digits[i]),
            i if i == n - 1 => (last - 1, last),
            i if i == n => (b'5', b'5'),
            _ => (b'0', b'0'),
        };
        midpoint_lower &= b == want_lower;
        midpoint_upper &= b == want_upper;
    }
    let even = if midpoint_lower {
        last - 1
    } else if midpoint_upper && last < b'9' {
        last + 1
    } else {
        return;
    };
    if even == b'0' {
        return;
    }
    // The neighbour must round-trip as well (not a given at a power-of-two boundary).
    let mut candidate = StackBuf::<40>::new();
    for (i, &d) in digits.iter().enumerate() {
        let d = if i == n - 1 { even } else { d };
        let _ = fmt::write(&mut candidate, format_args!("{}", char::from(d)));
    }
    let _ = fmt::write(&mut candidate, format_args!("e{}", exp - (n as i32 - 1)));
    let reads_back = std::str::from_utf8(candidate.as_bytes())
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        == Some(value);
    if reads_back {
        digits[n - 1] = even;
    }
}

/// A fixed-size `fmt::Write` target, to format without allocating.
struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackBuf<N> {
    fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> fmt::Write for StackBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > N {
            return Err(fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// 0: byte passes through; otherwise the escape to use (`u` means `\u00XX`).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = match i as u8 {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0x20..=0x7e => 0,
            _ => b'u',
        };
        i += 1;
    }
    table
};

/// Writes `s` as a JSON string exactly like Python's `json.dumps` (`ensure_ascii=True`): `"` and
/// `\` backslash-escaped, `\n \r \t \b \f` short forms, other control characters, DEL and all
/// non-ASCII characters as lowercase `\uXXXX` (UTF-16 surrogate pairs above U+FFFF).
pub(crate) fn write_json_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let esc = ESCAPE[usize::from(bytes[i])];
        if esc == 0 {
            i += 1;
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if bytes[i] >= 0x80 {
            // `i` is at a char boundary: everything before it was ASCII or a whole char.
            let c = s[i..].chars().next().unwrap_or('\u{fffd}');
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write_u_escape(out, *unit);
            }
            i += c.len_utf8();
        } else if esc == b'u' {
            write_u_escape(out, u16::from(bytes[i]));
            i += 1;
        } else {
            out.extend_from_slice(&[b'\\', esc]);
            i += 1;
        }
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_u_escape(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[usize::from(unit >> 12)],
        HEX[usize::from((unit >> 8) & 0xf)],
        HEX[usize::from((unit >> 4) & 0xf)],
        HEX[usize::from(unit & 0xf)],
    ]);
}

/// The last instant RFC 3339 (and Python) can write: 9999-12-31T23:59:59.999999Z.
const MAX_MICROS: u128 = 253_402_300_799_999_999;

/// Writes `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` (with the quotes), UTC, rounded to the nearest
/// microsecond with ties to even, as Python's `datetime.fromtimestamp` rounds. Instants before
/// 1970 or after 9999 are clamped to those bounds (the formatter cannot write them).
pub(crate) fn write_time(out: &mut Vec<u8>, t: SystemTime) {
    let nanos = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let (mut micros, rest) = (nanos / 1000, nanos % 1000);
    if rest > 500 || (rest == 500 && micros % 2 == 1) {
        micros += 1;
    }
    let micros = micros.min(MAX_MICROS) as u64;
    let t = UNIX_EPOCH + Duration::from_micros(micros);
    let _ = write!(out, "\"{}\"", humantime::format_rfc3339_micros(t));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(f: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, f);
        String::from_utf8(out).unwrap()
    }

    fn json_str(s: &str) -> String {
        let mut out = Vec::new();
        write_json_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    fn time(nanos: u64) -> String {
        time_at(UNIX_EPOCH + Duration::from_nanos(nanos))
    }

    fn time_at(t: SystemTime) -> String {
        let mut out = Vec::new();
        write_time(&mut out, t);
        String::from_utf8(out).unwrap()
    }

    #[test]
    // The tie cases are written with their exact binary values on purpose.
    #[allow(clippy::excessive_precision)]
    fn floats_match_python_repr() {
        // Expected values are Python 3 `repr(x)`.
        let cases: &[(f64, &str)] = &[
            (0.5, "0.5"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (-2.75, "-2.75"),
            (1234.5678, "1234.5678"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234567e17, "1.2345678901234566e+17"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (123456789.125, "123456789.125"),
            // Exactly halfway between two shortest candidates: Python keeps the even digit.
            (-1113178120592002.25, "-1113178120592002.2"),
            (111659285584252.125, "111659285584252.12"),
            (-233891771783429.625, "-233891771783429.62"),
        ];
        for (f, want) in cases {
            assert_eq!(float(*f), *want, "repr of {f:?}");
        }
    }

    #[test]
    fn non_finite_floats_are_strings() {
        assert_eq!(float(f64::NAN), r#""NaN""#);
        assert_eq!(float(f64::INFINITY), r#""Infinity""#);
        assert_eq!(float(f64::NEG_INFINITY), r#""-Infinity""#);
    }

    #[test]
    fn strings_are_escaped_like_python_ensure_ascii() {
        // Expected values are Python 3 `json.dumps(s)`.
        assert_eq!(json_str("plain"), r#""plain""#);
        assert_eq!(json_str("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            json_str("\n\r\t\u{8}\u{c}\u{1}\u{7f}"),
            r#""\n\r\t\b\f\u0001\u007f""#
        );
        assert_eq!(json_str("héllo"), r#""h\u00e9llo""#);
        assert_eq!(json_str("日本"), r#""\u65e5\u672c""#);
        assert_eq!(json_str("🚀!"), r#""\ud83d\ude80!""#);
        assert_eq!(json_str(""), r#""""#);
    }

    #[test]
    fn times_are_utc_micro_iso() {
        assert_eq!(time(0), r#""1970-01-01T00:00:00.000000Z""#);
        assert_eq!(
            time(1_795_990_174_298_704_000),
            r#""2026-11-29T22:09:34.298704Z""#
        );
        // Rounded to the nearest microsecond, ties to even, like Python.
        assert_eq!(
            time(1_795_990_174_298_704_499),
            r#""2026-11-29T22:09:34.298704Z""#
        );
        assert_eq!(
            time(1_795_990_174_298_704_501),
            r#""2026-11-29T22:09:34.298705Z""#
        );
        assert_eq!(
            time(1_795_990_174_298_704_500),
            r#""2026-11-29T22:09:34.298704Z""#
        );
        assert_eq!(time(999_999_500), r#""1970-01-01T00:00:01.000000Z""#);
        // Leap day and end of year.
        assert_eq!(
            time(1_709_164_800_000_000_000),
            r#""2024-02-29T00:00:00.000000Z""#
        );
        assert_eq!(
            time(1_735_689_599_999_999_000),
            r#""2024-12-31T23:59:59.999999Z""#
        );
        // Outside what RFC 3339 can write: clamped, never a panic.
        assert_eq!(
            time_at(UNIX_EPOCH - Duration::from_secs(5)),
            r#""1970-01-01T00:00:00.000000Z""#
        );
        assert_eq!(
            time_at(UNIX_EPOCH + Duration::from_secs(300_000_000_000)),
            r#""9999-12-31T23:59:59.999999Z""#
        );
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
    fn duplicate_attribute_keeps_first_position_last_value() {
        let attrs = vec![
            KeyValue::new("a", 1),
            KeyValue::new("b", true),
            KeyValue::new("a", 2),
            KeyValue::new("c", Value::Array(Array::F64(vec![1.5, 2.0]))),
        ];
        let mut out = Vec::new();
        write_attributes(&mut out, &attrs);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a": 2, "b": true, "c": [1.5, 2.0]}"#
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
        let exporter = ConsoleSpanExporter::to_writer(Broken);
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
