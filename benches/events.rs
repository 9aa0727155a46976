//! Cost of one event (a message and one `f64` field) inside a span of the `step` group, under
//! each wiring (see `nemo_lens_test_support::bench`), in one run. A new span every 100 events keeps
//! every event below the SDK's default limit of 128 events per span, so each is really
//! recorded; the span's own cost adds 1/100 of a span lifecycle per event.
//!
//! `lens_disabled_group` here is an ungated event inside a span whose group is disabled: the
//! event callsite is enabled (events outside recorded spans cannot be known at the callsite), so
//! it is dispatched and the layer finds no recorded span (the registry's current-span lookup).
//!
//! Run: `cargo bench --bench events`, then `python3 benches/report.py` for the table.
//! `benches/run_all.sh` runs it with the other benches and writes the figures to
//! `docs/performance.md`.
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use tracing::field::Empty;

use common::{Wiring, build};
use nemo_lens_test_support::bench as common;

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
