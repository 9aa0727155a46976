//! Cost of `depth` nested spans (each created with one field and entered inside its parent),
//! for depth 1, 10 and 100, under each wiring (see `benches/common/mod.rs`), in one run.
//!
//! Run: `cargo bench --bench nesting` (all figures: `benches/run_all.sh`).
//!
//! **This run** (2026-11-30T17:42Z, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM, **heavily loaded**:
//! load average 6-10 from other developers' builds; criterion medians, 1 s warm-up + 3 s
//! measurement; wall-clock figures move by up to 2x between runs at this load).
//!
//! | depth | no subscriber | non-exporting | disabled group | lens exported | plain | lens / plain | fmt_sink |
//! |---|---|---|---|---|---|---|---|
//! | 1 | 3.33 ns | 2.93 ns | 4.09 ns | 390 ns | 1.19 µs | 0.33x | 300 ns |
//! | 10 | 31.2 ns | 34.9 ns | 42.7 ns | 13.4 µs | 30.8 µs | 0.44x | 7.29 µs |
//! | 100 | 376 ns | 399 ns | 430 ns | 154 µs | 429 µs | 0.36x | 84.4 µs |
//!
//! (The floor cases include the recursion itself: ~4 ns per level.) A child span no longer
//! builds an OpenTelemetry `Context` for its parent on the training thread (the span record
//! keeps the parent's span context; the worker builds the context), and the open spans sit in
//! the registry's extensions as compact records instead of SDK spans. In instructions
//! (callgrind, `benches/spans.rs`), a child of a long-lived span costs 1.25x a root span (the
//! registry alone: 1.31x).
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tracing::field::Empty;

mod common;
use common::{Wiring, build};

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
