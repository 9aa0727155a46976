//! `Telemetry::opentelemetry_layer()`: tracing-opentelemetry's own layer on the lens tracer,
//! as middleware built on `OpenTelemetrySpanExt` meets it.

use std::collections::HashMap;
use std::time::Duration;

use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::memory;

const TRACE: &str = "4bf92f3577b34e0ea36b9a0f8e1c6a2d";
const PARENT: &str = "00f067aa0ba902b7";

fn exporting(exporter: &InMemorySpanExporter) -> Telemetry {
    memory::builder(exporter).build().unwrap()
}

fn extracted() -> Context {
    let carrier = HashMap::from([("traceparent".to_string(), format!("00-{TRACE}-{PARENT}-01"))]);
    TraceContextPropagator::new().extract(&carrier)
}

/// What an HTTP server middleware does: a request span, its parent taken from the incoming
/// headers with `OpenTelemetrySpanExt::set_parent`, and the context read back for a call out.
fn middleware() -> Context {
    let request = tracing::info_span!("handle_request");
    request.set_parent(extracted()).unwrap();
    let _entered = request.enter();
    tracing::info_span!("call_reward").in_scope(|| tracing::Span::current().context())
}

fn span<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}

#[test]
fn middleware_gets_valid_contexts_and_spans_reach_the_lens_exporter() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = exporting(&exporter);
    let subscriber = tracing_subscriber::registry().with(telemetry.opentelemetry_layer());
    let out = tracing::subscriber::with_default(subscriber, middleware);
    let trace = TraceId::from_hex(TRACE).unwrap();
    let sc = out.span().span_context().clone();
    assert!(sc.is_valid());
    assert_eq!(sc.trace_id(), trace);

    telemetry.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
    let request = span(&spans, "handle_request");
    assert_eq!(request.span_context.trace_id(), trace);
    assert_eq!(request.parent_span_id, SpanId::from_hex(PARENT).unwrap());
    let call = span(&spans, "call_reward");
    assert_eq!(call.span_context, sc);
    assert_eq!(call.parent_span_id, request.span_context.span_id());
    // They went through the lens tracer (its instrumentation scope) and the lens exporter.
    assert!(
        call.instrumentation_scope.name().starts_with("nemo"),
        "{:?}",
        call.instrumentation_scope
    );
}

#[test]
fn a_disabled_group_is_not_recorded() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = exporting(&exporter);
    assert!(!telemetry.is_span_group_enabled("step"));
    let subscriber = tracing_subscriber::registry().with(telemetry.opentelemetry_layer());
    tracing::subscriber::with_default(subscriber, || {
        let job = tracing::info_span!("job", nemo.group.job = tracing::field::Empty);
        let _job = job.enter();
        let step = tracing::info_span!("step", nemo.group.step = tracing::field::Empty);
        assert!(step.is_disabled());
        assert!(!step.context().span().span_context().is_valid());
        step.in_scope(|| {});
    });
    telemetry.force_flush().unwrap();
    let names: Vec<String> = exporter
        .get_finished_spans()
        .unwrap()
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
    assert_eq!(names, ["job"]);
}

#[test]
fn a_non_exporting_rank_is_inert() {
    let telemetry = Telemetry::builder(
        LensConfig::default()
            .with_enabled(true)
            .with(|c| c.export.rank = Some(0)),
    )
    .place(Place::rank(1).of(2))
    .install_globals(false)
    .build()
    .unwrap();
    assert!(!telemetry.is_exporting());
    let layer = telemetry.opentelemetry_layer::<tracing_subscriber::Registry>();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        let request = tracing::info_span!("handle_request");
        assert!(request.is_disabled());
        assert!(request.set_parent(extracted()).is_err());
        assert!(!request.context().span().span_context().is_valid());
    });
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
}
