//! The log bridge: `tracing` events (and `log` records) become OpenTelemetry log records,
//! behind [`LogFilter`].

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId};
use opentelemetry::{InstrumentationScope, Key};
use opentelemetry_appender_tracing::layer::OpenTelemetryTracingBridge;
use opentelemetry_sdk::logs::{SdkLogRecord, SdkLogger, SdkLoggerProvider};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Interest, LevelFilter, Metadata, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context as LayerContext, Filter};
use tracing_subscriber::registry::LookupSpan;

use crate::layer::filter::is_internal_target;
use crate::rank::groups::GroupGate;
use crate::record::attributes::{TextRules, truncate_chars};
use crate::record::open_spans::OpenSpans;
use crate::semconv;

thread_local! {
    /// The span context of the event being bridged on this thread (set around the bridge call).
    static EVENT_SPAN: Cell<Option<(TraceId, SpanId, TraceFlags)>> = const { Cell::new(None) };
}

/// A logger provider that hands out [`LensLogger`]s: the SDK provider plus redaction, the
/// value length limit and span correlation.
#[derive(Clone, Debug)]
pub(crate) struct LensLoggerProvider {
    inner: SdkLoggerProvider,
    text: TextRules,
}

impl LensLoggerProvider {
    /// Wraps an SDK logger provider; `text` redacts and cuts string attributes.
    pub(crate) fn new(inner: SdkLoggerProvider, text: TextRules) -> Self {
        LensLoggerProvider { inner, text }
    }

    /// The SDK provider (flush, shutdown).
    pub(crate) fn sdk(&self) -> &SdkLoggerProvider {
        &self.inner
    }
}

impl LoggerProvider for LensLoggerProvider {
    type Logger = LensLogger;
    fn logger_with_scope(&self, scope: InstrumentationScope) -> LensLogger {
        LensLogger {
            inner: self.inner.logger_with_scope(scope),
            text: self.text.clone(),
        }
    }
}

/// The logger behind the bridge: creates [`LensLogRecord`]s and stamps them with the span the
/// event happened in.
#[derive(Clone, Debug)]
pub(crate) struct LensLogger {
    inner: SdkLogger,
    text: TextRules,
}

impl Logger for LensLogger {
    type LogRecord = LensLogRecord;

    fn create_log_record(&self) -> LensLogRecord {
        let mut record = self.inner.create_log_record();
        // The time of the event, as Python's `LogRecord.created`.
        record.set_timestamp(SystemTime::now());
        LensLogRecord {
            record,
            // The default redaction set is `None` inside: no reference count to touch.
            text: self.text.clone(),
            code: CodeAttributes::default(),
        }
    }

    fn emit(&self, mut record: LensLogRecord) {
        if let Some((trace_id, span_id, flags)) = EVENT_SPAN.with(Cell::get) {
            record
                .record
                .set_trace_context(trace_id, span_id, Some(flags));
        }
        self.inner.emit(record.finish())
    }

    fn event_enabled(&self, level: Severity, target: &str, name: Option<&str>) -> bool {
        self.inner.event_enabled(level, target, name)
    }
}

/// The source-code attributes the appender writes before the event's fields, kept aside to be
/// written after them under Python's names.
#[derive(Debug, Default)]
struct CodeAttributes {
    function: Option<AnyValue>,
    file: Option<AnyValue>,
    line: Option<AnyValue>,
    /// The appender's metadata attributes are over (`code.lineno` is its last, and any other
    /// key is a field): a field of the same name is the user's own.
    done: bool,
}

/// Whether `name` is the name `tracing` gives an event nobody named (`event <file>:<line>`),
/// or tracing-log's name for `log` records (`log event`).
fn is_default_event_name(name: &str) -> bool {
    name == "log event"
        || name.strip_prefix("event ").is_some_and(|rest| {
            rest.rsplit_once(':')
                .is_some_and(|(file, line)| !file.is_empty() && line.parse::<u32>().is_ok())
        })
}

/// An SDK log record as Python writes it: string attributes under a redaction key become
/// `[REDACTED]` and every string attribute is cut to the log value length limit; the source
/// location comes after the fields as `code.file.path`, `code.function.name`,
/// `code.line.number`; the event name is empty unless the user named the event.
#[derive(Debug)]
pub(crate) struct LensLogRecord {
    record: SdkLogRecord,
    text: TextRules,
    code: CodeAttributes,
}

impl LensLogRecord {
    /// The SDK record, with the source location appended after the fields.
    fn finish(mut self) -> SdkLogRecord {
        let code = std::mem::take(&mut self.code);
        for (key, value) in [
            (semconv::CODE_FILE_PATH, code.file),
            (semconv::CODE_FUNCTION_NAME, code.function),
            (semconv::CODE_LINE_NUMBER, code.line),
        ] {
            if let Some(value) = value {
                self.push(Key::from_static_str(key), value);
            }
        }
        self.record
    }

    /// Adds an attribute, redacted and cut.
    fn push(&mut self, key: Key, value: AnyValue) {
        let value = match value {
            AnyValue::String(_) if self.text.redact.contains(key.as_str()) => {
                AnyValue::from(self.text.redacted())
            }
            AnyValue::String(s) => match self.text.limit {
                Some(limit) if s.as_str().len() > limit => {
                    AnyValue::from(truncate_chars(String::from(s), Some(limit)))
                }
                _ => AnyValue::String(s),
            },
            other => other,
        };
        self.record.add_attribute(key, value);
    }
}

impl LogRecord for LensLogRecord {
    fn set_event_name(&mut self, name: &'static str) {
        if !is_default_event_name(name) {
            self.record.set_event_name(name)
        }
    }
    fn set_target<T>(&mut self, target: T)
    where
        T: Into<Cow<'static, str>>,
    {
        self.record.set_target(target)
    }
    fn set_timestamp(&mut self, timestamp: SystemTime) {
        self.record.set_timestamp(timestamp)
    }
    fn set_observed_timestamp(&mut self, timestamp: SystemTime) {
        self.record.set_observed_timestamp(timestamp)
    }
    fn set_severity_text(&mut self, text: &'static str) {
        self.record.set_severity_text(text)
    }
    fn set_severity_number(&mut self, number: Severity) {
        self.record.set_severity_number(number)
    }
    fn set_body(&mut self, body: AnyValue) {
        self.record.set_body(body)
    }
    fn add_attributes<I, K, V>(&mut self, attributes: I)
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<Key>,
        V: Into<AnyValue>,
    {
        for (k, v) in attributes {
            self.add_attribute(k, v);
        }
    }
    fn add_attribute<K, V>(&mut self, key: K, value: V)
    where
        K: Into<Key>,
        V: Into<AnyValue>,
    {
        let key = key.into();
        let value = value.into();
        if !self.code.done {
            let code = &mut self.code;
            let slot = match key.as_str() {
                // The older names `opentelemetry-appender-tracing` writes (deprecated in
                // `semconv`, which names only what nemo-lens writes today).
                "code.namespace" => &mut code.function,
                "code.filepath" => &mut code.file,
                // Python writes no file name apart from the path.
                "code.filename" => return,
                "code.lineno" => {
                    code.done = true;
                    &mut code.line
                }
                _ => {
                    code.done = true;
                    return self.push(key, value);
                }
            };
            *slot = Some(value);
            return;
        }
        self.push(key, value);
    }
    fn set_trace_context(
        &mut self,
        trace_id: TraceId,
        span_id: SpanId,
        trace_flags: Option<TraceFlags>,
    ) {
        self.record
            .set_trace_context(trace_id, span_id, trace_flags)
    }
}

/// The per-layer filter of the log bridge: level threshold, feedback-loop guard, span groups.
/// [`LensLayer::log_filter`](crate::LensLayer::log_filter) returns it when the rank bridges
/// logs.
///
/// # The log bridge
///
/// With `logs_enabled` (`NEMO_LENS_LOGS_ENABLED=1`) an exporting rank builds a logger provider
/// with a batch processor (`OTEL_BLRP_*` sizes) and the console or OTLP log exporter, and
/// [`Telemetry::layer`](crate::Telemetry::layer) gains a bridge. In the Python library
/// `setup_logging_bridge()` has to be called by hand; in Rust the layer you already add is the
/// bridge, so there is nothing else to call.
///
/// What a record carries:
///
/// * the severity (`TRACE` … `ERROR`), the target, the `message` as body and every other field as
///   an attribute, then, after them, `code.file.path`, `code.function.name` and `code.line.number`,
///   the attributes and the order of the Python `LoggingHandler`. `code.function.name` is the
///   module path (`trainer::data`): a `tracing` callsite knows its module, file and line, never
///   its function. (`opentelemetry-appender-tracing` writes `code.namespace`, `code.filepath`,
///   `code.filename` and `code.lineno` before the fields; the bridge's log record renames and
///   moves them);
/// * an empty `event_name`, as Python's, unless the event was named
///   (`tracing::info!(name: "ckpt.saved", ...)`): the name `tracing` gives every unnamed event
///   (`event src/x.rs:17`) and tracing-log's `log event` are not written;
/// * the trace and span id of the innermost span the lens layer records, so a log line links to
///   its step in the trace;
/// * string values under the [redaction keys](crate::DEFAULT_REDACT_KEYS) (or the
///   application's own, [`TelemetryBuilder::redact_keys`](crate::TelemetryBuilder::redact_keys))
///   replaced with `[REDACTED]`, as for span attributes; then every string attribute cut to
///   `OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT` (else `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`)
///   characters, as Python's `LogLimits` (so with a limit of 8 a redacted value reads
///   `[REDACTE`).
///
/// Which events are bridged is decided once per callsite by the bridge's filter: events at or
/// above `logs_level` (`NEMO_LENS_LOGS_LEVEL`, default `info`), never those of the exporters' own
/// stacks (the [internal targets](crate::LensLayer#internal-targets), also checked on the original
/// target of `log` records), so an exporter logging its own failure cannot feed records back into
/// the pipeline. Spans are never bridged.
///
/// `log` crate records arrive once the application forwards them to `tracing` with
/// `tracing_log::LogTracer::init()` (what `tracing_subscriber`'s `init()` does by default).
///
/// ```
/// use nemo_lens::{LensConfig, Telemetry};
/// use tracing_subscriber::prelude::*;
///
/// let config = LensConfig::default().with_enabled(true).with(|c| c.logs_enabled = true);
/// # let config = config.with(|c| c.export.exporter = nemo_lens::ExporterKind::Console);
/// # let dir = tempfile::tempdir().unwrap();
/// # let config = config.with(|c| c.export.console_path = Some(dir.path().join("r{rank}.jsonl").display().to_string()));
/// let telemetry = Telemetry::builder(config).allow_reinit_for_testing(true).build().unwrap();
/// let _guard = tracing_subscriber::registry().with(telemetry.layer()).set_default();
/// tracing::info_span!("train_step").in_scope(|| {
///     tracing::warn!(loss = 7.5, "loss spiked"); // a log record carrying train_step's ids
/// });
/// telemetry.shutdown(std::time::Duration::from_secs(5)).unwrap();
/// ```
///
/// # On a rank that bridges nothing
///
/// ```
/// use nemo_lens::{LensConfig, Telemetry};
/// let telemetry = Telemetry::builder(LensConfig::default()).build().unwrap(); // disabled
/// let layer = telemetry.layer::<tracing_subscriber::Registry>();
/// assert!(!layer.bridges_logs()); // nothing is bridged on this rank
/// ```
#[derive(Clone)]
pub(crate) struct LogFilter {
    /// `false`: nothing is bridged (logs off, or a rank that does not export).
    on: bool,
    level: LevelFilter,
    spans: bool,
    groups: Arc<GroupGate>,
}

impl fmt::Debug for LogFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogFilter")
            .field("on", &self.on)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl LogFilter {
    /// `spans`: whether the lens layer records spans (so records can carry their ids).
    pub(crate) fn new(level: LevelFilter, spans: bool, groups: Arc<GroupGate>) -> Self {
        LogFilter {
            on: true,
            level,
            spans,
            groups,
        }
    }

    /// A filter that bridges nothing (every callsite `Interest::never`, level hint `OFF`).
    pub(crate) fn off(groups: Arc<GroupGate>) -> Self {
        LogFilter {
            on: false,
            level: LevelFilter::OFF,
            spans: false,
            groups,
        }
    }

    /// Whether this filter bridges anything at all.
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    fn allows(&self, meta: &Metadata<'_>) -> bool {
        // Spans the lens layer records are enabled here too (whatever their level): a per-layer
        // filter hides disabled spans from its layer, and the bridge needs to see the span an
        // event happened in to stamp its ids.
        let level_ok = if meta.is_span() {
            self.spans
        } else {
            self.level >= *meta.level()
        };
        self.on
            && level_ok
            && !is_internal_target(meta.target())
            && self
                .groups
                .group_of(meta)
                .is_none_or(|g| self.groups.is_enabled(g))
    }
}

impl<S> Filter<S> for LogFilter {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &LayerContext<'_, S>) -> bool {
        self.allows(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        crate::layer::filter::interest(self.allows(meta))
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &LayerContext<'_, S>) -> bool {
        // `log` records all share the callsites of `tracing-log` (target "log"): check the
        // record's own target here, once per record.
        match event.normalized_metadata() {
            Some(meta) => !is_internal_target(meta.target()),
            None => true,
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        if self.on && self.spans {
            None
        } else {
            Some(self.level)
        }
    }
}

/// The bridge layer: the `opentelemetry-appender-tracing` bridge, fed the lens span of each event.
pub(crate) struct LogLayer<S> {
    bridge: Option<OpenTelemetryTracingBridge<LensLoggerProvider, LensLogger>>,
    /// The span table of the lens layer's span part: a log record inside a recorded span
    /// carries that span's ids.
    spans: Arc<OpenSpans>,
    _subscriber: PhantomData<fn(S)>,
}

impl<S> fmt::Debug for LogLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogLayer").finish_non_exhaustive()
    }
}

impl<S> LogLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// The bridge to `provider` behind `filter`; with no provider, a layer whose filter must be
    /// [`LogFilter::off`] (a `None` layer would turn the whole subscriber's level hint `OFF`
    /// when combined with per-layer filters, so "no logs" is an always-`never` filter instead).
    pub(crate) fn filtered(
        provider: Option<&LensLoggerProvider>,
        filter: LogFilter,
        spans: Arc<OpenSpans>,
    ) -> Filtered<Self, LogFilter, S> {
        debug_assert!(provider.is_some() || !filter.is_on());
        LogLayer {
            bridge: provider.map(OpenTelemetryTracingBridge::new),
            spans,
            _subscriber: PhantomData,
        }
        .with_filter(filter)
    }

    /// The span context of the innermost span around `event` that the lens layer records: the
    /// innermost lens span entered on this thread, or for an event with an explicit parent,
    /// the first of that span's scope in the table.
    fn span_context(&self, event: &Event<'_>, ctx: &LayerContext<'_, S>) -> Option<SpanContext> {
        let context = |id: u64| self.spans.with(id, |e| e.state.span_context().clone());
        if event.is_contextual() {
            return context(crate::layer::activation::current(
                Arc::as_ptr(&self.spans) as usize
            )?);
        }
        ctx.event_scope(event)?
            .find_map(|span| context(span.id().into_u64()))
    }
}

/// Clears the thread's event span even if the bridge unwinds.
struct EventSpanGuard;

impl Drop for EventSpanGuard {
    fn drop(&mut self) {
        EVENT_SPAN.with(|c| c.set(None));
    }
}

fn ids(cx: &SpanContext) -> (TraceId, SpanId, TraceFlags) {
    (cx.trace_id(), cx.span_id(), cx.trace_flags())
}

impl<S> Layer<S> for LogLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, _attrs: &Attributes<'_>, _id: &Id, _ctx: LayerContext<'_, S>) {}

    fn on_record(&self, _id: &Id, _values: &Record<'_>, _ctx: LayerContext<'_, S>) {}

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let Some(bridge) = &self.bridge else {
            return;
        };
        let span = self.span_context(event, &ctx).map(|cx| ids(&cx));
        EVENT_SPAN.with(|c| c.set(span));
        let _reset = EventSpanGuard;
        bridge.on_event(event, ctx);
    }
}
