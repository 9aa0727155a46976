//! A data-parallel burn training job traced with nemo-lens: one process per rank trains the
//! same small MLP on its own shard of data generated in code, averaging gradients with
//! burn-collective's all-reduce every step.
//!
//! ```text
//! burn-trainer --rank R --world-size N --master-port P --steps S
//! ```
//!
//! Without the flags, torchrun's `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` are read.
//! Rank 0 hosts burn's global orchestrator on the master port and the job's step barrier on
//! port `P + 1 + 2N`; rank `r` serves its tensors on port `P + 1 + r` in odd steps and
//! `P + 1 + N + r` in even ones (a fresh port per registration: burn binds it again on every
//! registration, and the previous server may still hold it). `--steps 0` trains until SIGTERM
//! or SIGINT.
//!
//! Each step registers with burn-collective, computes, all-reduces the flattened gradients
//! once, finishes the registration and waits at the job's own step barrier (see
//! `step_barrier.rs`: burn's orchestrator needs every rank finished before any registers
//! again).
//!
//! nemo-lens is set up as its README recommends (layer, metrics layer, flight recorder, panic
//! hook, signal handlers); `--wiring none` runs without a subscriber and `--wiring otel-lean`
//! (feature `otel`) with tracing-opentelemetry, for benches/burn_step.sh. The job's spans:
//! `train_step` (group `step`, attributes `step` and `loss`), `forward_backward` (group
//! `forward_backward`), `optimizer_step` (group `optimizer`), `register_step`, `finish_step`
//! and `step_barrier` (group `collective`); burn's own collective spans (`burn_collective::*`, the
//! client's `all_reduce` the training thread waits in) join group `collective` through
//! nemo-lens's default span-group rules.
//!
//! Faults for the stories: `--slow-rank R --slow-factor F` makes rank R compute its forward and
//! backward passes F times per step (real work); `--hang-rank R --hang-at K` stops rank R inside
//! step K's `forward_backward`, so the others block in burn's all-reduce.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use burn::backend::{Autodiff, Flex};
use burn::tensor::activation::relu;
use burn::tensor::{ElementConversion, Tensor, TensorData, TensorPrimitive};
use burn_collective::{
    AllReduceStrategy, CollectiveConfig, PeerId, ReduceOperation, all_reduce, finish_collective,
    register,
};
use burn_communication::Address;
use clap::Parser;
use step_barrier::StepBarrier;
use tracing::instrument;
use wiring::Wiring;

mod step_barrier;
mod wiring;

/// The inner backend: what burn-collective reduces.
type Inner = Flex;
/// The training backend.
type B = Autodiff<Inner>;

const INPUTS: usize = 8;
const HIDDEN: usize = 32;
/// Rows of each rank's shard (one full batch per step).
const ROWS: usize = 256;

#[derive(Parser, Debug)]
#[command(about = "Data-parallel burn training traced with nemo-lens")]
struct Args {
    /// This process's rank.
    #[arg(long, env = "RANK")]
    rank: u32,
    /// Number of ranks.
    #[arg(long, env = "WORLD_SIZE")]
    world_size: u32,
    /// Host of rank 0's orchestrator.
    #[arg(long, env = "MASTER_ADDR", default_value = "127.0.0.1")]
    master_addr: String,
    /// Port of rank 0's orchestrator; the next 2 × world size + 1 ports are the ranks' tensor
    /// ports and rank 0's step barrier.
    #[arg(long, env = "MASTER_PORT")]
    master_port: u16,
    /// Steps to train; 0 trains until SIGTERM or SIGINT.
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// Learning rate of the SGD update.
    #[arg(long, default_value_t = 0.05)]
    lr: f32,
    /// The rank that computes `--slow-factor` times as much per step.
    #[arg(long)]
    slow_rank: Option<u32>,
    /// How many forward and backward passes the slow rank makes per step.
    #[arg(long, default_value_t = 1)]
    slow_factor: u32,
    /// The rank that stops inside step `--hang-at`.
    #[arg(long)]
    hang_rank: Option<u32>,
    /// The step the hung rank stops in.
    #[arg(long)]
    hang_at: Option<u64>,
    /// How the job is traced.
    #[arg(long, value_enum, default_value_t = Wiring::Lens)]
    wiring: Wiring,
    /// lens's spans go to an exporter that counts and discards them (feature `otel`).
    #[arg(long)]
    discard_spans: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let traced = match wiring::install(args.wiring, args.rank, args.world_size, args.discard_spans)
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("burn-trainer: {e}");
            return ExitCode::from(2);
        }
    };

    if args.rank == 0 {
        let port = args.master_port;
        std::thread::Builder::new()
            .name("orchestrator".into())
            .spawn(move || {
                let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
                runtime.block_on(burn_collective::start_global_orchestrator(port));
            })
            .expect("the orchestrator thread");
    }

    let result = train(&args);
    traced.finish(Duration::from_secs(10));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burn-trainer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Deterministic numbers in [-1, 1) (a 64-bit LCG): the same model on every rank from one seed,
/// a different data shard per rank.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn tensor<const D: usize>(&mut self, shape: [usize; D], scale: f32) -> Tensor<B, D> {
        let n = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|_| self.next() * scale).collect();
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }
}

/// The MLP's parameters: `relu(x W1 + b1) W2 + b2`.
struct Mlp {
    w1: Tensor<B, 2>,
    b1: Tensor<B, 1>,
    w2: Tensor<B, 2>,
    b2: Tensor<B, 1>,
}

impl Mlp {
    fn new(rng: &mut Lcg) -> Self {
        Mlp {
            w1: rng.tensor([INPUTS, HIDDEN], 0.5).require_grad(),
            b1: rng.tensor([HIDDEN], 0.0).require_grad(),
            w2: rng.tensor([HIDDEN, 1], 0.3).require_grad(),
            b2: rng.tensor([1], 0.0).require_grad(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = relu(x.matmul(self.w1.clone()) + self.b1.clone().unsqueeze());
        h.matmul(self.w2.clone()) + self.b2.clone().unsqueeze()
    }
}

/// The rank's shard: inputs and the targets of a fixed nonlinear function of them.
fn shard(rank: u32) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let mut rng = Lcg(1000 + rank as u64);
    let x = rng.tensor([ROWS, INPUTS], 1.0);
    let mut teacher = Lcg(7);
    let w = teacher.tensor::<2>([INPUTS, 1], 1.0);
    let y = (x.clone().matmul(w.clone())).tanh() + x.clone().powf_scalar(2.0).mean_dim(1);
    (x, y.detach())
}

#[instrument(skip_all, fields(nemo.group.job, dl.rank = args.rank, dl.world_size = args.world_size))]
fn train(args: &Args) -> Result<(), String> {
    let mut model = Mlp::new(&mut Lcg(42));
    let (x, y) = shard(args.rank);
    let barrier_port = port(args, 1 + 2 * args.world_size)?;
    let mut barrier =
        StepBarrier::join(args.rank, args.world_size, &args.master_addr, barrier_port)?;
    let mut step = 1;
    let mut times = Vec::new();
    while args.steps == 0 || step <= args.steps {
        let config = collective_config(args, step)?;
        let start = Instant::now();
        let loss = train_step(args, step, &mut model, &x, &y, &config, &mut barrier)?;
        times.push(start.elapsed());
        println!("step {step} loss {loss:.6}");
        step += 1;
    }
    print_timing(&mut times);
    Ok(())
}

/// `timing steps N median_ms M mean_ms A` over the steps after the first [`WARM_UP`] (connections
/// and allocations), for benches/burn_step.sh.
fn print_timing(times: &mut Vec<Duration>) {
    if times.len() <= WARM_UP {
        return;
    }
    let mut times = times.split_off(WARM_UP);
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    println!(
        "timing steps {} median_ms {:.3} mean_ms {mean:.3}",
        times.len(),
        ms(times[times.len() / 2])
    );
}

/// Steps left out of the timing.
const WARM_UP: usize = 3;

/// The collective's configuration for `step`: this rank's tensor port alternates between two
/// ports, so a registration never binds the port the previous one's server may still hold.
fn collective_config(args: &Args, step: u64) -> Result<CollectiveConfig, String> {
    let data_port = port(
        args,
        1 + args.rank
            + if step.is_multiple_of(2) {
                args.world_size
            } else {
                0
            },
    )?;
    Ok(CollectiveConfig::default()
        .with_num_devices(1)
        .with_num_nodes(args.world_size)
        .with_global_address(address(&args.master_addr, args.master_port)?)
        .with_node_address(address("127.0.0.1", data_port)?)
        .with_data_service_port(data_port)
        .with_global_all_reduce_strategy(AllReduceStrategy::Centralized)
        .with_local_all_reduce_strategy(AllReduceStrategy::Centralized))
}

fn address(host: &str, port: u16) -> Result<Address, String> {
    Address::from_str(&format!("ws://{host}:{port}")).map_err(|e| format!("{e:?}"))
}

/// The master port plus `offset`.
fn port(args: &Args, offset: u32) -> Result<u16, String> {
    u16::try_from(args.master_port as u32 + offset).map_err(|_| {
        format!(
            "--master-port {} leaves no room for {} ranks' ports",
            args.master_port, args.world_size
        )
    })
}

#[instrument(skip_all, fields(nemo.group.step, step = step, loss = tracing::field::Empty))]
fn train_step(
    args: &Args,
    step: u64,
    model: &mut Mlp,
    x: &Tensor<B, 2>,
    y: &Tensor<B, 2>,
    config: &CollectiveConfig,
    barrier: &mut StepBarrier,
) -> Result<f32, String> {
    // Registered before the compute: a rank slow or stuck in its compute then leaves the others
    // waiting inside burn's all-reduce (burn's global registration waits for every rank).
    register_step(args, config)?;
    let (loss, grads) = forward_backward(args, step, model, x, y);
    let grads = all_reduce_mean(args, grads)?;
    step_barrier(barrier, step)?;
    optimizer_step(model, grads, args.lr);
    tracing::Span::current().record("loss", loss);
    Ok(loss)
}

/// The gradients of w1, b1, w2, b2 flattened into one tensor: one all-reduce per step.
#[instrument(skip_all, fields(nemo.group.forward_backward))]
fn forward_backward(
    args: &Args,
    step: u64,
    model: &Mlp,
    x: &Tensor<B, 2>,
    y: &Tensor<B, 2>,
) -> (f32, Tensor<Inner, 1>) {
    let passes = if args.slow_rank == Some(args.rank) {
        args.slow_factor.max(1)
    } else {
        1
    };
    let mut result = None;
    for _ in 0..passes {
        let diff = model.forward(x.clone()) - y.clone();
        let loss = diff.clone().mul(diff).mean();
        let grads = loss.backward();
        let flat: Vec<Tensor<Inner, 1>> = vec![
            model.w1.grad(&grads).expect("w1's gradient").flatten(0, 1),
            model.b1.grad(&grads).expect("b1's gradient"),
            model.w2.grad(&grads).expect("w2's gradient").flatten(0, 1),
            model.b2.grad(&grads).expect("b2's gradient"),
        ];
        let loss: f32 = loss.into_scalar().elem();
        result = Some((loss, Tensor::cat(flat, 0)));
    }
    if args.hang_rank == Some(args.rank) && args.hang_at == Some(step) {
        // A stuck kernel: this rank never reaches the all-reduce.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    result.expect("at least one pass")
}

/// This rank's one device on its node.
const PEER: PeerId = PeerId(0);

/// Registers this step's collective: burn-collective 0.21 does one operation per registration
/// (its global sync never clears the peers that synced, so a second all-reduce within one
/// registration waits forever), so every step registers, reduces once and finishes.
#[instrument(skip_all, fields(nemo.group.collective))]
fn register_step(args: &Args, config: &CollectiveConfig) -> Result<(), String> {
    if args.world_size == 1 {
        return Ok(());
    }
    register::<Inner>(PEER, Default::default(), config.clone())
        .map_err(|e| format!("register: {e:?}"))
}

/// Averages the flattened gradients over the ranks in one all-reduce and finishes the step's
/// registration.
fn all_reduce_mean(args: &Args, grads: Tensor<Inner, 1>) -> Result<Tensor<Inner, 1>, String> {
    if args.world_size == 1 {
        return Ok(grads);
    }
    let peer = PEER;
    let reduced = all_reduce::<Inner>(peer, grads.into_primitive().tensor(), ReduceOperation::Mean)
        .map_err(|e| format!("all_reduce: {e:?}"))?;
    finish_step()?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(reduced)))
}

/// Ends this step's registration: a round trip to the orchestrator, which burn does not trace
/// (its time would otherwise count as compute).
#[instrument(skip_all, fields(nemo.group.collective))]
fn finish_step() -> Result<(), String> {
    finish_collective::<Inner>(PEER).map_err(|e| format!("finish_collective: {e:?}"))
}

/// Waits until every rank has finished this step's registration (see [`StepBarrier`]).
#[instrument(skip_all, fields(nemo.group.collective))]
fn step_barrier(barrier: &mut StepBarrier, step: u64) -> Result<(), String> {
    barrier.wait(step)
}

#[instrument(skip_all, fields(nemo.group.optimizer))]
fn optimizer_step(model: &mut Mlp, grads: Tensor<Inner, 1>, lr: f32) {
    let sizes = [INPUTS * HIDDEN, HIDDEN, HIDDEN, 1];
    let mut parts = grads.split_with_sizes(sizes.to_vec(), 0).into_iter();
    let mut next = || parts.next().expect("four gradients");
    let update_2 = |p: &Tensor<B, 2>, g: Tensor<Inner, 1>| {
        let g = g.reshape(p.dims());
        Tensor::from_inner(p.clone().inner() - g.mul_scalar(lr)).require_grad()
    };
    let update_1 = |p: &Tensor<B, 1>, g: Tensor<Inner, 1>| {
        Tensor::from_inner(p.clone().inner() - g.mul_scalar(lr)).require_grad()
    };
    model.w1 = update_2(&model.w1, next());
    model.b1 = update_1(&model.b1, next());
    model.w2 = update_2(&model.w2, next());
    model.b2 = update_1(&model.b2, next());
}
