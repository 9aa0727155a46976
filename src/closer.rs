//! The open-span closer: spans still open at shutdown are ended, marked as truncated.

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::KeyValue;
use opentelemetry::trace::Span as _;
use parking_lot::Mutex;
use slab::Slab;
use tracing_core::Dispatch;
use tracing_core::dispatcher::WeakDispatch;
use tracing_core::span::Id;

use crate::layer::LensSpan;
use crate::semconv;

/// Why the closer ended a span.
pub(crate) const REASON_SHUTDOWN: &str = "still open at telemetry shutdown";
/// Why a span was ended when the subscriber dropped it without closing it.
pub(crate) const REASON_DROPPED: &str = "dropped by the subscriber without being closed";

/// Runs `f` on the lens data of span `id` in the subscriber behind `dispatch`.
pub(crate) type WithSpanFn = fn(&Dispatch, &Id, &mut dyn FnMut(&mut LensSpan));

#[derive(Debug)]
struct Entry {
    id: Id,
    seq: u64,
}

/// Spans started by the lens layer and not yet ended.
#[derive(Default)]
pub(crate) struct OpenSpans {
    slots: Mutex<Slab<Entry>>,
    seq: AtomicU64,
    subscribers: Mutex<Vec<(WeakDispatch, WithSpanFn)>>,
}

impl std::fmt::Debug for OpenSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenSpans")
            .field("open", &self.slots.lock().len())
            .finish()
    }
}

impl OpenSpans {
    #[inline]
    pub(crate) fn insert(&self, id: Id) -> usize {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.slots.lock().insert(Entry { id, seq })
    }

    #[inline]
    pub(crate) fn remove(&self, key: usize) {
        self.slots.lock().try_remove(key);
    }

    pub(crate) fn register_subscriber(&self, dispatch: &Dispatch, f: WithSpanFn) {
        self.subscribers.lock().push((dispatch.downgrade(), f));
    }

    /// Number of spans currently open.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().len()
    }

    /// Ends every open span, innermost first, as truncated with `reason`. Returns how many were
    /// ended.
    pub(crate) fn close_all(&self, reason: &'static str) -> usize {
        let mut entries: Vec<Entry> = self.slots.lock().drain().collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.seq));
        let subscribers: Vec<(Dispatch, WithSpanFn)> = self
            .subscribers
            .lock()
            .iter()
            .filter_map(|(w, f)| w.upgrade().map(|d| (d, *f)))
            .collect();
        let mut closed = 0;
        for entry in &entries {
            for (dispatch, with_span) in &subscribers {
                with_span(dispatch, &entry.id, &mut |data| {
                    if data.truncate(reason) {
                        closed += 1;
                    }
                });
            }
        }
        closed
    }
}

/// Marks `span` as truncated and ends it now.
pub(crate) fn end_truncated(span: &mut opentelemetry_sdk::trace::Span, reason: &'static str) {
    span.set_attribute(KeyValue::new(semconv::NEMO_SPAN_TRUNCATED, true));
    span.add_event(
        semconv::NEMO_SPAN_TRUNCATED,
        vec![KeyValue::new(semconv::NEMO_SPAN_TRUNCATED_REASON, reason)],
    );
    span.end();
}
