//! Console JSONL export to a real file: the `ConsoleSpanExporter` alone on one thread
//! (criterion, batches of 512 spans made by the lens layer), then the whole pipeline (lens
//! layer, nemo-lens's batch processor with its defaults: queue 2048, batch 512, exporter `console`
//! with `console_path`) with the producer unthrottled and held to 500,000 spans/s for 3 s each;
//! written spans are the lines in the file after shutdown, dropped = produced - written (every
//! dropped span is counted and reported, never waited for).
//!
//! Run: `cargo bench --bench console` (the pipeline runs print one line each;
//! `python3 benches/report.py` prints the exporter's table). `benches/run_all.sh` runs it with the
//! other benches and writes the figures to `docs/performance.md`.
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
use nemo_lens::testing::SpanCapture;
use nemo_lens::{ExporterKind, LensConfig, Telemetry};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing_subscriber::prelude::*;

use common::{produce, training_span};
use nemo_lens_test_support::bench as common;

/// The SDK's default `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: what the batch processor hands over.
const BATCH: usize = 512;

/// Polls an export future to completion (the console exporter never waits).
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// `BATCH` real spans made by the lens layer, and the resource the pipeline would give the
/// exporter.
fn sample_batch() -> (Vec<SpanData>, opentelemetry_sdk::Resource) {
    let capture = SpanCapture::new();
    capture.in_scope(|| {
        for step in 0..BATCH as i64 {
            training_span(step);
        }
    });
    let resource = capture.telemetry().resource().expect("exporting").clone();
    (capture.finish(), resource)
}

/// One exporter thread writing batches of 512 spans to a file: the ceiling of the console path.
fn bench_exporter(c: &mut Criterion) {
    let (batch, resource) = sample_batch();
    assert_eq!(batch.len(), BATCH);
    let dir = tempfile::tempdir().expect("temp dir");
    let template = dir.path().join("spans-rank{rank}.jsonl");
    let mut exporter = ConsoleSpanExporter::new(
        ConsoleWriter::to_path(template.to_str().expect("utf-8 path"), 0).expect("file"),
    );
    exporter.set_resource(&resource);
    let path = exporter.path().expect("file target").to_path_buf();
    let mut g = c.benchmark_group("console_export");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("batch_512_to_file", |b| {
        b.iter_batched(
            || batch.clone(),
            |batch| block_on(exporter.export(black_box(batch))).expect("export"),
            BatchSize::LargeInput,
        );
        // Keep the temp file small between samples.
        std::fs::File::create(&path).expect("truncate");
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_exporter
}

/// What one end-to-end run produced and wrote.
struct Run {
    produced: u64,
    written: u64,
    produce_secs: f64,
    total_secs: f64,
}

/// Producer on this thread through the lens layer (exporter `console`, `console_path` set,
/// nemo-lens's batch processor with its defaults: queue 2048, batch 512) for `duration`, at most
/// `rate` spans/s (`None`: as fast as it can). Counts the lines in the file after shutdown.
fn end_to_end(duration: Duration, rate: Option<f64>) -> Run {
    let dir = tempfile::tempdir().expect("temp dir");
    let template = dir.path().join("spans-rank{rank}.jsonl");
    let telemetry = Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.metrics_enabled = false;
        c.export.exporter = ExporterKind::Console;
        c.export.console_path = Some(template.to_str().expect("utf-8 path").into());
    }))
    .allow_reinit_for_testing(true)
    .build()
    .expect("console telemetry");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let start = Instant::now();
    let (produced, produce_secs) =
        tracing::subscriber::with_default(subscriber, || produce(duration, rate, training_span));
    telemetry
        .shutdown(Duration::from_secs(60))
        .expect("shutdown");
    let total_secs = start.elapsed().as_secs_f64();
    let text = std::fs::read(dir.path().join("spans-rank0.jsonl")).expect("span file");
    let written = text.iter().filter(|&&b| b == b'\n').count() as u64;
    Run {
        produced,
        written,
        produce_secs,
        total_secs,
    }
}

fn report(label: &str, run: &Run) {
    println!(
        "{label}: produced {} spans in {:.2} s ({:.0} spans/s); written {} ({:.0} spans/s to shutdown); dropped {}",
        run.produced,
        run.produce_secs,
        run.produced as f64 / run.produce_secs,
        run.written,
        run.written as f64 / run.total_secs,
        run.produced - run.written,
    );
}

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    // Criterion's `--list` / `--test` modes (cargo test --benches) must stay quick.
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    report(
        "console_sustained (producer unthrottled, 3 s)",
        &end_to_end(Duration::from_secs(3), None),
    );
    report(
        "console_500k (producer held to 500,000 spans/s, 3 s)",
        &end_to_end(Duration::from_secs(3), Some(500_000.0)),
    );
}
