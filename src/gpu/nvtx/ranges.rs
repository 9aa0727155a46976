//! The NVTX calls: one domain, pushes and pops on enter and exit, marks for events.

use std::cell::RefCell;
use std::ffi::CString;
use std::fmt::{self, Write as _};
use std::marker::PhantomData;
use std::sync::OnceLock;

use nvtx::Domain;
use nvtx::domain::{EventAttributes, LocalRange, Message};
use tracing_core::field::{Field, Visit};
use tracing_core::span::Id;
use tracing_core::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::callsites::NvtxFilter;
use super::stack::Stack;

/// The NVTX domain every range and mark of nemo-lens belongs to.
pub(super) const DOMAIN_NAME: &std::ffi::CStr = c"NeMo Lens";

/// The longest mark text, in bytes (an event's message, cut at a character boundary).
pub(super) const MARK_TEXT_BYTES: usize = 1024;

/// The process's one domain. Created once (the first NVTX call of the process, which loads an
/// NVTX tool if one is attached) and never destroyed: categories and registered strings borrow
/// it for the life of the process.
pub(super) fn domain() -> &'static Domain {
    static DOMAIN: OnceLock<Domain> = OnceLock::new();
    DOMAIN.get_or_init(|| Domain::new(DOMAIN_NAME))
}

/// The colour of a group: a hue from the FNV-1a hash of its name (saturation 0.65, value 0.9),
/// as opaque ARGB. The same in every process, rank and run.
pub(super) fn group_color(group: &str) -> u32 {
    let hash = group.bytes().fold(0x811C_9DC5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let hue = f64::from(hash % 360) / 60.0;
    let (s, v) = (0.65, 0.90);
    let c = v * s;
    let x = c * (1.0 - (hue % 2.0 - 1.0).abs());
    let (r, g, b) = match hue as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let channel = |f: f64| ((f + v - c) * 255.0).round() as u32;
    0xFF00_0000 | channel(r) << 16 | channel(g) << 8 | channel(b)
}

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
    fn group_colours_are_stable_opaque_and_distinct() {
        let groups = [
            "job",
            "checkpoint",
            "evaluate",
            "model_init",
            "load_checkpoint",
            "step",
            "forward_backward",
            "optimizer",
            "collective",
        ];
        let colours: Vec<u32> = groups.iter().map(|g| group_color(g)).collect();
        assert!(colours.iter().all(|c| c >> 24 == 0xFF), "{colours:08X?}");
        let mut distinct = colours.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), groups.len(), "{colours:08X?}");
        assert_eq!(group_color("step"), colours[5]);
    }

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
