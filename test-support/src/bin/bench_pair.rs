//! The Rust side of the side-by-side comparison with the Python NeMo Lens
//! (`benches/compare_python.sh` runs both and prints the ratios).
//!
//! ```sh
//! cargo run --release -p nemo-lens-test-support --bin bench_pair -- 200000 export
//! cargo run --release -p nemo-lens-test-support --bin bench_pair -- 200000 noexport
//! ```
//!
//! Same shape as `benches/python/pylens_bench.py`: every iteration opens two nested group-gated
//! spans (`train_step` in group `step` with an `iteration` attribute, and `forward_backward` in
//! group `forward_backward`), `export` on an exporting rank (batch processor, an exporter that
//! counts and drops the spans: the Python side keeps them in memory), `noexport` on a rank the
//! `single_rank` strategy does not choose. Prints the Python script's line:
//! `<mode>: <ns> ns/span over <n> spans; exported=<k>`.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

/// Which rank to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// An exporting rank: every span reaches the exporter.
    Export,
    /// A rank that does not export (`single_rank`, export rank 0, this rank 1 of 2).
    Noexport,
}

/// Per-span cost of two nested group-gated spans per iteration.
#[derive(Parser, Debug)]
struct Args {
    /// Iterations (two spans each).
    #[arg(default_value_t = 100_000)]
    n: u64,
    /// Exporting or non-exporting rank.
    #[arg(value_enum, default_value_t = Mode::Export)]
    mode: Mode,
}

/// Counts the spans it receives and drops them.
#[derive(Debug, Clone, Default)]
struct Counting(Arc<AtomicU64>);

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// One training iteration: `train_step` > `forward_backward`, as the Python
/// `managed_span("step", "train_step", iteration=i)` > `managed_span("forward_backward", ...)`.
#[inline(never)]
fn work(i: u64) {
    let step = tracing::info_span!("train_step", nemo.group.step = Empty, iteration = i);
    let _s = step.enter();
    let fb = tracing::info_span!("forward_backward", nemo.group.forward_backward = Empty);
    let _f = fb.enter();
    black_box(&fb);
}

fn main() -> Result<(), nemo_lens::LensError> {
    let args = Args::parse();
    let exported = Counting::default();
    let mut config = LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.metrics_enabled = false;
    });
    let (rank, world_size) = match args.mode {
        Mode::Export => (0, 1),
        Mode::Noexport => {
            config.export.strategy = "single_rank".into();
            config.export.rank = Some(0);
            (1, 2)
        }
    };
    let telemetry = Telemetry::builder(config)
        .place(Place::rank(rank).of(world_size))
        .span_exporter(exported.clone())
        .build()?;
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .try_init()
        .expect("no other global subscriber");
    for i in 0..2000 {
        work(i);
    }
    let start = Instant::now();
    for i in 0..args.n {
        work(i);
    }
    let elapsed = start.elapsed();
    telemetry.shutdown(Duration::from_secs(30))?;
    let mode = match args.mode {
        Mode::Export => "export",
        Mode::Noexport => "noexport",
    };
    println!(
        "{mode}: {:.1} ns/span over {} spans; exported={}",
        elapsed.as_nanos() as f64 / (2 * args.n) as f64,
        2 * args.n,
        exported.0.load(Ordering::Relaxed)
    );
    Ok(())
}
