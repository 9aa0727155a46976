//! The closer of SDK spans: spans started through the OpenTelemetry SDK directly
//! ([`Telemetry::tracer`](crate::Telemetry::tracer), tracing-opentelemetry's layer from
//! [`Telemetry::opentelemetry_layer`](crate::Telemetry::opentelemetry_layer)) that are still
//! open at shutdown are exported as truncated, like the lens layer's own spans.
//!
//! # Why a copy, not the span itself
//!
//! Python's `_OpenSpanCloser` keeps a reference to each live span and calls `end()` on it at
//! shutdown. The Rust SDK (0.33) gives a span processor no such handle: `on_start` lends
//! `&mut Span` for the call only, the span's data lives inside the caller's `Span` value
//! (owned by the application or by tracing-opentelemetry's span extensions), and nothing ends a
//! span one does not own. So the closer does what it can honestly do:
//!
//! * `on_start` keeps a copy of the span's data as it starts (`Span::exported_data`: ids,
//!   parent, kind, name, start time, the attributes and links given at start);
//! * `on_end` forgets it;
//! * at shutdown, before the export processors shut down, every copy left is ended (end time =
//!   now), marked like a truncated lens span (attribute `nemo.span.truncated = true`, event
//!   `nemo.span.truncated` with `nemo.span.truncated.reason`, status left as it was) and handed
//!   to lens's processors, innermost (latest started) first;
//! * the original's later real end, if it ever comes, is ignored (not exported twice, not
//!   counted as dropped).
//!
//! What the copy lacks: attributes, events and status set on the span *after* it started (the
//! SDK keeps them in the caller's span, out of reach). tracing-opentelemetry starts its SDK span
//! lazily: at the first enter when context activation is on (the default), or when its context
//! is asked for; a tracing span never entered is started only when it closes, so one left open
//! at shutdown and never entered is not seen by any span processor.
//!
//! # Cost and bounds
//!
//! The lens layer's own spans are built through the SDK too (on the batch worker, `on_start`
//! and `on_end` back to back, see `src/record/to_sdk.rs`); they are marked while built and the
//! closer skips them with one thread-local read. For an SDK span, the cost is the copy at start
//! plus one short lock at start and one at end (`benches/instructions.sh` counts it). The table
//! holds at most [`MAX_TRACKED_SPANS`] spans and [`MAX_TRACKED_BYTES`] bytes of copies; a span
//! that does not fit is not tracked and counted
//! ([`Telemetry::untracked_sdk_spans`](crate::Telemetry::untracked_sdk_spans)).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::{Event, Span as _, SpanId};
use opentelemetry_sdk::trace::{Span, SpanData};
use parking_lot::Mutex;

use crate::ids::{self, IdMap};
use crate::record::to_sdk::lens_build;
use crate::semconv;
use crate::size::ApproxSize;

/// The most SDK spans the closer tracks at once.
pub(crate) const MAX_TRACKED_SPANS: usize = 4096;

/// The most bytes (approximate, see [`ApproxSize`]) of span copies the closer keeps.
pub(crate) const MAX_TRACKED_BYTES: usize = 8 << 20;

/// How long shutdown waits for the table's lock.
const LOCK_PATIENCE: Duration = Duration::from_millis(200);

#[derive(Debug)]
struct Tracked {
    seq: u64,
    bytes: usize,
    data: SpanData,
}

#[derive(Debug, Default)]
struct Table {
    open: IdMap<SpanId, Tracked>,
    /// Spans exported as truncated whose real end has not come (it is to be ignored).
    truncated: IdMap<SpanId, ()>,
    seq: u64,
    bytes: usize,
}

/// The SDK spans started and not yet ended (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct SdkSpanCloser {
    table: Mutex<Table>,
    /// Entries in `open` and `truncated`: `on_end` skips the lock when 0.
    watched: AtomicUsize,
    untracked: AtomicU64,
    closed: AtomicBool,
    /// The fork generation of the setup: a forked child never locks the parent's table.
    generation: u64,
}

impl SdkSpanCloser {
    pub(crate) fn new() -> Self {
        SdkSpanCloser {
            table: Mutex::new(Table::default()),
            watched: AtomicUsize::new(0),
            untracked: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            generation: ids::fork_generation(),
        }
    }

    #[inline]
    fn skip(&self) -> bool {
        lens_build()
            || self.closed.load(Ordering::Relaxed)
            || self.generation != ids::fork_generation()
    }

    /// Keeps a copy of `span` (sampled spans only; never lens-layer spans).
    ///
    /// Never inlined, so that `benches/instructions.sh` can count its cost by name.
    #[inline(never)]
    pub(crate) fn on_start(&self, span: &Span) {
        if self.skip() || !span.span_context().is_sampled() {
            return;
        }
        let Some(data) = span.exported_data() else {
            return;
        };
        let id = data.span_context.span_id();
        let bytes = data.approx_size();
        let mut table = self.table.lock();
        if table.open.len() >= MAX_TRACKED_SPANS || table.bytes + bytes > MAX_TRACKED_BYTES {
            drop(table);
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return;
        }
        table.seq += 1;
        let seq = table.seq;
        table.bytes += bytes;
        let old = table.open.insert(id, Tracked { seq, bytes, data });
        if let Some(old) = &old {
            // The same id twice (an application's own id generator): keep the newer.
            table.bytes -= old.bytes;
        } else {
            self.watched.fetch_add(1, Ordering::Relaxed);
        }
        drop(table);
        drop(old);
    }

    /// Forgets the span that ended; `false` when it was exported as truncated already, so its
    /// real end must be ignored. Never inlined (see [`SdkSpanCloser::on_start`]).
    #[inline(never)]
    pub(crate) fn on_end(&self, span: &SpanData) -> bool {
        if lens_build()
            || self.watched.load(Ordering::Relaxed) == 0
            || self.generation != ids::fork_generation()
        {
            return true;
        }
        let id = span.span_context.span_id();
        let mut table = self.table.lock();
        if let Some(entry) = table.open.remove(&id) {
            table.bytes -= entry.bytes;
            self.watched.fetch_sub(1, Ordering::Relaxed);
            drop(table);
            drop(entry);
            return true;
        }
        if table.truncated.remove(&id).is_some() {
            self.watched.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Stops tracking and returns every span still open, ended now as truncated with
    /// `reason`, innermost (latest started) first. Later calls return nothing.
    pub(crate) fn close_all(&self, reason: &'static str) -> Vec<SpanData> {
        if self.closed.swap(true, Ordering::SeqCst) || self.generation != ids::fork_generation() {
            return Vec::new();
        }
        let Some(mut table) = self.table.try_lock_for(LOCK_PATIENCE) else {
            return Vec::new();
        };
        let mut open: Vec<Tracked> = table.open.drain().map(|(_, t)| t).collect();
        table.bytes = 0;
        for t in &open {
            table.truncated.insert(t.data.span_context.span_id(), ());
        }
        drop(table);
        open.sort_by_key(|t| std::cmp::Reverse(t.seq));
        let now = SystemTime::now();
        open.into_iter()
            .map(|t| truncated(t.data, reason, now))
            .collect()
    }

    /// SDK spans the table had no room for.
    pub(crate) fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// SDK spans tracked now (open, not yet ended).
    #[cfg(test)]
    fn open(&self) -> usize {
        self.table.lock().open.len()
    }
}

/// `data` ended at `now` with the truncation marks of a lens span.
fn truncated(mut data: SpanData, reason: &'static str, now: SystemTime) -> SpanData {
    data.end_time = now;
    data.attributes
        .push(KeyValue::new(semconv::NEMO_SPAN_TRUNCATED, true));
    data.events.events.push(Event::new(
        semconv::NEMO_SPAN_TRUNCATED,
        now,
        vec![KeyValue::new(semconv::NEMO_SPAN_TRUNCATED_REASON, reason)],
        0,
    ));
    data
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanProcessor};
    use std::sync::Arc;

    /// A processor feeding the closer, as the lens composite does.
    #[derive(Debug)]
    struct Probe(Arc<SdkSpanCloser>, Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Probe {
        fn on_start(&self, span: &mut Span, _cx: &opentelemetry::Context) {
            self.0.on_start(span)
        }
        fn on_end(&self, span: SpanData) {
            if self.0.on_end(&span) {
                self.1.lock().push(span);
            }
        }
        fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
    }

    fn setup() -> (
        Arc<SdkSpanCloser>,
        Arc<Mutex<Vec<SpanData>>>,
        SdkTracerProvider,
    ) {
        let closer = Arc::new(SdkSpanCloser::new());
        let ended = Arc::new(Mutex::new(Vec::new()));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Probe(closer.clone(), ended.clone()))
            .build();
        (closer, ended, provider)
    }

    #[test]
    fn open_spans_come_back_truncated_innermost_first_and_their_real_end_is_ignored() {
        let (closer, ended, provider) = setup();
        let tracer = provider.tracer("t");
        let mut done = tracer.start("done");
        done.end();
        let mut outer = tracer.start("outer");
        let mut inner = tracer.start("inner");
        assert_eq!(closer.open(), 2);
        let closed = closer.close_all("why");
        let names: Vec<_> = closed.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(names, ["inner", "outer"]);
        for s in &closed {
            assert!(
                s.attributes
                    .contains(&KeyValue::new(semconv::NEMO_SPAN_TRUNCATED, true))
            );
            let event = &s.events.events[0];
            assert_eq!(event.name, semconv::NEMO_SPAN_TRUNCATED);
            assert_eq!(
                event.attributes,
                [KeyValue::new(semconv::NEMO_SPAN_TRUNCATED_REASON, "why")]
            );
        }
        inner.end();
        outer.end();
        let seen: Vec<_> = ended.lock().iter().map(|s| s.name.to_string()).collect();
        assert_eq!(
            seen,
            ["done"],
            "the real ends of truncated spans are ignored"
        );
        assert!(closer.close_all("again").is_empty());
        assert_eq!(closer.watched.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lens_builds_are_not_tracked() {
        let (closer, ended, provider) = setup();
        let tracer = provider.tracer("t");
        let _open = tracer.start("sdk");
        {
            let _b = crate::record::to_sdk::LensBuild::enter();
            let mut s = tracer.start("lens");
            s.end();
        }
        assert_eq!(closer.open(), 1);
        assert_eq!(ended.lock().len(), 1, "the lens span's end is forwarded");
    }

    #[test]
    fn a_full_table_counts_what_it_cannot_track() {
        let (closer, _ended, provider) = setup();
        let tracer = provider.tracer("t");
        let spans: Vec<_> = (0..MAX_TRACKED_SPANS + 3)
            .map(|_| tracer.start("s"))
            .collect();
        assert_eq!(closer.open(), MAX_TRACKED_SPANS);
        assert_eq!(closer.untracked(), 3);
        drop(spans);
        assert_eq!(closer.open(), 0);
    }
}
