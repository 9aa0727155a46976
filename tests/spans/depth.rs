//! Spans nested 30,000 deep, exited out of order and closed on other threads: the lens layer
//! and the flight recorder keep every parent and the current span right. What a span costs at
//! depth is counted by `depth_work.rs` (registry lookups, memory read) and timed by
//! `benches/nesting.rs` and `benches/recorder.rs` (`at_depth_N`).

use std::collections::HashMap;
use std::path::Path;

use nemo_lens::{ExportMode, LensConfig, LensSpanExt, Place, Telemetry};
use opentelemetry::trace::{SpanId, TraceContextExt};
use opentelemetry_sdk::trace::InMemorySpanExporter;
use serde_json::Value;
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::memory;

const DEPTH: usize = 30_000;
/// Threads the spans' handles are dropped on (so their closes run there, out of order).
const CLOSERS: usize = 4;
/// Stack of a thread that closes spans: the registry closes a span whose last child closed
/// from inside that child's close, so a chain closed from its innermost end recurses as deep
/// as the chain.
const CLOSER_STACK: usize = 1 << 30;

fn lens_id(span: &tracing::Span) -> SpanId {
    span.context().span().span_context().span_id()
}

/// Hands the spans to [`CLOSERS`] threads, interleaved, each dropping its share in an order of
/// its own: a span closes on whichever thread drops the last handle of it or of a descendant.
fn close_on_other_threads(spans: Vec<tracing::Span>, dispatch: &Dispatch) {
    let mut shares: Vec<Vec<tracing::Span>> = (0..CLOSERS).map(|_| Vec::new()).collect();
    for (i, span) in spans.into_iter().enumerate() {
        shares[i % CLOSERS].push(span);
    }
    std::thread::scope(|s| {
        for (k, mut share) in shares.into_iter().enumerate() {
            let dispatch = dispatch.clone();
            let closer = std::thread::Builder::new().stack_size(CLOSER_STACK);
            closer
                .spawn_scoped(s, move || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        // Outermost first on even threads, innermost first on odd ones, and a
                        // stride through the middle first on all.
                        if k % 2 == 1 {
                            share.reverse();
                        }
                        let mut rest = Vec::new();
                        for (i, span) in share.into_iter().enumerate() {
                            if i % 7 == 3 {
                                drop(span);
                            } else {
                                rest.push(span);
                            }
                        }
                        drop(rest);
                    });
                })
                .unwrap();
        }
    });
}

#[test]
fn thirty_thousand_nested_spans_keep_their_parents_through_out_of_order_exits_and_closes_on_other_threads()
 {
    let exporter = InMemorySpanExporter::default();
    let telemetry = memory::builder(&exporter)
        .export_mode(ExportMode::Synchronous)
        .build()
        .unwrap();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    let (ids, probe_parent) = tracing::dispatcher::with_default(&dispatch, || {
        let mut spans = Vec::with_capacity(DEPTH);
        for depth in 0..DEPTH {
            let span = tracing::info_span!("level", nemo.group.job = Empty, depth);
            dispatch.enter(&span.id().unwrap());
            spans.push(span);
        }
        let ids: Vec<SpanId> = spans.iter().map(lens_id).collect();
        let current = || {
            opentelemetry::Context::current()
                .span()
                .span_context()
                .span_id()
        };
        assert_eq!(current(), ids[DEPTH - 1], "the innermost span is current");
        // Every 97th span exited out of order, the deepest entries first.
        for span in spans.iter().skip(1).step_by(97) {
            dispatch.exit(&span.id().unwrap());
        }
        assert_eq!(current(), ids[DEPTH - 1], "still the innermost span");
        let probe = tracing::info_span!("probe", nemo.group.job = Empty);
        let probe_parent = probe.in_scope(|| {
            // Inside the probe, its context is current; after it, the innermost span's again.
            assert_eq!(current(), lens_id(&probe));
            lens_id(&probe)
        });
        assert_eq!(current(), ids[DEPTH - 1]);
        drop(probe);
        // The others, innermost first.
        for (i, span) in spans.iter().enumerate().rev() {
            if i % 97 != 1 {
                dispatch.exit(&span.id().unwrap());
            }
        }
        assert!(
            !opentelemetry::Context::current().has_active_span(),
            "every activation detached"
        );
        close_on_other_threads(spans, &dispatch);
        (ids, probe_parent)
    });
    telemetry.force_flush().unwrap();
    let exported = exporter.get_finished_spans().unwrap();
    assert_eq!(exported.len(), DEPTH + 1, "every span exported once");
    let by_id: HashMap<SpanId, &opentelemetry_sdk::trace::SpanData> = exported
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let trace = by_id[&ids[0]].span_context.trace_id();
    for (depth, id) in ids.iter().enumerate() {
        let span = by_id[id];
        assert_eq!(span.span_context.trace_id(), trace, "depth {depth}");
        let want = if depth == 0 {
            SpanId::INVALID
        } else {
            ids[depth - 1]
        };
        assert_eq!(
            span.parent_span_id, want,
            "parent of the span at depth {depth}"
        );
    }
    assert_eq!(by_id[&probe_parent].parent_span_id, ids[DEPTH - 1]);
    let stats = telemetry.stats();
    assert_eq!((stats.dropped_spans, stats.open_spans), (0, 0), "{stats:?}");
    telemetry
        .shutdown(std::time::Duration::from_secs(5))
        .unwrap();
}

/// A non-exporting rank (rank 0 of 4) whose recorder keeps 16 closed spans.
pub(super) fn recorder_rank(dir: &Path) -> Telemetry {
    let mut c = LensConfig::default()
        .with_enabled(true)
        .with(|c| c.metrics_enabled = false);
    c.flight_recorder.capacity = 16;
    c.flight_recorder.dump_dir = Some(dir.to_path_buf());
    c.flight_recorder.hang_timeout = None;
    Telemetry::builder(c)
        .place(Place::rank(0).of(4))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap()
}

/// The open spans of a dump: recorder span id → (depth attribute, parent id).
fn open_spans(path: &Path) -> HashMap<String, (i64, Option<String>)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["attributes"]["nemo.span.open"] == true)
        .map(|l| {
            (
                l["context"]["span_id"].as_str().unwrap().to_string(),
                (
                    l["attributes"]["depth"].as_i64().unwrap(),
                    l["parent_id"].as_str().map(str::to_string),
                ),
            )
        })
        .collect()
}

#[test]
fn past_its_open_slots_the_recorder_gives_a_deep_span_its_nearest_recorded_ancestor() {
    let dir = tempfile::tempdir().unwrap();
    let t = recorder_rank(dir.path());
    let recorder = t.flight_recorder().expect("recorder on").clone();
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(t.layer())
            .with(t.recorder_layer()),
    );
    let step = |depth: i64| tracing::info_span!("level", nemo.group.step = Empty, depth);
    let dump = tracing::dispatcher::with_default(&dispatch, || {
        // Siblings that take most open slots, then a chain 30,000 deep: most of it is past
        // the slots (dropped), a few of its spans may find one.
        let fillers: Vec<tracing::Span> = (0..1_024).map(|_| step(-1)).collect();
        let mut chain = Vec::with_capacity(DEPTH);
        for depth in 0..DEPTH {
            let span = step(depth as i64);
            dispatch.enter(&span.id().unwrap());
            chain.push(span);
        }
        assert!(recorder.dropped() as usize >= DEPTH - 1_024);
        // Slots free again: spans made now, deep in the chain, are recorded.
        drop(fillers);
        let depths = [DEPTH - 1, DEPTH / 2, 2_000, 1_500];
        let leaves: Vec<tracing::Span> = std::thread::scope(|s| {
            let handles: Vec<_> = depths
                .iter()
                .map(|&d| {
                    let parent = chain[d].clone();
                    let dispatch = dispatch.clone();
                    s.spawn(move || {
                        tracing::dispatcher::with_default(&dispatch, || {
                            tracing::info_span!(
                                parent: &parent,
                                "leaf",
                                nemo.group.step = Empty,
                                depth = (DEPTH + d) as i64
                            )
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let path = recorder.dump().unwrap();
        drop(leaves);
        // Out of order: every 97th span first, outermost first, then the rest, innermost
        // first.
        for span in chain.iter().step_by(97) {
            dispatch.exit(&span.id().unwrap());
        }
        for (i, span) in chain.iter().enumerate().rev() {
            if i % 97 != 0 {
                dispatch.exit(&span.id().unwrap());
            }
        }
        close_on_other_threads(chain, &dispatch);
        path
    });
    let open = open_spans(&dump);
    // The chain's recorded spans, by depth: each one's parent is the recorded one above it.
    let mut recorded: Vec<(i64, &String)> = open
        .iter()
        .filter(|(_, (d, _))| (0..DEPTH as i64).contains(d))
        .map(|(id, (d, _))| (*d, id))
        .collect();
    recorded.sort();
    assert!(recorded.len() >= 2, "{recorded:?}");
    for pair in recorded.windows(2) {
        assert_eq!(
            open[pair[1].1].1.as_ref(),
            Some(pair[0].1),
            "the parent of the recorded span at depth {}",
            pair[1].0
        );
    }
    // Each leaf's parent: the deepest recorded chain span at or above its parent's depth.
    let leaves: Vec<(i64, &Option<String>)> = open
        .values()
        .filter(|(d, _)| *d >= DEPTH as i64)
        .map(|(d, p)| (*d - DEPTH as i64, p))
        .collect();
    assert_eq!(leaves.len(), 4, "every leaf recorded: {leaves:?}");
    for (under, parent) in leaves {
        let want = recorded
            .iter()
            .rev()
            .find(|(d, _)| *d <= under)
            .map(|(_, id)| (*id).clone());
        assert_eq!(parent, &want, "the parent of the leaf under depth {under}");
    }
    assert_eq!(recorder.open_spans(), 0, "every span closed");
    t.shutdown(std::time::Duration::from_secs(5)).unwrap();
}
