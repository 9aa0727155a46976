//! The job's identity as Python NeMo Lens derives it, for a launcher written in Rust: the Slurm
//! attributes, `nv.dl.job.uuid` and `nv.dl.run.uuid`.
//!
//! A rank set up with [`crate::Telemetry::builder`] carries all of them on its resource without
//! calling anything here. A launcher that starts ranks (or a tool that prepares their
//! environment) derives them here and hands them down in `OTEL_RESOURCE_ATTRIBUTES` with
//! [`crate::carrier`]; the ranks then keep the launcher's values.
//!
//! ```
//! use nemo_lens::{carrier, identity};
//! use opentelemetry::KeyValue;
//!
//! let env = |k: &str| std::env::var(k).ok();
//! let mut attrs = identity::slurm_attributes(env);
//! if let Some(run) = identity::run_uuid(env, Some("exp-42")) {
//!     attrs.push(KeyValue::new(nemo_lens::semconv::NV_DL_RUN_UUID, run));
//! }
//! let inherited = std::env::var(carrier::OTEL_RESOURCE_ATTRIBUTES).unwrap_or_default();
//! let value = carrier::extend(&inherited, &attrs, false); // what the launcher was given wins
//! assert!(value.contains("nv.dl.run.uuid="));
//! ```

pub use crate::config::resource::slurm::slurm_attributes;
pub use crate::config::resource::uuids::{job_uuid, run_uuid};
