//! Cost of one span (create with one field + enter + exit + close) under each wiring, in one run:
//! no subscriber, LensLayer on a non-exporting rank, LensLayer with the span's group disabled,
//! LensLayer exporting (batch processor, discarding exporter), the plain tracing-opentelemetry
//! wiring (default options, batch processor, same exporter) and `fmt` to `io::sink`. Also the
//! same span from two threads at once, the candle pattern (one span built once, entered and
//! exited on every pass), and `span_vs_registry`: the exported span against
//! `tracing_subscriber::registry()` alone, as a root span and as the child of a long-lived span.
//!
//! Run: `cargo bench --bench spans` (all figures: `benches/run_all.sh`).
//!
//! **This run** (2026-11-30T19:53Z, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM, quiet: load average
//! 1.1-1.2; criterion medians, 1 s warm-up + 3 s measurement; `python3 benches/report.py`),
//! the code of this round's final merge (context activation on, SDK-span closer, trace flags).
//!
//! | case | median |
//! |---|---|
//! | `span/` no_subscriber / non-exporting rank / disabled group | 0.27 / 0.27 / 0.56 ns |
//! | `span/lens_exported` | 495 ns |
//! | `span/plain_tracing_opentelemetry` / lean | 1.13 µs / 752 ns (lens: 0.44x / 0.66x) |
//! | `span/registry_only` / `fmt_sink` | 80.3 ns / 293 ns |
//! | `span_2threads/lens_exported` (per thread) | 909 ns (1.84x one thread) |
//! | `span_2threads/plain_tracing_opentelemetry` / lean | 1.56 µs (1.38x) / 1.25 µs (1.66x) |
//! | `span_2threads/registry_only` | 233 ns (2.90x one thread) |
//! | `span_reentered/lens_exported` / plain / lean / registry / fmt | 109 ns / 243 ns / 135 ns / 10.6 ns / 15.1 ns |
//! | `span_vs_registry/registry_only` root / child | 126 ns (bimodal: 80-232 ns) / 119 ns |
//! | `span_vs_registry/lens_exported` root / child | 513 ns / 641 ns |
//!
//! Two threads: on this 2-core VM the two producers share the cores with the batch worker (which
//! now builds the SDK spans), and even the registry alone costs 2.9x per thread; the 1.3x
//! target is **missed** (1.84x). The re-entered span (built once, entered on every pass, the
//! candle pattern) costs 109 ns since context activation (issue 12): each enter attaches an
//! OpenTelemetry `Context` (an allocation), each exit detaches it; it was 23 ns on the
//! 17:34Z run before activation. `TelemetryBuilder::context_activation(false)` returns to that
//! where no OpenTelemetry-API code needs the current context.
//!
//! The instruction counts below come from the 17:34Z run, **before** context activation
//! (about +560 instructions per enter/exit pair) and the SDK-span closer; the current counts
//! per wiring are in the `benches/peers.rs` header (`bash benches/instructions.sh`): lens
//! exported 3,907 root / 4,609 child, 3,337 / 4,041 with activation off.
//!
//! **Instructions on the training thread** (callgrind, load-independent;
//! `benches/instructions.sh` for `bench_pair`, and the same method on one span of this bench's
//! shape, root or child of a long-lived span, discarding exporter, 20,000 spans):
//!
//! | | before (SDK span per span) | after (span record) | registry alone |
//! |---|---|---|---|
//! | `bench_pair` (two nested group spans), per span (`benches/instructions.sh`) | 4,592 | 3,040-3,210 (*) | |
//! | root span | 4,274 | 2,741 | 733 |
//! | child span | 5,092 | 3,432 | 957 |
//! | event in a span (message + one field) | 1,779 | 1,594 | |
//! | all threads, `bench_pair`, per span | 5,206 | 5,395 | |
//!
//! (*) Over six runs: the training thread allocates a span's state only when the worker has not
//! handed an emptied one back yet, and under valgrind (one thread at a time) how often it has
//! varies from run to run.
//!
//! Targets (issue 13): exported span <= 2x registry alone: **missed** (3.7x root, 3.6x child in
//! instructions). Child <= 1.1x root: **missed** (1.25x; the registry alone is 1.31x). <= 2,000
//! instructions per span: **missed** (3,040-3,210). Two threads <= 1.3x one: **missed** at this load
//! (1.38x). Event <= 150 ns: not resolvable at this load (`benches/events.rs`: 480 ns here,
//! against 514 ns for the old layer in the same run and 1.44-1.84 µs for `fmt`).
//!
//! Where the 2,741 instructions of a root span go now (callgrind, inclusive): the registry's
//! own work ~730 (slot, current span, `span_data` lookups, enter/exit, the slot's clear); the
//! extension map's insert and remove ~315 (a hash map and a `Box` per span, inside
//! `tracing-subscriber`); ids from the ChaCha stream and the suppression/context thread-locals
//! ~225; reading the field into the record ~185; the open-span table (closer) lock, insert and
//! remove ~150; the queue push ~95; two `clock_gettime` ~55; the record's state (reused from
//! the worker's spare queue, restarted in place; a fresh allocation when none is spare) ~100;
//! the rest is the layer's own bookkeeping (`Filtered` checks, parent lookup, `SpanContext`).
//! The SDK span (`build_with_context`, `SpanData`, processors, ~2,300 instructions) now runs on
//! the batch worker: the training thread is 34 % cheaper, the process as a whole is not (all
//! threads: +4 %), so on this 2-core VM, where the worker competes for the same cores, the
//! wall-clock gain is small; it is a gain where the worker has a core of its own. Left on the
//! training thread beyond the registry: the extension map (~315, inside `tracing-subscriber`),
//! the open-span table (~150: per-thread lists would remove the shared lock), the ChaCha ids
//! (Python parity) and the queue push; 2,000 per exported span is not reachable with a
//! per-span extension on top of a registry that costs 733-957 by itself.
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

/// The issue-13 targets, side by side in one run: an exported lens span against the
/// `tracing_subscriber::registry()` it sits on, as a root span and as the child of a
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
