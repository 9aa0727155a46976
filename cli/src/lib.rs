//! `nemo-lens`: the command-line tool of NeMo Lens for Rust.
//!
//! * `perfetto` merges per-rank console JSONL into one Chrome Trace Event file ([`perfetto`]);
//! * `summary` prints per-rank span statistics and a straggler report ([`summary`]);
//! * `emit-spans` exports completed spans from epoch-second intervals ([`emit`]);
//! * `goodput` gives NeMo Lens's goodput figures and flame of a Megatron job ([`goodput`]);
//! * `hang` names the stuck rank from flight-recorder dumps ([`hang`]);
//! * `straggler` names the rank the others wait for, and what it costs per step ([`straggler`]);
//! * `set-slurm-resource-attrs` prints the shell line that hands a Slurm job's identity down
//!   through `OTEL_RESOURCE_ATTRIBUTES` ([`slurm_attrs`]).
//!
//! Input files are read by [`input`] (plain, gzip or zstd, compact or pretty-printed records,
//! streamed, bad or oversized records skipped and counted; collector archives split per rank).

mod emit;
mod goodput;
mod hang;
mod input;
mod perfetto;
mod ranges;
mod slurm_attrs;
mod straggler;
mod summary;

/// Entry points for the fuzz targets in `fuzz/` (built only with `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "\
Exit codes:
  0  success (skipped input records are reported on stderr, not an error)
  1  invalid input: emit-spans got a bad --span (\"nothing emitted: invalid span input\")
  2  usage error, an input or output file that cannot be opened or written (any write error,
     stdout included, also a closed stdout; an output that is one of the inputs is refused), an
     input that is not a file or a pipe (a device, a socket, a directory, a FIFO no writer opens
     within 2 s), a reading thread that cannot start, (straggler) no rank with a complete step,
     or (emit-spans) a time before 1970 or after 2554, a bad rank, world size or run id, an
     exporter that cannot be set up or fails to export; set-slurm-resource-attrs:
     --container-image without --stage task; goodput: no trainer file (lens_rank<N>.jsonl[.gz])
  3  hang: a suspect rank was named (an outlier or a rank without a dump);
     straggler: a rank the others wait for was named";

/// Tools for NeMo Lens span files: merge ranks into a Perfetto timeline, find stragglers, emit
/// backdated spans.
#[derive(Debug, Parser)]
#[command(name = "nemo-lens", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Merge per-rank JSONL (plain or .gz) into one Chrome Trace Event JSON file for
    /// ui.perfetto.dev or chrome://tracing.
    #[command(after_help = EXIT_CODES)]
    Perfetto {
        /// Console JSONL files, one or more per rank, or OpenTelemetry Collector archives or
        /// their directories (gzip and zstd detected by content).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output file (Chrome Trace Event JSON).
        #[arg(short, long)]
        output: PathBuf,
        /// Do not draw the progress bar (it is drawn only when stderr is a terminal anyway).
        #[arg(long)]
        no_progress: bool,
        #[command(flatten)]
        read: input::ReadOptions,
        /// Threads: with 2 or more, the input is parsed on a second thread while the first
        /// writes (the output follows the input's order, so more add nothing); 1 does both on
        /// one thread. The output is the same either way. Default: 2 when this process may run
        /// on more than one core.
        #[arg(short = 'j', long = "jobs", value_name = "N")]
        jobs: Option<std::num::NonZeroUsize>,
    },
    /// Per span name and rank: count, total, p50/p90/p99/max duration; then the ranks whose
    /// median is slower than the cross-rank median (stragglers), and the verdict of `straggler`.
    /// The step span (named `step` or `train_step`) is listed first.
    #[command(after_help = EXIT_CODES)]
    Summary {
        /// Console JSONL files or collector archives or their directories (plain, gzip or zstd).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Order of the statistics table.
        #[arg(long, value_enum, default_value_t = GroupBy::Name)]
        group_by: GroupBy,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// A rank is a straggler for a span name when its median exceeds the cross-rank median
        /// by more than this many percent.
        #[arg(long, default_value_t = 10.0, value_parser = summary::parse_threshold)]
        threshold: f64,
        /// Also write a heatmap of step duration by rank (rows) and step (columns) to this SVG
        /// file. The step index is the `dl.step` or `step` attribute, else the order of
        /// occurrence on each rank.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        #[command(flatten)]
        reading: input::Reading,
    },
    /// Which rank the others wait for, among thousands: per rank and step, the time waiting in
    /// collective spans and the rest (compute), from flight-recorder dumps or console JSONL.
    /// The verdict comes first, in a few lines; exit code 3 when it names a suspect.
    #[command(after_help = EXIT_CODES)]
    Straggler {
        /// Flight-recorder dumps (default groups are enough), console JSONL or collector
        /// archives (or their directories) with the step and collective spans, plain, gzip or
        /// zstd, any mix of ranks.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// After the verdict, every rank's medians.
        #[arg(long)]
        detail: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// A suspect waits less (or computes more) than the median rank by more than this
        /// percentage of the median step (or by the ranks' spread, if larger).
        #[arg(long, default_value_t = 10.0, value_parser = summary::parse_threshold)]
        threshold: f64,
        /// Number of ranks, when the input does not carry `dl.world_size` (ranks without data
        /// are listed).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        world_size: Option<i64>,
        /// One more name of the step span (besides `step` and `train_step`, and the group
        /// `step` of a dump). Repeat for each.
        #[arg(long = "step-span", value_name = "NAME")]
        step_spans: Vec<String>,
        /// One more name of a collective span (besides `all_reduce`, `all_gather`,
        /// `reduce_scatter`, `broadcast`, `barrier`, ..., and the group `collective` of a dump).
        /// Repeat for each.
        #[arg(long = "collective-span", value_name = "NAME")]
        collective_spans: Vec<String>,
        #[command(flatten)]
        reading: input::Reading,
    },
    /// Goodput of a Megatron job, with NeMo Lens's model: peak-rate committed compute over the
    /// GPU time, the scheduling x runtime x application factors, lost work (iterations redone
    /// after a requeue or never checkpointed) and the flame of where the time went.
    #[command(after_help = EXIT_CODES)]
    Goodput {
        /// Job directories (their lens_rank<N>.jsonl[.gz], lens_slurm*, lens_ftlauncher*,
        /// *_ckptworker* files, collector archives) or such files.
        #[arg(required = true, value_name = "DIR|FILE")]
        inputs: Vec<PathBuf>,
        /// Print JSON instead of the text report.
        #[arg(long)]
        json: bool,
        /// Also write folded stacks (`path milliseconds` per line) to this file.
        #[arg(long, value_name = "FILE")]
        fold: Option<PathBuf>,
        /// Also write the flame as a self-contained HTML page (click to zoom) to this file.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Order of a node's children in the flame.
        #[arg(long, value_enum, default_value_t = goodput::Sort::Fixed)]
        sort: goodput::Sort,
        #[command(flatten)]
        read: input::ReadOptions,
        #[command(flatten)]
        jobs: input::Jobs,
    },
    /// Emit completed spans from epoch-second intervals through the normal exporter
    /// configuration (NEMO_LENS_EXPORTER, NEMO_LENS_CONSOLE_PATH, OTEL_EXPORTER_OTLP_*,
    /// OTEL_RESOURCE_ATTRIBUTES). All or nothing: any bad --span emits nothing (exit 1).
    #[command(name = "emit-spans", after_help = EXIT_CODES)]
    EmitSpans {
        /// `service.name` of the emitted spans (overrides OTEL_SERVICE_NAME and
        /// OTEL_RESOURCE_ATTRIBUTES).
        #[arg(long)]
        service: String,
        /// `NAME,START,END[,PARENT]`: epoch seconds (decimal, nanosecond precision); PARENT
        /// names another --span (listed before or after). Repeat for each span.
        #[arg(long = "span", value_name = "NAME,START,END[,PARENT]", required = true)]
        spans: Vec<String>,
        #[command(flatten)]
        identity: emit::IdentityArgs,
    },
    /// Print `export OTEL_RESOURCE_ATTRIBUTES=...` with the Slurm job's identity added (typed
    /// slurm.* attributes, nv.dl.job.uuid), for `eval` in a batch script or task. Keys already
    /// in OTEL_RESOURCE_ATTRIBUTES win.
    #[command(name = "set-slurm-resource-attrs", after_help = EXIT_CODES)]
    SetSlurmResourceAttrs {
        /// Where the command runs: `sbatch` (the batch script: adds slurm.head_node.name outside
        /// a step, leaves out the task-local topology) or `task` (each task: adds host.name).
        #[arg(long, value_enum)]
        stage: slurm_attrs::Stage,
        /// Container image to record as nv.dl.launch.container.image (`--stage task` only).
        #[arg(long, value_name = "IMAGE")]
        container_image: Option<String>,
    },
    /// Which rank is stuck, and where: merge flight-recorder dumps (NEMO_LENS_FLIGHT_RECORDER)
    /// of any number of ranks, group ranks by innermost open span and step, name the outliers
    /// and the ranks without a dump. Exit code 3 when it names a suspect.
    #[command(after_help = EXIT_CODES)]
    Hang {
        /// Dump files (`nemo-lens-dump-rank*.jsonl`) or collector archives; the latest dump of
        /// each rank is used.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Number of ranks, when the dumps do not carry `dl.world_size`.
        #[arg(long)]
        world_size: Option<i64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        read: input::ReadOptions,
    },
}

/// Row order of the summary table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GroupBy {
    /// Rows grouped by span name, ranks within.
    Name,
    /// Rows grouped by rank, span names within.
    Rank,
}

/// An error with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    /// 1 (invalid input) or 2 (setup, I/O, export).
    pub code: u8,
    /// What went wrong, with context.
    pub error: anyhow::Error,
}

impl Failure {
    /// Exit code 2.
    pub fn setup(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code: 2,
            error: error.into(),
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Perfetto {
            files,
            output,
            no_progress,
            read,
            jobs,
        } => {
            let threads = input::Jobs { jobs }.threads();
            let outcome = perfetto::run(&files, &output, &read, threads, !no_progress)
                .map_err(Failure::setup)?;
            outcome.report(&output);
            Ok(())
        }
        Command::Summary {
            files,
            group_by,
            json,
            threshold,
            plot,
            reading,
        } => summary::run(&summary::Options {
            files,
            group_by,
            json,
            threshold_percent: threshold,
            plot,
            reading,
        })
        .map_err(Failure::setup),
        Command::Straggler {
            files,
            detail,
            json,
            threshold,
            world_size,
            step_spans,
            collective_spans,
            reading,
        } => {
            let opts = straggler::Options {
                files,
                detail,
                json,
                settings: straggler::Settings {
                    threshold_percent: threshold,
                    world_size,
                },
                names: straggler::SpanNames {
                    step: step_spans,
                    collective: collective_spans,
                },
                reading,
            };
            match straggler::run(&opts).map_err(Failure::setup)? {
                false => Ok(()),
                true => Err(Failure {
                    code: 3,
                    error: anyhow::anyhow!("a straggler was named"),
                }),
            }
        }
        Command::Goodput {
            inputs,
            json,
            fold,
            html,
            sort,
            read,
            jobs,
        } => goodput::run(&goodput::Options {
            inputs,
            json,
            fold,
            html,
            sort,
            read,
            jobs,
        })
        .map_err(Failure::setup),
        Command::EmitSpans {
            service,
            spans,
            identity,
        } => emit::run(&service, &spans, &identity),
        Command::SetSlurmResourceAttrs {
            stage,
            container_image,
        } => slurm_attrs::run(stage, container_image.as_deref()),
        Command::Hang {
            files,
            world_size,
            json,
            read,
        } => match hang::run(&files, world_size, json, &read).map_err(Failure::setup)? {
            false => Ok(()),
            true => Err(Failure {
                code: 3,
                error: anyhow::anyhow!("a suspect rank was named"),
            }),
        },
    }
}

/// The tool's entry point (`main.rs` calls it): parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            eprintln!("error: {error:#}");
            ExitCode::from(code)
        }
    }
}
