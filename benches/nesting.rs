//! Cost of `depth` nested spans (each created with one field and entered inside its parent),
//! for depth 1, 10 and 100, under each wiring (see `nemo_lens_test_support::bench`), in one run. The
//! floor cases (no subscriber, non-exporting rank, disabled group) include the recursion itself.
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
    targets = bench_nesting
}
criterion_main!(benches);
