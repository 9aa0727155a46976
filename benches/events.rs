//! Cost of one event (a message and one `f64` field) inside a span of the `step` group, under
//! each wiring (see `benches/common/mod.rs`), in one run. A new span every 100 events keeps
//! every event below the SDK's default limit of 128 events per span, so each is really
//! recorded; the span's own cost adds 1/100 of a span lifecycle per event.
//!
//! Run: `cargo bench --bench events` (all figures: `benches/run_all.sh`).
//!
//! **This run** (2026-11-30T19:53Z, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM, quiet: load average
//! 1.1-1.2; criterion medians, 1 s warm-up + 3 s measurement), this round's final merge.
//!
//! | `event_in_span` case | median | / plain |
//! |---|---|---|
//! | no_subscriber | 0.31 ns | |
//! | lens_non_exporting_rank | 0.30 ns | |
//! | lens_disabled_group (the span's group is off; the event itself is not gated) | 17 ns | |
//! | lens_exported | 278 ns | 0.31x |
//! | plain_tracing_opentelemetry | 888 ns | 1 |
//! | plain_tracing_opentelemetry_lean | 626 ns | 0.71x |
//! | registry_only | 8.74 ns | |
//! | fmt_sink | 1.00 µs | 1.13x |
//!
//! Target (issue 13): an event inside an exported span <= 150 ns: **missed** (278 ns on this
//! quiet run; the 17:42Z loaded run gave 405 ns). Instructions on the training thread (callgrind, message + one field, 100 events per
//! span): 1,779 with the SDK span, 1,593 with the span record. Where they go: formatting the
//! message (`record_debug` gets `&dyn Debug` of the `format_args!`, so it cannot borrow a
//! literal: a `String` per event) and the field ~630, two allocations (message and attribute
//! `Vec`) that the batch worker frees, so the training thread's allocator never gets them back
//! from its thread cache (~180 each), the registry's current-span and span lookups ~240, the
//! `clock_gettime` of the event ~30, the push under the record's lock ~100. The field's
//! `Display`/`Debug` runs before any lock is taken (a panicking field is the application's
//! panic, `tests/panicking_field.rs`).
//! `lens_disabled_group` here is an ungated event inside a span whose group is disabled: the
//! event callsite is enabled (events outside recorded spans cannot be known at the callsite), so
//! it is dispatched and the layer finds no recorded span (registry's current-span lookup).
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use tracing::field::Empty;

mod common;
use common::{Wiring, build};

/// Events per span: below the SDK's default limit of 128 events per span, so that every event
/// is really recorded rather than dropped by the span's event queue.
const EVENTS_PER_SPAN: u64 = 100;

/// `iters` events (a message and one field), inside spans of the `step` group, a new span every
/// [`EVENTS_PER_SPAN`] events; returns the time. The span's own cost is spread over its events
/// (1/100 of a span lifecycle per event, see `benches/spans.rs`).
fn events(iters: u64) -> Duration {
    let start = Instant::now();
    let mut left = iters;
    while left > 0 {
        let n = left.min(EVENTS_PER_SPAN);
        let span = tracing::info_span!("step", nemo.group.step = Empty, step = 1_i64);
        let _e = span.enter();
        for _ in 0..n {
            tracing::info!(loss = black_box(0.25_f64), "step done");
        }
        left -= n;
    }
    start.elapsed()
}

fn bench_events(c: &mut Criterion) {
    let mut g = c.benchmark_group("event_in_span");
    for wiring in Wiring::ALL {
        let built = build(wiring);
        built.run(|| g.bench_function(wiring.name(), |b| b.iter_custom(events)));
        built.shutdown();
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_events
}
criterion_main!(benches);
