//! The NVTX calls: pushes and pops on enter and exit, marks for events.

use std::cell::RefCell;
use std::ffi::CString;
use std::fmt::{self, Write as _};
use std::marker::PhantomData;

use nvtx::domain::{EventAttributes, LocalRange, Message};
use tracing_core::field::{Field, Visit};
use tracing_core::span::Id;
use tracing_core::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::callsites::NvtxFilter;
use super::domain::domain;
use super::stack::Stack;

/// The longest mark text, in bytes (an event's message, cut at a character boundary).
pub(super) const MARK_TEXT_BYTES: usize = 1024;

thread_local! {
    /// The ranges this thread has pushed.
    static PUSHED: RefCell<Stack<LocalRange<'static>>> = const { RefCell::new(Stack::new()) };
}

/// The layer behind [`NvtxFilter`]: pushes and pops on enter and exit, marks for events.
pub(super) struct Ranges<S> {
    /// The decision and range attributes of each callsite.
    callsites: NvtxFilter,
    _subscriber: PhantomData<fn(S)>,
}

impl<S> Ranges<S> {
    pub(super) fn new(callsites: NvtxFilter) -> Self {
        Ranges {
            callsites,
            _subscriber: PhantomData,
        }
    }
}

// No `on_new_span`: a span carries nothing of its own; its callsite says everything.
impl<S> Layer<S> for Ranges<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(meta) = ctx.metadata(id) else { return };
        let Some(attributes) = self.callsites.with_attributes(meta, Clone::clone) else {
            return;
        };
        // `try_*`: an enter during the thread's TLS teardown, or from inside a push, does not
        // panic; it pushes nothing.
        let _ = PUSHED.try_with(|pushed| {
            if let Ok(mut pushed) = pushed.try_borrow_mut() {
                pushed.enter(id.into_u64(), || domain().local_range(attributes));
            }
        });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        let _ = PUSHED.try_with(|pushed| {
            if let Ok(mut pushed) = pushed.try_borrow_mut() {
                pushed.exit(id.into_u64());
            }
        });
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        // The nearest span that pushes ranges: the mark takes its group's category and colour.
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let Some((category, color)) = self
            .callsites
            .with_attributes(span.metadata(), |a| (a.category, a.color))
        else {
            return;
        };
        drop(span);
        // The message field, formatted with no lock held (user `Debug` code may run, or panic).
        let mut text = MarkText::default();
        event.record(&mut text);
        let text = if text.found {
            text.text
        } else {
            event.metadata().name().to_string()
        };
        // Built field by field: the attribute builder would register the text in the domain,
        // which keeps every registered string for the life of the process (and so does the
        // tool); a message carrying values is a new string every time.
        domain().mark(EventAttributes {
            category,
            color,
            message: Some(mark_message(text)),
            payload: None,
        });
    }
}

/// An ASCII text goes as an ASCII C string (one byte a character); any other as a wide string.
/// NUL characters are left out.
fn mark_message(text: String) -> Message<'static> {
    if !text.is_ascii() {
        return Message::from_string_lossy(text);
    }
    match CString::new(text) {
        Ok(c) => Message::Ascii(c),
        Err(e) => {
            let mut bytes = e.into_vec();
            bytes.retain(|&b| b != 0);
            Message::Ascii(CString::new(bytes).unwrap_or_default())
        }
    }
}

/// The `message` field of an event, cut to [`MARK_TEXT_BYTES`].
#[derive(Default)]
struct MarkText {
    text: String,
    found: bool,
}

impl fmt::Write for MarkText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MARK_TEXT_BYTES - self.text.len();
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut take = room;
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.text.push_str(&s[..take]);
        Err(fmt::Error) // full: stop formatting
    }
}

impl Visit for MarkText {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.found = true;
            let _ = self.write_str(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.found = true;
            let _ = write!(self, "{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_text_is_bounded_at_a_character_boundary() {
        let mut text = MarkText::default();
        let long = "é".repeat(MARK_TEXT_BYTES);
        let _ = write!(text, "{long}");
        assert_eq!(text.text.len(), MARK_TEXT_BYTES);
        assert!(text.text.chars().all(|c| c == 'é'));
    }

    #[test]
    fn mark_messages_drop_nul_characters() {
        match mark_message("a\0b".to_string()) {
            Message::Ascii(c) => assert_eq!(c.as_bytes(), b"ab"),
            _ => panic!("ASCII text is sent as ASCII"),
        }
        assert!(matches!(
            mark_message("é\0".to_string()),
            Message::Unicode(_)
        ));
    }
}
