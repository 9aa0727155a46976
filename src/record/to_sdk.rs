//! The compact record becomes an SDK span: on the batch worker (or, with synchronous export, on
//! the thread that ends the span), through the tracer provider the application configured, so
//! its sampler, span limits and span processors see the span.

use std::borrow::Cow;
use std::cell::Cell;
use std::time::SystemTime;

use opentelemetry::trace::{Event, Link, Span as _, SpanBuilder, SpanKind, Status, Tracer as _};
use opentelemetry_sdk::trace::SdkTracer;

use super::{Parent, SpanState};
use crate::ids;
use crate::layer::fields::SpanAttributes;

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

    /// Moves the contents of the ended record out (the lock is held for this only), leaving
    /// the record in place, ended and marked built, so that the state can be reused for
    /// another span; `None` when it is still open or was built already.
    /// Backtraces captured for its events are resolved here, outside the lock: resolving
    /// symbols is the slow part of a backtrace, and this runs on the export worker.
    pub(crate) fn take_ended(&self) -> Option<Ended> {
        let (mut ended, stacktraces) = {
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
            (ended, std::mem::take(&mut r.stacktraces))
        };
        stacktraces.resolve_into(&mut ended.events, crate::layer::fields::truncate_chars);
        Some(ended)
    }
}

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
