//! Cost of `depth` nested spans (each created with one field and entered inside its parent),
//! for depth 1, 10 and 100, under each wiring (see `nemo_lens_test_support::bench`), in one run. The
//! floor cases (no subscriber, non-exporting rank, disabled group) include the recursion itself.
//!
//! `at_depth_N`: one span (created, entered, exited, closed) under N − 1 entered ancestors, for
//! N = 1,000 and 30,000: what a span costs deep in a nesting, which stays what it costs near the
//! root for lens (the registry itself looks through its stack of entered spans at each enter).
//!
//! Run: `cargo bench --bench nesting`, then `python3 benches/report.py` for the tables.
//! `benches/run_all.sh` runs it with the other benches and writes the figures to
//! `docs/performance.md`.
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tracing::field::Empty;

use common::{Wiring, build};
use nemo_lens_test_support::bench as common;

/// `depth` nested spans (group `step`, one field), each entered inside its parent.
fn nest(depth: u32) {
    if depth == 0 {
        return;
    }
    let span = tracing::info_span!("level", nemo.group.step = Empty, depth = black_box(depth));
    let _e = span.enter();
    nest(depth - 1);
}

/// One span of the `step` group (one field), entered and closed.
#[inline(never)]
fn one_span(depth: u32) {
    let span = tracing::info_span!("level", nemo.group.step = Empty, depth = black_box(depth));
    let _e = span.enter();
}

/// One span under `depth - 1` entered ancestors, built once per wiring outside the timing.
fn bench_at_depth(c: &mut Criterion) {
    for depth in [1_000_u32, 30_000] {
        let mut g = c.benchmark_group(format!("at_depth_{depth}"));
        for wiring in Wiring::ALL {
            let built = build(wiring);
            built.run(|| {
                let ancestors: Vec<tracing::span::EnteredSpan> = (1..depth)
                    .map(|d| {
                        tracing::info_span!("level", nemo.group.step = Empty, depth = d).entered()
                    })
                    .collect();
                g.bench_with_input(
                    BenchmarkId::from_parameter(wiring.name()),
                    &depth,
                    |b, &d| b.iter(|| one_span(d)),
                );
                // Innermost first, as they were entered.
                for span in ancestors.into_iter().rev() {
                    drop(span);
                }
            });
            built.shutdown();
        }
        g.finish();
    }
}

fn bench_nesting(c: &mut Criterion) {
    for depth in [1_u32, 10, 100] {
        let mut g = c.benchmark_group(format!("nested_{depth}"));
        for wiring in Wiring::ALL {
            let built = build(wiring);
            built.run(|| {
                g.bench_with_input(
                    BenchmarkId::from_parameter(wiring.name()),
                    &depth,
                    |b, &d| b.iter(|| nest(d)),
                )
            });
            built.shutdown();
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = bench_nesting, bench_at_depth
}
criterion_main!(benches);
