//! Cost of one span (create with one field + enter + exit + close) under every wiring of
//! `nemo_lens_test_support::bench`, one subscriber at a time in one process: no subscriber, the lens layer
//! on a non-exporting rank, with the span's group disabled, and exporting (its batch processor, a
//! discarding exporter), `tracing_opentelemetry::layer()` with default options and lean (same
//! processor and exporter), `tracing_subscriber::registry()` alone and `fmt` to `io::sink`.
//!
//! Groups:
//!
//! * `span`: the span, on one thread;
//! * `span_2threads`: the same span from two threads at once (per-thread latency while both run);
//! * `span_reentered`: the candle pattern, one span built once and entered and exited on every
//!   forward pass (also with the lens layer's context activation off);
//! * `span_vs_registry`: the exported lens span against the registry it sits on, as a root span and
//!   as the child of a long-lived span.
//!
//! Run: `cargo bench --bench spans`, then `python3 benches/report.py` for the tables.
//! `benches/run_all.sh` runs it with the other benches and writes the figures to
//! `docs/performance.md`.
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tracing::field::Empty;

use common::{Wiring, build, concurrent};
use nemo_lens_test_support::bench as common;

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
        built.run(|| g.bench_function(wiring.name(), |b| b.iter(one_span)));
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
    // With context activation off too: what activation adds to a re-entry.
    let wirings = Wiring::ALL
        .into_iter()
        .chain([Wiring::LensExportedNoActivation]);
    for wiring in wirings {
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

/// An exported lens span against the `tracing_subscriber::registry()` it sits on, side by side
/// in one run, as a root span and as the child of a
/// long-lived span (every step span of a trainer is one).
fn bench_against_registry(c: &mut Criterion) {
    let mut g = c.benchmark_group("span_vs_registry");
    let child = |g: &mut criterion::BenchmarkGroup<'_, _>, name: &str| {
        let outer = tracing::info_span!("train", nemo.group.step = Empty);
        outer.in_scope(|| g.bench_function(name, |b| b.iter(one_span)));
    };
    tracing::subscriber::with_default(tracing_subscriber::registry(), || {
        g.bench_function("registry_only/root", |b| b.iter(one_span));
        child(&mut g, "registry_only/child");
    });
    let built = build(Wiring::LensExported);
    built.run(|| {
        g.bench_function("lens_exported/root", |b| b.iter(one_span));
        child(&mut g, "lens_exported/child");
    });
    built.shutdown();
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = bench_spans, bench_spans_two_threads, bench_reentered, bench_against_registry
}
criterion_main!(benches);
