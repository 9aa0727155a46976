//! Cost of one span (create with one field + enter + exit + close) under each wiring, in one run:
//! no subscriber, LensLayer on a non-exporting rank, LensLayer with the span's group disabled,
//! LensLayer exporting (batch processor, discarding exporter), the plain tracing-opentelemetry
//! wiring (default options, batch processor, same exporter) and `fmt` to `io::sink`. Also the
//! same span from two threads at once, and the candle pattern (one span built once, entered and
//! exited on every pass).
//!
//! Run: `cargo bench --bench spans` (all figures: `benches/run_all.sh`).
//!
//! **Quiet-machine run** (2026-11-30T01:03Z, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM, nothing
//! else running; `benches/run_all.sh`, criterion medians, 1 s warm-up + 3 s measurement; the
//! exported cases use nemo-lens's own batch span processor). The older "preliminary" runs
//! further down were taken on a loaded machine, with the SDK's batch processor.
//!
//! | `span` case | median | / no subscriber | / plain |
//! |---|---|---|---|
//! | no_subscriber | 0.62 ns | 1 | |
//! | lens_non_exporting_rank | 0.32 ns | 0.51x | |
//! | lens_disabled_group | 0.63 ns | 1.00x | |
//! | lens_exported | 595 ns | | 0.49x |
//! | plain_tracing_opentelemetry | 1.22 µs | | 1 |
//! | fmt_sink | 400 ns | | 0.33x |
//!
//! | `span_2threads` case | median | / plain |
//! |---|---|---|
//! | no_subscriber / non-exporting / disabled group | 2.02 / 1.80 / 2.62 ns | |
//! | lens_exported | 1.04 µs | 0.62x |
//! | plain_tracing_opentelemetry | 1.68 µs | 1 |
//! | fmt_sink | 688 ns | 0.41x |
//!
//! | `span_reentered` case | median | / plain |
//! |---|---|---|
//! | no_subscriber / non-exporting / disabled group | 0.63 / 0.62 / 0.65 ns | |
//! | lens_exported | 13.6 ns | 0.06x |
//! | plain_tracing_opentelemetry | 244 ns | 1 |
//! | fmt_sink | 18.8 ns | 0.08x |
//!
//! Targets on this run: off (non-exporting 0.51x, disabled group 1.00x) <= 1.2x: met. Exported
//! <= 0.5x plain: met (0.49x; stretch 0.3x missed: the plain wiring measured 1.22 µs here
//! against 1.8-2.9 µs on the loaded machine, while lens stays at 570-600 ns). Two threads:
//! 0.62x, missed (two producers and the batch worker on two cores). Callgrind
//! (`benches/instructions.sh`): 4,644 instructions per exported span on the training thread,
//! 12 on a non-exporting rank.
//!
//! Preliminary, machine loaded: 2026-11-30, rustc 1.95.0, 2-vCPU AMD EPYC KVM VM shared with
//! other helpers' `cargo` builds, criterion medians (1 s warm-up, 3 s measurement) of three runs
//! of `benches/run_all.sh`, given as "run 1 / run 2 / run 3". Runs 1 and 2: load average ~3,
//! before the event fix (run 1 also before the second and third span fixes) listed in
//! `benches/spans.rs`; run 3: load average ~1, every fix in. Sub-nanosecond cases are within
//! noise at this load. To be replaced by a quiet-machine run: `benches/run_all.sh` regenerates
//! every figure (tables by `benches/report.py`).
//!
//! `span` (one thread)
//!
//! | case | median | / no subscriber | / plain |
//! |---|---|---|---|
//! | no_subscriber | 0.69 / 0.86 / 0.65 ns | 1 | |
//! | lens_non_exporting_rank | 0.33 / 0.40 / 0.34 ns | 0.48x / 0.46x / 0.52x | |
//! | lens_disabled_group | 0.66 / 0.97 / 0.74 ns | 0.95x / 1.12x / 1.13x | |
//! | lens_exported | 571 / 596 / 582 ns | | 0.32x / 0.20x / 0.26x |
//! | plain_tracing_opentelemetry | 1.77 / 2.93 / 2.27 µs | | 1 |
//! | fmt_sink | 432 / 405 / 397 ns | | 0.24x / 0.14x / 0.17x |
//!
//! `span_2threads` (per-thread latency while both threads run)
//!
//! | case | median | / plain |
//! |---|---|---|
//! | no_subscriber / non-exporting / disabled group | 6.5 / 2.7 / 3.5 ns; 3.7 / 3.8 / 3.5 ns; 3.0 / 2.7 / 3.1 ns | |
//! | lens_exported | 1.57 / 1.25 µs / 972 ns | 0.65x / 0.66x / 0.61x |
//! | plain_tracing_opentelemetry | 2.41 / 1.90 / 1.60 µs | 1 |
//! | fmt_sink | 1.09 µs / 762 / 817 ns | 0.45x / 0.40x / 0.51x |
//!
//! `span_reentered` (enter + exit of a span built once)
//!
//! | case | median | / plain |
//! |---|---|---|
//! | no_subscriber / non-exporting / disabled group | 0.46 / 0.77 / 0.66 ns; 0.72 / 0.69 / 0.72 ns; 0.41 / 0.39 / 0.39 ns | |
//! | lens_exported | 24.3 / 15.2 / 14.2 ns | 0.08x / 0.06x / 0.06x |
//! | plain_tracing_opentelemetry | 292 / 259 / 248 ns | 1 |
//! | fmt_sink | 33.3 / 21.5 / 33.0 ns | 0.11x / 0.08x / 0.13x |
//!
//! Targets:
//!
//! * Non-exporting rank, disabled group <= 1.2x no subscriber: met here (0.46-0.52x,
//!   0.95-1.13x), but at this load the sub-nanosecond cases are noise. Structurally: a
//!   non-exporting rank's level hint is `OFF`, so the macro stops at the global level check
//!   exactly as with no subscriber; a disabled group passes the level check (the rank exports
//!   other spans) and reads the callsite's cached `Interest::never`: one more atomic load and
//!   branch (~0.35 ns), which an earlier quiet run measured as 0.74 ns vs 0.37 ns (2.0x). No
//!   per-layer filter can be cheaper than a disabled `tracing` callsite; if the quiet run shows
//!   2x, that is what bounds it.
//! * Exported span <= 0.5x plain: met on one thread (0.20-0.32x; the plain figure moves between
//!   1.4 and 2.9 µs with the load, lens stays at 570-650 ns). Stretch 0.3x: met in runs 2 and 3
//!   (0.20x, 0.26x), not in run 1 (0.32x). Missed from two threads (0.61-0.66x): both wirings
//!   share the batch processor's channel and the registry's slab; lens adds the closer's slab
//!   lock (one short `parking_lot` lock per span start and end), and the batch thread competes
//!   for the same two cores. The two-thread profile shows no lock contention: three busy
//!   threads (two producers, the batch thread) on two cores, spans dropped at the full queue
//!   (`TrySendError` drops), and the SDK's batch thread copying each 512-span batch
//!   (`split_off(0)` in `export_batch_sync`, 8 % of all cycles).
//!
//! Profile (`perf record -g --call-graph dwarf` on `--profile-time 5 span/lens_exported`, and
//! callgrind on `examples/bench_pair` via `benches/instructions.sh`: ~4,300 instructions per
//! exported span on the training thread; 4,300-4,400 depending on the allocator's state). The SDK
//! builds the span (`build_with_context`: sampler, IDs, `InstrumentationScope` clone, ~700
//! instructions) and ends it (`SpanData`, the batch channel's `try_send`, ~570); the registry
//! (sharded-slab slot, `span_data` lookups, current span, the extension map's insert and remove,
//! the slot's clear) ~1,400; `malloc`/`free` and `memmove` of the large `Span`/`SpanData` structs
//! (7-13 % of cycles, on both threads); `clock_gettime` for the start and end times (6-7 % of
//! cycles). The layer's own code (field recording, the parent's OpenTelemetry `Context` (one `Arc`
//! per child span), the closer's slab) is the rest, a few hundred instructions.
//!
//! Fixed after profiling (instructions per exported span on the training thread, no drops:
//! 5,662 before, 4,493 after the first fix, 4,294 after all three; 4,300-4,400 since, as the
//! allocator's state moves):
//!
//! 1. The log part of `LensLayer` (off by default) registered a `never` interest that turned
//!    every recorded callsite into `sometimes` (an `enabled` call per span and event) and cost a
//!    registry lookup on every enter, exit and close. The re-entered exported span went from
//!    ~96 ns to ~13 ns (the exported span ~700 -> ~620 ns in back-to-back runs, within this
//!    machine's noise).
//! 2. `on_close` goes straight to the span part, past its `Filtered` wrapper, which looked the
//!    span up once more only to check its filter bit.
//! 3. The attribute `Vec` is sized by the fields that carry a value: a span whose only field is
//!    its group allocates none.
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
