//! [`OpenSpans`]: the spans a lens layer started and has not closed, keyed by their `tracing`
//! id. It is both where the layer keeps a span's state while the span is open (every callback
//! finds it here by id) and the open-span table that shutdown, the panic hook and a dropped
//! subscriber end as truncated: a span is inserted once, when it starts, and removed once,
//! when it closes.
//!
//! # Why not the registry's span extensions
//!
//! The state could live in the span's registry extension, with the table listing it for the
//! closer. That costs two insertions and two removals per span (the extension map allocates a
//! box per value), and a type-keyed extension allows one lens layer per subscriber: a second
//! one (a second telemetry in the same subscriber) would insert the same type and panic. Each
//! layer has its own table here, so layers never see each other's spans.
//!
//! # Cost and contention
//!
//! The table is split in [`SHARDS`] shards by a hash of the id, each a short-held lock around a
//! hash map: spans of different threads rarely share a shard. No user code runs while a shard
//! is locked (fields are read before, contexts dropped after), so a panic in user code never
//! leaves a lock behind; the panic hook and shutdown still take shard locks with a timeout.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::Context;
use opentelemetry::trace::SpanContext;
use parking_lot::Mutex;

use crate::ids::{self, IdMap};
use crate::record::SpanState;
use crate::record::held::{DetailRole, StepHold};

/// Why the closer ended a span.
pub(crate) const REASON_SHUTDOWN: &str = "still open at telemetry shutdown";
/// Why a span was ended when the subscriber dropped it without closing it.
pub(crate) const REASON_DROPPED: &str = "dropped by the subscriber without being closed";

/// How long the closer and the panic hook wait for a shard's lock.
const LOCK_PATIENCE: Duration = Duration::from_millis(200);

/// Shards of the table (a power of two).
const SHARDS: usize = 16;

/// One open span of the layer.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Its identity and record (shared with the batch queue once it ends).
    pub(crate) state: Arc<SpanState>,
    /// The span's static name (the sampler's input when `set_parent` decides again).
    pub(crate) name: &'static str,
    /// The span was entered, has children or handed out its context: its parent is fixed
    /// (`LensSpanExt::set_parent`).
    pub(crate) used: bool,
    /// The span records (sampled); an unsampled span is kept only for its context.
    pub(crate) recorded: bool,
    /// The OpenTelemetry context made current while the span is entered (context
    /// activation): built at the first enter, attached by clone on every enter.
    pub(crate) activation: Option<Context>,
    /// Its place in per-step detail capture (`Outside` when capture is off).
    pub(crate) detail: DetailRole,
    /// Start order on the starting thread (ties of the start time, for innermost-first).
    seq: u64,
}

impl Entry {
    /// A new span's entry.
    #[inline]
    pub(crate) fn new(state: Arc<SpanState>, name: &'static str, recorded: bool) -> Self {
        thread_local! {
            static SEQ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        let seq = SEQ.with(|s| {
            let n = s.get().wrapping_add(1);
            s.set(n);
            n
        });
        Entry {
            state,
            name,
            used: false,
            recorded,
            activation: None,
            detail: DetailRole::Outside,
            seq,
        }
    }

    /// The span's context, marking the span used (a child or a handed-out context fixes its
    /// parent).
    #[inline]
    pub(crate) fn use_context(&mut self) -> SpanContext {
        self.used = true;
        self.state.cx.clone()
    }
}

type Map = IdMap<u64, Entry>;

/// One shard, alone on its cache line.
#[repr(align(64))]
#[derive(Default)]
struct Shard(Mutex<Map>);

/// The open spans of one lens layer (see the [module docs](self)).
pub(crate) struct OpenSpans {
    shards: [Shard; SHARDS],
}

impl Default for OpenSpans {
    fn default() -> Self {
        OpenSpans {
            shards: std::array::from_fn(|_| Shard::default()),
        }
    }
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
    fn shard(&self, id: u64) -> &Mutex<Map> {
        let h = ids::spread(id);
        &self.shards[(h >> (64 - SHARDS.trailing_zeros())) as usize].0
    }

    /// Adds the entry of new span `id`.
    #[inline]
    pub(crate) fn insert(&self, id: u64, entry: Entry) {
        let old = self.shard(id).lock().insert(id, entry);
        // An id still present is a span the registry reused without our seeing it close
        // (never, with `tracing_subscriber`'s registry): its entry goes.
        drop(old);
    }

    /// Runs `f` on the entry of span `id`, if this layer has it. `f` must not run user code:
    /// the shard is locked meanwhile.
    #[inline]
    pub(crate) fn with<R>(&self, id: u64, f: impl FnOnce(&mut Entry) -> R) -> Option<R> {
        self.shard(id).lock().get_mut(&id).map(f)
    }

    /// The state of span `id`, if this layer has it.
    #[inline]
    pub(crate) fn state(&self, id: u64) -> Option<Arc<SpanState>> {
        self.with(id, |e| e.state.clone())
    }

    /// Removes span `id`'s entry (its close).
    #[inline]
    pub(crate) fn remove(&self, id: u64) -> Option<Entry> {
        self.shard(id).lock().remove(&id)
    }

    /// The state of recorded span `id`, waiting at most [`LOCK_PATIENCE`] for its shard (the
    /// panic hook: the panicking thread may hold it).
    pub(crate) fn find(&self, id: u64) -> Option<Arc<SpanState>> {
        let shard = self.shard(id).try_lock_for(LOCK_PATIENCE)?;
        shard
            .get(&id)
            .filter(|e| e.recorded)
            .map(|e| e.state.clone())
    }

    /// Recorded spans open now (shards whose lock is not free within the patience count 0).
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .filter_map(|s| s.0.try_lock_for(LOCK_PATIENCE))
            .map(|m| m.values().filter(|e| e.recorded).count())
            .sum()
    }

    /// The held detail of the steps open in this table (per-step detail capture), waiting at
    /// most [`LOCK_PATIENCE`] per shard: a dropped subscriber releases them before its spans
    /// are truncated.
    pub(crate) fn step_holds(&self) -> Vec<Arc<StepHold>> {
        self.shards
            .iter()
            .filter_map(|s| s.0.try_lock_for(LOCK_PATIENCE))
            .flat_map(|map| {
                map.values()
                    .filter_map(|e| match &e.detail {
                        DetailRole::Step(hold) => Some(hold.clone()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Empties the table and returns its recorded spans' states, innermost (latest started)
    /// first: by start time, then by start order on their thread.
    pub(crate) fn drain(&self) -> Vec<Arc<SpanState>> {
        let mut entries: Vec<Entry> = Vec::new();
        for shard in &self.shards {
            if let Some(mut map) = shard.0.try_lock_for(LOCK_PATIENCE) {
                entries.extend(map.drain().map(|(_, e)| e));
            }
        }
        let mut open: Vec<(Option<SystemTime>, u64, Arc<SpanState>)> = entries
            .into_iter()
            .filter(|e| e.recorded)
            .map(|e| (e.state.start_time(), e.seq, e.state))
            .collect();
        open.sort_by_key(|(start, seq, _)| std::cmp::Reverse((*start, *seq)));
        open.into_iter().map(|(_, _, s)| s).collect()
    }
}
