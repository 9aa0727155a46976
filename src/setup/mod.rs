//! Setup: [`TelemetryBuilder`] builds the pipelines of one process; [`Telemetry`] is the handle.
//!
//! The builder mirrors the Python `setup_telemetry(config, rank, world_size,
//! resource_attributes, span_exporter, metric_reader, export_strategy)`:
//!
//! 1. a second *enabled* setup in one process is an error ([`LensError::AlreadyInitialized`]);
//! 2. an empty `run_id` becomes `SLURM_JOB_ID` or 12 random hex characters;
//! 3. the export strategy decides whether this rank exports (evaluated even when disabled, so an
//!    unknown strategy fails on every rank);
//! 4. disabled (also by `OTEL_SDK_DISABLED=true`; then any rank and world size is accepted),
//!    or enabled on a non-exporting rank: **nothing is built**: no provider, no thread,
//!    no socket, and the layer is inert (every callsite `Interest::never`);
//! 5. exporting: resource, tracer provider (ChaCha IDs, optional rank sampler, extra
//!    processors, then the exporter's batch processor), meter provider (the injected reader, or
//!    a periodic reader every `OTEL_METRIC_EXPORT_INTERVAL` ms, default 10 000, on the
//!    configured exporter; console output shares the span exporter's stream), the W3C
//!    TraceContext + Baggage propagator and the global tracer and meter providers.
//!
//! # Fork
//!
//! A process forked without exec (a data-loader worker) inherits the telemetry of its parent,
//! but not its threads: the batch processor's worker, the gRPC runtime and the HTTP client are
//! gone. In the child, the inherited handle and its layer are therefore inert:
//!
//! * the layer records nothing (one relaxed atomic load per span compares the `pthread_atfork`
//!   generation recorded at setup with the current one; no syscall);
//! * spans the parent had open are neither ended nor truncated nor exported by the child (the
//!   parent exports them once), and the closer's slab is never touched;
//! * [`Telemetry::force_flush`], [`Telemetry::shutdown`] and dropping the handle return at once
//!   (the inherited providers are leaked, never shut down: that would wait for dead threads);
//! * the child may set up its own telemetry (the double-init guard counts per fork generation),
//!   which draws IDs from a freshly seeded stream ([`crate::ids`]).
//!
//! ```
//! use nemo_lens::{LensConfig, Telemetry};
//! use tracing_subscriber::prelude::*;
//!
//! let config = LensConfig::from_env().unwrap();
//! let telemetry = Telemetry::builder(config).rank(0).world_size(1).build().unwrap();
//! let _guard = tracing_subscriber::registry().with(telemetry.layer()).set_default();
//! tracing::info_span!("train").in_scope(|| { /* ... */ });
//! telemetry.shutdown(std::time::Duration::from_secs(5)).unwrap();
//! ```

mod build;
mod builder;
mod handle;
mod once;
mod pipelines;
pub(crate) mod process_exit;
mod processors;
mod shutdown;

pub use builder::TelemetryBuilder;
pub use handle::Telemetry;
