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
//! | `ERROR` event, `#[instrument(err)]` | status `ERROR` with the message, plus an `exception` event with Python's `exception.type`, `exception.message`, `exception.stacktrace` (when a backtrace is captured), `exception.escaped = "False"` (see [`semconv::EXCEPTION_TYPE`](crate::semconv::EXCEPTION_TYPE)) |
//! | `follows_from` | link |
//! | field `otel.name` / `otel.kind` / `otel.status_code` / `otel.status_description` | span name / kind / status |
//! | field named `nemo.group.<g>` | the span's [group](crate::groups); not exported |
//!
//! String values of fields named `prompt`, `input_text`, `output_text`, `text`, `password`,
//! `token`, `secret` or `key` are replaced with `[REDACTED]` ([`DEFAULT_REDACT_KEYS`], or the
//! keys given to [`TelemetryBuilder::redact_keys`](crate::TelemetryBuilder::redact_keys)), on
//! spans and events alike. String values longer than `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`
//! (else `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) characters are cut to it, on a character boundary,
//! on spans and events alike; redaction comes first, as in Python (limit 8: `[REDACTE`).
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
//!
//! On an exporting rank the training thread keeps only a compact record per span (see
//! `src/recording.rs`): ids, timestamps, attributes, events. The OpenTelemetry SDK span is
//! built from it later on the batch worker thread, where span processors also run.

use std::any::TypeId;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Weak};

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt, TraceFlags, TraceState};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SdkTracer, ShouldSample};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Dispatch, Event, Interest, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::closer::OpenSpans;
use crate::export::batch::SpanQueue;
use crate::fields::{EventValues, SpanAttributes, SpanFields, TextRules};
use crate::filter::LensFilter;
use crate::ids;
use crate::logs::{LensLoggerProvider, LogFilter, LogLayer};
use crate::rank::groups::declared_group;
use crate::recording::{LensSpan, Limits, Parent, SpanState};

pub use crate::fields::{DEFAULT_REDACT_KEYS, REDACTED};

/// Where finished span records go.
#[derive(Debug)]
pub(crate) enum RecordSink {
    /// The queue of nemo-lens's batch processor: the worker builds the SDK spans.
    Queue(SpanQueue),
    /// No batch processor (synchronous export): the SDK span is built on the thread that
    /// ends the span.
    Inline,
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
    /// Redaction and the longest string attribute value (`OTEL_*ATTRIBUTE_VALUE_LENGTH_LIMIT`).
    pub(crate) text: TextRules,
    /// Where finished records go.
    pub(crate) sink: RecordSink,
    pub(crate) limits: Limits,
    /// The sampler follows the parent's sampled flag (the SDK's default `ParentBased`
    /// sampler); `false` with the rank sampler, which keeps every span of a sampled rank.
    pub(crate) parent_based: bool,
    /// The sampler `OTEL_TRACES_SAMPLER` gives the SDK, when it is not the default: the span's
    /// sampled flag is decided on the training thread by the same sampler, so that the context
    /// children and propagation see agrees with what the worker's SDK span will be.
    env_sampler: Option<Sampler>,
    /// Groups whose spans each start a trace of their own (`NEMO_LENS_TRACE_PER`), lower-case;
    /// empty (the default) costs one branch per span.
    trace_per: Box<[String]>,
    index: PipelineIndex,
}

impl Pipeline {
    /// `queue` is the batch processor's record queue when spans are exported in batches;
    /// `rank_sampler` says whether the provider samples with [`crate::RankAwareSampler`]
    /// (which ignores the parent's flag) instead of the SDK default.
    pub(crate) fn new(
        tracer: SdkTracer,
        default_parent: Option<Context>,
        text: TextRules,
        queue: Option<SpanQueue>,
        rank_sampler: bool,
    ) -> Self {
        let sink = match queue {
            Some(queue) => {
                queue.attach(tracer.clone());
                RecordSink::Queue(queue)
            }
            None => RecordSink::Inline,
        };
        Pipeline {
            tracer: ManuallyDrop::new(tracer),
            open: OpenSpans::default(),
            default_parent,
            generation: ids::fork_generation(),
            text,
            sink,
            limits: Limits::from_env(),
            parent_based: !rank_sampler,
            env_sampler: if rank_sampler { None } else { env_sampler() },
            trace_per: Box::default(),
            index: PipelineIndex::default(),
        }
    }

    /// Spans of `groups` (lower-case names) start a trace each, linked to the span that would
    /// have been their parent.
    pub(crate) fn with_trace_per(mut self, groups: Vec<String>) -> Self {
        self.trace_per = groups.into_boxed_slice();
        self
    }

    /// Whether a span of `meta` starts a trace of its own.
    #[inline]
    fn starts_trace(&self, meta: &Metadata<'_>) -> bool {
        !self.trace_per.is_empty()
            && declared_group(meta)
                .is_some_and(|g| self.trace_per.iter().any(|t| t.eq_ignore_ascii_case(g)))
    }

    /// `true` in a process forked (without exec) after the pipeline was built.
    #[inline]
    pub(crate) fn inherited(&self) -> bool {
        self.generation != ids::fork_generation()
    }

    /// An emptied span state to reuse, if any.
    #[inline]
    fn spare_state(&self) -> Option<Arc<SpanState>> {
        match &self.sink {
            RecordSink::Queue(queue) => queue.spare(),
            RecordSink::Inline => None,
        }
    }

    /// Hands an ended record over for export.
    #[inline]
    pub(crate) fn finish(&self, state: Arc<SpanState>) {
        match &self.sink {
            RecordSink::Queue(queue) => queue.push_record(state),
            RecordSink::Inline => {
                let _ = state.build_sdk_span(&self.tracer);
            }
        }
    }

    /// Ends every open span as truncated with `reason`, innermost first, and hands them over
    /// for export; returns how many.
    pub(crate) fn close_all(&self, reason: &'static str) -> usize {
        let mut closed = 0;
        for state in self.open.drain() {
            if state.truncate(reason, self.limits) {
                self.finish(state);
                closed += 1;
            }
        }
        closed
    }

    /// Records a panic on the innermost open span among `scope` (span ids, innermost first),
    /// without waiting on any lock for long (the panic hook).
    pub(crate) fn record_panic(&self, scope: &[Id], message: &str) {
        let limit = self.text.limit;
        let message = crate::fields::truncate_chars(message.to_string(), limit);
        let stacktrace =
            crate::fields::captured_backtrace(limit, crate::fields::UserFrames::AfterPanic);
        for id in scope {
            if let Some(state) = self.open.find(id)
                && state.record_exception("panic", &message, stacktrace.as_deref(), self.limits)
            {
                return;
            }
        }
    }

    /// Before the provider shuts down: export what is queued, within `deadline` (the SDK
    /// builds no span once its provider is shut down, so records must be turned into spans
    /// first).
    pub(crate) fn drain(&self, deadline: std::time::Instant) {
        if let RecordSink::Queue(queue) = &self.sink {
            queue.drain(deadline);
        }
    }
}

/// The sampler the SDK's default configuration reads from `OTEL_TRACES_SAMPLER` and
/// `OTEL_TRACES_SAMPLER_ARG` (the same mapping), unless it is the default
/// `parentbased_always_on` (or unset, or one the SDK does not implement, which it replaces by
/// the default).
fn env_sampler() -> Option<Sampler> {
    let name = std::env::var("OTEL_TRACES_SAMPLER").ok()?;
    let ratio = || {
        std::env::var("OTEL_TRACES_SAMPLER_ARG")
            .ok()
            .and_then(|r| r.parse::<f64>().ok())
            .unwrap_or(1.0)
    };
    Some(match name.as_str() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(ratio()),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio())))
        }
        _ => return None,
    })
}

/// The table of live pipelines, so that a span the subscriber drops without closing it (a
/// rare path) can reach its pipeline without every span holding a reference to it.
static PIPELINES: parking_lot::Mutex<slab::Slab<Weak<Pipeline>>> =
    parking_lot::Mutex::new(slab::Slab::new());

/// A pipeline's index in the table (registered once, when its first layer is made).
#[derive(Debug, Default)]
pub(crate) struct PipelineIndex(std::sync::OnceLock<usize>);

impl Pipeline {
    fn index(self: &Arc<Self>) -> usize {
        *self
            .index
            .0
            .get_or_init(|| PIPELINES.lock().insert(Arc::downgrade(self)))
    }
}

/// Ends, as truncated, an open span whose extension is dropped without the span being closed.
pub(crate) fn end_dropped_span(pipeline: usize, key: usize, state: &Arc<SpanState>) {
    let pipeline = PIPELINES
        .try_lock_for(std::time::Duration::from_millis(200))
        .and_then(|t| t.get(pipeline).and_then(Weak::upgrade));
    let Some(pipeline) = pipeline else {
        return;
    };
    pipeline.open.remove_if(key, state);
    if state.truncate(crate::closer::REASON_DROPPED, pipeline.limits) {
        pipeline.finish(state.clone());
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if let Some(index) = self.index.0.get()
            && let Some(mut table) = PIPELINES.try_lock_for(std::time::Duration::from_millis(200))
        {
            table.try_remove(*index);
        }
        if !self.inherited() {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.tracer) }
        }
    }
}

/// The decision of an `OTEL_TRACES_SAMPLER` sampler for a new span (see
/// [`Pipeline::env_sampler`]): sampled, and the trace state.
#[cold]
fn sample(
    sampler: &Sampler,
    parent: &Parent,
    trace_id: opentelemetry::trace::TraceId,
    name: &str,
) -> (bool, TraceState) {
    let cx = match parent {
        Parent::Root => Context::new(),
        Parent::Span(sc) => Context::new().with_remote_span_context(sc.clone()),
        Parent::Context(cx) => cx.clone(),
    };
    let result = sampler.should_sample(Some(&cx), trace_id, name, &SpanKind::Internal, &[], &[]);
    (
        result.decision == SamplingDecision::RecordAndSample,
        result.trace_state,
    )
}

/// Runs `f` on the lens data of span `id` in the subscriber behind `dispatch`.
pub(crate) type WithSpanFn = fn(&Dispatch, &Id, &mut dyn FnMut(&LensSpan));
/// Collects the ids of span `id`'s scope (itself first), without touching span extensions.
pub(crate) type ScopeFn = fn(&Dispatch, &Id) -> Vec<Id>;

/// Lets [`crate::LensSpanExt`] and the panic hook reach the lens data of a `tracing::Span`
/// through the dispatcher.
pub(crate) struct WithLens {
    pub(crate) with_span: WithSpanFn,
    pub(crate) scope: ScopeFn,
    pub(crate) limits: Option<Limits>,
    pub(crate) set_parent: SetParentFn,
    pub(crate) pipeline: Option<Arc<Pipeline>>,
}

/// Gives span `id` a new parent (see [`crate::LensSpanExt::set_parent`]).
pub(crate) type SetParentFn =
    fn(&WithLens, &Dispatch, &Id, Context) -> Result<(), crate::span_ext::SetParentError>;

fn set_parent<S>(
    with: &WithLens,
    dispatch: &Dispatch,
    id: &Id,
    cx: Context,
) -> Result<(), crate::span_ext::SetParentError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    use crate::span_ext::SetParentError;
    let pipeline = with.pipeline.as_ref().ok_or(SetParentError::NotRecorded)?;
    let subscriber = dispatch
        .downcast_ref::<S>()
        .ok_or(SetParentError::NotRecorded)?;
    let span = subscriber.span(id).ok_or(SetParentError::NotRecorded)?;
    let name = span.metadata().name();
    let mut ext = span.extensions_mut();
    let data = ext
        .get_mut::<LensSpan>()
        .filter(|d| d.is_live())
        .ok_or(SetParentError::NotRecorded)?;
    if data.is_used() {
        return Err(SetParentError::AlreadyStarted);
    }
    let parent = if cx.span().span_context().is_valid() {
        Parent::Context(cx)
    } else {
        Parent::Root
    };
    let (trace_id, flags, trace_state) = decide(pipeline, &parent, name);
    let old = data.state().clone();
    // The record moves to a new state (the old one, still in the open-span table until it is
    // removed below, is left without a record: the closer finds nothing to end in it).
    let record = old.record.lock().take();
    let sampled = flags.is_sampled() && record.is_some();
    let flags = flags.with_sampled(sampled);
    let new_cx = SpanContext::new(
        trace_id,
        data.span_context().span_id(),
        flags,
        false,
        trace_state,
    );
    if let Some(key) = data.open_key.take() {
        pipeline.open.remove(key, &old);
    }
    let record = record.filter(|_| sampled).map(|mut r| {
        r.set_parent(parent);
        r
    });
    let recorded = record.is_some();
    let state = Arc::new(SpanState::new(new_cx, record));
    if recorded {
        data.open_key = Some(pipeline.open.insert(id.clone(), state.clone()));
    }
    data.replace_state(state);
    Ok(())
}

/// The trace id, trace flags (sampled, W3C `random`) and trace state of a new span with
/// `parent`.
fn decide(
    pipeline: &Pipeline,
    parent: &Parent,
    name: &str,
) -> (opentelemetry::trace::TraceId, TraceFlags, TraceState) {
    let parent_cx = parent.span_context();
    let (trace_id, mut sampled, mut trace_state) = match &parent_cx {
        Some(p) => (
            p.trace_id(),
            !pipeline.parent_based || p.is_sampled(),
            p.trace_state().clone(),
        ),
        None => (ids::new_trace_id(), true, TraceState::default()),
    };
    if let Some(sampler) = &pipeline.env_sampler {
        (sampled, trace_state) = sample(sampler, parent, trace_id, name);
    }
    let flags = ids::trace_flags(sampled, parent_cx.map(|p| p.trace_flags()));
    (trace_id, flags, trace_state)
}

/// The inner, unfiltered layer. Users get it wrapped in [`LensLayer`].
pub(crate) struct SpanLayer<S> {
    pipeline: Option<Arc<Pipeline>>,
    /// Context activation (see [`crate::activation`]).
    activate: bool,
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

fn with_span<S>(dispatch: &Dispatch, id: &Id, f: &mut dyn FnMut(&LensSpan))
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(subscriber) = dispatch.downcast_ref::<S>() else {
        return;
    };
    let Some(span) = subscriber.span(id) else {
        return;
    };
    let ext = span.extensions();
    if let Some(data) = ext.get::<LensSpan>() {
        f(data);
    }
}

fn scope_ids<S>(dispatch: &Dispatch, id: &Id) -> Vec<Id>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(subscriber) = dispatch.downcast_ref::<S>() else {
        return Vec::new();
    };
    let Some(span) = subscriber.span(id) else {
        return Vec::new();
    };
    span.scope().map(|s| s.id()).collect()
}

impl<S> SpanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn new(pipeline: Option<Arc<Pipeline>>, activate: bool) -> Self {
        if let Some(p) = &pipeline {
            p.index();
        }
        SpanLayer {
            activate: activate && pipeline.is_some(),
            with_lens: WithLens {
                with_span: with_span::<S>,
                scope: scope_ids::<S>,
                limits: pipeline.as_ref().map(|p| p.limits),
                set_parent: set_parent::<S>,
                pipeline: pipeline.clone(),
            },
            pipeline,
            _subscriber: PhantomData,
        }
    }

    fn parent(
        &self,
        pipeline: &Pipeline,
        attrs: &Attributes<'_>,
        ctx: &LayerContext<'_, S>,
    ) -> Parent {
        let parent = if let Some(id) = attrs.parent() {
            ctx.span(id)
        } else if attrs.is_contextual() {
            ctx.lookup_current()
        } else {
            return Parent::Root;
        };
        if let Some(parent) = parent
            && let Some(data) = parent.extensions().get::<LensSpan>()
        {
            // A span with children keeps its parent (`LensSpanExt::set_parent`).
            data.mark_used();
            return Parent::Span(data.span_context().clone());
        }
        // An attached remote parent (clone the context only when it has one); a context this
        // thread activated for a lens span is not one.
        if let Some(current) = Context::map_current(|cx| {
            (cx.has_active_span()
                && !crate::activation::is_activated(cx.span().span_context().span_id()))
            .then(|| cx.clone())
        }) {
            return Parent::Context(current);
        }
        match &pipeline.default_parent {
            Some(cx) => Parent::Context(cx.clone()),
            None => Parent::Root,
        }
    }

    /// The state of a span while this thread unwinds from a panic: found through the
    /// open-span table, because the span's extension lock may be poisoned (another layer
    /// panicked in user code while holding it), and touching a poisoned lock now would abort.
    #[cold]
    fn state_while_panicking(&self, id: &Id) -> Option<Arc<SpanState>> {
        self.pipeline.as_ref()?.open.find(id)
    }
}

impl<S> Layer<S> for SpanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
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
        let mut parent = self.parent(pipeline, attrs, &ctx);
        // A span of a trace-per group starts a trace, linked to its would-be parent.
        let mut link = None;
        if pipeline.starts_trace(attrs.metadata()) {
            link = parent.span_context();
            parent = Parent::Root;
        }
        let (trace_id, flags, trace_state) = decide(pipeline, &parent, attrs.metadata().name());
        let sampled = flags.is_sampled();
        let cx = SpanContext::new(trace_id, ids::new_span_id(), flags, false, trace_state);
        let data = if sampled {
            let mut state =
                SpanState::start(pipeline.spare_state(), cx, attrs.metadata().name(), parent);
            // The fields are read straight into the record. User code (`Display`/`Debug`)
            // runs here: the state is not shared yet, so it is reached without its lock (a
            // panic drops it, and nothing else ever saw it).
            if let Some(record) = Arc::get_mut(&mut state).and_then(|s| s.record.get_mut().as_mut())
            {
                record.read_fields(attrs, &pipeline.text);
                if let Some(link) = link {
                    record.push_link(link, Vec::new(), pipeline.limits);
                }
            }
            let key = pipeline.open.insert(id.clone(), state.clone());
            LensSpan::new(state, Some(key), pipeline.generation, pipeline.index())
        } else {
            // Not sampled (a parent that is not): nothing recorded, the context is kept for
            // the children and propagation.
            LensSpan::new(
                Arc::new(SpanState::new(cx, None)),
                None,
                pipeline.generation,
                0,
            )
        };
        span_ref.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let Some(pipeline) = &self.pipeline else {
            return;
        };
        // User code runs here, before any lock is taken.
        let mut attributes = SpanAttributes::new();
        let reserved = SpanFields::read_record(values, &mut attributes, &pipeline.text);
        if std::thread::panicking() {
            if let Some(state) = self.state_while_panicking(id) {
                state.record_fields(attributes, reserved);
            }
            return;
        }
        let Some(span_ref) = ctx.span(id) else {
            return;
        };
        let ext = span_ref.extensions();
        if let Some(data) = ext.get::<LensSpan>().filter(|d| d.is_live()) {
            data.state().record_fields(attributes, reserved);
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, ctx: LayerContext<'_, S>) {
        let Some(pipeline) = &self.pipeline else {
            return;
        };
        let Some(follows_cx) = ctx.span(follows).and_then(|s| {
            s.extensions()
                .get::<LensSpan>()
                .map(|d| d.span_context().clone())
        }) else {
            return;
        };
        let Some(span_ref) = ctx.span(id) else {
            return;
        };
        let ext = span_ref.extensions();
        if let Some(data) = ext.get::<LensSpan>().filter(|d| d.is_live()) {
            data.state()
                .add_link(follows_cx, Vec::new(), pipeline.limits);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let Some(pipeline) = &self.pipeline else {
            return;
        };
        if Context::is_current_telemetry_suppressed() {
            return;
        }
        let Some(span_ref) = ctx.event_span(event) else {
            return;
        };
        if std::thread::panicking() {
            if let Some(state) = self.state_while_panicking(&span_ref.id()) {
                state.add_event(EventValues::of(event, &pipeline.text), pipeline.limits);
            }
            return;
        }
        // Is the span recorded? (Checked first: the fields are read only for a live span.)
        let state = {
            let ext = span_ref.extensions();
            match ext.get::<LensSpan>() {
                Some(data) if data.is_live() && data.open_key.is_some() => data.state().clone(),
                _ => return,
            }
        };
        // User code (`Display`/`Debug` of the fields) runs here, with no lock held.
        let values = EventValues::of(event, &pipeline.text);
        state.add_event(values, pipeline.limits);
    }

    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
        if self.pipeline.is_none() || std::thread::panicking() {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        let cx = match span.extensions().get::<LensSpan>() {
            Some(data) if data.is_live() => {
                // Entered: its parent is fixed from now on (`LensSpanExt::set_parent`).
                data.mark_used();
                if !self.activate {
                    return;
                }
                data.span_context().clone()
            }
            _ => return,
        };
        crate::activation::enter(id, cx);
    }

    fn on_exit(&self, id: &Id, _ctx: LayerContext<'_, S>) {
        if self.activate {
            crate::activation::exit(id);
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(pipeline) = &self.pipeline else {
            return;
        };
        if std::thread::panicking() {
            // Ended through the open-span table (see `state_while_panicking`); the extension
            // is dropped later by the registry and finds the record ended.
            if let Some(state) = self.state_while_panicking(&id) {
                pipeline.open.remove_state(&state);
                if state.end() {
                    pipeline.finish(state);
                }
            }
            return;
        }
        let Some(span_ref) = ctx.span(&id) else {
            return;
        };
        let data = span_ref.extensions_mut().remove::<LensSpan>();
        let Some(mut data) = data else {
            return;
        };
        // An inherited span (forked child): never touch the parent's table, whose lock
        // another thread of the parent may have held at fork time, nor its queue.
        if !data.is_live() {
            return;
        }
        let Some(key) = data.open_key.take() else {
            return;
        };
        let state = data.into_state();
        pipeline.open.remove(key, &state);
        if state.end() {
            pipeline.finish(state);
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
    /// Context activation is on (forward `on_enter`/`on_exit` to the span part).
    activate: bool,
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
        activate: bool,
    ) -> Self {
        let (provider, log_filter) = logs;
        let activate = activate && pipeline.is_some();
        LensLayer {
            activate,
            filter: filter.clone(),
            logs_on: log_filter.is_on(),
            logs_layer: LogLayer::filtered(provider, log_filter.clone()),
            logs: log_filter,
            spans: SpanLayer::new(pipeline, activate).with_filter(filter),
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
// when the wrapped layer ignores the callback. Only context activation acts on
// `on_enter`/`on_exit`: they go straight to the span part (past its `Filtered` wrapper, as
// `on_close` does: `SpanLayer` acts only on spans carrying lens data), and not at all when
// activation is off. The log part never acts on them, so
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
    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
        // Always: the span part marks the span entered (and activates its context when
        // context activation is on); it returns at once on a non-exporting rank.
        self.spans.inner().on_enter(id, ctx);
    }
    fn on_exit(&self, id: &Id, ctx: LayerContext<'_, S>) {
        if self.activate {
            self.spans.inner().on_exit(id, ctx);
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
