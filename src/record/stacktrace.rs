//! `exception.stacktrace`: a backtrace captured on the thread where the error or panic happens,
//! turned into text later, on the export worker.
//!
//! Capturing walks the stack and keeps the frames' addresses; resolving them into symbol names,
//! files and lines maps and parses the binary's debug information (hundreds of microseconds per
//! backtrace, tens of megabytes of memory the first time). `std`'s [`Backtrace`] resolves lazily,
//! on its first `Display`, so a record keeps the unresolved backtrace ([`PendingStacktraces`])
//! and the worker formats it when it builds the SDK span (see `src/record/to_sdk.rs`).
//!
//! Which exceptions get one: a panic when `RUST_BACKTRACE` / `RUST_LIB_BACKTRACE` enable
//! backtraces (the rule of `std`'s own panic message), an `ERROR` event only when the
//! application asks ([`TelemetryBuilder::error_backtraces`](crate::TelemetryBuilder::error_backtraces)),
//! which also gives every panic one.

use std::backtrace::{Backtrace, BacktraceStatus};

use opentelemetry::KeyValue;
use opentelemetry::trace::Event;

use crate::semconv;

/// Where the user's part of a backtrace starts (the frames before it are nemo-lens's,
/// `tracing`'s and the panic machinery's own).
#[derive(Clone, Copy, Debug)]
pub(crate) enum UserFrames {
    /// Every frame.
    All,
    /// At the frame of the event's callsite (`file:line`).
    Callsite(&'static str, u32),
    /// After the last frame of the panic machinery (`std::panicking`, `core::panicking`,
    /// `rust_begin_unwind`).
    AfterPanic,
}

/// A backtrace captured and not yet resolved, with what its text keeps.
#[derive(Debug)]
pub(crate) struct Stacktrace {
    trace: Backtrace,
    from: UserFrames,
    /// Longest text, in characters (the attribute value length limit).
    limit: Option<usize>,
}

impl Stacktrace {
    /// Captures the stack here (addresses only): always when `force`, else when
    /// `RUST_BACKTRACE` / `RUST_LIB_BACKTRACE` enable backtraces. `None` when nothing was
    /// captured: never a placeholder.
    pub(crate) fn capture(force: bool, from: UserFrames, limit: Option<usize>) -> Option<Self> {
        let trace = if force {
            Backtrace::force_capture()
        } else {
            Backtrace::capture()
        };
        (trace.status() == BacktraceStatus::Captured).then_some(Stacktrace { trace, from, limit })
    }

    /// The text from the user's first frame on, cut to the limit by `cut` (resolves the
    /// symbols: the expensive part). When the user's first frame is not found, the whole
    /// backtrace is kept.
    pub(crate) fn text(&self, cut: fn(String, Option<usize>) -> String) -> String {
        let text = self.trace.to_string();
        let start = user_frames_start(&text, self.from).unwrap_or(0);
        cut(text[start..].to_string(), self.limit)
    }
}

/// What a record counts for one unresolved backtrace in its byte budget: the text it becomes
/// (about 100 bytes per frame), erring high.
const PENDING_SIZE: usize = 16 * 1024;

/// The unresolved backtraces of a span record's `exception` events, by event index.
#[derive(Debug, Default)]
pub(crate) struct PendingStacktraces(Vec<(usize, Stacktrace)>);

impl PendingStacktraces {
    /// Keeps `trace` for the event at `index` of the record's events.
    pub(crate) fn push(&mut self, index: usize, trace: Stacktrace) {
        self.0.push((index, trace));
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// The bytes the resolved texts may take (see [`PENDING_SIZE`]).
    pub(crate) fn approx_size(&self) -> usize {
        self.0.len() * PENDING_SIZE
    }

    /// Resolves each backtrace (cut by `cut`) into `exception.stacktrace` of its event, after
    /// `exception.type` and `exception.message`, as Python's `record_exception` orders them.
    pub(crate) fn resolve_into(
        self,
        events: &mut [Event],
        cut: fn(String, Option<usize>) -> String,
    ) {
        for (index, trace) in self.0 {
            if let Some(event) = events.get_mut(index) {
                let at = event.attributes.len().min(2);
                let value = KeyValue::new(semconv::EXCEPTION_STACKTRACE, trace.text(cut));
                event.attributes.insert(at, value);
            }
        }
    }
}

/// The offset of the header line (`  12: symbol`) of the first user frame in a backtrace's
/// text.
fn user_frames_start(text: &str, from: UserFrames) -> Option<usize> {
    // The offset of each frame's header line.
    let mut frames: Vec<usize> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let is_header = trimmed
            .split_once(": ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if is_header {
            frames.push(offset);
        }
        offset += line.len();
    }
    // Each frame's own text: up to the next frame.
    let frame_text = |i: usize| -> &str {
        let end = frames.get(i + 1).copied().unwrap_or(text.len());
        &text[frames[i]..end]
    };
    match from {
        UserFrames::All => None,
        UserFrames::Callsite(file, line) => {
            let at = format!("{file}:{line}:");
            (0..frames.len())
                .find(|&i| frame_text(i).contains(&at))
                .map(|i| frames[i])
        }
        UserFrames::AfterPanic => {
            // The first run of the panic machinery's frames (`std`'s short-backtrace marker
            // included); later ones (`lang_start`'s `catch_unwind`) are below the user's.
            let machinery = |i: usize| {
                let t = frame_text(i);
                t.contains("panicking") || t.contains("__rust_end_short_backtrace")
            };
            let first = (0..frames.len()).find(|&i| machinery(i))?;
            let after = (first..frames.len()).find(|&i| !machinery(i))?;
            Some(frames[after])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_frames_start_at_the_callsite_or_after_the_panic_machinery() {
        let text = "   0: nemo_lens::fields::captured_backtrace\n             at ./src/fields.rs:382:17\n   1: std::panicking::begin_panic\n             at /rustc/x/library/std/src/panicking.rs:769:5\n   2: std::sys::backtrace::__rust_end_short_backtrace\n   3: {closure#0}\n             at /rustc/x/library/std/src/panicking.rs:700:5\n   4: trainer::step\n             at ./examples/trainer.rs:86:9\n   5: std::panicking::catch_unwind\n   6: main\n";
        let at = |from| &text[user_frames_start(text, from).unwrap()..];
        assert!(
            at(UserFrames::Callsite("examples/trainer.rs", 86)).starts_with("   4: trainer::step")
        );
        assert!(at(UserFrames::AfterPanic).starts_with("   4: trainer::step"));
        assert_eq!(
            user_frames_start(text, UserFrames::Callsite("examples/trainer.rs", 87)),
            None
        );
        assert_eq!(user_frames_start(text, UserFrames::All), None);
    }
}
