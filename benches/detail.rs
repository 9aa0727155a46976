//! Per-step detail capture (`NEMO_LENS_DETAIL_GROUPS`) against exporting every step's detail
//! (`per_step`).
//!
//! * criterion group `detail_span`: what one detail span (group `forward_backward`, one field,
//!   create + enter + exit + close) costs the training thread inside a step of 50 of them,
//!   `exported` (span groups `per_step`, a discarding exporter) against `held_dropped` (the
//!   same spans under detail capture, every step's detail dropped: the slow factor is out of
//!   reach). The step span's own cost, and the decision and the drop at its end, are spread
//!   over its 50 spans in both cases.
//! * the whole process (printed after criterion's output as a table): a simulated job of
//!   `DETAIL_BENCH_STEPS` steps (default 500), 50 detail spans and about 5 ms per step (steps
//!   long beside a sleep's jitter), one step in 50 four times longer, exporting console JSONL to a file: CPU time of the process
//!   (every thread: training, batch worker, exporter) per step, exported bytes per step, the
//!   steps whose detail arrived, and the most bytes of detail held at once.
//!
//! Run: `cargo bench --bench detail`; `DETAIL_BENCH_STEPS=50 cargo bench --bench detail --
//! --warm-up-time 0.1 --measurement-time 0.2` checks it quickly. `benches/run_all.sh` runs it
//! and writes the figures to `docs/performance.md`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use nemo_lens::{LensConfig, Place, Telemetry};
use nemo_lens_test_support::bench::{Built, exporting_config, lens};
use nemo_lens_test_support::console;
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

/// Detail spans per step.
const PER_STEP: u64 = 50;

/// One detail span: create (one field) + enter + exit + close.
#[inline(always)]
fn detail_span(i: u64) {
    let span = tracing::info_span!(
        "forward_backward",
        nemo.group.forward_backward = Empty,
        layer = black_box(i as i64)
    );
    let _e = span.enter();
}

/// The groups and detail settings of a case: `per_step` exports every step's detail; with
/// `detail`, forward/backward and optimizer spans are held and kept only for slow steps
/// (`slow_factor`) and the first.
fn with_detail(config: LensConfig, detail: bool, slow_factor: f64) -> LensConfig {
    config.with(|c| {
        if detail {
            c.groups.span_groups = "default".into();
            c.groups.detail_groups = "forward_backward,optimizer".into();
            c.groups.detail_slow_factor = slow_factor;
        } else {
            c.groups.span_groups = "per_step".into();
        }
    })
}

/// `iters` detail spans in steps of [`PER_STEP`]; the wall time.
fn steps_of_spans(iters: u64) -> Duration {
    let start = Instant::now();
    let mut done = 0;
    while done < iters {
        let step = tracing::info_span!("train_step", nemo.group.step = Empty);
        let _e = step.enter();
        for i in 0..PER_STEP.min(iters - done) {
            detail_span(i);
        }
        done += PER_STEP;
    }
    start.elapsed()
}

fn bench_detail_span(c: &mut Criterion) {
    let mut g = c.benchmark_group("detail_span");
    for (name, detail) in [("exported", false), ("held_dropped", true)] {
        let exported = Arc::default();
        // Out of reach: every step after the first drops its detail.
        let config = with_detail(exporting_config("per_step"), detail, 1000.0);
        let telemetry = lens(config, 0, 1, Arc::clone(&exported));
        let dispatch = Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
        let built = Built::lens(telemetry, dispatch, exported);
        built.run(|| g.bench_function(name, |b| b.iter_custom(steps_of_spans)));
        built.shutdown();
    }
    g.finish();
}

criterion_group!(benches, bench_detail_span);

/// CPU time of the whole process so far (every thread), from `getrusage`.
fn process_cpu() -> Duration {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// What one simulated job gave.
struct JobFigures {
    cpu_per_step: Duration,
    bytes_per_step: u64,
    steps_with_detail: usize,
    peak_held_bytes: usize,
}

/// A simulated job of `steps` steps exporting console JSONL to `path`.
fn job(path: &Path, steps: u64, detail: bool) -> JobFigures {
    let config = with_detail(console::config_to(path), detail, 2.0);
    let telemetry = Telemetry::builder(config)
        .place(Place::rank(0).of(1))
        .allow_reinit_for_testing(true)
        .build()
        .expect("valid bench config");
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    let mut peak_held_bytes = 0;
    let cpu = process_cpu();
    tracing::dispatcher::with_default(&dispatch, || {
        for n in 1..=steps {
            let step = tracing::info_span!("train_step", nemo.group.step = Empty, step = n as i64);
            let _e = step.enter();
            for i in 0..PER_STEP {
                detail_span(i);
            }
            let compute = if n % 50 == 25 { 20 } else { 5 };
            std::thread::sleep(Duration::from_millis(compute));
            peak_held_bytes = peak_held_bytes.max(telemetry.stats().detail_held_bytes);
        }
    });
    telemetry
        .shutdown(Duration::from_secs(30))
        .expect("shutdown");
    let cpu = process_cpu() - cpu;
    let lines = console::read(path);
    let steps_with_detail = lines
        .iter()
        .filter(|l| l["name"] == "train_step")
        .filter(|s| {
            let id = &s["context"]["span_id"];
            lines.iter().any(|l| &l["parent_id"] == id)
        })
        .count();
    JobFigures {
        cpu_per_step: cpu / steps as u32,
        bytes_per_step: std::fs::metadata(path).map_or(0, |m| m.len()) / steps,
        steps_with_detail,
        peak_held_bytes,
    }
}

fn whole_process() {
    let steps: u64 = std::env::var("DETAIL_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let dir = tempfile::tempdir().expect("a temporary directory");
    println!();
    println!(
        "Whole process, {steps} steps of {PER_STEP} detail spans, one step in 50 four times longer:"
    );
    println!();
    println!(
        "| capture | CPU per step | exported bytes per step | steps whose detail was exported | most detail held |"
    );
    println!("|---|---|---|---|---|");
    for (name, detail) in [("per_step", false), ("detail capture", true)] {
        let f = job(&dir.path().join(format!("{detail}.jsonl")), steps, detail);
        println!(
            "| {name} | {:.1} µs | {} | {} of {steps} | {} bytes |",
            f.cpu_per_step.as_secs_f64() * 1e6,
            f.bytes_per_step,
            f.steps_with_detail,
            f.peak_held_bytes
        );
    }
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    whole_process();
}
