//! # nemo-lens
//!
//! [NVIDIA NeMo Lens](https://docs.nvidia.com/nemo/lens) for Rust training programs: a
//! [`tracing`] layer that exports your `#[instrument]` spans, metrics and logs through
//! OpenTelemetry, with the
//! rank-level export strategies, span groups, resource attributes and compact JSONL output of the
//! Python library, so a job mixing Python and Rust ranks is configured once (the same
//! `NEMO_LENS_*` variables) and read by one set of tools.
//!
//! ## Getting started
//!
//! ```
//! use nemo_lens::{LensConfig, Telemetry};
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
//! let telemetry = Telemetry::builder(config).rank(0).world_size(1).build()?;
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
//! * **[`Telemetry`]** (built by [`TelemetryBuilder`]): the handle. It gives the layer,
//!   [`Telemetry::is_exporting`], a tracer, [`Telemetry::force_flush`] and a bounded, idempotent
//!   [`Telemetry::shutdown`].
//! * **[`LensLayer`]**: the `tracing_subscriber::Layer`; spans become OpenTelemetry spans with
//!   typed attributes, events become span events, errors set an `ERROR` status
//!   ([`layer`] has the mapping table). It composes with any other layer.
//! * **IDs** ([`ids`]): a ChaCha20 generator seeded from the OS per thread, re-seeded after
//!   `fork`, so identically seeded ranks and data-loader workers never share IDs.
//! * **The closer** ([`Telemetry::shutdown`]): spans still open at shutdown are ended innermost
//!   first with `nemo.span.truncated = true` and a `nemo.span.truncated` event.
//! * **Resource** ([`resource`]): `service.name`, `dl.rank`, `nemo.run.id`,
//!   `service.instance.id`, SLURM, Kubernetes and host attributes, as the Python library.
//! * **Exporters** ([`export`]): compact JSONL in the Python field layout (stdout or a per-rank
//!   file), or OTLP.
//! * **Metrics** ([`metrics`]): a meter provider on exporting ranks (periodic export every
//!   `OTEL_METRIC_EXPORT_INTERVAL` ms), Lens's instrument families ([`TrainingMetrics`],
//!   [`InferenceMetrics`], [`RlMetrics`], [`GymMetrics`]), a registry for your own metric groups
//!   ([`register_metric_group`], [`record_metrics`]) and metrics from event fields
//!   ([`Telemetry::metrics_layer`]: `info!(histogram.step_ms = dt)`).
//! * **Logs** ([`logs`]): with `NEMO_LENS_LOGS_ENABLED=1` the same layer bridges events (and
//!   `log` records) into OpenTelemetry log records carrying the ids of their span, filtered by
//!   `NEMO_LENS_LOGS_LEVEL`, never fed the exporters' own records.
//! * **Propagation** ([`propagation`]): W3C TraceContext + Baggage over map carriers, the JSON
//!   payload bytes of the Python NCCL helpers, linked spans ([`LensSpanExt::add_link`]), and a
//!   launcher's `TRACEPARENT` as every rank's parent.
//! * **OTLP** ([`export::otlp`]): gRPC, HTTP/protobuf or HTTP/JSON per signal from the standard
//!   `OTEL_EXPORTER_OTLP_*` variables; gRPC runs on a private runtime, so no Tokio is needed.
//! * **Attribute names** ([`semconv`]): every name of the Python `semconv` module as a constant.
//! * **Backdated spans** ([`emit`]): [`emit_span`] records a completed span from timestamps
//!   taken earlier (clamping and tagging an end before the start).
//! * **Testing** ([`testing`], feature `testing`): capture finished spans in your own tests.
//! * **Reliability**: a bounded batch queue that counts what it drops ([`export::batch`],
//!   [`Telemetry::dropped`]); opt-in panic hook and SIGTERM/SIGINT handlers that truncate open
//!   spans and flush before the process dies ([`exit`]); inert inherited telemetry in a process
//!   forked without exec ([`setup`], *Fork*). README's *Guarantees* lists each promise and its
//!   test.
//!
//! ## Performance
//!
//! Off means off: on a disabled or non-exporting rank, on an unsampled rank, and for a span in
//! a disabled group, [`LensFilter`] answers `Interest::never` once per callsite and a span costs
//! what a disabled `tracing` callsite costs (a few instructions; on a non-exporting rank the same
//! as with no subscriber at all). Non-exporting ranks build no providers, start no threads and
//! open no sockets. An exported span costs about half the same span through a plain
//! `tracing_opentelemetry::layer()` with its default options and a batch processor (0.7-0.9 of
//! a lean one: `benches/peers.rs`), and re-entering a span built once
//! (the per-forward-pass pattern) costs tens of nanoseconds. The README's Performance section
//! has the figures, the targets and `benches/run_all.sh`, which regenerates them all.

#![warn(missing_docs)]

mod closer;
pub mod config;
pub mod emit;
mod error;
pub mod exit;
pub mod export;
pub mod filter;
pub mod groups;
pub mod ids;
pub mod layer;
pub mod logs;
pub mod metrics;
pub mod propagation;
pub mod resource;
pub mod sampling;
pub mod semconv;
pub mod setup;
mod span_ext;
pub mod strategy;
#[cfg(feature = "testing")]
pub mod testing;

pub use config::{ConfigSources, ExporterKind, LensConfig};
pub use emit::{EmitSpan, EpochSeconds, emit_span};
pub use error::{LensError, Result};
pub use export::batch::DropCounts;
pub use filter::LensFilter;
pub use groups::is_span_group_enabled;
pub use layer::LensLayer;
pub use metrics::{
    EventMetricsLayer, GymMetrics, InferenceMetrics, Instruments, MetricKind, MetricSpec,
    RlMetrics, TrainingMetrics, record_metrics, register_metric_group, registered_metric_groups,
    unregister_metric_group,
};
pub use sampling::RankAwareSampler;
pub use setup::{SCOPE_NAME, Telemetry, TelemetryBuilder};
pub use span_ext::LensSpanExt;
