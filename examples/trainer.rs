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
//! SIGTERM/SIGINT handlers ([`nemo_lens::Telemetry::install_signal_handlers`]), so a preempted
//! job (`kill -TERM`, or Ctrl-C on `--steps 0`, which runs until interrupted) still exports its
//! finished spans, and its open ones as truncated (`nemo.span.truncated = true`), and a crash
//! (`--panic-at STEP`) exports everything, the panic on the step's span. With `--catch-panics`
//! the step's panic is caught and training goes on, telemetry with it.
//!
//! With `NEMO_LENS_DETECT_GPU=1` (feature `nvml`) the exporting rank's resource names its GPU
//! (`nv.gpu.*`); with `NEMO_LENS_NVTX=1` (feature `nvtx`) every rank's spans are NVTX ranges:
//!
//! ```sh
//! cargo build --release --features nvtx --example trainer
//! NEMO_LENS_ENABLED=1 NEMO_LENS_NVTX=1 NEMO_LENS_SPAN_GROUPS=per_step \
//!     nsys profile --trace=cuda,nvtx -o trainer target/release/examples/trainer
//! ```
//!
//! With `--barrier-dir DIR`, every step ends its forward/backward pass with an `all_reduce` span
//! (group `collective`) that waits for the other ranks through a file barrier (one file per rank
//! and step in `DIR`), as a real gradient all-reduce does; `--hang-at STEP` makes this rank stop
//! inside its `forward_backward` span at that step, so the others wait in `all_reduce` forever;
//! `--slow-rank R --slow-factor F` makes rank R's `forward_backward` take F times longer, so the
//! others wait for it in every `all_reduce` (a straggler).
//! With `NEMO_LENS_FLIGHT_RECORDER=N` every rank keeps a flight recorder ([`nemo_lens::flight_recorder`]):
//!
//! ```sh
//! export NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console NEMO_LENS_FLIGHT_RECORDER=1024 \
//!        NEMO_LENS_HANG_TIMEOUT=5 NEMO_LENS_DUMP_DIR=dumps
//! for r in 0 1 2 3; do
//!   cargo run --example trainer -- --rank $r --world-size 4 --steps 0 --barrier-dir barrier \
//!       $( [ $r = 2 ] && echo --hang-at 3 ) &
//! done
//! sleep 10; nemo-lens hang dumps/*.jsonl   # names rank 2 in forward_backward at step 3
//! ```
//!
//! The same with `--slow-rank 2` for every rank instead of `--hang-at 3`, then
//! `pkill -USR1 -f examples/trainer` (every rank dumps and trains on) and
//! `nemo-lens straggler dumps/*-signal.jsonl` names rank 2 and what it costs the job per step.
//!
//! With `--megatron` the trainer registers Megatron-LM's span groups and presets
//! ([`nemo_lens::GroupsConfig::MEGATRON_SPAN_GROUPS`]) and names its spans as Megatron does, so
//! `nemo-lens goodput` reports on it: `megatron.startup.model_init`, `megatron.startup.dataloader`,
//! one `megatron.train.iteration` per step and a `megatron.checkpoint.save` per checkpoint (both
//! with `megatron.iteration`), and with `--resume-from N` (a requeued job that reloads
//! checkpoint N) a `megatron.checkpoint.load` and iterations from N + 1 on. A second run that
//! resumes from an earlier checkpoint than the first run reached makes the first run's later
//! iterations redone:
//!
//! ```sh
//! export NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console NEMO_LENS_CONSOLE_PATH='job/lens_rank{rank}.jsonl'
//! cargo run --example trainer -- --megatron --steps 7 --checkpoint-every 4            # stops at 7
//! cargo run --example trainer -- --megatron --steps 10 --checkpoint-every 4 --resume-from 4
//! nemo-lens goodput job     # 5, 6, 7 redone; 9, 10 uncommitted; 8 committed
//! ```
//! With `--slow-steps 7,19` those steps take 4 times `--step-ms`; with
//! `NEMO_LENS_DETAIL_GROUPS=forward_backward,optimizer` only their detail (and the first step's)
//! is exported, every step span saying what was kept (`docs/detail-capture.md`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread::sleep;
use std::time::{Duration, Instant};

use clap::Parser;
use nemo_lens::metrics::TrainingMetrics;
use nemo_lens::{GroupsConfig, LensConfig, Place, Telemetry};
use opentelemetry::KeyValue;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use tracing::instrument;
use tracing_subscriber::prelude::*;

/// Simulated data-parallel training with nemo-lens telemetry.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// This process's rank [default: the launcher's `nv.dl.rank` in OTEL_RESOURCE_ATTRIBUTES,
    /// else 0].
    #[arg(long)]
    rank: Option<u32>,
    /// Number of ranks in the job [default: the launcher's `nv.dl.world_size`, else 1].
    #[arg(long)]
    world_size: Option<u32>,
    /// This process's rank on its node, which picks its GPU for `NEMO_LENS_DETECT_GPU=1`
    /// [default: `LOCAL_RANK`, else `SLURM_LOCALID`, else 0].
    #[arg(long)]
    local_rank: Option<u32>,
    /// This process's role in the job, as `nv.dl.role` (`trainer`, `ckpt_worker`, ...).
    #[arg(long)]
    role: Option<String>,
    /// A resource attribute that applies only where nothing else set the key (repeatable;
    /// an integer value is an integer): `--default-attribute nv.dl.world_size=8`.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_attribute)]
    default_attribute: Vec<(String, String)>,
    /// A job-scoped process (one that outlives attempts): no `nv.dl.run.uuid` on its resource.
    #[arg(long)]
    job_scoped: bool,
    /// Publish the resolved resource in OTEL_RESOURCE_ATTRIBUTES while the telemetry lives, so
    /// `--spawn` (or any process started meanwhile) inherits the job's identity.
    #[arg(long, conflicts_with = "reward_url")]
    publish_resource: bool,
    /// Run `sh -c CMD` after setup and wait for it (a checkpoint worker, a helper script).
    #[arg(long, value_name = "CMD")]
    spawn: Option<String>,
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
    /// Catch a step's panic and go on with the next step, as a job runner that retries does.
    #[arg(long)]
    catch_panics: bool,
    /// Directory of the file barrier of the `all_reduce` span (no `all_reduce` without it).
    #[arg(long)]
    barrier_dir: Option<PathBuf>,
    /// Hang forever inside `forward_backward` in this step (simulates a stuck rank).
    #[arg(long)]
    hang_at: Option<u64>,
    /// Make this rank a straggler: its `forward_backward` takes `--slow-factor` times longer
    /// (with `--barrier-dir`, every other rank waits for it in `all_reduce`).
    #[arg(long, value_name = "RANK")]
    slow_rank: Option<u32>,
    /// How many times longer the `--slow-rank`'s compute takes (a finite number >= 1).
    #[arg(long, default_value_t = 3.0, value_parser = parse_slow_factor)]
    slow_factor: f64,
    /// Steps that take 4 times `--step-ms` (comma-separated, e.g. `7,19`): outliers for
    /// per-step detail capture (`NEMO_LENS_DETAIL_GROUPS`) to keep.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    slow_steps: Vec<u64>,
    /// Ask this reward server (`examples/reward_server.rs`) for a reward once per step, with
    /// the step's trace context in the request headers.
    #[arg(long)]
    reward_url: Option<String>,
    /// Name the spans as Megatron-LM does (`megatron.train.iteration`, ...), with its span
    /// groups registered, so that `nemo-lens goodput` reports on the job.
    #[arg(long)]
    megatron: bool,
    /// Resume from the checkpoint of this step (a requeued job): load it, then run the steps
    /// after it up to `--steps`.
    #[arg(long, value_name = "STEP")]
    resume_from: Option<u64>,
}

fn parse_attribute(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().into(), value.into())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

fn parse_slow_factor(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && (1.0..=1000.0).contains(&f) => Ok(f),
        _ => Err(format!("expected a number from 1 to 1000, got {s:?}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.megatron
        && let Err(e) = nemo_lens::groups::register_span_groups(
            &GroupsConfig::MEGATRON_SPAN_GROUPS,
            &GroupsConfig::MEGATRON_SPAN_PRESETS,
        )
    {
        eprintln!("trainer: {e}");
        return ExitCode::from(2);
    }
    let config = match LensConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("trainer: {e}");
            return ExitCode::from(2);
        }
    };
    let mut place = match args.rank {
        Some(rank) => Place::rank(rank),
        None => Place::default(),
    };
    if let Some(world_size) = args.world_size {
        place = place.of(world_size);
    }
    if let Some(local_rank) = args.local_rank {
        place = place.local_rank(local_rank);
    }
    let defaults = args
        .default_attribute
        .iter()
        .map(|(k, v)| match v.parse::<i64>() {
            Ok(n) => KeyValue::new(k.clone(), n),
            Err(_) => KeyValue::new(k.clone(), v.clone()),
        });
    let mut builder = Telemetry::builder(config)
        .place(place)
        .resource_attribute_defaults(defaults)
        .derive_run_uuid(!args.job_scoped);
    if let Some(role) = &args.role {
        builder = builder.role(role.as_str());
    }
    // SAFETY: no other thread of this program exists yet; the handle is shut down after
    // training (or by the signal thread), when no thread of this program reads the
    // environment (`--reward-url`'s HTTP client, which would, is refused beside this flag).
    let builder = unsafe { builder.publish_resource_attributes(args.publish_resource) };
    let telemetry = match builder.build() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("trainer: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::registry()
        .with(telemetry.layer()) // spans (and, with NEMO_LENS_LOGS_ENABLED=1, log records)
        .with(telemetry.metrics_layer()) // `histogram.*` / `gauge.*` / `counter.*` event fields
        .with(telemetry.recorder_layer()) // the flight recorder (NEMO_LENS_FLIGHT_RECORDER=N)
        .with(telemetry.nvtx_layer()) // NVTX ranges for Nsight Systems (NEMO_LENS_NVTX=1)
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

    if let Some(command) = &args.spawn {
        // The child inherits the environment, with the published identity in it.
        match std::process::Command::new("sh")
            .args(["-c", command])
            .status()
        {
            Ok(status) if !status.success() => eprintln!("trainer: --spawn: {status}"),
            Ok(_) => {}
            Err(e) => eprintln!("trainer: --spawn: {e}"),
        }
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
    if args.megatron {
        megatron_startup(args.resume_from);
    } else if let Some(step) = args.resume_from {
        load_checkpoint(step);
    }
    let mut step = args.resume_from.unwrap_or(0) + 1;
    while args.steps == 0 || step <= args.steps {
        let started = Instant::now();
        let loss = if args.catch_panics {
            let step_result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                iteration(step, args, &mut rng)
            }));
            match step_result {
                Ok(loss) => loss,
                Err(_) => {
                    tracing::warn!(step, "step panicked; going on");
                    step += 1;
                    continue;
                }
            }
        } else {
            iteration(step, args, &mut rng)
        };
        // Metrics: a no-op on ranks that export nothing.
        TrainingMetrics {
            step_duration_s: Some(started.elapsed().as_secs_f64()),
            loss: Some(loss),
            ..Default::default()
        }
        .record(telemetry.instruments());
        tracing::debug!(loss, step, "step finished");
        if args.checkpoint_every > 0 && step.is_multiple_of(args.checkpoint_every) {
            if args.megatron {
                megatron_checkpoint_save(step);
            } else {
                save_checkpoint(step);
            }
        }
        step += 1;
    }
}

/// One training step, in the span of the trainer's vocabulary.
fn iteration(step: u64, args: &Args, rng: &mut ChaCha8Rng) -> f64 {
    if args.megatron {
        tracing::info_span!(
            "megatron.train.iteration",
            nemo.group.step = tracing::field::Empty,
            megatron.iteration = step,
            dl.loss = tracing::field::Empty,
        )
        .in_scope(|| step_body(step, args, rng))
    } else {
        train_step(step, args, rng)
    }
}

#[instrument(skip(args, rng), fields(nemo.group.step, dl.loss = tracing::field::Empty))]
fn train_step(step: u64, args: &Args, rng: &mut ChaCha8Rng) -> f64 {
    step_body(step, args, rng)
}

/// What a step does, in the span of its caller (which records `dl.loss`).
fn step_body(step: u64, args: &Args, rng: &mut ChaCha8Rng) -> f64 {
    let step_ms = if args.slow_steps.contains(&step) {
        args.step_ms * 4
    } else {
        args.step_ms
    };
    let mut compute_ms = step_ms * 2 / 3;
    if args.slow_rank == Some(args.rank.unwrap_or(0)) {
        compute_ms = (compute_ms as f64 * args.slow_factor).round() as u64;
    }
    forward_backward(compute_ms, args.hang_at == Some(step));
    if args.panic_at == Some(step) {
        panic!("simulated failure in step {step}");
    }
    if let Some(dir) = &args.barrier_dir {
        all_reduce(
            step,
            args.rank.unwrap_or(0),
            args.world_size.unwrap_or(1),
            dir,
        );
    }
    if let Some(url) = &args.reward_url {
        ask_reward(url, step);
    }
    optimizer_step(step_ms / 3);
    let loss = 2.0 / (step as f64).sqrt() + (rng.next_u32() % 100) as f64 / 1000.0;
    tracing::Span::current().record("dl.loss", loss);
    loss
}

#[instrument(skip(hang), fields(nemo.group.forward_backward))]
fn forward_backward(ms: u64, hang: bool) {
    sleep(Duration::from_millis(ms));
    if hang {
        // A stuck kernel: never returns, never reaches the collective.
        loop {
            sleep(Duration::from_secs(1));
        }
    }
}

/// A simulated gradient all-reduce: announce this rank's arrival at `step` with a file, then wait
/// until every rank has arrived. Arrival files of step - 2 are removed (every rank has left that
/// barrier once this one is reached), so the directory stays small.
#[instrument(skip(rank, world_size, dir), fields(nemo.group.collective))]
fn all_reduce(step: u64, rank: u32, world_size: u32, dir: &Path) {
    let arrival = |s: u64, r: u32| dir.join(format!("step{s}-rank{r}"));
    if let Err(e) =
        std::fs::create_dir_all(dir).and_then(|_| std::fs::write(arrival(step, rank), b""))
    {
        tracing::error!("barrier: {e}");
        return;
    }
    if step > 2 {
        let _ = std::fs::remove_file(arrival(step - 2, rank));
    }
    while !(0..world_size).all(|r| arrival(step, r).exists()) {
        sleep(Duration::from_millis(2));
    }
}

#[instrument(fields(nemo.group.optimizer))]
fn optimizer_step(ms: u64) {
    sleep(Duration::from_millis(ms));
}

#[instrument(fields(nemo.group.checkpoint))]
fn save_checkpoint(step: u64) {
    checkpoint_body(step);
}

#[instrument(fields(nemo.group.load_checkpoint))]
fn load_checkpoint(step: u64) {
    sleep(Duration::from_millis(2));
}

/// Megatron's start-up: the model, the checkpoint a requeued job resumes from, the data
/// loaders.
fn megatron_startup(resume_from: Option<u64>) {
    tracing::info_span!(
        "megatron.startup.model_init",
        nemo.group.model_init = tracing::field::Empty
    )
    .in_scope(|| sleep(Duration::from_millis(5)));
    if let Some(step) = resume_from {
        tracing::info_span!(
            "megatron.checkpoint.load",
            nemo.group.load_checkpoint = tracing::field::Empty,
            megatron.iteration = step,
        )
        .in_scope(|| sleep(Duration::from_millis(3)));
    }
    tracing::info_span!(
        "megatron.startup.dataloader",
        nemo.group.data_loading = tracing::field::Empty
    )
    .in_scope(|| sleep(Duration::from_millis(2)));
}

/// A checkpoint save as Megatron names it: its iteration commits the steps up to it.
fn megatron_checkpoint_save(step: u64) {
    tracing::info_span!(
        "megatron.checkpoint.save",
        nemo.group.checkpoint = tracing::field::Empty,
        megatron.iteration = step,
    )
    .in_scope(|| checkpoint_body(step));
}

fn checkpoint_body(step: u64) {
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
