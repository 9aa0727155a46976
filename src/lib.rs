//! nemo-lens (WIP)
#![warn(missing_docs)]
mod closer;
pub mod config;
mod error;
pub mod export;
pub mod filter;
pub mod groups;
pub mod ids;
pub mod layer;
pub mod propagation;
pub mod resource;
pub mod sampling;
pub mod semconv;
mod setup;
mod span_ext;
pub mod strategy;
#[cfg(feature = "testing")]
pub mod testing;

pub use config::{ConfigSources, ExporterKind, LensConfig};
pub use error::{LensError, Result};
pub use filter::LensFilter;
pub use groups::is_span_group_enabled;
pub use layer::LensLayer;
pub use sampling::RankAwareSampler;
pub use setup::{SCOPE_NAME, Telemetry, TelemetryBuilder};
pub use span_ext::LensSpanExt;
