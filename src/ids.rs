//! Trace and span IDs that stay unique across identically seeded ranks and forked workers.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use opentelemetry_sdk::trace::IdGenerator;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

extern "C" fn bump_generation_in_child() {
    // Async-signal-safe: one atomic add, nothing else.
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Registers the fork handler once per process.
pub(crate) fn install_fork_handler() {
    ATFORK.call_once(|| {
        // SAFETY: the handler only performs an atomic add; registering it has no preconditions.
        unsafe {
            libc::pthread_atfork(None, None, Some(bump_generation_in_child));
        }
    });
}

/// The current fork generation: it changes in a child after `fork()`.
pub(crate) fn fork_generation() -> u64 {
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// IDs drawn per refill of a thread's buffer: four ChaCha blocks (the generator's native
/// batch), ten root spans.
const BUFFERED: usize = 32;

/// A thread's ID stream: its ChaCha20 generator and a buffer of its next outputs.
struct Stream {
    /// The fork generation the generator was seeded in.
    generation: u64,
    rng: Option<ChaCha20Rng>,
    buf: [u64; BUFFERED],
    /// The next unused word of `buf` (`BUFFERED`: empty).
    next: usize,
}

thread_local! {
    static STREAM: RefCell<Stream> = const {
        RefCell::new(Stream {
            generation: 0,
            rng: None,
            buf: [0; BUFFERED],
            next: BUFFERED,
        })
    };
}

fn seeded() -> ChaCha20Rng {
    // Every stream is seeded before its first draw: register the fork handler here, so a
    // generator made with `Default` (or the crate-internal draws) re-seeds after fork too.
    install_fork_handler();
    ChaCha20Rng::try_from_rng(&mut getrandom::SysRng).unwrap_or_else(|_| {
        // No OS entropy (exotic sandbox): fall back to std's randomly keyed hasher mixed with
        // the time, the pid and the thread, which is still independent of the trainer's seeds.
        use std::hash::{BuildHasher, Hasher};
        let mut seed = [0u8; 32];
        let salt = &seed as *const _ as usize;
        for (i, chunk) in seed.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            h.write_u32(std::process::id());
            h.write_usize(i);
            h.write_usize(salt);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
        ChaCha20Rng::from_seed(seed)
    })
}

impl Stream {
    /// The next word of the stream, refilling (and seeding, on first use and after a fork)
    /// when the buffer is empty.
    #[inline]
    fn next(&mut self, generation: u64) -> u64 {
        if self.next < BUFFERED && self.generation == generation {
            let v = self.buf[self.next];
            self.next += 1;
            return v;
        }
        self.refill(generation);
        self.next = 1;
        self.buf[0]
    }

    #[cold]
    fn refill(&mut self, generation: u64) {
        if self.generation != generation || self.rng.is_none() {
            // First use on this thread, or a forked child: a new seed, and nothing of the
            // parent's buffer is used.
            self.rng = Some(seeded());
            self.generation = generation;
        }
        let mut bytes = [0u8; BUFFERED * 8];
        if let Some(rng) = self.rng.as_mut() {
            rng.fill_bytes(&mut bytes);
        }
        for (word, chunk) in self.buf.iter_mut().zip(bytes.chunks_exact(8)) {
            *word = u64::from_le_bytes(chunk.try_into().unwrap_or([1; 8]));
        }
    }
}

/// Runs `f` with this thread's stream.
#[inline]
fn with_stream<T>(f: impl FnOnce(&mut Stream, u64) -> T) -> T {
    let generation = fork_generation();
    STREAM.with(|cell| f(&mut cell.borrow_mut(), generation))
}

/// Draws a random non-zero `u64` from the private stream.
#[inline]
pub(crate) fn next_u64() -> u64 {
    with_stream(|s, g| s.next(g)).max(1)
}

/// The OpenTelemetry [`IdGenerator`] of nemo-lens: OS-seeded ChaCha20 per thread, re-seeded
/// after `fork`, never zero.
///
/// ```
/// use nemo_lens::ChaChaIdGenerator;
/// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
///     .with_id_generator(ChaChaIdGenerator::new())
///     .build();
/// # let _ = provider;
/// ```
///
/// # Why ChaCha, per thread, re-seeded after fork
///
/// Training code seeds every random generator it knows of, often identically on all
/// data-parallel ranks. IDs drawn from such a generator collide across ranks. The
/// [`ChaChaIdGenerator`] therefore draws from a private ChaCha20 stream per thread, seeded from
/// the operating system (`getrandom`) the first time the thread asks, and never touched by the
/// trainer's seeding.
///
/// * **Fork**: a `pthread_atfork` child handler bumps a process-wide generation counter; a
///   thread whose stream belongs to an older generation re-seeds before its next ID, so a forked
///   data-loader worker never repeats its parent's IDs.
/// * **Hot path**: one thread-local access, one relaxed atomic load and a read from a buffer of
///   the stream's next 32 words, refilled four ChaCha blocks at a time: no lock, no syscall
///   (`getpid` would cost more than the span).
/// * **Never zero**: an all-zero ID is invalid in W3C Trace Context; it is replaced by 1.
/// * **Random flag**: the trace IDs are random in the sense of W3C Trace Context Level 2, so
///   a trace that starts here carries the `random` trace flag (0x02) beside `sampled`: flags
///   `03`, as the Python SDK writes them (its generator says `is_trace_id_random()`). Spans of
///   a trace continued from elsewhere keep the flag their parent had. opentelemetry-sdk 0.33
///   builds a root span's flags from its empty parent (`01`), so lens sets the bit where it
///   can: on the span contexts of the lens layer (children, the log bridge, propagation), on
///   every root span it exports, and on the wire through the propagator setup installs (see
///   [`propagation`](crate::propagation); the SDK's W3C propagator clears every flag but
///   `sampled`). A span processor of your own sees the SDK's `01` on root spans.
///
/// ```
/// use nemo_lens::ChaChaIdGenerator;
/// use opentelemetry_sdk::trace::IdGenerator;
/// let ids = ChaChaIdGenerator::new();
/// assert_ne!(ids.new_span_id(), ids.new_span_id());
/// assert_ne!(ids.new_trace_id(), opentelemetry::trace::TraceId::INVALID);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ChaChaIdGenerator {
    _private: (),
}

impl ChaChaIdGenerator {
    /// Creates the generator (and registers the process's fork handler).
    pub fn new() -> Self {
        install_fork_handler();
        ChaChaIdGenerator { _private: () }
    }
}

/// The W3C Trace Context Level 2 `random` trace flag: the trace id's right-most 7 bytes are
/// random.
pub(crate) const RANDOM_FLAG: u8 = 0x02;

/// The trace flags of a new span: `sampled` as decided; `random` when the span starts a trace
/// here (its id comes from this generator) or its parent says its trace id is random.
#[inline]
pub(crate) fn trace_flags(sampled: bool, parent: Option<TraceFlags>) -> TraceFlags {
    let random = parent.is_none_or(|p| p.to_u8() & RANDOM_FLAG != 0);
    TraceFlags::new(u8::from(sampled) | if random { RANDOM_FLAG } else { 0 })
}

/// Sets the `random` flag on an exported root span (the SDK built its flags from an empty
/// parent); spans with a parent keep the flags they inherited.
#[inline]
pub(crate) fn mark_random_root(span: &mut opentelemetry_sdk::trace::SpanData) {
    if span.parent_span_id == SpanId::INVALID {
        let cx = &span.span_context;
        let flags = TraceFlags::new(cx.trace_flags().to_u8() | RANDOM_FLAG);
        span.span_context = opentelemetry::trace::SpanContext::new(
            cx.trace_id(),
            cx.span_id(),
            flags,
            cx.is_remote(),
            cx.trace_state().clone(),
        );
    }
}

/// A fresh random trace id (never zero), from this thread's stream.
#[inline]
pub(crate) fn new_trace_id() -> TraceId {
    let v = with_stream(|s, g| (u128::from(s.next(g)) << 64) | u128::from(s.next(g)));
    TraceId::from(v.max(1))
}

/// A fresh random span id (never zero), from this thread's stream.
#[inline]
pub(crate) fn new_span_id() -> SpanId {
    SpanId::from(next_u64())
}

thread_local! {
    /// The ids the next span built through the SDK on this thread must get (see
    /// [`with_forced_ids`]).
    static FORCED: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Runs `f` (which builds one SDK span) so that the generator hands out `trace_id` and
/// `span_id` instead of drawing new ones.
///
/// The lens layer draws a span's ids on the training thread, when the span starts (its
/// children, the log bridge and propagation need them at once), and builds the SDK span later,
/// on the batch worker (`src/record/`). The SDK (0.33) ignores the ids of a
/// `SpanBuilder` and always asks its generator, so the generator gives back the drawn ones.
/// The SDK asks for the span id first, then for a trace id only when the span has no valid
/// parent; whatever `f` leaves unused is cleared.
pub(crate) fn with_forced_ids<T>(trace_id: TraceId, span_id: SpanId, f: impl FnOnce() -> T) -> T {
    FORCED.with(|c| c.set(Some((trace_id, span_id))));
    let out = f();
    FORCED.with(|c| c.set(None));
    out
}

impl IdGenerator for ChaChaIdGenerator {
    #[inline]
    fn new_trace_id(&self) -> TraceId {
        match FORCED.with(|c| c.get()) {
            Some((trace_id, _)) if trace_id != TraceId::INVALID => {
                FORCED.with(|c| c.set(None));
                trace_id
            }
            _ => new_trace_id(),
        }
    }

    #[inline]
    fn new_span_id(&self) -> SpanId {
        match FORCED.with(|c| c.get()) {
            Some((trace_id, span_id)) if span_id != SpanId::INVALID => {
                // The trace id stays for a root span's `new_trace_id`.
                FORCED.with(|c| c.set(Some((trace_id, SpanId::INVALID))));
                span_id
            }
            _ => new_span_id(),
        }
    }
}

/// A map keyed by an id: a span id (random) or a `tracing` span id (a dense slab key).
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Spreads an id over all 64 bits with one multiplication (Fibonacci hashing): dense keys as
/// well as random ones; the high bits are the best mixed.
#[inline]
pub(crate) fn spread(id: u64) -> u64 {
    id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Hashes an id with [`spread`]: SipHash (the default, a few times dearer per lookup) buys
/// nothing for ids.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        spread(self.0)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    /// Both key types (`u64` and [`SpanId`]) hash as one `u64`.
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(32) ^ n;
    }
}
