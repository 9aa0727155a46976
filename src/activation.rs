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

use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::{Context, ContextGuard};
use tracing_core::span::Id;

/// One activation: the tracing span id, the span's context, the [fork
/// generation](crate::ids::fork_generation) it was entered in, and the attach guard.
type Active = (u64, SpanContext, u64, ContextGuard);

thread_local! {
    /// The guards of the entered lens spans of this thread, innermost last.
    static ACTIVE: RefCell<Vec<Active>> = const { RefCell::new(Vec::new()) };
}

/// `true` when `span` is the context of a lens span entered on this thread before a `fork`
/// (the child inherits the thread's context stack, not the span: its spans must not take it
/// as their parent).
pub(crate) fn is_inherited(span: &SpanContext) -> bool {
    let generation = crate::ids::fork_generation();
    ACTIVE
        .try_with(|active| {
            active.borrow().iter().any(|(_, sc, entered_in, _)| {
                *entered_in != generation && sc.span_id() == span.span_id()
            })
        })
        .unwrap_or(false)
}

/// Makes `span` the current OpenTelemetry span of this thread until [`exit`] with the same id.
#[inline]
pub(crate) fn enter(id: &Id, span: SpanContext) {
    let guard = Context::current()
        .with_remote_span_context(span.clone())
        .attach();
    let generation = crate::ids::fork_generation();
    // During thread teardown the stack is gone: the guard is dropped at once (nothing active).
    let _ = ACTIVE.try_with(|active| {
        active
            .borrow_mut()
            .push((id.into_u64(), span, generation, guard))
    });
}

/// Ends the activation of span `id` on this thread (the innermost one with that id).
#[inline]
pub(crate) fn exit(id: &Id) {
    let id = id.into_u64();
    let guard = ACTIVE
        .try_with(|active| {
            let mut active = active.borrow_mut();
            let pos = active.iter().rposition(|(entered, ..)| *entered == id)?;
            Some(active.remove(pos).3)
        })
        .ok()
        .flatten();
    // Dropped after the borrow ends: dropping a context may run user destructors.
    drop(guard);
}
