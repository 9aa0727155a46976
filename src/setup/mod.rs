//! Setup: [`TelemetryBuilder`] builds the pipelines of one process (its phases, and the
//! one-enabled-setup-per-process guard `INITIALIZED_IN`, are in `phases.rs`; the pipelines
//! they assemble in `pipelines.rs`, from the processors of `crate::queue::processors`);
//! [`Telemetry`] is the handle (`handle.rs`), which shuts them down (`shutdown.rs`, run once
//! through `once.rs`'s `ShutdownOnce`, and `process_exit.rs` for signals, panics and exit).
//! [`Place`] is the process's place in the job and [`Stats`] the handle's counters;
//! `resource.rs` finishes the resource and publishes what child processes inherit.

mod builder;
mod handle;
mod once;
mod phases;
mod pipelines;
mod place;
pub(crate) mod process_exit;
mod resource;
mod shutdown;
mod stats;

pub use builder::{ExportMode, TelemetryBuilder};
pub use handle::Telemetry;
pub use place::Place;
pub use stats::Stats;
