//! Setup: [`TelemetryBuilder`] builds the pipelines of one process (its phases are in
//! `build.rs`, the pipelines and processors they assemble in `pipelines.rs` and
//! `processors.rs`); [`Telemetry`] is the handle (`handle.rs`), which shuts them down
//! (`shutdown.rs`, and `process_exit.rs` for signals, panics and exit). `once.rs` holds the
//! one-enabled-setup-per-process guard.

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
