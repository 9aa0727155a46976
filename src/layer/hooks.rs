//! How [`LensSpanExt`](crate::LensSpanExt) and the panic hook reach the lens data of a
//! `tracing::Span`: the layer answers `downcast_raw` for [`WithLens`], whose functions are
//! monomorphised for the layer's subscriber.

use std::sync::Arc;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use tracing_core::span::Id;
use tracing_core::{Dispatch, Metadata, Subscriber};
use tracing_subscriber::registry::LookupSpan;

use crate::layer::detail::ParentPlace;
use crate::layer::pipeline::{Pipeline, decide};
use crate::record::open_spans::{Entry, OpenSpans};
use crate::record::{Parent, SpanState};

/// Why [`LensSpanExt::set_parent`](crate::LensSpanExt::set_parent) changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetParentError {
    /// The lens layer does not record this span: no lens layer in the subscriber, a
    /// non-exporting rank, a disabled span group, a span inherited across `fork`, or a
    /// disabled span.
    #[error("the lens layer does not record this span")]
    NotRecorded,
    /// The span was entered, has children, or handed out its context
    /// ([`LensSpanExt::context`](crate::LensSpanExt::context)): its trace is fixed.
    #[error("the span was already entered, has children or handed out its context")]
    AlreadyStarted,
}

/// Collects the ids of span `id`'s scope (itself first), without touching span extensions.
pub(crate) type ScopeFn = fn(&Dispatch, &Id) -> Vec<Id>;

/// Lets [`crate::LensSpanExt`] and the panic hook reach the lens data of a `tracing::Span`
/// through the dispatcher: the span table of the subscriber's (first) lens layer.
pub(crate) struct WithLens {
    pub(crate) scope: ScopeFn,
    pub(crate) table: Arc<OpenSpans>,
    pub(crate) pipeline: Option<Arc<Pipeline>>,
}

impl WithLens {
    /// The state of span `id` in this layer's table, for an exporting rank's live layer.
    pub(crate) fn state(&self, id: &Id) -> Option<Arc<SpanState>> {
        self.live()?;
        self.table.state(id.into_u64())
    }

    /// Runs `f` on span `id`'s entry (no user code: the table's shard is locked meanwhile).
    pub(crate) fn with<R>(&self, id: &Id, f: impl FnOnce(&mut Entry) -> R) -> Option<R> {
        self.live()?;
        self.table.with(id.into_u64(), f)
    }

    fn live(&self) -> Option<&Arc<Pipeline>> {
        self.pipeline.as_ref().filter(|p| !p.inherited())
    }

    /// Gives span `id` (of callsite `meta`) a new parent (see
    /// [`crate::LensSpanExt::set_parent`]); with detail capture on, its place is decided again
    /// by that parent.
    pub(crate) fn set_parent(
        &self,
        id: &Id,
        meta: &Metadata<'_>,
        cx: Context,
    ) -> Result<(), SetParentError> {
        let pipeline = self.live().ok_or(SetParentError::NotRecorded)?;
        let valid = cx.span().span_context().is_valid();
        // Found before the table's shard is locked (it may look at the open steps).
        let place = match &pipeline.detail {
            Some(detail) if valid => detail.place_of_context(&cx),
            _ => ParentPlace::default(),
        };
        let parent = if valid {
            Parent::Context(cx)
        } else {
            Parent::Root
        };
        self.table
            .with(id.into_u64(), |e| {
                if e.used {
                    return Err(SetParentError::AlreadyStarted);
                }
                let (trace_id, flags, trace_state) = decide(pipeline, &parent, e.name);
                // The record moves to a new state; the old one is left without a record.
                let mut record = e.state.record.lock().take();
                let sampled = flags.is_sampled() && record.is_some();
                let new_cx = SpanContext::new(
                    trace_id,
                    e.state.span_context().span_id(),
                    flags.with_sampled(sampled),
                    false,
                    trace_state,
                );
                // The replaced parent and an unsampled record are dropped by the caller, after
                // the table's lock: a context may hold user values.
                let old = match record.as_mut() {
                    Some(r) if sampled => r.replace_parent(parent),
                    _ => parent,
                };
                let kept = record.take_if(|_| sampled);
                e.recorded = kept.is_some();
                e.state.mark_closed();
                e.state = Arc::new(SpanState::new(new_cx, kept));
                if e.recorded
                    && let Some(detail) = &pipeline.detail
                {
                    detail.reparented(meta, &mut e.detail, place, &e.state);
                }
                Ok((old, record))
            })
            .ok_or(SetParentError::NotRecorded)?
            .map(drop)
    }
}

pub(crate) fn scope_ids<S>(dispatch: &Dispatch, id: &Id) -> Vec<Id>
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
