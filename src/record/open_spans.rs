//! The open-span closer: spans still open at shutdown are ended, marked as truncated.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use slab::Slab;
use tracing_core::span::Id;

use crate::record::SpanState;

/// Why the closer ended a span.
pub(crate) const REASON_SHUTDOWN: &str = "still open at telemetry shutdown";
/// Why a span was ended when the subscriber dropped it without closing it.
pub(crate) const REASON_DROPPED: &str = "dropped by the subscriber without being closed";

/// How long the closer and the panic hook wait for the slab's lock.
const LOCK_PATIENCE: Duration = Duration::from_millis(200);

#[derive(Debug)]
struct Entry {
    id: Id,
    seq: u64,
    state: Arc<SpanState>,
}

/// Spans started by the lens layer and not yet ended.
#[derive(Default)]
pub(crate) struct OpenSpans {
    slots: Mutex<Slab<Entry>>,
    seq: AtomicU64,
}

impl std::fmt::Debug for OpenSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenSpans")
            .field("open", &self.len())
            .finish()
    }
}

impl OpenSpans {
    #[inline]
    pub(crate) fn insert(&self, id: Id, state: Arc<SpanState>) -> usize {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.slots.lock().insert(Entry { id, seq, state })
    }

    /// Removes entry `key` if it is `state`'s: after a [`drain`](Self::drain) (shutdown) the
    /// key may hold another span's entry by now.
    #[inline]
    pub(crate) fn remove(&self, key: usize, state: &Arc<SpanState>) {
        let mut slots = self.slots.lock();
        let entry = match slots.get(key) {
            Some(e) if Arc::ptr_eq(&e.state, state) => slots.try_remove(key),
            _ => None,
        };
        // The entry (and its reference to the record) is dropped after the lock is released.
        drop(slots);
        drop(entry);
    }

    /// Removes entry `key` if it is `state`'s (the key may have been reused since).
    pub(crate) fn remove_if(&self, key: usize, state: &Arc<SpanState>) {
        let Some(mut slots) = self.slots.try_lock_for(LOCK_PATIENCE) else {
            return;
        };
        let entry = match slots.get(key) {
            Some(e) if Arc::ptr_eq(&e.state, state) => slots.try_remove(key),
            _ => None,
        };
        drop(slots);
        drop(entry);
    }

    /// Removes the entry of `state`, wherever it is (slow: a scan; for unwinding threads).
    pub(crate) fn remove_state(&self, state: &Arc<SpanState>) {
        let Some(mut slots) = self.slots.try_lock_for(LOCK_PATIENCE) else {
            return;
        };
        let key = slots
            .iter()
            .find(|(_, e)| Arc::ptr_eq(&e.state, state))
            .map(|(k, _)| k);
        let entry = key.and_then(|k| slots.try_remove(k));
        drop(slots);
        drop(entry);
    }

    /// The record of open span `id` (a scan, for the panic hook and unwinding threads), or
    /// `None` when it is not open or the slab's lock is not free within the patience.
    pub(crate) fn find(&self, id: &Id) -> Option<Arc<SpanState>> {
        let slots = self.slots.try_lock_for(LOCK_PATIENCE)?;
        slots
            .iter()
            .filter(|(_, e)| e.id == *id)
            .max_by_key(|(_, e)| e.seq)
            .map(|(_, e)| e.state.clone())
    }

    /// Number of spans currently open.
    pub(crate) fn len(&self) -> usize {
        self.slots
            .try_lock_for(LOCK_PATIENCE)
            .map_or(0, |s| s.len())
    }

    /// Empties the table and returns its records, innermost (latest started) first.
    pub(crate) fn drain(&self) -> Vec<Arc<SpanState>> {
        let Some(mut slots) = self.slots.try_lock_for(LOCK_PATIENCE) else {
            return Vec::new();
        };
        let mut entries: Vec<Entry> = slots.drain().collect();
        drop(slots);
        entries.sort_by_key(|e| std::cmp::Reverse(e.seq));
        entries.into_iter().map(|e| e.state).collect()
    }
}
