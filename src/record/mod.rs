//! The compact record of a span, kept on the training thread; the exported span is built from
//! it later, on the batch worker ([`to_span_data`], or [`to_sdk`] through the SDK). The lens
//! layer keeps each open span in its table ([`open_spans`]), which also ends them as truncated
//! at shutdown, on a panic, or when the subscriber is dropped.
//!
//! # Why
//!
//! Building an `opentelemetry_sdk` span for every `tracing` span (sampler call, span data,
//! processor callbacks, `SpanData` at the end) would be most of what an exported span costs on
//! the thread that makes it. The lens layer keeps, in its table of open spans, only what the
//! span *is*: its static name (or `otel.name`), kind, status, two timestamps, its span context
//! (ids drawn at once, so children, the log bridge and propagation see them), its parent, its
//! attributes (static keys), events and links. When the span closes, the record goes into the
//! batch queue as one pointer, and the worker thread ([`crate::queue::span_processor::LensBatchProcessor`])
//! builds the exported span from it. An OpenTelemetry [`Context`] is built only when something
//! asks for one (context activation at the first enter,
//! [`LensSpanExt::context`](crate::LensSpanExt::context), propagation, a `TRACEPARENT` parent).
//!
//! # What the SDK sees
//!
//! When the application added no span processor of its own (and uses lens's provider and batch
//! export), no processor of the application can see a lens-layer span: the worker builds the
//! exporter's `SpanData` itself, exactly as the SDK would have ([`to_span_data`]). Otherwise
//! the SDK span is built through the tracer provider the application configured, with the ids
//! drawn at start ([`crate::ids`]), its start and end times, attributes, events, links and
//! status: the sampler, the span limits (`OTEL_SPAN_*_COUNT_LIMIT`) and every span processor
//! see the whole span. **Where processors run**: a span processor added with
//! [`TelemetryBuilder::span_processor`](crate::TelemetryBuilder::span_processor) gets
//! `on_start` *and* `on_end` on the batch worker thread (`nemo-lens-spans`), one after the
//! other, when the worker reaches the span (after it ended, within `OTEL_BSP_SCHEDULE_DELAY`);
//! its `on_start` sees the finished span's attributes. With synchronous export
//! ([`ExportMode::Synchronous`](crate::ExportMode::Synchronous)) both run on the
//! thread that ends the span, when it ends. Spans made directly with
//! [`Telemetry::tracer`](crate::Telemetry::tracer) are ordinary SDK spans.
//!
//! A record bounds its events and links by the same limits as the SDK (128 each, or
//! `OTEL_SPAN_EVENT_COUNT_LIMIT` / `OTEL_SPAN_LINK_COUNT_LIMIT`): the rest are counted as
//! dropped (`dropped_events_count`, `dropped_links_count`). A field recorded again with
//! `span.record` replaces its value.
//!
//! # Panics in user code
//!
//! A field's `Display` or `Debug` runs while the layer *reads* the fields, before it takes any
//! lock: a panic there is the application's own panic (the thread unwinds, the process exits
//! 101 if it is the main thread), and nothing is poisoned. The record's own lock and the
//! table's shard locks are held only for pushes, lookups and swaps, never while user code runs.
//! The panic hook and the shutdown closer take them with a timeout, and never touch the
//! registry's span extensions (which another layer, such as `fmt`, may hold while it formats).

pub(crate) mod attributes;
pub(crate) mod held;
pub(crate) mod open_spans;
pub(crate) mod stacktrace;
pub(crate) mod thread;
pub(crate) mod to_sdk;
pub(crate) mod to_span_data;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Event, Link, SpanContext, SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use parking_lot::Mutex;

use crate::rank::tags::Tags;
use crate::record::attributes::{EventValues, Reserved, SpanAttributes, exception_attributes};
use crate::record::stacktrace::{PendingStacktraces, Stacktrace};
use crate::semconv;
use crate::size::{ApproxSize, ENTRY_OVERHEAD, kv_size};

/// How long the panic hook and the closer wait for a record's lock before giving up on it.
const LOCK_PATIENCE: Duration = Duration::from_millis(200);

/// The parent a span was started with.
#[derive(Debug)]
pub(crate) enum Parent {
    /// None: a root span.
    Root,
    /// A span the lens layer records (a context is built from it on the worker).
    Span(SpanContext),
    /// An attached OpenTelemetry context (a remote parent) or the launcher's `TRACEPARENT`.
    Context(Context),
}

impl Parent {
    /// The parent's span context, when it is a valid one.
    pub(crate) fn span_context(&self) -> Option<SpanContext> {
        let sc = match self {
            Parent::Root => return None,
            Parent::Span(sc) => sc.clone(),
            Parent::Context(cx) => cx.span().span_context().clone(),
        };
        sc.is_valid().then_some(sc)
    }

    fn into_context(self) -> Context {
        match self {
            Parent::Root => Context::new(),
            Parent::Span(sc) => Context::new().with_remote_span_context(sc),
            Parent::Context(cx) => cx,
        }
    }
}

/// Per-span limits of a record, as the SDK's (`OTEL_SPAN_EVENT_COUNT_LIMIT`,
/// `OTEL_SPAN_LINK_COUNT_LIMIT`, 128 each by default).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) events: usize,
    pub(crate) links: usize,
}

impl Limits {
    /// The SDK's defaults, overridden by the variables the SDK reads (parsed as it parses them:
    /// the SDK counts the events and links a record drops past these, so both must agree).
    pub(crate) fn from_env() -> Self {
        let read = |var: &str| sdk_count_limit(var).map_or(128, |n| n as usize);
        Limits {
            events: read("OTEL_SPAN_EVENT_COUNT_LIMIT"),
            links: read("OTEL_SPAN_LINK_COUNT_LIMIT"),
        }
    }
}

/// A span count limit (`OTEL_SPAN_*_COUNT_LIMIT`) as the SDK's default provider configuration
/// reads it: a `u32`, untrimmed; `None` when unset or not one.
pub(crate) fn sdk_count_limit(var: &str) -> Option<u32> {
    std::env::var(var).ok()?.parse().ok()
}

/// Everything a span records until it ends.
#[derive(Debug)]
pub(crate) struct SpanRecord {
    name: Cow<'static, str>,
    kind: Option<SpanKind>,
    status: Status,
    start: SystemTime,
    end: Option<SystemTime>,
    parent: Parent,
    attributes: SpanAttributes,
    events: Vec<Event>,
    dropped_events: u32,
    links: Vec<Link>,
    dropped_links: u32,
    /// Backtraces of `exception` events, resolved by the worker.
    stacktraces: PendingStacktraces,
    /// The worker has built its SDK span.
    built: bool,
    /// The attributes of its span group (`lens.group`, ...), appended by the worker.
    group_tags: Option<Tags>,
}

impl SpanRecord {
    /// A record started now, without attributes yet (see [`SpanRecord::read_fields`]).
    #[inline]
    pub(crate) fn start(name: &'static str, parent: Parent) -> Self {
        SpanRecord {
            name: Cow::Borrowed(name),
            kind: None,
            status: Status::Unset,
            start: SystemTime::now(),
            end: None,
            parent,
            attributes: SpanAttributes::new(),
            events: Vec::new(),
            dropped_events: 0,
            links: Vec::new(),
            dropped_links: 0,
            stacktraces: PendingStacktraces::default(),
            built: false,
            group_tags: None,
        }
    }

    /// Gives the span `thread.id` and `thread.name` of the thread it is made on (see
    /// [`thread`]), after its own fields; `limit` cuts the name (the value length limit).
    #[inline]
    pub(crate) fn add_thread_attributes(&mut self, limit: Option<usize>) {
        thread::append(&mut self.attributes, limit);
    }

    /// Gives the span the attributes of its group, which the worker appends.
    #[inline]
    pub(crate) fn set_group_tags(&mut self, tags: Option<Tags>) {
        self.group_tags = tags;
    }

    /// Adds a link, or counts it past the limit.
    pub(crate) fn push_link(&mut self, cx: SpanContext, attributes: Vec<KeyValue>, limits: Limits) {
        if self.links.len() < limits.links {
            self.links.push(Link::new(cx, attributes, 0));
        } else {
            self.dropped_links = self.dropped_links.saturating_add(1);
        }
    }

    /// Starts this (emptied, reused) record anew, in place.
    #[inline]
    fn restart(&mut self, name: &'static str, parent: Parent) {
        self.name = Cow::Borrowed(name);
        self.kind = None;
        self.status = Status::Unset;
        self.start = SystemTime::now();
        self.end = None;
        self.parent = parent;
        self.attributes.clear();
        self.events.clear();
        self.dropped_events = 0;
        self.links.clear();
        self.dropped_links = 0;
        self.stacktraces.clear();
        self.built = false;
        self.group_tags = None;
    }

    /// Reads the new span's fields straight into the record: `read` (the layer's field reader)
    /// fills the attributes and returns the reserved settings. User code runs there: the record
    /// must not be shared yet, so that no lock is held.
    #[inline]
    pub(crate) fn read_fields(&mut self, read: impl FnOnce(&mut SpanAttributes) -> Reserved) {
        let reserved = read(&mut self.attributes);
        if reserved.is_set() {
            self.apply(reserved);
        }
    }

    #[cold]
    fn apply(&mut self, mut reserved: Reserved) {
        if let Some(name) = reserved.name.take() {
            self.name = Cow::Owned(name);
        }
        if let Some(kind) = reserved.kind.take() {
            self.kind = Some(kind);
        }
        if let Some(status) = reserved.status() {
            self.set_status(status);
        }
    }

    fn is_open(&self) -> bool {
        self.end.is_none()
    }

    /// Sets attributes: a key recorded again gets the new value.
    fn set_attribute(&mut self, kv: KeyValue) {
        match self.attributes.iter_mut().find(|a| a.key == kv.key) {
            Some(slot) => slot.value = kv.value,
            None => self.attributes.push(kv),
        }
    }

    fn add_event(&mut self, event: Event, limits: Limits) {
        self.add_event_with_stacktrace(event, None, limits);
    }

    /// Adds an event (with the backtrace of its exception, if any), or counts it past the
    /// limit.
    fn add_event_with_stacktrace(
        &mut self,
        event: Event,
        stacktrace: Option<Stacktrace>,
        limits: Limits,
    ) {
        if self.events.len() < limits.events {
            if let Some(trace) = stacktrace {
                self.stacktraces.push(self.events.len(), trace);
            }
            self.events.push(event);
        } else {
            self.dropped_events = self.dropped_events.saturating_add(1);
        }
    }

    /// Replaces the parent (`LensSpanExt::set_parent`, before the span is first entered);
    /// returns the old one.
    pub(crate) fn replace_parent(&mut self, parent: Parent) -> Parent {
        std::mem::replace(&mut self.parent, parent)
    }

    fn set_error_if_unset(&mut self, description: String) {
        if self.status == Status::Unset {
            self.status = Status::error(description);
        }
    }

    fn set_status(&mut self, status: Status) {
        // As the SDK: the statuses are ordered `Ok` > `Error` > `Unset`.
        if status > self.status {
            self.status = status;
        }
    }
}

/// A span's identity and record, shared by its registry extension, the open-span table
/// (closer, panic hook) and, once it ends, the batch queue.
#[derive(Debug)]
pub(crate) struct SpanState {
    cx: SpanContext,
    /// `None` when the span is not sampled (nothing is recorded), or once the worker took it.
    pub(crate) record: Mutex<Option<SpanRecord>>,
    /// The `tracing` span closed (or its state was replaced): a thread that kept this state to
    /// enter the span again without a table lookup must look again (its id may be reused).
    closed: AtomicBool,
    /// Entries of the span on threads' stacks of entered spans (`layer/activation.rs`): while
    /// it is 0, entering needs no look for an earlier entry and closing no sweep of the stack.
    entries: AtomicU32,
}

impl SpanState {
    #[inline]
    pub(crate) fn new(cx: SpanContext, record: Option<SpanRecord>) -> Self {
        SpanState {
            cx,
            record: Mutex::new(record),
            closed: AtomicBool::new(false),
            entries: AtomicU32::new(0),
        }
    }

    /// Marks the `tracing` span closed (see [`SpanState::is_closed`]).
    #[inline]
    pub(crate) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether the `tracing` span closed.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Counts an entry of the span pushed on a thread's stack; returns how many there were
    /// before.
    #[inline]
    pub(crate) fn entry_pushed(&self) -> u32 {
        self.entries.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts an entry of the span gone from a thread's stack.
    #[inline]
    pub(crate) fn entry_gone(&self) {
        self.entries.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether some thread's stack holds an entry of the span.
    #[inline]
    pub(crate) fn has_entries(&self) -> bool {
        self.entries.load(Ordering::Relaxed) != 0
    }

    /// The state of a new span with record `name`/`parent`: `spare` (an emptied state, see
    /// [`SpanQueue::spare`](crate::queue::span_processor::SpanQueue::spare)) restarted in place
    /// when it is referenced nowhere else, else a new allocation. Returned unshared.
    #[inline]
    pub(crate) fn start(
        spare: Option<Arc<SpanState>>,
        cx: SpanContext,
        name: &'static str,
        parent: Parent,
    ) -> Arc<SpanState> {
        if let Some(mut spare) = spare
            && let Some(state) = Arc::get_mut(&mut spare)
            && let Some(record) = state.record.get_mut().as_mut()
        {
            state.cx = cx;
            *state.closed.get_mut() = false;
            record.restart(name, parent);
            return spare;
        }
        Arc::new(SpanState::new(cx, Some(SpanRecord::start(name, parent))))
    }

    /// Applies a `span.record` (values read beforehand, outside the lock).
    pub(crate) fn record_fields(&self, attributes: SpanAttributes, reserved: Reserved) {
        let mut guard = self.record.lock();
        let Some(record) = guard.as_mut().filter(|r| r.is_open()) else {
            return;
        };
        if reserved.is_set() {
            record.apply(reserved);
        }
        for kv in attributes {
            record.set_attribute(kv);
        }
    }

    /// Sets an attribute (`LensSpanExt::set_attribute`); `false` when the span has ended or
    /// is not recorded.
    pub(crate) fn set_attribute(&self, kv: KeyValue) -> bool {
        let mut guard = self.record.lock();
        let Some(record) = guard.as_mut().filter(|r| r.is_open()) else {
            return false;
        };
        record.set_attribute(kv);
        true
    }

    /// Sets the status (`LensSpanExt::set_status`, ordered as the SDK's); `false` when the
    /// span has ended or is not recorded.
    pub(crate) fn set_status(&self, status: Status) -> bool {
        let mut guard = self.record.lock();
        let Some(record) = guard.as_mut().filter(|r| r.is_open()) else {
            return false;
        };
        record.set_status(status);
        true
    }

    /// Sets the status `ERROR` with `description` unless a status is set (a panic unwinds
    /// through the span: never waits more than [`LOCK_PATIENCE`] for the record).
    pub(crate) fn set_error_if_unset(&self, description: String) {
        if let Some(mut guard) = self.record.try_lock_for(LOCK_PATIENCE)
            && let Some(record) = guard.as_mut().filter(|r| r.is_open())
        {
            record.set_error_if_unset(description);
        }
    }

    /// Adds an event (read beforehand, outside the lock).
    pub(crate) fn add_event(&self, values: EventValues, limits: Limits) {
        let mut guard = self.record.lock();
        let Some(record) = guard.as_mut().filter(|r| r.is_open()) else {
            return;
        };
        if let Some(status) = values.status {
            record.set_status(status);
        }
        record.add_event_with_stacktrace(values.event, values.stacktrace, limits);
    }

    /// Adds a link; `false` when the span has ended or is not recorded.
    pub(crate) fn add_link(
        &self,
        cx: SpanContext,
        attributes: Vec<KeyValue>,
        limits: Limits,
    ) -> bool {
        let mut guard = self.record.lock();
        let Some(record) = guard.as_mut().filter(|r| r.is_open()) else {
            return false;
        };
        record.push_link(cx, attributes, limits);
        true
    }

    /// When the span started (`None` when it is not recorded, or its lock is not free within
    /// [`LOCK_PATIENCE`]).
    pub(crate) fn start_time(&self) -> Option<SystemTime> {
        self.record
            .try_lock_for(LOCK_PATIENCE)?
            .as_ref()
            .map(|r| r.start)
    }

    /// The span's context.
    #[inline]
    pub(crate) fn span_context(&self) -> &SpanContext {
        &self.cx
    }

    /// Ends the span now; its approximate size (see [`ApproxSize`]), or `None` when it had
    /// ended already (or is not recorded).
    #[inline]
    pub(crate) fn end(&self) -> Option<usize> {
        let now = SystemTime::now();
        match self.record.lock().as_mut() {
            Some(record) if record.is_open() => {
                record.end = Some(now);
                Some(record.approx_size())
            }
            _ => None,
        }
    }

    /// Ends the span as truncated (`nemo.span.truncated`), unless it has ended; its
    /// approximate size, or `None` when it had ended, or when its lock could not be had within
    /// [`LOCK_PATIENCE`].
    pub(crate) fn truncate(&self, reason: &'static str, limits: Limits) -> Option<usize> {
        let now = SystemTime::now();
        let mut guard = self.record.try_lock_for(LOCK_PATIENCE)?;
        let record = guard.as_mut().filter(|r| r.is_open())?;
        record.set_attribute(KeyValue::new(semconv::NEMO_SPAN_TRUNCATED, true));
        record.add_event(
            Event::new(
                semconv::NEMO_SPAN_TRUNCATED,
                now,
                vec![KeyValue::new(semconv::NEMO_SPAN_TRUNCATED_REASON, reason)],
                0,
            ),
            limits,
        );
        record.end = Some(now);
        Some(record.approx_size())
    }

    /// Adds an `exception` event of type `kind` (`exception.escaped = "True"`: a panic unwinds
    /// out of the span) with the backtrace in `stacktrace` (taken when the event is added) and
    /// sets the status `ERROR` (the panic hook: never waits more than [`LOCK_PATIENCE`] for the
    /// lock). `false` when the span is not open.
    pub(crate) fn record_exception(
        &self,
        kind: &'static str,
        message: &str,
        stacktrace: &mut Option<Stacktrace>,
        limits: Limits,
    ) -> bool {
        let Some(mut guard) = self.record.try_lock_for(LOCK_PATIENCE) else {
            return false;
        };
        let Some(record) = guard.as_mut().filter(|r| r.is_open()) else {
            return false;
        };
        record.add_event_with_stacktrace(
            Event::new(
                semconv::EXCEPTION_EVENT,
                SystemTime::now(),
                exception_attributes(kind.to_string(), message.to_string(), true, 0),
                0,
            ),
            stacktrace.take(),
            limits,
        );
        record.set_status(Status::error(message.to_string()));
        true
    }

    /// Moves the contents of the ended record out (the lock is held for this only), leaving
    /// the record in place, ended and marked built, so that the state can be reused for
    /// another span; `None` when it is still open or was built already.
    /// Backtraces captured for its events are resolved here, outside the lock: resolving
    /// symbols is the slow part of a backtrace, and this runs on the export worker.
    pub(crate) fn take_ended(&self) -> Option<Ended> {
        let (mut ended, stacktraces, tags) = {
            let mut guard = self.record.lock();
            let r = guard.as_mut().filter(|r| !r.built && !r.is_open())?;
            r.built = true;
            let ended = Ended {
                name: std::mem::replace(&mut r.name, Cow::Borrowed("")),
                kind: r.kind.take(),
                status: std::mem::replace(&mut r.status, Status::Unset),
                start: r.start,
                end: r.end.unwrap_or_else(SystemTime::now),
                parent: std::mem::replace(&mut r.parent, Parent::Root),
                attributes: std::mem::take(&mut r.attributes),
                events: std::mem::take(&mut r.events),
                dropped_events: r.dropped_events,
                links: std::mem::take(&mut r.links),
                dropped_links: r.dropped_links,
            };
            (
                ended,
                std::mem::take(&mut r.stacktraces),
                r.group_tags.take(),
            )
        };
        stacktraces.resolve_into(&mut ended.events, attributes::truncate_chars);
        if let Some(tags) = tags {
            append_tags(&mut ended.attributes, &tags);
        }
        Some(ended)
    }
}

/// Appends a group's `tags` to a span's `attributes`, but not a key the span set itself.
fn append_tags(attributes: &mut SpanAttributes, tags: &[KeyValue]) {
    for tag in tags {
        if !attributes.iter().any(|kv| kv.key == tag.key) {
            attributes.push(tag.clone());
        }
    }
}

/// The fixed part of a record's size.
const RECORD_BASE_SIZE: usize =
    std::mem::size_of::<SpanState>() + std::mem::size_of::<SpanRecord>();

/// What an ended record holds, moved out of it for export.
pub(crate) struct Ended {
    pub(crate) name: Cow<'static, str>,
    pub(crate) kind: Option<SpanKind>,
    pub(crate) status: Status,
    pub(crate) start: SystemTime,
    pub(crate) end: SystemTime,
    pub(crate) parent: Parent,
    pub(crate) attributes: SpanAttributes,
    pub(crate) events: Vec<Event>,
    pub(crate) dropped_events: u32,
    pub(crate) links: Vec<Link>,
    pub(crate) dropped_links: u32,
}

impl ApproxSize for SpanState {
    /// The record's size (see [`SpanRecord::approx_size`]); a record the worker holds right
    /// now counts its fixed part only.
    fn approx_size(&self) -> usize {
        match self.record.try_lock() {
            Some(guard) => guard
                .as_ref()
                .map_or(RECORD_BASE_SIZE, SpanRecord::approx_size),
            None => RECORD_BASE_SIZE,
        }
    }
}

impl SpanRecord {
    /// The record's size from its name, attributes, events and links: the same estimate as
    /// for an SDK span (see [`ApproxSize`]).
    fn approx_size(&self) -> usize {
        let record = self;
        RECORD_BASE_SIZE
            + record.name.len()
            + record.attributes.iter().map(kv_size).sum::<usize>()
            + record
                .events
                .iter()
                .map(|e| {
                    ENTRY_OVERHEAD + e.name.len() + e.attributes.iter().map(kv_size).sum::<usize>()
                })
                .sum::<usize>()
            + record
                .links
                .iter()
                .map(|l| 64 + l.attributes.iter().map(kv_size).sum::<usize>())
                .sum::<usize>()
            + record.stacktraces.approx_size()
    }
}
