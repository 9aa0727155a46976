//! Cost of `depth` nested spans (each created with one field and entered inside its parent),
//! for depth 1, 10 and 100, under each wiring (see `benches/common/mod.rs`), in one run.
//!
//! Run: `cargo bench --bench nesting` (all figures: `benches/run_all.sh`).
//!
//! **Quiet-machine run** (2026-11-30T01:03Z, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM, nothing
//! else running; `benches/run_all.sh`, criterion medians, 1 s warm-up + 3 s measurement; the
//! exported cases use nemo-lens's own batch span processor). The older "preliminary" runs
//! further down were taken on a loaded machine, with the SDK's batch processor.
//!
//! | depth | lens exported | plain | ratio | non-exporting / no subscriber |
//! |---|---|---|---|---|
//! | 1 | 597 ns | 1.44 µs | 0.41x | 4.10 / 4.24 ns |
//! | 10 | 7.29 µs | 17.0 µs | 0.43x | 26.2 / 28.1 ns |
//! | 100 | 77.8 µs | 175 µs | 0.44x | 232 / 265 ns |
//!
//! Preliminary, machine loaded: 2026-11-30, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM shared with
//! other helpers' `cargo` builds, criterion medians (1 s warm-up, 3 s measurement) of three runs
//! of `benches/run_all.sh`, given as "run 1 / run 2 / run 3". Runs 1 and 2: load average ~3,
//! before the event fix (run 1 also before the second and third span fixes) listed in
//! `benches/spans.rs`; run 3: load average ~1, every fix in. Sub-nanosecond cases are within
//! noise at this load. To be replaced by a quiet-machine run: `benches/run_all.sh` regenerates
//! every figure (tables by `benches/report.py`).
//!
//! | depth | no subscriber | non-exporting | disabled group | lens exported | plain | lens / plain | fmt_sink |
//! |---|---|---|---|---|---|---|---|
//! | 1 | 4.23 / 5.53 / 4.53 ns | 4.25 / 4.51 / 4.20 ns | 4.34 / 5.39 / 4.05 ns | 750 / 632 / 645 ns | 1.74 / 2.53 / 1.44 µs | 0.43x / 0.25x / 0.45x | 431 / 650 / 409 ns |
//! | 10 | 42.4 / 30.5 / 28.4 ns | 30.9 / 39.4 / 26.9 ns | 42.4 / 30.5 / 27.9 ns | 13.2 / 8.84 / 9.62 µs | 21.6 / 15.8 / 34.8 µs | 0.61x / 0.56x / 0.28x | 7.05 / 5.45 / 4.84 µs |
//! | 100 | 402 / 394 / 233 ns | 250 / 290 / 233 ns | 408 / 350 / 233 ns | 125 / 89.1 / 74.0 µs | 202 / 251 / 176 µs | 0.62x / 0.36x / 0.42x | 88.6 / 62.5 / 50.9 µs |
//!
//! (The floor cases include the recursion itself: ~4 ns per level.)
//! In run 1 exported spans cost more per span when nested (1.25 µs at depth 100 vs 0.75 µs at depth
//! 1; plain: 2.0 vs 1.7 µs; run 2: 0.89 vs 0.63 µs, plain 2.5 vs 2.5 µs; run 3: 0.74 vs 0.65 µs,
//! plain 1.8 vs 1.4 µs): each child builds an OpenTelemetry `Context` for its parent (one `Arc`
//! allocation), 100 open SDK spans (~0.5 KB each) sit in the registry's extensions, and the 100
//! span ends arrive at the batch processor in a burst (`memmove` of `SpanData` on both threads is
//! 19 % of cycles at depth 100).
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
