//! Context activation: while a lens span is entered, `opentelemetry::Context::current()`
//! carries its span context.
//!
//! Code that speaks the OpenTelemetry API rather than `tracing` then sees the lens span as the
//! current span: a global propagator injecting `traceparent` into HTTP headers
//! (`global::get_text_map_propagator(|p| p.inject(&mut headers))`, tonic interceptors,
//! `opentelemetry-http`), spans started with an OpenTelemetry tracer (they become children of
//! the lens span), and `Context::current().span().span_context()` in user code. This is what
//! tracing-opentelemetry calls context activation.
//!
//! On enter, the layer attaches `Context::current()` with the span's context (one allocation)
//! and keeps the guard on a per-thread stack; on exit it drops that guard (out-of-order exits,
//! as with spans entered on one thread and exited after another was entered, are fine:
//! OpenTelemetry's context stack allows them). It costs tens of nanoseconds per enter; turn it
//! off with [`TelemetryBuilder::context_activation`](crate::TelemetryBuilder::context_activation)
//! when no OpenTelemetry-API code runs inside lens spans.

use std::cell::RefCell;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt};
use opentelemetry::{Context, ContextGuard};
use tracing_core::span::Id;

thread_local! {
    /// The entered lens spans of this thread, innermost last: `tracing` id, OpenTelemetry span
    /// id, and the guard of the attached context.
    static ACTIVE: RefCell<Vec<(u64, SpanId, ContextGuard)>> = const { RefCell::new(Vec::new()) };
}

/// Makes `span` the current OpenTelemetry span of this thread until [`exit`] with the same id.
#[inline]
pub(crate) fn enter(id: &Id, span: SpanContext) {
    let span_id = span.span_id();
    let guard = Context::current().with_remote_span_context(span).attach();
    // During thread teardown the stack is gone: the guard is dropped at once (nothing active).
    let _ = ACTIVE.try_with(|active| active.borrow_mut().push((id.into_u64(), span_id, guard)));
}

/// Ends the activation of span `id` on this thread (the innermost one with that id).
#[inline]
pub(crate) fn exit(id: &Id) {
    let id = id.into_u64();
    let guard = ACTIVE
        .try_with(|active| {
            let mut active = active.borrow_mut();
            let pos = active.iter().rposition(|(entered, _, _)| *entered == id)?;
            Some(active.remove(pos).2)
        })
        .ok()
        .flatten();
    // Dropped after the borrow ends: dropping a context may run user destructors.
    drop(guard);
}

/// Whether `span` is a lens span this thread activated (its context mirrors the `tracing` tree,
/// so the layer must not take it as an attached remote parent: in a process forked while a span
/// was entered, the child inherits the activation but not the span).
#[inline]
pub(crate) fn is_activated(span: SpanId) -> bool {
    ACTIVE
        .try_with(|active| active.borrow().iter().any(|(_, id, _)| *id == span))
        .unwrap_or(false)
}
