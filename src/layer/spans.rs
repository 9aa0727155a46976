//! The span part of the lens layer: `tracing` span callbacks on the training thread. A new span
//! gets its ids and a compact record ([`crate::record`]) in the layer's table of open spans
//! ([`OpenSpans`]); fields, events and links go into the record; on close the record goes to
//! the pipeline's queue. The registry is not consulted: the table is found by span id, and the
//! contextual parent is the innermost lens span entered on the thread
//! ([`crate::layer::activation`]).

use std::any::TypeId;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::ids;
use crate::layer::activation;
use crate::layer::detail::{ContextPlace, ParentPlace};
use crate::layer::fields::SpanFields;
use crate::layer::hooks::{WithLens, scope_ids};
use crate::layer::pipeline::{Pipeline, decide};
use crate::layer::unwind;
use crate::record::attributes::{EventValues, SpanAttributes};
use crate::record::open_spans::{Entry, OpenSpans, REASON_DROPPED};
use crate::record::{Parent, SpanState};

/// The inner, unfiltered layer. Users get it wrapped in [`LensLayer`](crate::LensLayer).
pub(crate) struct SpanLayer<S> {
    pipeline: Option<Arc<Pipeline>>,
    /// This layer's open spans (one table per layer: see [`OpenSpans`]).
    table: Arc<OpenSpans>,
    /// Context activation (see [`crate::layer::activation`]).
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

impl<S> SpanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    pub(crate) fn new(pipeline: Option<Arc<Pipeline>>, activate: bool) -> Self {
        let table = match &pipeline {
            Some(p) => p.new_table(),
            None => Arc::default(),
        };
        SpanLayer {
            activate: activate && pipeline.is_some(),
            with_lens: WithLens {
                scope: scope_ids::<S>,
                table: table.clone(),
                pipeline: pipeline.clone(),
            },
            table,
            pipeline,
            _subscriber: PhantomData,
        }
    }

    /// The table's identity on the per-thread stack of entered spans.
    #[inline]
    fn key(&self) -> usize {
        Arc::as_ptr(&self.table) as usize
    }

    /// This layer's open spans (the log bridge reads span contexts from it).
    pub(crate) fn table(&self) -> &Arc<OpenSpans> {
        &self.table
    }

    /// The pipeline, unless this rank does not export or the process is a forked child (whose
    /// parent's table and queue are never touched: another parent thread may have held their
    /// locks at fork time).
    #[inline]
    fn live(&self) -> Option<&Arc<Pipeline>> {
        self.pipeline.as_ref().filter(|p| !p.inherited())
    }

    /// The parent of a new span: a lens span of this layer, an attached remote context, the
    /// launcher's `TRACEPARENT`, or none.
    ///
    /// `active` says whether the current OpenTelemetry context has an active span (read by the
    /// caller): only then can it be a remote parent.
    ///
    /// With detail capture on, also the parent's place in it (see [`ParentPlace`]).
    fn parent(
        &self,
        pipeline: &Pipeline,
        attrs: &Attributes<'_>,
        active: bool,
    ) -> (Parent, ParentPlace) {
        let lens_parent = if let Some(id) = attrs.parent() {
            Some(id.into_u64())
        } else if attrs.is_contextual() {
            activation::current(self.key())
        } else {
            return (Parent::Root, ParentPlace::default());
        };
        let detail = pipeline.detail.is_some();
        // A span with children keeps its parent (`LensSpanExt::set_parent`).
        if let Some((sc, place)) = lens_parent.and_then(|id| {
            self.table.with(id, |e| {
                let place = if detail {
                    ParentPlace::of(&e.detail)
                } else {
                    ParentPlace::default()
                };
                (e.use_context(), place)
            })
        }) {
            return (Parent::Span(sc), place);
        }
        if let Some(cx) = attached_parent(active) {
            // Its span may be a step of this process, or inside one (another thread's).
            let place = match &pipeline.detail {
                Some(detail) => detail.place_of_context(&cx),
                None => ParentPlace::default(),
            };
            return (Parent::Context(cx), place);
        }
        let parent = match &pipeline.default_parent {
            Some(cx) => Parent::Context(cx.clone()),
            None => Parent::Root,
        };
        (parent, ParentPlace::default())
    }

    /// The span being entered (its context built at its first enter), if this layer has it.
    #[inline]
    fn entered(&self, id: u64) -> Option<activation::Activation> {
        let activate = self.activate;
        self.table.with(id, |e| {
            // Entered: its parent is fixed from now on (`LensSpanExt::set_parent`).
            e.used = true;
            let cx = activate.then(|| {
                e.activation
                    .get_or_insert_with(|| {
                        let sc = e.state.span_context();
                        let cx = Context::map_current(|cx| cx.with_remote_span_context(sc.clone()));
                        // A step's context says which step it is (per-step detail capture), for
                        // spans other threads start under it.
                        match ContextPlace::of_step(&e.detail, sc.span_id()) {
                            Some(place) => cx.with_value(place),
                            None => cx,
                        }
                    })
                    .clone()
            });
            activation::Activation {
                span_id: e.state.span_context().span_id(),
                state: e.state.clone(),
                cx,
            }
        })
    }
}

/// The attached OpenTelemetry context, when its active span is a remote parent for a new span
/// without a lens parent (a context this thread activated for a lens span is not one).
/// `active` says whether the current context has an active span (read by the caller).
fn attached_parent(active: bool) -> Option<Context> {
    if !active {
        return None;
    }
    Context::map_current(|cx| {
        (cx.has_active_span() && !activation::is_activated(cx.span().span_context().span_id()))
            .then(|| cx.clone())
    })
}

impl<S> Drop for SpanLayer<S> {
    fn drop(&mut self) {
        // The subscriber is dropped with spans still open (never closed, or whose parent was
        // released on a thread without the subscriber): end them now, saying so.
        if let Some(pipeline) = self.pipeline.as_ref().filter(|p| !p.inherited()) {
            pipeline.close_table(&self.table, REASON_DROPPED);
        }
    }
}

impl<S> Layer<S> for SpanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: LayerContext<'_, S>) {
        let Some(pipeline) = self.live() else {
            return;
        };
        // One look at the current OpenTelemetry context.
        let (suppressed, active) =
            Context::map_current(|cx| (cx.is_telemetry_suppressed(), cx.has_active_span()));
        if suppressed {
            // An exporter (or the SDK) at work on this thread: a span of its own would feed
            // back into the pipeline (or re-enter a locked exporter).
            return;
        }
        activation::clear_stale();
        let (mut parent, place) = self.parent(pipeline, attrs, active);
        // A span of a trace-per group starts a trace, linked to its would-be parent.
        let mut link = None;
        if pipeline.starts_trace(attrs.metadata()) {
            link = parent.span_context();
            parent = Parent::Root;
        }
        let name = attrs.metadata().name();
        let (trace_id, flags, trace_state) = decide(pipeline, &parent, name);
        let sampled = flags.is_sampled();
        let cx = SpanContext::new(trace_id, ids::new_span_id(), flags, false, trace_state);
        let state = if sampled {
            let mut state = SpanState::start(pipeline.spare_state(), cx, name, parent);
            // The fields are read straight into the record. User code (`Display`/`Debug`)
            // runs here: the state is not shared yet, so it is reached without its lock (a
            // panic drops it, and nothing else ever saw it).
            if let Some(record) = Arc::get_mut(&mut state).and_then(|s| s.record.get_mut().as_mut())
            {
                record.read_fields(|attributes| {
                    SpanFields::read_new_span(attrs, attributes, &pipeline.text)
                });
                if pipeline.thread_attributes {
                    record.add_thread_attributes(pipeline.text.limit);
                }
                if let Some(link) = link {
                    record.push_link(link, Vec::new(), pipeline.limits);
                }
                record.set_group_tags(pipeline.group_tags.of(attrs.metadata()));
            }
            state
        } else {
            // Not sampled (a parent that is not): nothing recorded, the context is kept for
            // the children and propagation.
            Arc::new(SpanState::new(cx, None))
        };
        let mut entry = Entry::new(state, name, sampled);
        if sampled && let Some(detail) = &pipeline.detail {
            entry.detail = detail.role(attrs.metadata(), place, &entry.state);
        }
        self.table.insert(id.into_u64(), entry);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: LayerContext<'_, S>) {
        let Some(pipeline) = self.live() else {
            return;
        };
        // A span of another layer (this one reaches every span): its fields are not read.
        let Some(state) = self
            .table
            .with(id.into_u64(), |e| e.recorded.then(|| e.state.clone()))
            .flatten()
        else {
            return;
        };
        // User code runs here, with no lock held.
        let mut attributes = SpanAttributes::new();
        let reserved = SpanFields::read_record(values, &mut attributes, &pipeline.text);
        state.record_fields(attributes, reserved);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _ctx: LayerContext<'_, S>) {
        let Some(pipeline) = self.live() else {
            return;
        };
        let Some(follows_cx) = self
            .table
            .with(follows.into_u64(), |e| e.state.span_context().clone())
        else {
            return;
        };
        if let Some(state) = self.table.state(id.into_u64()) {
            state.add_link(follows_cx, Vec::new(), pipeline.limits);
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: LayerContext<'_, S>) {
        let Some(pipeline) = self.live() else {
            return;
        };
        if Context::is_current_telemetry_suppressed() {
            return;
        }
        // The event's span: explicit, or the innermost lens span entered on this thread.
        let span = if event.is_contextual() {
            activation::current(self.key())
        } else {
            event.parent().map(Id::into_u64)
        };
        // Is the span recorded? (Checked first: the fields are read only for a live span.)
        let Some(state) = span.and_then(|id| {
            self.table
                .with(id, |e| e.recorded.then(|| e.state.clone()))
                .flatten()
        }) else {
            return;
        };
        // User code (`Display`/`Debug` of the fields) runs here, with no lock held.
        let values = EventValues::of(event, &pipeline.text, pipeline.error_backtraces);
        state.add_event(values, pipeline.limits);
    }

    fn on_enter(&self, id: &Id, _ctx: LayerContext<'_, S>) {
        if self.live().is_none() {
            return;
        }
        let id = id.into_u64();
        if activation::enter_again(self.key(), id) {
            return;
        }
        if let Some(span) = self.entered(id) {
            activation::enter(self.key(), id, span);
        }
    }

    fn on_exit(&self, id: &Id, _ctx: LayerContext<'_, S>) {
        let Some(pipeline) = self.live() else {
            return;
        };
        let id = id.into_u64();
        match activation::exit(self.key(), id) {
            activation::Exit::Here => {}
            activation::Exit::Unwound(state) => unwind::unwound(&state, pipeline.text.limit),
            activation::Exit::Elsewhere => {
                // Entered on another thread (a guard held across an `.await`): that thread's
                // entry (and the context it attached) is stale from now on.
                if let Some(span_id) = self.table.with(id, |e| e.state.span_context().span_id()) {
                    activation::exited_elsewhere(span_id);
                }
            }
        }
    }

    fn on_close(&self, id: Id, _ctx: LayerContext<'_, S>) {
        let Some(pipeline) = self.live() else {
            return;
        };
        let id = id.into_u64();
        let Some(entry) = self.table.remove(id) else {
            return;
        };
        let Entry {
            state,
            activation,
            detail,
            ..
        } = entry;
        state.mark_closed();
        activation::closed(self.key(), id, &state);
        // Dropped here, with no lock held: a context may hold user values.
        drop(activation);
        match &pipeline.detail {
            Some(capture) => capture.closed(&**pipeline, detail, state),
            None => {
                if let Some(size) = state.end() {
                    pipeline.finish(state, size);
                }
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
