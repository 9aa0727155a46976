//! A simulated data-parallel trainer instrumented with `#[tracing::instrument]`.
//!
//! ```sh
//! NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console \
//!     cargo run --release --example trainer -- --rank 0 --world-size 1
//! ```
//!
//! prints one JSON line per finished span (the `job` span and `checkpoint` spans with the
//! default span groups; add `NEMO_LENS_SPAN_GROUPS=per_step` for `step`, `forward_backward` and
//! `optimizer`) and one `resource_metrics` line per metric export (`dl.step.duration`,
//! `dl.loss`; every `OTEL_METRIC_EXPORT_INTERVAL` ms and at exit). Configuration comes from the `NEMO_LENS_*` environment variables; a rank the
//! export strategy excludes prints nothing and exits 0. A bad variable prints the error and exits
//! with status 2.
//!
//! It is also the recommended production set-up: after setup it installs the panic hook and the
//! SIGTERM/SIGINT handlers ([`nemo_lens::exit`]), so a preempted job (`kill -TERM`, or Ctrl-C on
//! `--steps 0`, which runs until interrupted) or a crash (`--panic-at STEP`) still exports its
//! finished spans, and its open ones as truncated (`nemo.span.truncated = true`).

use std::process::ExitCode;
use std::thread::sleep;
use std::time::{Duration, Instant};

use clap::Parser;
use nemo_lens::{LensConfig, Telemetry, TrainingMetrics};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use tracing::instrument;
use tracing_subscriber::prelude::*;

/// Simulated data-parallel training with nemo-lens telemetry.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// This process's rank.
    #[arg(long, default_value_t = 0)]
    rank: u32,
    /// Number of ranks in the job.
    #[arg(long, default_value_t = 1)]
    world_size: u32,
    /// Training steps to run (0 = run until interrupted).
    #[arg(long, default_value_t = 5)]
    steps: u64,
    /// Simulated compute per step, in milliseconds.
    #[arg(long, default_value_t = 10)]
    step_ms: u64,
    /// Seed of the trainer's own random generator (seed every rank alike: IDs still differ).
    #[arg(long, default_value_t = 1234)]
    seed: u64,
    /// Save a checkpoint every N steps.
    #[arg(long, default_value_t = 5)]
    checkpoint_every: u64,
    /// Panic in this step (simulates a crash).
    #[arg(long)]
    panic_at: Option<u64>,
    /// Ask this reward server (`examples/reward_server.rs`) for a reward once per step, with
    /// the step's trace context in the request headers.
    #[arg(long)]
    reward_url: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match LensConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("trainer: {e}");
            return ExitCode::from(2);
        }
    };
    let telemetry = match Telemetry::builder(config)
        .rank(args.rank)
        .world_size(args.world_size)
        .build()
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("trainer: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::registry()
        .with(telemetry.layer()) // spans (and, with NEMO_LENS_LOGS_ENABLED=1, log records)
        .with(telemetry.metrics_layer()) // `histogram.*` / `gauge.*` / `counter.*` event fields
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::EnvFilter::new(
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
                )),
        )
        .init();
    // Production set-up: a crash or a preemption still flushes, with open spans truncated.
    telemetry.install_panic_hook();
    if let Err(e) = telemetry.install_signal_handlers() {
        eprintln!("trainer: {e}");
    }

    train(&args, &telemetry);

    if let Err(e) = telemetry.shutdown(Duration::from_secs(10)) {
        eprintln!("trainer: {e}");
    }
    ExitCode::SUCCESS
}

#[instrument(skip_all, fields(nemo.group.job, dl.rank = args.rank, dl.world_size = args.world_size))]
fn train(args: &Args, telemetry: &Telemetry) {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut step = 1;
    while args.steps == 0 || step <= args.steps {
        let started = Instant::now();
        let loss = train_step(step, args, &mut rng);
        // Metrics: a no-op on ranks that export nothing.
        TrainingMetrics {
            step_duration_s: Some(started.elapsed().as_secs_f64()),
            loss: Some(loss),
            ..Default::default()
        }
        .record(telemetry);
        tracing::debug!(loss, step, "step finished");
        if args.checkpoint_every > 0 && step % args.checkpoint_every == 0 {
            save_checkpoint(step);
        }
        step += 1;
    }
}

#[instrument(skip(args, rng), fields(nemo.group.step, dl.loss = tracing::field::Empty))]
fn train_step(step: u64, args: &Args, rng: &mut ChaCha8Rng) -> f64 {
    forward_backward(args.step_ms * 2 / 3);
    if args.panic_at == Some(step) {
        panic!("simulated failure in step {step}");
    }
    if let Some(url) = &args.reward_url {
        ask_reward(url, step);
    }
    optimizer_step(args.step_ms / 3);
    let loss = 2.0 / (step as f64).sqrt() + (rng.next_u32() % 100) as f64 / 1000.0;
    tracing::Span::current().record("dl.loss", loss);
    loss
}

#[instrument(fields(nemo.group.forward_backward))]
fn forward_backward(ms: u64) {
    sleep(Duration::from_millis(ms));
}

#[instrument(fields(nemo.group.optimizer))]
fn optimizer_step(ms: u64) {
    sleep(Duration::from_millis(ms));
}

#[instrument(fields(nemo.group.checkpoint))]
fn save_checkpoint(step: u64) {
    let started = Instant::now();
    sleep(Duration::from_millis(1));
    // A log record (with NEMO_LENS_LOGS_ENABLED=1) and a histogram point, from one event.
    tracing::info!(
        path = %format!("/tmp/ckpt/step{step}"),
        histogram.checkpoint_ms = started.elapsed().as_secs_f64() * 1e3,
        "checkpoint saved"
    );
}

/// Posts this step's rollout to the reward server. The trace context of the current span goes
/// into the headers through the standard OpenTelemetry propagator, as any OpenTelemetry-aware
/// HTTP client middleware would do it: `Context::current()` carries the lens span while it is
/// entered.
fn ask_reward(url: &str, step: u64) {
    let mut headers = std::collections::HashMap::new();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&opentelemetry::Context::current(), &mut headers)
    });
    let client = reqwest::blocking::Client::new();
    let mut request = client.post(url).body(format!("rollout of step {step}"));
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    match request.send().and_then(|r| r.text()) {
        Ok(body) => tracing::debug!(step, %body, "reward"),
        Err(e) => tracing::warn!(step, error = %e, "reward server unreachable"),
    }
}
