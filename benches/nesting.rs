//! Cost of `depth` nested spans (each created with one field and entered inside its parent),
//! for depth 1, 10 and 100, under each wiring (see `benches/common/mod.rs`), in one run.
//!
//! Run: `cargo bench --bench nesting` (all figures: `benches/run_all.sh`).
//!
//! **This run** (2026-11-30T19:53Z, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM, quiet: load average
//! 1.1-1.2; criterion medians, 1 s warm-up + 3 s measurement), this round's final merge
//! (context activation on: each level's enter attaches a context).
//!
//! | depth | no subscriber | non-exporting | disabled group | lens exported | plain | lens / plain | lean | registry | fmt_sink |
//! |---|---|---|---|---|---|---|---|---|---|
//! | 1 | 3.30 ns | 3.62 ns | 3.34 ns | 486 ns | 1.14 µs | 0.43x | 890 ns | 83.2 ns | 293 ns |
//! | 10 | 22.0 ns | 21.7 ns | 21.6 ns | 6.27 µs | 16.0 µs | 0.39x | 8.88 µs | 1.08 µs | 3.35 µs |
//! | 100 | 188 ns | 186 ns | 206 ns | 64.8 µs | 147 µs | 0.44x | 94.2 µs | 13.7 µs | 37.5 µs |
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
