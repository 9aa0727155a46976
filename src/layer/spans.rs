//! The span part of the lens layer: `tracing` span callbacks on the training thread. A new span
//! gets its ids and a compact record ([`crate::record`]) in its registry extension; fields,
//! events and links go into the record; on close the record goes to the pipeline's queue.

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
use crate::layer::fields::{EventValues, SpanAttributes, SpanFields};
use crate::layer::hooks::{WithLens, scope_ids, set_parent, with_span};
use crate::layer::pipeline::{Pipeline, decide};
use crate::record::{LensSpan, Parent, SpanState};

/// The inner, unfiltered layer. Users get it wrapped in [`LensLayer`].
pub(crate) struct SpanLayer<S> {
    pipeline: Option<Arc<Pipeline>>,
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
                && !crate::layer::activation::is_activated(cx.span().span_context().span_id()))
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
        crate::layer::activation::enter(id, cx);
    }

    fn on_exit(&self, id: &Id, _ctx: LayerContext<'_, S>) {
        if self.activate {
            crate::layer::activation::exit(id);
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
                if let Some(size) = state.end() {
                    pipeline.finish(state, size);
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
        if let Some(size) = state.end() {
            pipeline.finish(state, size);
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
