//! Decisions once per callsite: with the log bridge off (the default), a span or event the lens
//! layer records has the callsite interest `always`, so `tracing` never asks the subscriber's
//! `enabled` per span or event; a span of a disabled group is `never`.
//!
//! `Dispatch::register_callsite` returns the interest the registry merged from its per-layer
//! filters for that callsite: the value `tracing` caches.

use nemo_lens::{LensConfig, Place, Telemetry};
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_core::Metadata;
use tracing_subscriber::prelude::*;

fn telemetry(span_groups: &str, logs_enabled: bool) -> Telemetry {
    Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = span_groups.into();
        c.metrics_enabled = false;
        c.logs_enabled = logs_enabled;
    }))
    .span_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
    .log_exporter(opentelemetry_sdk::logs::InMemoryLogExporter::default())
    .allow_reinit_for_testing(true)
    .build()
    .unwrap()
}

fn step_span() -> tracing::Span {
    tracing::info_span!("step", nemo.group.step = Empty, step = 1_i64)
}

fn plain_span() -> tracing::Span {
    tracing::info_span!("load_batch", batch = 3_i64)
}

/// The static metadata of the span `make` creates (taken under a subscriber that records it).
fn metadata_of(make: fn() -> tracing::Span) -> &'static Metadata<'static> {
    let t = telemetry("all", false);
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(t.layer()));
    let span = tracing::dispatcher::with_default(&dispatch, make);
    span.metadata().expect("recorded span has metadata")
}

fn interest(t: &Telemetry, meta: &'static Metadata<'static>) -> tracing_core::Interest {
    Dispatch::new(tracing_subscriber::registry().with(t.layer())).register_callsite(meta)
}

#[test]
fn recorded_spans_are_always_with_the_log_bridge_off() {
    let t = telemetry("all", false);
    assert!(interest(&t, metadata_of(step_span)).is_always());
    assert!(interest(&t, metadata_of(plain_span)).is_always());
}

#[test]
fn recorded_spans_are_always_with_the_log_bridge_on() {
    let t = telemetry("all", true);
    assert!(t.layer::<tracing_subscriber::Registry>().bridges_logs());
    assert!(interest(&t, metadata_of(step_span)).is_always());
    assert!(interest(&t, metadata_of(plain_span)).is_always());
}

#[test]
fn a_disabled_group_is_never() {
    let t = telemetry("default", false);
    assert!(interest(&t, metadata_of(step_span)).is_never());
    assert!(interest(&t, metadata_of(plain_span)).is_always());
}

#[test]
fn a_non_exporting_rank_is_never() {
    let t = Telemetry::builder(
        LensConfig::default()
            .with_enabled(true)
            .with(|c| c.metrics_enabled = false),
    )
    .place(Place::rank(0).of(8))
    .allow_reinit_for_testing(true)
    .build()
    .unwrap();
    assert!(!t.is_exporting());
    assert!(interest(&t, metadata_of(step_span)).is_never());
    assert!(interest(&t, metadata_of(plain_span)).is_never());
}
