//! Spans a panic unwinds through end `ERROR`, as Python's `start_as_current_span` marks every
//! span an exception propagates through.
//!
//! A span is unwound through when its entry is popped while the thread panics and was pushed
//! while it did not ([`activation::Exit::Unwound`](super::activation::Exit)): the guard of an
//! entered span (`#[instrument]`, `Span::in_scope`, `span.enter()`) is dropped by the
//! unwinding. A span a destructor enters and exits during the unwinding (a cleanup step
//! instrumented on its own) was entered while the thread panicked, so it ends as it would
//! otherwise; so do spans above the frame that catches the panic (`catch_unwind`), which
//! the unwinding never leaves.
//!
//! The innermost span gets the `exception` event from the panic hook
//! ([`Telemetry::install_panic_hook`](crate::Telemetry::install_panic_hook)), which runs before
//! the unwinding; every span unwound through whose status is still unset gets `ERROR` with the
//! panic's message (and location) as its description: the message the hook noted for this
//! thread, or `panic` without the hook.

use std::cell::RefCell;

use crate::record::SpanState;

/// The most of a panic message kept for the status descriptions (the span limits cut it
/// further).
const MAX_MESSAGE_BYTES: usize = 4096;

/// The description of a span unwound through when no panic hook noted the message.
pub(crate) const UNKNOWN_PANIC: &str = "panic";

thread_local! {
    /// The message of this thread's latest panic, as the panic hook noted it.
    static MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Notes `message` as this thread's current panic (the panic hook, before unwinding).
pub(crate) fn note_panic(message: &str) {
    let mut end = message.len().min(MAX_MESSAGE_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let _ = MESSAGE.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            *m = Some(message[..end].to_string());
        }
    });
}

/// The panic unwinds through the span of `state`: its status becomes `ERROR` with the panic's
/// message (cut to `limit` characters) unless it is set already.
pub(crate) fn unwound(state: &SpanState, limit: Option<usize>) {
    let message = MESSAGE
        .try_with(|m| m.try_borrow().ok().and_then(|m| m.clone()))
        .ok()
        .flatten()
        .unwrap_or_else(|| UNKNOWN_PANIC.to_string());
    state.set_error_if_unset(crate::record::attributes::truncate_chars(message, limit));
}
