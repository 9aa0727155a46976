//! [`LensLayer`]: the `tracing` layer that turns spans and events into OpenTelemetry spans.
//!
//! The layer is a [`tracing_subscriber::Layer`] with its own per-layer filter, so it composes
//! with whatever the application already has (`fmt`, `EnvFilter`, other exporters) and never
//! disables callsites for them:
//!
//! ```
//! use tracing_subscriber::prelude::*;
//! let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
//!     .with(telemetry.layer());
//! tracing::subscriber::with_default(subscriber, || {
//!     tracing::info_span!("step").in_scope(|| {});
//! });
//! ```
//!
//! # What becomes what
//!
//! | `tracing` | OpenTelemetry |
//! |---|---|
//! | span (name, fields) | span (name, attributes); started when the span is created, ended when it closes |
//! | parent span (explicit or current) | parent; a span without one takes the current OpenTelemetry context (an attached remote parent) or the launcher's `TRACEPARENT` |
//! | `i64`/`u64`/`bool`/`f64`/`&str` field | attribute of that type (`u64` above `i64::MAX` becomes a string) |
//! | `?debug` / `%display` field | string attribute |
//! | event inside a span | span event named by its message |
//! | `ERROR` event, `#[instrument(err)]` | status `ERROR` with the message, plus an `exception` event |
//! | `follows_from` | link |
//! | field `otel.name` / `otel.kind` / `otel.status_code` / `otel.status_description` | span name / kind / status |
//! | field named `nemo.group.<g>` | the span's [group](crate::groups); not exported |
//!
//! String values of fields named `prompt`, `input_text`, `output_text`, `text`, `password`,
//! `token`, `secret` or `key` are replaced with `[REDACTED]` ([`DEFAULT_REDACT_KEYS`]), on spans
//! and events alike. String values longer than `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT` (else
//! `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) characters are cut to it, on a character boundary, on
//! spans and events alike.
//!
//! Spans and events raised while OpenTelemetry telemetry is suppressed on the thread (an
//! exporter at work: nemo-lens exports in a suppressed scope) are not recorded, so an exporter
//! that logs through `tracing` never feeds back into the pipeline nor re-enters itself.
//!
//! # Cost
//!
//! Which callsites the layer records is decided by [`LensFilter`] once per callsite; on a
//! non-exporting rank or for a disabled group the callsite is `Interest::never` and a span costs
//! what a disabled callsite costs. Events outside any span are ignored by this layer.

use std::any::TypeId;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, Key, KeyValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Dispatch, Event, Interest, Level, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::closer::{self, OpenSpans, WithSpanFn};
use crate::filter::LensFilter;
use crate::groups::GROUP_FIELD_PREFIX;
use crate::ids;
use crate::logs::{LensLoggerProvider, LogFilter, LogLayer};
use crate::semconv;

/// Keys whose string values are replaced with `[REDACTED]` (exact, case-sensitive match), as the
/// Python `DEFAULT_REDACT_KEYS`.
pub const DEFAULT_REDACT_KEYS: [&str; 8] = [
    "prompt",
    "input_text",
    "output_text",
    "text",
    "password",
    "token",
    "secret",
    "key",
];

/// The replacement for redacted values.
pub const REDACTED: &str = "[REDACTED]";

#[inline]
pub(crate) fn is_redacted(key: &str) -> bool {
    DEFAULT_REDACT_KEYS.contains(&key)
}

/// Cuts `text` to at most `limit` characters, on a character boundary.
#[inline]
fn truncate_chars(mut text: String, limit: Option<usize>) -> String {
    if let Some(limit) = limit {
        // Bytes bound characters from above: most values need no scan.
        if text.len() > limit
            && let Some((cut, _)) = text.char_indices().nth(limit)
        {
            text.truncate(cut);
        }
    }
    text
}

/// What the layer shares with the telemetry handle on an exporting rank.
#[derive(Debug)]
pub(crate) struct Pipeline {
    /// Never dropped in a forked child: dropping the last reference to an inherited provider
    /// would shut it down and wait for its dead worker thread.
    pub(crate) tracer: ManuallyDrop<SdkTracer>,
    pub(crate) open: OpenSpans,
    /// Parent of root spans (from `TRACEPARENT`), if the launcher gave one.
    pub(crate) default_parent: Option<Context>,
    /// The [fork generation](crate::ids) the pipeline was built in; in a forked child (another
    /// generation) the pipeline is inherited and the layer records nothing through it.
    pub(crate) generation: u64,
    /// Longest string attribute value, in characters (`OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT`).
    pub(crate) value_limit: Option<usize>,
}

impl Pipeline {
    pub(crate) fn new(
        tracer: SdkTracer,
        default_parent: Option<Context>,
        value_limit: Option<usize>,
    ) -> Self {
        Pipeline {
            tracer: ManuallyDrop::new(tracer),
            open: OpenSpans::default(),
            default_parent,
            generation: ids::fork_generation(),
            value_limit,
        }
    }

    /// `true` in a process forked (without exec) after the pipeline was built.
    #[inline]
    pub(crate) fn inherited(&self) -> bool {
        self.generation != ids::fork_generation()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if !self.inherited() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.tracer) }
        }
    }
}

/// The span context of the innermost span around `event` that the lens layer records.
pub(crate) fn recorded_span_context<S>(
    event: &Event<'_>,
    ctx: &LayerContext<'_, S>,
) -> Option<SpanContext>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    ctx.event_scope(event)?
        .find_map(|span| span.extensions().get::<LensSpan>().map(|d| d.cx.clone()))
}

/// The lens state of one `tracing` span.
pub(crate) struct LensSpan {
    span: Option<SdkSpan>,
    cx: SpanContext,
    open_key: Option<usize>,
    /// The fork generation the span was started in (see [`Pipeline::generation`]).
    generation: u64,
}

impl LensSpan {
    pub(crate) fn span_context(&self) -> &SpanContext {
        &self.cx
    }

    /// Adds a link to `cx` (a span of another rank or stage); `false` if the span has ended.
    pub(crate) fn add_link(&mut self, cx: SpanContext, attributes: Vec<KeyValue>) -> bool {
        match &mut self.span {
            Some(span) => {
                span.add_link(cx, attributes);
                true
            }
            None => false,
        }
    }

    /// Ends the span as truncated; `false` if it had already ended (or belongs to the parent
    /// of this forked process, see [`LensSpan::take_live`]).
    pub(crate) fn truncate(&mut self, reason: &'static str) -> bool {
        self.open_key = None;
        match self.take_live() {
            Some(mut span) => {
                closer::end_truncated(&mut span, reason);
                true
            }
            None => false,
        }
    }

    /// The SDK span, to end it, unless it was started before this process was forked: such a
    /// span belongs to the parent, which exports it; ending it here would export it twice (or
    /// queue it for a worker thread that did not survive the fork), so it is forgotten.
    fn take_live(&mut self) -> Option<SdkSpan> {
        let span = self.span.take()?;
        if self.generation == ids::fork_generation() {
            Some(span)
        } else {
            std::mem::forget(span);
            None
        }
    }

    /// Adds an `exception` event of type `kind` and sets the status `ERROR`.
    pub(crate) fn record_exception(&mut self, kind: &'static str, message: &str) {
        if let Some(span) = self.live_mut() {
            span.add_event(
                semconv::EXCEPTION_EVENT,
                vec![
                    KeyValue::new(semconv::EXCEPTION_TYPE, kind),
                    KeyValue::new(semconv::EXCEPTION_MESSAGE, message.to_string()),
                ],
            );
            span.set_status(Status::error(message.to_string()));
        }
    }

    /// The SDK span to record into, unless it was inherited across `fork`.
    #[inline]
    fn live_mut(&mut self) -> Option<&mut SdkSpan> {
        if self.generation == ids::fork_generation() {
            self.span.as_mut()
        } else {
            None
        }
    }
}

impl Drop for LensSpan {
    fn drop(&mut self) {
        // The subscriber dropped the span without closing it (e.g. the subscriber itself was
        // dropped): the SDK would export it as if it had finished; say what happened.
        self.truncate(closer::REASON_DROPPED);
    }
}

/// Lets [`crate::LensSpanExt`] reach the lens data of a `tracing::Span` through the dispatcher.
pub(crate) struct WithLens {
    pub(crate) with_span: WithSpanFn,
    /// Like `with_span`, on the innermost span of the given span's scope (itself first) that
    /// the lens layer records.
    pub(crate) with_innermost: WithSpanFn,
}

/// The inner, unfiltered layer. Users get it wrapped in [`LensLayer`].
pub struct SpanLayer<S> {
    pipeline: Option<Arc<Pipeline>>,
    with_lens: WithLens,
    _subscriber: PhantomData<fn(S)>,
}

impl<S> fmt::Debug for SpanLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanLayer")
            .field("exporting", &self.pipeline.is_some())
            .finish()
    }
}

fn with_span<S>(dispatch: &Dispatch, id: &Id, f: &mut dyn FnMut(&mut LensSpan))
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(subscriber) = dispatch.downcast_ref::<S>() else {
        return;
    };
    let Some(span) = subscriber.span(id) else {
        return;
    };
    let mut ext = span.extensions_mut();
    if let Some(data) = ext.get_mut::<LensSpan>() {
        f(data);
    }
}

fn with_innermost<S>(dispatch: &Dispatch, id: &Id, f: &mut dyn FnMut(&mut LensSpan))
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(subscriber) = dispatch.downcast_ref::<S>() else {
        return;
    };
    let Some(span) = subscriber.span(id) else {
        return;
    };
    for span in span.scope() {
        let mut ext = span.extensions_mut();
        if let Some(data) = ext.get_mut::<LensSpan>().filter(|d| d.span.is_some()) {
            f(data);
            return;
        }
    }
}

impl<S> SpanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn new(pipeline: Option<Arc<Pipeline>>) -> Self {
        SpanLayer {
            pipeline,
            with_lens: WithLens {
                with_span: with_span::<S>,
                with_innermost: with_innermost::<S>,
            },
            _subscriber: PhantomData,
        }
    }

    #[inline]
    fn value_limit(&self) -> Option<usize> {
        self.pipeline.as_ref().and_then(|p| p.value_limit)
    }

    fn parent_context(&self, attrs: &Attributes<'_>, ctx: &LayerContext<'_, S>) -> Context {
        let parent = if let Some(id) = attrs.parent() {
            ctx.span(id)
        } else if attrs.is_contextual() {
            ctx.lookup_current()
        } else {
            return Context::new();
        };
        if let Some(parent) = parent
            && let Some(data) = parent.extensions().get::<LensSpan>()
        {
            return Context::new().with_remote_span_context(data.cx.clone());
        }
        // An attached remote parent (clone the context only when it has one).
        if let Some(current) = Context::map_current(|cx| cx.has_active_span().then(|| cx.clone())) {
            return current;
        }
        match self
            .pipeline
            .as_ref()
            .and_then(|p| p.default_parent.as_ref())
        {
            Some(cx) => cx.clone(),
            None => Context::new(),
        }
    }
}

/// Span-level settings carried by reserved fields.
#[derive(Default)]
struct Reserved {
    name: Option<String>,
    kind: Option<SpanKind>,
    status_code: Option<bool>,
    status_description: Option<String>,
}

impl Reserved {
    fn status(&mut self) -> Option<Status> {
        match (self.status_code, self.status_description.take()) {
            (Some(true), _) => Some(Status::Ok),
            (Some(false), d) | (None, d @ Some(_)) => Some(Status::error(d.unwrap_or_default())),
            (None, None) => None,
        }
    }
}

/// Where the typed values of a span's or an event's fields go. [`Fields`] turns `tracing`'s
/// typed callbacks into these two calls, so both kinds of record share one conversion.
trait FieldSink {
    /// A typed (non-text) value.
    fn value(&mut self, field: &Field, value: Value);
    /// A text value (`&str`, `Debug`, `Display`, `Error`), before redaction.
    fn text(&mut self, field: &Field, text: String);
}

/// Initial capacity of the text of a `Debug`-recorded value (an event's message, `?field`).
const DEBUG_TEXT_CAPACITY: usize = 48;

/// The `Visit` adapter over a [`FieldSink`].
struct Fields<'a, T>(&'a mut T);

fn int_value<T: TryInto<i64> + ToString + Copy>(v: T) -> Value {
    v.try_into()
        .map_or_else(|_| Value::from(v.to_string()), Value::I64)
}

impl<T: FieldSink> Visit for Fields<'_, T> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.value(field, Value::F64(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.value(field, Value::I64(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.value(field, int_value(value));
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        self.0.value(field, int_value(value));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.0.value(field, int_value(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.value(field, Value::Bool(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.text(field, value.to_string());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.text(field, value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Messages and `?`/`%` values are mostly short: one allocation of a small buffer up
        // front instead of `format!`'s growth from an empty string.
        let mut text = String::with_capacity(DEBUG_TEXT_CAPACITY);
        let _ = fmt::Write::write_fmt(&mut text, format_args!("{value:?}"));
        self.0.text(field, text);
    }
}

/// A text value, cut to the length limit, or `[REDACTED]` under a redact key.
fn redacted(field: &Field, text: String, limit: Option<usize>) -> Value {
    if is_redacted(field.name()) {
        Value::from(REDACTED)
    } else {
        Value::from(truncate_chars(text, limit))
    }
}

/// Collects span fields as attributes.
struct SpanFields<'a> {
    attributes: &'a mut Vec<KeyValue>,
    reserved: &'a mut Reserved,
    limit: Option<usize>,
}

impl SpanFields<'_> {
    #[cold]
    fn reserved(&mut self, name: &'static str, value: Value) {
        match name {
            "otel.name" => self.reserved.name = Some(value.to_string()),
            "otel.kind" => {
                self.reserved.kind = match value.as_str().to_ascii_lowercase().as_str() {
                    "server" => Some(SpanKind::Server),
                    "client" => Some(SpanKind::Client),
                    "producer" => Some(SpanKind::Producer),
                    "consumer" => Some(SpanKind::Consumer),
                    "internal" => Some(SpanKind::Internal),
                    _ => None,
                }
            }
            "otel.status_code" => {
                self.reserved.status_code = match value.as_str().to_ascii_lowercase().as_str() {
                    "ok" => Some(true),
                    "error" => Some(false),
                    _ => None,
                }
            }
            "otel.status_description" => self.reserved.status_description = Some(value.to_string()),
            _ if name.starts_with(GROUP_FIELD_PREFIX) => {}
            _ => self
                .attributes
                .push(KeyValue::new(Key::from_static_str(name), value)),
        }
    }
}

impl FieldSink for SpanFields<'_> {
    #[inline]
    fn value(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name.starts_with("otel.") || name.starts_with(GROUP_FIELD_PREFIX) {
            self.reserved(name, value);
            return;
        }
        self.attributes
            .push(KeyValue::new(Key::from_static_str(name), value));
    }

    fn text(&mut self, field: &Field, text: String) {
        self.value(field, redacted(field, text, self.limit));
    }
}

/// Collects an event: its message, fields and error text.
#[derive(Default)]
struct EventFields {
    message: Option<String>,
    error: Option<String>,
    attributes: Vec<KeyValue>,
    limit: Option<usize>,
}

impl FieldSink for EventFields {
    fn value(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name.starts_with(GROUP_FIELD_PREFIX) || name.starts_with("log.") {
            return;
        }
        self.attributes
            .push(KeyValue::new(Key::from_static_str(name), value));
    }

    fn text(&mut self, field: &Field, text: String) {
        match field.name() {
            "message" => self.message = Some(text),
            "error" => {
                self.error = Some(text.clone());
                self.value(field, Value::from(truncate_chars(text, self.limit)));
            }
            _ => self.value(field, redacted(field, text, self.limit)),
        }
    }
}

impl<S> Layer<S> for SpanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        if let Some(p) = &self.pipeline {
            p.open.register_subscriber(subscriber, with_span::<S>);
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(pipeline) = &self.pipeline else {
            return;
        };
        if pipeline.inherited() {
            // A forked child: the parent's providers have no worker threads here.
            return;
        }
        if Context::is_current_telemetry_suppressed() {
            // An exporter (or the SDK) at work on this thread: a span of its own would feed
            // back into the pipeline (or re-enter a locked exporter).
            return;
        }
        let Some(span_ref) = ctx.span(id) else {
            return;
        };
        let meta = attrs.metadata();
        // Fields with a value only (`Empty` ones, such as a group field, are not visited): a
        // span whose only field is its group allocates nothing here.
        let mut attributes = Vec::with_capacity(attrs.values().len());
        let mut reserved = Reserved::default();
        attrs.record(&mut Fields(&mut SpanFields {
            attributes: &mut attributes,
            reserved: &mut reserved,
            limit: pipeline.value_limit,
        }));
        let parent_cx = self.parent_context(attrs, &ctx);
        let mut builder = SpanBuilder::from_name(match reserved.name.take() {
            Some(name) => Cow::Owned(name),
            None => Cow::Borrowed(meta.name()),
        });
        builder.attributes = Some(attributes);
        builder.span_kind = reserved.kind.take();
        let mut span = pipeline.tracer.build_with_context(builder, &parent_cx);
        if let Some(status) = reserved.status() {
            span.set_status(status);
        }
        let cx = span.span_context().clone();
        let open_key = span
            .is_recording()
            .then(|| pipeline.open.insert(id.clone()));
        span_ref.extensions_mut().insert(LensSpan {
            span: Some(span),
            cx,
            open_key,
            generation: pipeline.generation,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let Some(span_ref) = ctx.span(id) else {
            return;
        };
        let mut ext = span_ref.extensions_mut();
        let Some(span) = ext.get_mut::<LensSpan>().and_then(LensSpan::live_mut) else {
            return;
        };
        let mut attributes = Vec::new();
        let mut reserved = Reserved::default();
        values.record(&mut Fields(&mut SpanFields {
            attributes: &mut attributes,
            reserved: &mut reserved,
            limit: self.value_limit(),
        }));
        if let Some(name) = reserved.name.take() {
            span.update_name(name);
        }
        if let Some(status) = reserved.status() {
            span.set_status(status);
        }
        span.set_attributes(attributes);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: LayerContext<'_, S>) {
        let Some(follows_cx) = ctx
            .span(follows)
            .and_then(|s| s.extensions().get::<LensSpan>().map(|d| d.cx.clone()))
        else {
            return;
        };
        let Some(span_ref) = ctx.span(id) else {
            return;
        };
        if let Some(span) = span_ref
            .extensions_mut()
            .get_mut::<LensSpan>()
            .and_then(LensSpan::live_mut)
        {
            span.add_link(follows_cx, Vec::new());
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        if Context::is_current_telemetry_suppressed() {
            return;
        }
        let Some(span_ref) = ctx.event_span(event) else {
            return;
        };
        let mut ext = span_ref.extensions_mut();
        let Some(span) = ext.get_mut::<LensSpan>().and_then(LensSpan::live_mut) else {
            return;
        };
        let limit = self.value_limit();
        // One allocation for the attributes: every field but the message becomes one.
        let fields = event.metadata().fields();
        let mut v = EventFields {
            limit,
            attributes: Vec::with_capacity(
                fields.len() - usize::from(fields.field("message").is_some()),
            ),
            ..EventFields::default()
        };
        event.record(&mut Fields(&mut v));
        let meta = event.metadata();
        if *meta.level() == Level::ERROR {
            let description = v
                .message
                .clone()
                .or_else(|| v.error.clone())
                .unwrap_or_default();
            let mut attributes = v.attributes;
            attributes.push(KeyValue::new(
                semconv::EXCEPTION_MESSAGE,
                truncate_chars(description.clone(), limit),
            ));
            if let Some(message) = v.message {
                attributes.push(KeyValue::new("message", truncate_chars(message, limit)));
            }
            span.add_event(semconv::EXCEPTION_EVENT, attributes);
            span.set_status(Status::error(description));
        } else {
            let name: Cow<'static, str> = match v.message {
                Some(m) => Cow::Owned(m),
                None => Cow::Borrowed(meta.name()),
            };
            span.add_event(name, v.attributes);
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(span_ref) = ctx.span(&id) else {
            return;
        };
        let data = span_ref.extensions_mut().remove::<LensSpan>();
        if let Some(mut data) = data {
            // An inherited span (forked child): never touch the parent's slab, whose lock
            // another thread of the parent may have held at fork time.
            if let Some(mut span) = data.take_live() {
                if let (Some(key), Some(p)) = (data.open_key.take(), &self.pipeline) {
                    p.open.remove(key);
                }
                span.end();
            }
        }
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            Some(self as *const Self as *const ())
        } else if id == TypeId::of::<WithLens>() {
            Some(&self.with_lens as *const WithLens as *const ())
        } else {
            None
        }
    }
}

/// The nemo-lens layer: spans and events of a `tracing` subscriber, exported through
/// OpenTelemetry, behind its rank / group / sampling per-layer filter.
///
/// Get one from [`Telemetry::layer`](crate::Telemetry::layer) and add it to any
/// `tracing_subscriber::registry()`-based subscriber.
///
/// ```
/// use tracing_subscriber::prelude::*;
/// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// let _subscriber = tracing_subscriber::registry().with(telemetry.layer());
/// ```
pub struct LensLayer<S> {
    filter: LensFilter,
    logs: LogFilter,
    /// The log part bridges something (`logs.is_on()`, fixed at setup). When it is off (the
    /// default) no callback reaches it: see the combination below.
    logs_on: bool,
    spans: Filtered<SpanLayer<S>, LensFilter, S>,
    logs_layer: Filtered<LogLayer<S>, LogFilter, S>,
}

impl<S> fmt::Debug for LensLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensLayer")
            .field("filter", &self.filter)
            .field("logs", &self.logs)
            .finish()
    }
}

impl<S> LensLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    pub(crate) fn new(
        pipeline: Option<Arc<Pipeline>>,
        filter: LensFilter,
        logs: (Option<&LensLoggerProvider>, LogFilter),
    ) -> Self {
        let (provider, log_filter) = logs;
        LensLayer {
            filter: filter.clone(),
            logs_on: log_filter.is_on(),
            logs_layer: LogLayer::filtered(provider, log_filter.clone()),
            logs: log_filter,
            spans: SpanLayer::new(pipeline).with_filter(filter),
        }
    }

    /// The filter that decides which callsites this layer records as spans and span events.
    pub fn filter(&self) -> &LensFilter {
        &self.filter
    }

    /// The filter of the log bridge, when this rank bridges logs (`logs_enabled`).
    pub fn log_filter(&self) -> Option<&LogFilter> {
        Some(&self.logs).filter(|f| f.is_on())
    }
}

// Two per-layer-filtered parts in one layer. `Layered` cannot be used here: for `S = Registry`
// it believes its inner part *is* the registry and keeps only the outer part's level hint, so
// an inert log part (hint OFF) would switch every callsite off. The combination below follows
// tracing-subscriber's rules for two filtered layers: the registry merges the per-layer
// interests, and the level hint is the most verbose of the two (`None` if either has none).
//
// Cost: an off log part (logs not enabled, the default) is left out of everything but the
// layer set-up (`on_layer` gives it its filter id). Registering its `never` would merge with
// the span part's `always` into `sometimes`, and `tracing` would then ask `enabled` on every
// span and event; and each `Filtered` callback that takes a span id (`on_enter`, `on_exit`,
// `on_close`, `on_record`) looks the span up in the registry to check its filter bit, even
// when the wrapped layer ignores the callback. Neither part acts on `on_enter`/`on_exit`, so
// those are not forwarded at all (a part that starts to needs its forwarding back here).
impl<S> Layer<S> for LensLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.spans.on_register_dispatch(subscriber);
        self.logs_layer.on_register_dispatch(subscriber);
    }
    fn on_layer(&mut self, subscriber: &mut S) {
        self.spans.on_layer(subscriber);
        self.logs_layer.on_layer(subscriber);
    }
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        // Each filtered part records its own interest for the registry to merge.
        if self.logs_on {
            self.logs_layer.register_callsite(metadata);
        }
        self.spans.register_callsite(metadata)
    }
    fn enabled(&self, metadata: &Metadata<'_>, ctx: LayerContext<'_, S>) -> bool {
        (!self.logs_on || self.logs_layer.enabled(metadata, ctx.clone()))
            && self.spans.enabled(metadata, ctx)
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        self.spans.on_new_span(attrs, id, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_new_span(attrs, id, ctx);
        }
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        let spans = self.spans.max_level_hint()?;
        if !self.logs_on {
            return Some(spans);
        }
        Some(spans.max(self.logs_layer.max_level_hint()?))
    }
    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        self.spans.on_record(span, values, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_record(span, values, ctx);
        }
    }
    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: LayerContext<'_, S>) {
        self.spans.on_follows_from(span, follows, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_follows_from(span, follows, ctx);
        }
    }
    fn event_enabled(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) -> bool {
        (!self.logs_on || self.logs_layer.event_enabled(event, ctx.clone()))
            && self.spans.event_enabled(event, ctx)
    }
    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        self.spans.on_event(event, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_event(event, ctx);
        }
    }
    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        if self.logs_on {
            self.logs_layer.on_close(id.clone(), ctx.clone());
        }
        // Straight to the span part, past its `Filtered` wrapper: the wrapper would look the
        // span up once more only to check its filter bit (and `LensFilter` has no `on_close`),
        // while `SpanLayer::on_close` looks it up anyway and acts only on spans carrying lens
        // data, which only spans the filter enabled have.
        self.spans.inner().on_close(id, ctx);
    }
    fn on_id_change(&self, old: &Id, new: &Id, ctx: LayerContext<'_, S>) {
        self.spans.on_id_change(old, new, ctx.clone());
        if self.logs_on {
            self.logs_layer.on_id_change(old, new, ctx);
        }
    }
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to the wrapped layers, which uphold the contract.
        unsafe {
            self.spans
                .downcast_raw(id)
                .or_else(|| self.logs_layer.downcast_raw(id))
        }
    }
}
