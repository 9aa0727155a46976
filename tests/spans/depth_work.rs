//! What a span costs at depth, counted rather than timed: the span lookups the lens layer and
//! the flight recorder make through the registry, and the memory a close reads, are the same
//! for a span under thousands of entered ancestors as for one near the root.
//!
//! Lookups are counted by a registry that counts its `LookupSpan::span_data` calls, composed
//! under the layers as a user composes them on `registry()`: a recorder that walked a deep
//! span's ancestry would look up every ancestor. The memory a close reads is the anonymous
//! memory the kernel marks referenced while it runs (`/proc/self/clear_refs`, then
//! `Referenced` in `/proc/self/smaps`, Linux), in a process of its own: a close that looked
//! through the thread's stack of entered spans would read every entry of it.

use std::any::TypeId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nemo_lens::ExportMode;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_core::span::{Attributes, Current, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Event, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::FilterId;
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::{LookupSpan, Registry};

use nemo_lens_test_support::{child, memory};

use super::depth::recorder_rank;

/// A registry that counts the span lookups made through it.
#[derive(Default)]
struct CountingRegistry {
    inner: Registry,
    lookups: Arc<AtomicU64>,
}

impl Subscriber for CountingRegistry {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.inner.new_span(span)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        self.inner.record(span, values);
    }
    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.inner.record_follows_from(span, follows);
    }
    fn event_enabled(&self, event: &Event<'_>) -> bool {
        self.inner.event_enabled(event)
    }
    fn event(&self, event: &Event<'_>) {
        self.inner.event(event);
    }
    fn enter(&self, span: &Id) {
        self.inner.enter(span);
    }
    fn exit(&self, span: &Id) {
        self.inner.exit(span);
    }
    fn clone_span(&self, id: &Id) -> Id {
        self.inner.clone_span(id)
    }
    fn try_close(&self, id: Id) -> bool {
        self.inner.try_close(id)
    }
    fn current_span(&self) -> Current {
        self.inner.current_span()
    }
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // The layers' `try_close` finds the registry by downcast (its close guard keeps a
        // closing span readable until every layer saw the close).
        // SAFETY: forwarded to the registry, which upholds the contract.
        unsafe { self.inner.downcast_raw(id) }
    }
}

impl<'a> LookupSpan<'a> for CountingRegistry {
    type Data = <Registry as LookupSpan<'a>>::Data;

    fn span_data(&'a self, id: &Id) -> Option<Self::Data> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.inner.span_data(id)
    }
    fn register_filter(&mut self) -> FilterId {
        self.inner.register_filter()
    }
}

/// The depth of the shallow nesting each measurement compares with.
const NEAR_ROOT: usize = 10;

/// Spans entered on this thread, each the child of the one before.
struct Chain<'a> {
    spans: Vec<tracing::Span>,
    dispatch: &'a Dispatch,
}

impl<'a> Chain<'a> {
    fn new(dispatch: &'a Dispatch) -> Chain<'a> {
        Chain {
            spans: Vec::new(),
            dispatch,
        }
    }

    /// Enters new spans made by `make` until the chain is `depth` long.
    fn nest_to(&mut self, depth: usize, make: impl Fn() -> tracing::Span) {
        while self.spans.len() < depth {
            let span = make();
            self.dispatch.enter(&span.id().unwrap());
            self.spans.push(span);
        }
    }
}

impl Drop for Chain<'_> {
    /// Exits and closes the spans innermost first, also when an assertion fails: the registry
    /// closes a parent whose last child closes from inside that close, so a chain closed
    /// outermost first would recurse as deep as the chain.
    fn drop(&mut self) {
        while let Some(span) = self.spans.pop() {
            self.dispatch.exit(&span.id().unwrap());
            drop(span);
        }
    }
}

/// Depth of the nesting the recorder sees past its 1,024 open slots.
const RECORDER_DEPTH: usize = 5_000;

/// Span lookups of a leaf made, entered, exited and closed under the current span.
fn lookups_of_a_leaf(lookups: &AtomicU64) -> u64 {
    let before = lookups.load(Ordering::Relaxed);
    let leaf = tracing::info_span!("leaf", nemo.group.step = Empty);
    leaf.in_scope(|| {});
    drop(leaf);
    lookups.load(Ordering::Relaxed) - before
}

#[test]
fn a_span_under_five_thousand_looks_up_as_many_spans_as_near_the_root_with_the_recorder_on() {
    let dir = tempfile::tempdir().unwrap();
    let t = recorder_rank(dir.path());
    let recorder = t.flight_recorder().expect("recorder on").clone();
    let registry = CountingRegistry::default();
    let lookups = registry.lookups.clone();
    let dispatch = Dispatch::new(registry.with(t.layer()).with(t.recorder_layer()));
    tracing::dispatcher::with_default(&dispatch, || {
        let make = || tracing::info_span!("level", nemo.group.step = Empty);
        let mut chain = Chain::new(&dispatch);
        chain.nest_to(NEAR_ROOT, make);
        let near_root = lookups_of_a_leaf(&lookups);
        assert_eq!(
            recorder.dropped(),
            0,
            "near the root every span is recorded"
        );
        chain.nest_to(RECORDER_DEPTH, make);
        assert!(
            recorder.dropped() as usize >= RECORDER_DEPTH - 1_024,
            "the chain went past the open slots: {} dropped",
            recorder.dropped()
        );
        let deep = lookups_of_a_leaf(&lookups);
        eprintln!(
            "span lookups of a leaf: {near_root} at depth {NEAR_ROOT}, {deep} at depth \
             {RECORDER_DEPTH}"
        );
        // Past the slots, the leaf is not recorded either: one more lookup, to leave its
        // nearest recorded ancestor for its children. Lookups near the root: the count sees
        // the layers' lookups.
        assert!(
            near_root > 0 && deep <= near_root + 2,
            "span lookups of a leaf: {near_root} at depth {NEAR_ROOT}, {deep} at depth \
             {RECORDER_DEPTH}"
        );
        drop(chain);
    });
    assert_eq!(recorder.open_spans(), 0, "every span closed");
    t.shutdown(std::time::Duration::from_secs(5)).unwrap();
}

/// Depth of the nesting a close is measured under.
const CLOSE_DEPTH: usize = 20_000;
/// What a close under [`CLOSE_DEPTH`] may read beyond a close near the root: the allocator's
/// pages of a larger heap (under 100 KiB), far less than the thread's stack of entered spans
/// (each entry holds at least the span's table, `tracing` id and OpenTelemetry id, 24 bytes:
/// 480,000 bytes in all).
const CLOSE_SLACK: u64 = 256 << 10;
/// Closes measured at each depth.
const CLOSES: usize = 5;

/// The process's anonymous memory (heap, thread stacks, large allocations) the kernel marked
/// referenced since [`Referenced::clear`]. Code and other file pages are left out: they hold
/// no data of the spans, and any thread running some code marks them.
struct Referenced {
    /// `/proc/self/smaps`, read into a buffer made beforehand (a buffer grown while it is
    /// read would count).
    smaps: Vec<u8>,
}

impl Referenced {
    fn new() -> Referenced {
        let mut smaps = vec![0_u8; 4 << 20];
        smaps.clear();
        Referenced { smaps }
    }

    /// Clears the referenced mark of every page of this process.
    fn clear(&mut self) {
        std::fs::write("/proc/self/clear_refs", "1").expect("write /proc/self/clear_refs");
    }

    /// Bytes of anonymous memory referenced since [`Referenced::clear`].
    fn anonymous(&mut self) -> u64 {
        use std::io::Read;
        self.smaps.clear();
        let cap = self.smaps.capacity();
        std::fs::File::open("/proc/self/smaps")
            .unwrap()
            .take(cap as u64)
            .read_to_end(&mut self.smaps)
            .unwrap();
        assert!(
            self.smaps.len() < cap,
            "/proc/self/smaps within {cap} bytes"
        );
        let text = std::str::from_utf8(&self.smaps).unwrap();
        let mut anonymous = false;
        let mut kib = 0;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if !first.ends_with(':') {
                // A mapping's first line: range, permissions, offset, device, inode, path.
                let perms = words.next().unwrap_or("");
                let path = words.nth(3);
                anonymous =
                    perms.starts_with("rw") && path.is_none_or(|p| p == "[heap]" || p == "[stack]");
            } else if first == "Referenced:" && anonymous {
                kib += words.next().unwrap().parse::<u64>().unwrap();
            }
        }
        kib << 10
    }
}

/// The measurement sees what a piece of code reads: a buffer read whole after
/// [`Referenced::clear`] counts whole, and not before.
fn referenced_counts_reads(referenced: &mut Referenced) {
    const LEN: usize = 4 << 20;
    let buf = vec![1_u8; LEN];
    referenced.clear();
    let before = referenced.anonymous();
    let sum: u64 = std::hint::black_box(&buf)
        .iter()
        .map(|&b| u64::from(b))
        .sum();
    let after = referenced.anonymous();
    assert_eq!(sum, LEN as u64);
    assert!(
        before < LEN as u64 / 2 && after - before >= LEN as u64 * 9 / 10,
        "referenced: {before} bytes after clearing, {after} after reading {LEN}"
    );
}

/// Bytes of anonymous memory the close of a span (made, never entered) under the current span
/// reads: the least over [`CLOSES`] closes (another thread of the process can only add to
/// what one close reads).
fn read_by_a_close(referenced: &mut Referenced) -> u64 {
    (0..CLOSES)
        .map(|_| {
            let leaf = tracing::info_span!("leaf", nemo.group.job = Empty);
            referenced.clear();
            drop(leaf);
            referenced.anonymous()
        })
        .min()
        .unwrap()
}

#[test]
fn closing_a_span_under_twenty_thousand_reads_what_it_reads_near_the_root() {
    child::run_alone(|| {
        // Pages of 4 KiB: a huge page read for a byte of it would count 2 MiB.
        // SAFETY: a prctl that sets a flag of this process.
        let thp = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        assert_eq!(thp, 0, "{}", std::io::Error::last_os_error());
        let mut referenced = Referenced::new();
        referenced_counts_reads(&mut referenced);
        let exporter = InMemorySpanExporter::default();
        let telemetry = memory::builder(&exporter)
            .export_mode(ExportMode::Synchronous)
            .build()
            .unwrap();
        let dispatch = Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
        let (near_root, deep) = tracing::dispatcher::with_default(&dispatch, || {
            let make = || tracing::info_span!("level", nemo.group.job = Empty);
            let mut chain = Chain::new(&dispatch);
            chain.nest_to(NEAR_ROOT, make);
            let near_root = read_by_a_close(&mut referenced);
            chain.nest_to(CLOSE_DEPTH, make);
            let deep = read_by_a_close(&mut referenced);
            drop(chain);
            (near_root, deep)
        });
        eprintln!(
            "bytes a close read: {near_root} at depth {NEAR_ROOT}, {deep} at depth {CLOSE_DEPTH}"
        );
        assert!(
            deep <= near_root + CLOSE_SLACK,
            "bytes a close read: {near_root} at depth {NEAR_ROOT}, {deep} at depth {CLOSE_DEPTH}"
        );
        telemetry.force_flush().unwrap();
        let exported = exporter.get_finished_spans().unwrap();
        assert_eq!(
            exported.len(),
            CLOSE_DEPTH + 2 * CLOSES,
            "every span exported"
        );
        telemetry
            .shutdown(std::time::Duration::from_secs(5))
            .unwrap();
    });
}
