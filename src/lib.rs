//! # nemo-lens
//!
//! [NVIDIA NeMo Lens](https://docs.nvidia.com/nemo/lens) for Rust training programs: a
//! [`tracing`] layer that exports your `#[instrument]` spans, metrics and logs through
//! OpenTelemetry, with the
//! rank-level export strategies, span groups, resource attributes and compact JSONL output of the
//! Python library, so a job mixing Python and Rust ranks is configured once (the same
//! `NEMO_LENS_*` variables) and read by one set of tools.
//!
//! ## In libraries
//!
//! A library (a model crate, a data loader, a communication wrapper) depends on [`tracing`]
//! only and never sets anything up:
//!
//! * instrument with `#[tracing::instrument]` and `tracing::info_span!`, as for any subscriber;
//! * name the span's [group](groups) with a `nemo.group.<group>` field (register your own
//!   groups with [`groups::register_span_groups`]), so an application switches a whole
//!   family of spans on or off with `NEMO_LENS_SPAN_GROUPS`, at the cost of a disabled
//!   callsite when it is off;
//! * use the attribute names of [`semconv`] (`dl.step`, `dl.loss`, …), so that one set of
//!   dashboards reads Python and Rust ranks alike;
//! * never build a [`Telemetry`], install a subscriber or touch the global providers: that is
//!   the application's choice.
//!
//! ```
//! #[tracing::instrument(skip_all, fields(nemo.group.forward_backward, dl.micro_batch = mb))]
//! pub fn forward_backward(mb: u64) {
//!     tracing::debug!(tokens = 4096, "micro-batch done");
//! }
//! # forward_backward(0);
//! ```
//!
//! ## In applications
//!
//! The training binary builds one [`Telemetry`] at start-up from the job's environment, adds
//! [`Telemetry::layer`] to its subscriber, and calls [`Telemetry::shutdown`] on the way out
//! (opt in to [`Telemetry::install_signal_handlers`] and [`Telemetry::install_panic_hook`] so
//! that SIGTERM and panics truncate and flush too):
//!
//! ```
//! use nemo_lens::{LensConfig, Place, Telemetry};
//! use tracing_subscriber::prelude::*;
//!
//! #[tracing::instrument(fields(nemo.group.step))]
//! fn train_step(step: i64) {
//!     tracing::info!(loss = 0.25, "step done");
//! }
//!
//! # fn main() -> Result<(), nemo_lens::LensError> {
//! // NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console NEMO_LENS_SPAN_GROUPS=per_step ...
//! let config = LensConfig::from_env()?;
//! let telemetry = Telemetry::builder(config).place(Place::rank(0).of(1)).build()?;
//! tracing_subscriber::registry()
//!     .with(telemetry.layer())                     // next to fmt, EnvFilter, ...
//!     .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
//!     .try_init()
//!     .ok();
//! for step in 0..3 {
//!     train_step(step);
//! }
//! telemetry.shutdown(std::time::Duration::from_secs(5))?; // ends open spans, flushes
//! # Ok(())
//! # }
//! ```
//!
//! `examples/trainer.rs` is a complete simulated data-parallel trainer.
//!
//! ## Key concepts
//!
//! * **[`LensConfig`]**: every field of the Python `NemoLensConfig`, read by
//!   [`LensConfig::from_env`] with the same variables and parsing rules. Bad values are typed
//!   [`LensError`]s that name the variable and the accepted values.
//! * **Export strategies** ([`strategy`]): which ranks export. `single_rank` (the last rank, by
//!   default), `all_ranks`, `sampled` (the Python md5 rule, bit for bit) and
//!   `first_rank_per_node`, plus your own by name. Decided once, at setup.
//! * **Span groups** ([`groups`]): coarse on/off switches per instrumentation family. A span
//!   declares its group with a `nemo.group.<group>` field; `NEMO_LENS_SPAN_GROUPS` (`default`,
//!   `per_step`, `all`, or names) enables them.
//! * **[`Telemetry`]** (built by [`TelemetryBuilder`]): the handle. It gives the layers,
//!   [`Telemetry::is_exporting`], a tracer, [`Telemetry::force_flush`] and a bounded, idempotent
//!   [`Telemetry::shutdown`].
//! * **[`LensLayer`]**: the `tracing_subscriber::Layer`; spans become OpenTelemetry spans with
//!   typed attributes, events become span events, errors set an `ERROR` status (the
//!   [`LensLayer`] docs have the mapping table). It composes with any other layer.
//! * **IDs** ([`ChaChaIdGenerator`]): a ChaCha20 generator seeded from the OS per thread,
//!   re-seeded after `fork`, so identically seeded ranks and data-loader workers never share IDs.
//! * **The closer** ([`Telemetry::shutdown`]): spans still open at shutdown are ended innermost
//!   first with `nemo.span.truncated = true` and a `nemo.span.truncated` event.
//! * **Resource** ([`Telemetry::resource`]): `service.name`, `nv.dl.rank` (and 0.1.0's
//!   `dl.rank`), `nemo.run.id`, `service.instance.id`, the job's identity (Slurm attributes,
//!   `nv.dl.job.uuid`, `nv.dl.run.uuid`), Kubernetes and host attributes, as the Python library.
//! * **Identity** ([`identity`]) and **carrier** ([`carrier`]): a launcher written in Rust
//!   derives the job's identity as Python does and hands it to its ranks in
//!   `OTEL_RESOURCE_ATTRIBUTES`, read and extended byte for byte; the ranks keep the
//!   launcher's values.
//! * **Exporters** ([`export`]): compact JSONL in the Python field layout (stdout or a per-rank
//!   file), or OTLP over gRPC, HTTP/protobuf or HTTP/JSON.
//! * **Metrics** ([`metrics`]): Lens's instrument families, a registry for your own metric
//!   groups and metrics from event fields ([`Telemetry::metrics_layer`]).
//! * **Logs**: with `NEMO_LENS_LOGS_ENABLED=1` the same layer bridges events (and `log`
//!   records) into OpenTelemetry log records carrying the ids of their span.
//! * **Propagation** ([`propagation`]): W3C TraceContext and Baggage across ranks and
//!   processes, linked spans ([`LensSpanExt`]), a launcher's `TRACEPARENT` as every rank's parent.
//! * **Attribute names** ([`semconv`]): every name of the Python `semconv` module as a constant.
//! * **Backdated spans**: [`EmitSpan`] records a completed span from timestamps taken earlier.
//! * **Flight recorder** ([`flight_recorder`]): every enabled rank, exporting or not, keeps its
//!   last spans of a few groups in fixed memory and dumps them on `SIGUSR1` or when it hangs.
//! * **Testing** ([`testing`], feature `testing`): capture finished spans in your own tests.
//! * **On the GPU** (features `nvml`, `nvtx`): `NEMO_LENS_DETECT_GPU=1` names the exporting
//!   rank's GPU in its resource (`nv.gpu.uuid`, …, read through NVML, the key to DCGM's GPU
//!   metrics); `NEMO_LENS_NVTX=1` makes spans NVTX ranges in Nsight Systems (an [`NvtxLayer`]
//!   from [`Telemetry::nvtx_layer`]). `docs/gpu.md` shows both.
//!
//! ## Where a span goes
//!
//! On the training thread, the `tracing` callsite asks the layer's per-layer filter
//! once whether it records at all; the layer keeps a compact record of each recorded span and,
//! when the span closes, pushes it into a bounded queue. The queue's worker thread turns records
//! into OpenTelemetry spans and hands them to the exporter (console or OTLP). The source tree
//! follows the same path, `layer/` → `record/` → `queue/` → `export/`: the layer writes records
//! (`record/`) and pushes them into the queue (`queue/`, where the span processors run), whose
//! worker hands them to the exporters (`export/`). The dependencies run one way: the layer
//! uses the record and the queue, the queue uses the record and the exporters, and neither
//! the record nor the exporters use another part of the path.
//!
//! ## Performance
//!
//! Off means off: on a disabled or non-exporting rank, on an unsampled rank, and for a span in a
//! disabled group, the layer's per-layer filter answers `Interest::never` once per callsite and
//! a span costs what a disabled `tracing` callsite costs. Non-exporting ranks build no providers,
//! start no threads and open no sockets. On an exporting rank the training thread keeps a
//! compact record and the export worker turns it into the exporter's span; the queues between
//! them are bounded in items and bytes, never block, and count what they drop
//! ([`Telemetry::stats`]). Each enter of a span attaches its OpenTelemetry context (built at
//! its first enter), which [`TelemetryBuilder::context_activation`]`(false)` turns off.
//! `docs/performance.md` has both figures, the training thread's and the whole process's,
//! beside the `tracing` registry alone and tracing-opentelemetry.
//!
//! ## Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `otlp-grpc` | yes | OTLP over gRPC (tonic, and a private one-thread Tokio runtime) |
//! | `otlp-http` | yes | OTLP over HTTP/protobuf and HTTP/JSON (a hyper client of nemo-lens's own, on the same runtime) |
//! | `tracing-opentelemetry` | no | [`Telemetry::opentelemetry_layer`]: tracing-opentelemetry's layer on the lens tracer |
//! | `testing` | no | [`testing`]: capture finished spans in your tests |
//! | `nvml` | no | `nv.gpu.*` resource attributes from NVML (`libnvidia-ml.so.1`, loaded at run time) |
//! | `nvtx` | no | [`Telemetry::nvtx_layer`]: spans as NVTX ranges (needs libclang to build) |
//!
//! With `default-features = false` the crate exports to the console only (JSONL), with the
//! fewest dependencies; `NEMO_LENS_EXPORTER=otlp` is then a setup error on the exporting rank
//! that names the missing feature.
//!
//! ## Supported Rust versions
//!
//! The minimum supported Rust version is 1.88 (`let` chains), as `rust-version` in
//! `Cargo.toml` says; raising it is a minor-version change.

#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The modules in dependency order: each uses only modules above it (`.ci/deps.py` checks this
// for the folders and files of src/).
//
// Leaves, used anywhere: errors, ids, attribute names, Python's JSON text (`pyjson`),
// approximate sizes (`size`), a value as an error message shows it (`text`), and work bounded
// by a deadline on a thread of its own (`bounded`).
mod bounded;
mod error;
mod ids;
mod overwrite;
mod pyjson;
pub mod semconv;
mod size;
mod text;

// The `OTEL_RESOURCE_ATTRIBUTES` codec, what the job asked for, who the job is, and which ranks
// and span groups record (decided once, at setup).
pub mod carrier;
mod config;
pub mod identity;
mod rank;

// The path of a span, from the record back to the layer that writes it:
// the record, the table of open records, and the record's conversion to an SDK span;
mod record;
// the exporters, which put spans (and metrics and logs) on the wire (`export/` uses only
// leaves and `config`);
pub mod export;
// the bounded queue, whose worker thread builds the SDK spans and runs the span processors;
mod queue;
// the layer, on the training thread, which keeps a compact record of each span it records and
// pushes it into the queue when the span closes.
mod layer;

// Beside the span path: spans from timestamps, the flight recorder, the GPU's identity and NVTX
// ranges, metrics, propagation and test capture.
mod backdated;
pub mod flight_recorder;
mod gpu;
pub mod metrics;
pub mod propagation;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

// On top: the setup that builds it all and shuts it down.
mod setup;

/// Entry points for the fuzz targets in `fuzz/` (built only with `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;

pub use backdated::{EmitSpan, EpochSeconds};
pub use config::{ExportConfig, ExporterKind, GroupsConfig, IdentityConfig, LensConfig};
pub use error::{LensError, Result};
pub use gpu::nvtx::NvtxLayer;
pub use ids::ChaChaIdGenerator;
pub use layer::LensLayer;
pub use layer::hooks::SetParentError;
pub use layer::span_ext::LensSpanExt;
pub use overwrite::Overwrite;
pub use rank::RankAwareSampler;
pub use rank::{groups, strategy};
pub use setup::{ExportMode, Place, Stats, Telemetry, TelemetryBuilder};

/// The instrumentation scope of spans created by the lens layer and by [`Telemetry::tracer`].
pub(crate) const SCOPE_NAME: &str = "nemo.lens";

// README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The docs/ pages' examples are compiled and run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../docs/api.md")]
mod api_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/at-scale.md")]
mod at_scale_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
mod cli_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/configuration.md")]
mod configuration_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/detail-capture.md")]
mod detail_capture_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/exporting.md")]
mod exporting_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/features.md")]
mod features_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/frameworks.md")]
mod frameworks_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/gpu.md")]
mod gpu_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guarantees.md")]
mod guarantees_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/hangs.md")]
mod hangs_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/interop.md")]
mod interop_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/logs.md")]
mod logs_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/metrics.md")]
mod metrics_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/performance.md")]
mod performance_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/propagation.md")]
mod propagation_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/python-compatibility.md")]
mod python_compatibility_md {}
#[cfg(doctest)]
#[doc = include_str!("../docs/stragglers.md")]
mod stragglers_md {}
