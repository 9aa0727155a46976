//! The compact record becomes an SDK span: on the batch worker (or, with synchronous export, on
//! the thread that ends the span), through the tracer provider the application configured, so
//! its sampler, span limits and span processors see the span.

use std::cell::Cell;

use opentelemetry::trace::{Span as _, SpanBuilder, Status, Tracer as _};
use opentelemetry_sdk::trace::SdkTracer;

use super::{Ended, SpanState};
use crate::ids;

thread_local! {
    /// Set while the lens layer builds one of its own spans through the SDK on this thread.
    static LENS_BUILD: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as building a lens-layer span through the SDK until dropped: the closer
/// ignores the spans started and ended meanwhile (the lens closer covers them).
pub(crate) struct LensBuild(());

impl LensBuild {
    #[inline]
    pub(crate) fn enter() -> Self {
        LENS_BUILD.with(|c| c.set(true));
        LensBuild(())
    }
}

impl Drop for LensBuild {
    #[inline]
    fn drop(&mut self) {
        LENS_BUILD.with(|c| c.set(false));
    }
}

/// Whether this thread is building a lens-layer span through the SDK right now.
#[inline]
pub(crate) fn lens_build() -> bool {
    LENS_BUILD.with(|c| c.get())
}

impl SpanState {
    /// Builds the SDK span of this ended record through `tracer` (its processors' `on_start`
    /// and `on_end` run here, on this thread) and ends it at the recorded time. Returns
    /// `false` when a span that should have been exported was not: the SDK did not record it
    /// because its provider is shut down (a span its sampler drops is not a loss).
    pub(crate) fn build_sdk_span(&self, tracer: &SdkTracer) -> bool {
        // The SDK-span closer skips the span built and ended here (the lens closer covers it).
        let _lens = LensBuild::enter();
        let Some(Ended {
            name,
            kind,
            status,
            start,
            end,
            parent,
            attributes,
            events,
            dropped_events,
            links,
            dropped_links,
        }) = self.take_ended()
        else {
            return true;
        };
        let mut builder = SpanBuilder::from_name(name);
        builder.span_kind = kind;
        builder.start_time = Some(start);
        builder.attributes = Some(attributes.into_vec());
        if !events.is_empty() {
            builder.events = Some(events);
        }
        if !links.is_empty() {
            builder.links = Some(links);
        }
        let parent = parent.into_context();
        let mut span = ids::with_forced_ids(self.cx.trace_id(), self.cx.span_id(), || {
            tracer.build_with_context(builder, &parent)
        });
        if !span.is_recording() {
            // A shut-down provider hands out an empty context; a sampled-out span keeps its ids.
            return span.span_context().is_valid();
        }
        if status != Status::Unset {
            span.set_status(status);
        }
        // Past the limit, the SDK counts what is added instead of keeping it.
        for _ in 0..dropped_events {
            span.add_event_with_timestamp("", start, Vec::new());
        }
        for _ in 0..dropped_links {
            span.add_link(self.cx.clone(), Vec::new());
        }
        span.end_with_timestamp(end);
        true
    }
}
