//! How [`LensSpanExt`](crate::LensSpanExt) and the panic hook reach the lens data of a
//! `tracing::Span`: the layer answers `downcast_raw` for [`WithLens`], whose functions are
//! monomorphised for the layer's subscriber.

use std::sync::Arc;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use tracing_core::span::Id;
use tracing_core::{Dispatch, Subscriber};
use tracing_subscriber::registry::LookupSpan;

use crate::layer::pipeline::{Pipeline, decide};
use crate::record::{LensSpan, Limits, Parent, SpanState};

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
    fn(&WithLens, &Dispatch, &Id, Context) -> Result<(), crate::layer::hooks::SetParentError>;

pub(crate) fn set_parent<S>(
    with: &WithLens,
    dispatch: &Dispatch,
    id: &Id,
    cx: Context,
) -> Result<(), crate::layer::hooks::SetParentError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    use crate::layer::hooks::SetParentError;
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

pub(crate) fn with_span<S>(dispatch: &Dispatch, id: &Id, f: &mut dyn FnMut(&LensSpan))
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
