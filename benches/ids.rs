//! RESULTS-PLACEHOLDER
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nemo_lens::ids::ChaChaIdGenerator;
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
