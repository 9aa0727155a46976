//! Trace and span ID generation: `nemo_lens::ChaChaIdGenerator` (OS-seeded ChaCha20 per
//! thread, fork-aware) against the SDK's default `RandomIdGenerator`, which draws from a
//! non-cryptographic per-thread generator. A root span draws both IDs, a child span a span ID.
//!
//! Run: `cargo bench --bench ids`, then `python3 benches/report.py` for the tables.
//! `benches/run_all.sh` runs it with the other benches and writes the figures to
//! `docs/performance.md`.
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nemo_lens::ChaChaIdGenerator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

fn bench_ids(c: &mut Criterion) {
    let ours = ChaChaIdGenerator::new();
    let sdk = RandomIdGenerator::default();
    let mut g = c.benchmark_group("span_id");
    g.bench_function("chacha", |b| b.iter(|| black_box(ours.new_span_id())));
    g.bench_function("sdk_random", |b| b.iter(|| black_box(sdk.new_span_id())));
    g.finish();
    let mut g = c.benchmark_group("trace_id");
    g.bench_function("chacha", |b| b.iter(|| black_box(ours.new_trace_id())));
    g.bench_function("sdk_random", |b| b.iter(|| black_box(sdk.new_trace_id())));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = bench_ids
}
criterion_main!(benches);
