//! Cost of the flight recorder ([`nemo_lens::flight_recorder`]): one span (create with one field +
//! enter + exit + close) of a recorded group, of an unrecorded group and with no group, on a
//! non-exporting rank and on an exporting rank, with the recorder on
//! (`NEMO_LENS_FLIGHT_RECORDER=4096`, layer `telemetry.recorder_layer()`) and off. One
//! subscriber alive at a time (callsite interest is shared by live dispatchers).
//!
//! Run: `cargo bench --bench recorder`.
//!
//! Instruction counts (`valgrind --tool=callgrind`) do not depend on machine load; the timings
//! below were taken on a loaded machine and only bound the figures from above.
//!
//! **Instructions per span** (2026-11-30T17:16Z, rustc 1.95.0, release, 20,000 spans per case;
//! inclusive count of the span function / 20,000):
//!
//! ```sh
//! cargo bench --bench recorder --no-run
//! RECORDER_BENCH_CASE=non_exporting/recorder_on/step_recorded RECORDER_BENCH_N=20000 \
//!   OTEL_BSP_MAX_QUEUE_SIZE=200000 valgrind --tool=callgrind target/release/deps/recorder-<hash>
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep 'recorder::step_span '
//! ```
//!
//! | case | recorder off | recorder on |
//! |---|---|---|
//! | non-exporting rank, span of a recorded group (`step`) | 10 | 2,300 |
//! | non-exporting rank, span of another group | | 17 |
//! | non-exporting rank, span without a group | | 17 |
//! | exporting rank, span without a group (exported) | 4,285 | 4,354 (+1.6%) |
//! | exporting rank, `step` span (exported, and recorded when on) | 4,294 | 5,211 (+21%) |
//!
//! Of the 2,300 instructions of a recorded span on a non-exporting rank, about 920 are the
//! recorder's (`on_new_span` 598: field values, the parent lookup in the registry, two clock
//! reads of ~104 each, the open-table insert; `on_close` 324: the move to the ring); the rest is
//! `tracing-subscriber`'s registry creating, entering, exiting and closing a span that, without
//! the recorder, would not exist on this rank. A callsite nobody records stays a disabled
//! callsite (17 vs 10 instructions: the recorder's level hint is open, so the macro's
//! cached-interest check runs instead of the level check). A span the lens layer exports anyway
//! pays the field-name scan and one open-table probe (+69 instructions).
//!
//! **Wall time**, criterion medians (`target/criterion/*/new/estimates.json`; 1 s warm-up, 3 s measurement), 2-vCPU AMD EPYC KVM VM
//! **shared with other developers' builds** (load average 7.4-8.7 during run 2, 8.8-12 during
//! run 1, which was before the closed-span move was changed to copy words), "run 1 / run 2":
//!
//! | case | recorder off | recorder on |
//! |---|---|---|
//! | non-exporting, `step` (recorded) | 1.63 / 2.92 ns | 284 / 563 ns |
//! | non-exporting, other group | | 1.56 / 3.41 ns |
//! | non-exporting, no group | | 2.69 / 3.71 ns |
//! | exporting, no group | 1.10 / 1.78 µs | 1.29 / 1.64 µs |
//! | exporting, `step` | 1.08 / 1.72 µs | 1.13 / 2.29 µs |
//!
//! On this load the exporting cases differ by less than their run-to-run spread; the
//! instruction counts above are the figures to compare. A quiet-machine run is still to be
//! taken.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::Criterion;
use nemo_lens::{LensConfig, Telemetry};
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
    let mut config = LensConfig::default()
        .with_enabled(true)
        .with_metrics_enabled(false)
        .with_span_groups("per_step");
    config.flight_recorder.capacity = recorder;
    config.flight_recorder.hang_timeout = None;
    config.flight_recorder.dump_dir = Some(std::env::temp_dir());
    Telemetry::builder(config)
        .rank(if exporting { 7 } else { 0 })
        .world_size(8)
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

fn case(c: &mut Criterion, name: &str, recorder: usize, exporting: bool, span: fn(i64)) {
    let t = telemetry(recorder, exporting);
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(t.layer())
            .with(t.recorder_layer()),
    );
    tracing::dispatcher::with_default(&dispatch, || {
        let mut i = 0_i64;
        c.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                span(black_box(i))
            })
        });
    });
    drop(dispatch);
    let _ = t.shutdown(std::time::Duration::from_secs(5));
}

/// `(name, recorder slots, exporting rank, span)`.
type Case = (&'static str, usize, bool, fn(i64));

const CASES: [Case; 8] = [
    // Non-exporting rank: only the recorder's callsites pay.
    ("non_exporting/recorder_off/step", 0, false, step_span),
    (
        "non_exporting/recorder_on/step_recorded",
        4096,
        false,
        step_span,
    ),
    (
        "non_exporting/recorder_on/other_group",
        4096,
        false,
        unrecorded_group_span,
    ),
    (
        "non_exporting/recorder_on/no_group",
        4096,
        false,
        plain_span,
    ),
    // Exporting rank: the recorder's overhead on spans exported anyway.
    ("exporting/recorder_off/no_group", 0, true, plain_span),
    ("exporting/recorder_on/no_group", 4096, true, plain_span),
    ("exporting/recorder_off/step", 0, true, step_span),
    ("exporting/recorder_on/step_recorded", 4096, true, step_span),
];

/// Runs one case `n` times with no timing, for `valgrind --tool=callgrind` (instruction counts
/// do not depend on machine load): `RECORDER_BENCH_CASE=<name> RECORDER_BENCH_N=<n>`.
fn instructions(name: &str, n: i64) {
    let (_, slots, exporting, span) = CASES
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
        for i in 0..n {
            span(black_box(i));
        }
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
    for (name, slots, exporting, span) in CASES {
        case(&mut c, name, slots, exporting, span);
    }
    c.final_summary();
}
