//! Context activation: inside an entered lens span, OpenTelemetry-API code sees that span as
//! the current one (spans of an OpenTelemetry tracer nest under it, a propagator injects it),
//! and `context_activation(false)` turns that off.

use std::collections::HashMap;

use nemo_lens::{LensSpanExt, Telemetry};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, Tracer as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use tracing_subscriber::prelude::*;

use crate::common::memory;

fn telemetry(activate: bool, exporter: InMemorySpanExporter) -> Telemetry {
    memory::builder(&exporter)
        .context_activation(activate)
        .build()
        .unwrap()
}

#[test]
fn opentelemetry_api_code_inside_a_lens_span_sees_it() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = telemetry(true, exporter.clone());
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let mut headers = HashMap::new();
    let step_id = tracing::subscriber::with_default(subscriber, || {
        let step = tracing::info_span!("step", nemo.group.job = tracing::field::Empty);
        let _entered = step.enter();
        // An HTTP client's middleware, through the OpenTelemetry API only.
        TraceContextPropagator::new()
            .inject_context(&opentelemetry::Context::current(), &mut headers);
        telemetry.tracer().in_span("api_child", |_| {});
        // A nested lens span is current while entered, and the outer one again after it.
        let inner_id = tracing::info_span!("inner", nemo.group.job = tracing::field::Empty)
            .in_scope(|| {
                opentelemetry::Context::current()
                    .span()
                    .span_context()
                    .span_id()
            });
        assert_ne!(inner_id, step.span_context().unwrap().span_id());
        assert_eq!(
            opentelemetry::Context::current()
                .span()
                .span_context()
                .span_id(),
            step.span_context().unwrap().span_id()
        );
        step.span_context().unwrap()
    });
    // Outside every span: nothing current.
    assert!(
        !opentelemetry::Context::current()
            .span()
            .span_context()
            .is_valid()
    );
    let traceparent = &headers["traceparent"];
    assert!(
        traceparent.contains(&format!("-{}-{}-", step_id.trace_id(), step_id.span_id())),
        "{traceparent}"
    );
    telemetry.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let child = spans.iter().find(|s| s.name == "api_child").unwrap();
    assert_eq!(child.parent_span_id, step_id.span_id());
    assert_eq!(child.span_context.trace_id(), step_id.trace_id());
}

#[test]
fn without_activation_the_opentelemetry_context_stays_empty() {
    let telemetry = telemetry(false, InMemorySpanExporter::default());
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    tracing::subscriber::with_default(subscriber, || {
        let step = tracing::info_span!("step", nemo.group.job = tracing::field::Empty);
        let _entered = step.enter();
        assert!(step.span_context().is_some(), "the span is recorded");
        assert!(
            !opentelemetry::Context::current()
                .span()
                .span_context()
                .is_valid()
        );
    });
}
