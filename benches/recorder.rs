//! Cost of the flight recorder ([`nemo_lens::flight_recorder`]): one span (create with one field +
//! enter + exit + close) of a recorded group, of an unrecorded group and with no group, on a
//! non-exporting rank and on an exporting rank, with the recorder on
//! (`NEMO_LENS_FLIGHT_RECORDER=4096`, layer `telemetry.recorder_layer()`) and off. One
//! subscriber alive at a time (callsite interest is shared by live dispatchers).
//!
//! On a non-exporting rank only the recorder's callsites pay: a span of a recorded group is
//! created, recorded and closed by the registry and the recorder, while a callsite nobody records
//! stays a disabled callsite (the recorder's level hint is open, so the macro's cached-interest
//! check runs instead of the level check). On an exporting rank a span exported anyway pays the
//! recorder's field-name scan and one open-table probe.
//!
//! The `…/at_depth_N` cases time one recorded span under N − 1 entered recorded ancestors
//! (N = 1,000 and 30,000, past the recorder's 1,024 open slots): a span deep in a nesting costs
//! what it costs near the root.
//!
//! Run: `cargo bench --bench recorder`, then `python3 benches/report.py` for the table.
//! `benches/run_all.sh` runs it with the other benches and writes the figures to
//! `docs/performance.md`. Instructions per span, which do not depend on machine load:
//!
//! ```sh
//! cargo bench --bench recorder --no-run
//! RECORDER_BENCH_CASE=non_exporting/recorder_on/step_recorded RECORDER_BENCH_N=20000 \
//!   OTEL_BSP_MAX_QUEUE_SIZE=200000 valgrind --tool=callgrind target/release/deps/recorder-<hash>
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep 'recorder::step_span '
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::Criterion;
use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

/// Drops every batch: measures the pipeline, not an exporter.
#[derive(Debug, Clone, Default)]
struct Discard(Arc<AtomicU64>);

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        black_box(batch);
        Ok(())
    }
}

fn telemetry(recorder: usize, exporting: bool) -> Telemetry {
    let mut config = LensConfig::default().with_enabled(true).with(|c| {
        c.metrics_enabled = false;
        c.groups.span_groups = "per_step".into();
    });
    config.flight_recorder.capacity = recorder;
    config.flight_recorder.hang_timeout = None;
    config.flight_recorder.dump_dir = Some(std::env::temp_dir());
    Telemetry::builder(config)
        .place(Place::rank(if exporting { 7 } else { 0 }).of(8))
        .span_exporter(Discard::default())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap()
}

#[inline(never)]
fn step_span(step: i64) {
    let s = tracing::info_span!("train_step", nemo.group.step = Empty, step);
    let _e = s.enter();
}

#[inline(never)]
fn unrecorded_group_span(step: i64) {
    let s = tracing::info_span!(
        "forward_backward",
        nemo.group.forward_backward = Empty,
        step
    );
    let _e = s.enter();
}

#[inline(never)]
fn plain_span(step: i64) {
    let s = tracing::info_span!("load_batch", step);
    let _e = s.enter();
}

/// `depth - 1` entered spans of the recorded group, outermost first.
fn ancestors(depth: usize) -> Vec<tracing::span::EnteredSpan> {
    (1..depth)
        .map(|d| tracing::info_span!("outer", nemo.group.step = Empty, d).entered())
        .collect()
}

/// Drops entered spans innermost first, as they were entered.
fn leave(spans: Vec<tracing::span::EnteredSpan>) {
    for span in spans.into_iter().rev() {
        drop(span);
    }
}

fn case(c: &mut Criterion, (name, recorder, exporting, span, depth): Case) {
    let t = telemetry(recorder, exporting);
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(t.layer())
            .with(t.recorder_layer()),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        let outer = ancestors(depth);
        let mut i = 0_i64;
        c.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                span(black_box(i))
            })
        });
        leave(outer);
    });
    drop(dispatch);
    let _ = t.shutdown(std::time::Duration::from_secs(5));
}

/// `(name, recorder slots, exporting rank, span, depth the span is created at)`.
type Case = (&'static str, usize, bool, fn(i64), usize);

const CASES: [Case; 10] = [
    // Non-exporting rank: only the recorder's callsites pay.
    ("non_exporting/recorder_off/step", 0, false, step_span, 1),
    (
        "non_exporting/recorder_on/step_recorded",
        4096,
        false,
        step_span,
        1,
    ),
    (
        "non_exporting/recorder_on/other_group",
        4096,
        false,
        unrecorded_group_span,
        1,
    ),
    (
        "non_exporting/recorder_on/no_group",
        4096,
        false,
        plain_span,
        1,
    ),
    // Deep in a nesting, past the open slots.
    (
        "non_exporting/recorder_on/step_recorded/at_depth_1000",
        4096,
        false,
        step_span,
        1_000,
    ),
    (
        "non_exporting/recorder_on/step_recorded/at_depth_30000",
        4096,
        false,
        step_span,
        30_000,
    ),
    // Exporting rank: the recorder's overhead on spans exported anyway.
    ("exporting/recorder_off/no_group", 0, true, plain_span, 1),
    ("exporting/recorder_on/no_group", 4096, true, plain_span, 1),
    ("exporting/recorder_off/step", 0, true, step_span, 1),
    (
        "exporting/recorder_on/step_recorded",
        4096,
        true,
        step_span,
        1,
    ),
];

/// Runs one case `n` times with no timing, for `valgrind --tool=callgrind` (instruction counts
/// do not depend on machine load): `RECORDER_BENCH_CASE=<name> RECORDER_BENCH_N=<n>`.
fn instructions(name: &str, n: i64) {
    let (_, slots, exporting, span, depth) = CASES
        .iter()
        .find(|c| c.0 == name)
        .unwrap_or_else(|| panic!("no case {name}"));
    let t = telemetry(*slots, *exporting);
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(t.layer())
            .with(t.recorder_layer()),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        let outer = ancestors(*depth);
        for i in 0..n {
            span(black_box(i));
        }
        leave(outer);
    });
}

fn main() {
    if let Ok(name) = std::env::var("RECORDER_BENCH_CASE") {
        let n = std::env::var("RECORDER_BENCH_N").map_or(100_000, |v| v.parse().unwrap());
        return instructions(&name, n);
    }
    let mut c = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3))
        .configure_from_args();
    for case_ in CASES {
        case(&mut c, case_);
    }
    c.final_summary();
}
