//! RESULTS-PLACEHOLDER
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tracing::field::Empty;

mod common;
use common::{Wiring, build, concurrent};

/// One span: create (one field, group `step`) + enter + exit + close.
///
/// The `nemo.group.step` field is what gates it under `lens_disabled_group`; it has no value,
/// so no wiring records it. Inlined into criterion's loop, so the floor cases measure the
/// macro's checks and nothing else.
#[inline(always)]
fn one_span() {
    let span = tracing::info_span!("step", nemo.group.step = Empty, step = black_box(1_i64));
    let _e = span.enter();
}

fn bench_spans(c: &mut Criterion) {
    let mut g = c.benchmark_group("span");
    for wiring in Wiring::ALL {
        let built = build(wiring);
        built.run(|| g.bench_function(wiring.name(), |b| b.iter(|| one_span())));
        built.shutdown();
    }
    g.finish();
}

/// The same span from two threads at once (per-thread latency while both run).
fn bench_spans_two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("span_2threads");
    for wiring in Wiring::ALL {
        let built = build(wiring);
        g.bench_function(wiring.name(), |b| {
            b.iter_custom(|iters| concurrent(&built, 2, iters, one_span))
        });
        built.shutdown();
    }
    g.finish();
}

/// The candle pattern: one span built once, entered and exited on every forward pass.
fn bench_reentered(c: &mut Criterion) {
    let mut g = c.benchmark_group("span_reentered");
    for wiring in Wiring::ALL {
        let built = build(wiring);
        built.run(|| {
            let span = tracing::info_span!("forward", nemo.group.step = Empty, layer = 3_i64);
            g.bench_function(wiring.name(), |b| {
                b.iter(|| {
                    let _e = black_box(&span).enter();
                })
            });
        });
        built.shutdown();
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = bench_spans, bench_spans_two_threads, bench_reentered
}
criterion_main!(benches);
