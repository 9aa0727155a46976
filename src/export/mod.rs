//! Exporters: where finished spans go.
pub mod console;
