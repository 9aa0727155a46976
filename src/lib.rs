//! nemo-lens (WIP skeleton)
pub mod config;
mod error;
pub mod export;
pub mod resource;
pub mod semconv;
pub use config::{ExporterKind, LensConfig};
pub use error::{LensError, Result};
