//! Setup: [`TelemetryBuilder`] builds the pipelines of one process (its phases are in
//! `build.rs`, the pipelines and processors they assemble in `pipelines.rs` and
//! `processors.rs`); [`Telemetry`] is the handle (`handle.rs`), which shuts them down
//! (`shutdown.rs`, and `process_exit.rs` for signals, panics and exit). `once.rs` holds the
//! one-enabled-setup-per-process guard; [`Place`] is the process's place in the job and [`Stats`]
//! the handle's counters.

mod build;
mod builder;
mod handle;
mod once;
mod pipelines;
mod place;
pub(crate) mod process_exit;
mod processors;
mod shutdown;
mod stats;

pub use builder::{ExportMode, TelemetryBuilder};
pub use handle::Telemetry;
pub use place::Place;
pub use stats::Stats;
