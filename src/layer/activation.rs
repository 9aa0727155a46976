//! The lens spans entered on each thread, and context activation: while a lens span is
//! entered, `opentelemetry::Context::current()` carries its span context.
//!
//! Code that speaks the OpenTelemetry API rather than `tracing` then sees the lens span as the
//! current span: a global propagator injecting `traceparent` into HTTP headers
//! (`global::get_text_map_propagator(|p| p.inject(&mut headers))`, tonic interceptors,
//! `opentelemetry-http`), spans started with an OpenTelemetry tracer (they become children of
//! the lens span), and `Context::current().span().span_context()` in user code. This is what
//! tracing-opentelemetry calls context activation; turn it off with
//! [`TelemetryBuilder::context_activation`](crate::TelemetryBuilder::context_activation) when
//! no OpenTelemetry-API code runs inside lens spans.
//!
//! # The per-thread stack
//!
//! Each thread keeps the lens spans it entered, innermost last (as the registry keeps its
//! current-span stack): the innermost one is the contextual parent of a new span, without a
//! registry lookup. With activation on, an entry also holds the guard of the context attached
//! for it. A span's context is built once, at its first enter (the current context with the
//! span), and attached by clone at every enter (no allocation); exits may come out of order,
//! as OpenTelemetry's context stack allows.
//!
//! A span's state counts the entries of it on every thread's stack: while it is 0, entering
//! the span needs no look for an earlier entry (a re-entry) and closing it no sweep for entries
//! left behind, so a span costs the same under 30,000 entered ancestors as under none. An exit
//! in order pops the top; one out of order looks down the stack as far as the span's entry.
//!
//! # A span exited on another thread
//!
//! The `tracing` guard of an entered span can be held across an `.await` (`let _g =
//! span.enter(); x.await;`, a documented mistake that compiles): the span is entered on one
//! runtime worker and exited, then closed, on another. The context attached on the first
//! thread can only be detached there (OpenTelemetry's context stack is per thread). So an exit
//! on a thread that holds no activation of the span marks it stale, and the thread holding it
//! detaches it the next time it runs nemo-lens code: a lens span callback (a new span, enter,
//! exit, close), or nemo-lens's propagation functions. The W3C propagator nemo-lens installs
//! never injects a span marked stale, even from a context read before the thread detached it:
//! code in no span injects no `traceparent`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use opentelemetry::trace::SpanId;
use opentelemetry::{Context, ContextGuard};
use parking_lot::Mutex;

use crate::record::SpanState;

/// What entering a lens span activates on this thread: its ids, its state and the context to
/// attach.
pub(crate) struct Activation {
    pub(crate) span_id: SpanId,
    /// Its state, kept so that the span can be entered again without a table lookup.
    pub(crate) state: Arc<SpanState>,
    /// The context to attach (context activation on).
    pub(crate) cx: Option<Context>,
}

/// One entered lens span of this thread.
struct Entered {
    /// The layer's span table (its address), and the span's `tracing` id in it.
    table: usize,
    id: u64,
    span: Activation,
    /// The guard of the attached context.
    guard: Option<ContextGuard>,
    /// The span was already on the stack when entered again (the registry's rule: the
    /// current span is the innermost entry that is not a re-entry).
    again: bool,
    /// Entered while this thread was not panicking: an exit while it panics is the panic
    /// unwinding through the span (an entry made while panicking is a destructor's own span).
    calm: bool,
}

/// How an exit went on this thread.
pub(crate) enum Exit {
    /// This thread held no entry of the span (it was entered on another thread).
    Elsewhere,
    /// The innermost entry of the span was popped.
    Here,
    /// Popped by a panic unwinding through it: entered before the panic, exited while the
    /// thread panics.
    Unwound(Arc<SpanState>),
}

/// This thread's entered lens spans, innermost last, and the span it exited last (entered
/// again without a table lookup while it is open: the candle pattern re-enters one span per
/// step).
struct Stack {
    entered: Vec<Entered>,
    last: Option<(usize, u64, Activation)>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Thread exit: OpenTelemetry's context stack may be gone already, and dies with the
        // thread anyway; its guards are not run. Marks that only this thread could clear go.
        let mut ids = Vec::new();
        for e in self.entered.drain(..) {
            ids.push(e.span.span_id);
            e.span.state.entry_gone();
            std::mem::forget(e.guard);
        }
        if MARKED.load(Ordering::Relaxed) != 0 {
            let mut marks = MARKS.lock();
            for id in ids {
                unmark(&mut marks, id);
            }
        }
    }
}

thread_local! {
    static STACK: RefCell<Stack> = const {
        RefCell::new(Stack {
            entered: Vec::new(),
            last: None,
        })
    };
    /// The [`EPOCH`] this thread last cleared its stale activations at.
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Bumped at every stale mark: a thread whose [`SEEN`] differs looks for stale activations.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Activations marked stale and not yet detached: span id and how many.
static MARKS: Mutex<VecDeque<(SpanId, u32)>> = Mutex::new(VecDeque::new());
/// Number of entries in [`MARKS`].
static MARKED: AtomicUsize = AtomicUsize::new(0);
/// The most marks kept (a mark no thread can clear, e.g. of an activation a thread never
/// pushed while it was exiting, is dropped oldest first past this).
const MAX_MARKS: usize = 1024;

/// Enters span `id` of `table` again if it is the span this thread exited last and it is
/// still open (no table lookup); `false` otherwise.
#[inline]
pub(crate) fn enter_again(table: usize, id: u64) -> bool {
    clear_stale();
    let stale = STACK.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        match &stack.last {
            Some((s, i, _)) if *s == table && *i == id => {}
            _ => return None,
        }
        let (_, _, span) = stack.last.take()?;
        if span.state.is_closed() {
            // The id was reused: the caller looks the span up.
            return Some(Some(span));
        }
        push(&mut stack, table, id, span);
        Some(None)
    });
    match stale {
        Ok(Some(None)) => true,
        Ok(Some(Some(span))) => {
            // Dropped outside the borrow: a context may hold user values.
            drop(span);
            false
        }
        _ => false,
    }
}

/// Pushes span `id` of `table` on this thread's stack, attaching its context until the
/// matching [`exit`]. Called after [`enter_again`] (which cleared stale activations).
#[inline]
pub(crate) fn enter(table: usize, id: u64, span: Activation) {
    // During thread teardown the stack is gone: nothing is attached.
    let _ = STACK.try_with(|stack| push(&mut stack.borrow_mut(), table, id, span));
}

#[inline]
fn push(stack: &mut Stack, table: usize, id: u64, span: Activation) {
    // The stack is looked through only when some thread holds an entry of the span already
    // (a re-entry, or the span entered on several threads at once): a span entered once costs
    // the same at any depth.
    let again = span.state.entry_pushed() != 0
        && stack
            .entered
            .iter()
            .rev()
            .any(|e| e.table == table && e.id == id && e.span.span_id == span.span_id);
    let guard = span.cx.clone().map(Context::attach);
    stack.entered.push(Entered {
        table,
        id,
        span,
        guard,
        again,
        calm: !std::thread::panicking(),
    });
}

/// Pops the innermost entry of span `id` of `table` from this thread's stack, detaching its
/// context.
#[inline]
pub(crate) fn exit(table: usize, id: u64) -> Exit {
    let popped = STACK
        .try_with(|stack| {
            let mut stack = stack.borrow_mut();
            let this = |e: &Entered| e.table == table && e.id == id;
            // The innermost entry is the span's in the usual nesting; an exit out of order
            // looks down from the top as far as the span's entry.
            let Entered {
                span, guard, calm, ..
            } = if stack.entered.last().is_some_and(this) {
                stack.entered.pop()?
            } else {
                let pos = stack.entered.iter().rposition(this)?;
                stack.entered.remove(pos)
            };
            span.state.entry_gone();
            let unwound = (calm && std::thread::panicking()).then(|| span.state.clone());
            let last = stack.last.replace((table, id, span));
            Some((guard, last, unwound))
        })
        .ok()
        .flatten();
    let Some((guard, last, unwound)) = popped else {
        return Exit::Elsewhere;
    };
    // After the borrow ends, the context first: dropping a context may run user destructors.
    drop(guard);
    drop(last);
    match unwound {
        Some(state) => Exit::Unwound(state),
        None => Exit::Here,
    }
}

/// The innermost span of `table` entered on this thread (the contextual parent of a new span).
#[inline]
pub(crate) fn current(table: usize) -> Option<u64> {
    STACK
        .try_with(|stack| {
            stack
                .borrow()
                .entered
                .iter()
                .rev()
                .find(|e| e.table == table && !e.again)
                .map(|e| e.id)
        })
        .ok()
        .flatten()
}

/// Whether `span` is a lens span this thread activated (its context mirrors the `tracing` tree,
/// so the layer must not take it as an attached remote parent).
#[inline]
pub(crate) fn is_activated(span: SpanId) -> bool {
    STACK
        .try_with(|stack| {
            stack
                .borrow()
                .entered
                .iter()
                .rev()
                .any(|e| e.span.span_id == span && e.guard.is_some())
        })
        .unwrap_or(false)
}

/// Span `id` of `table` (state `state`) closes: entries this thread still has for it (a guard
/// that was leaked rather than dropped, or an entry left by an exit on another thread) go,
/// with their contexts, and so does the span if this thread exited it last. The stack is
/// swept only when some entry of the span is left somewhere: a span exited before it closes
/// costs the same at any depth.
#[inline]
pub(crate) fn closed(table: usize, id: u64, state: &SpanState) {
    let span_id = state.span_context().span_id();
    let this = |e: &Entered| e.table == table && e.id == id && e.span.span_id == span_id;
    let gone = STACK.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        let last = match &stack.last {
            Some((s, i, span)) if *s == table && *i == id && span.span_id == span_id => {
                stack.last.take()
            }
            _ => None,
        };
        if !state.has_entries() || !stack.entered.iter().any(this) {
            return (Vec::new(), last);
        }
        let (gone, kept): (Vec<Entered>, Vec<Entered>) = std::mem::take(&mut stack.entered)
            .into_iter()
            .partition(this);
        stack.entered = kept;
        for e in &gone {
            e.span.state.entry_gone();
        }
        (gone, last)
    });
    // After the borrow ends: dropping a context may run user destructors.
    drop(gone);
}

/// An exit of lens span `span_id` on a thread that did not enter it: the activation another
/// thread holds for it is stale; that thread detaches it at its next nemo-lens call.
#[cold]
pub(crate) fn exited_elsewhere(span_id: SpanId) {
    let mut marks = MARKS.lock();
    match marks.iter_mut().find(|(id, _)| *id == span_id) {
        Some((_, n)) => *n = n.saturating_add(1),
        None => {
            if marks.len() >= MAX_MARKS {
                marks.pop_front();
            }
            marks.push_back((span_id, 1));
        }
    }
    MARKED.store(marks.len(), Ordering::Relaxed);
    EPOCH.fetch_add(1, Ordering::Release);
}

/// Whether an activation of `span_id` is marked stale (its span was exited on another thread
/// than the one that activated it): a propagator must not inject it.
pub(crate) fn is_stale(span_id: SpanId) -> bool {
    MARKED.load(Ordering::Relaxed) != 0 && MARKS.lock().iter().any(|(id, _)| *id == span_id)
}

/// Detaches this thread's activations marked stale since it last looked (one relaxed load
/// when nothing was marked).
#[inline]
pub(crate) fn clear_stale() {
    let epoch = EPOCH.load(Ordering::Acquire);
    if SEEN.try_with(|s| s.get()).unwrap_or(epoch) != epoch {
        clear_stale_slow(epoch);
    }
}

#[cold]
fn clear_stale_slow(epoch: u64) {
    let _ = SEEN.try_with(|s| s.set(epoch));
    let gone: Vec<Entered> = STACK
        .try_with(|stack| {
            let mut stack = stack.borrow_mut();
            let mut marks = MARKS.lock();
            let mut gone = Vec::new();
            let mut i = 0;
            // Oldest first: an exit elsewhere ends the earliest activation still held.
            while i < stack.entered.len() {
                let span_id = stack.entered[i].span.span_id;
                if unmark(&mut marks, span_id) {
                    let e = stack.entered.remove(i);
                    e.span.state.entry_gone();
                    gone.push(e);
                } else {
                    i += 1;
                }
            }
            MARKED.store(marks.len(), Ordering::Relaxed);
            gone
        })
        .unwrap_or_default();
    // Innermost first, after every borrow and lock is released.
    drop(gone.into_iter().rev().collect::<Vec<_>>());
}

/// Takes one mark of `span_id`; `false` when there is none.
fn unmark(marks: &mut VecDeque<(SpanId, u32)>, span_id: SpanId) -> bool {
    let Some(pos) = marks.iter().position(|(id, _)| *id == span_id) else {
        return false;
    };
    marks[pos].1 -= 1;
    if marks[pos].1 == 0 {
        marks.remove(pos);
    }
    MARKED.store(marks.len(), Ordering::Relaxed);
    true
}
