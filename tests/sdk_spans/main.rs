//! Spans made through the OpenTelemetry side (feature `tracing-opentelemetry`):
//! `Telemetry::opentelemetry_layer()` as middleware built on `OpenTelemetrySpanExt` meets it,
//! and the closer of SDK spans still open at shutdown or SIGTERM, in real processes.
//!
//! One test binary: its tests run as threads of one process; the closer's scenarios run in
//! children (`nemo_lens_test_support::child`).

mod otel_layer;
mod sdk_closer;
