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

use nemo_lens_test_support::memory;

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

/// The guard of an entered span held across an `.await` on a multi-thread runtime: the span is
/// entered on one worker and exited (then closed) on another. The context the first worker
/// attached is never injected afterwards: code in no span, on every worker, injects no
/// `traceparent` through nemo-lens's propagator or propagation functions.
#[test]
fn a_span_exited_on_another_worker_is_never_injected_afterwards() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    let exporter = InMemorySpanExporter::default();
    // Globals installed: `inject_context` writes through nemo-lens's propagator, the one that
    // must never inject a stale context.
    let telemetry = memory::builder(&exporter)
        .context_activation(true)
        .install_globals(true)
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    let workers: Arc<Mutex<HashSet<ThreadId>>> = Arc::default();
    let runtime = {
        let (dispatch, workers) = (dispatch.clone(), workers.clone());
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .on_thread_start(move || {
                workers.lock().unwrap().insert(std::thread::current().id());
                // The subscriber is every worker's default for its whole life.
                std::mem::forget(tracing::dispatcher::set_default(&dispatch));
            })
            .build()
            .unwrap()
    };

    // The pattern, until at least one span was exited on another worker than its entry's.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut crossed = 0;
    while crossed == 0 {
        assert!(
            Instant::now() < deadline,
            "no span was ever resumed on another worker"
        );
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                runtime.spawn(async move {
                    // A root: the tasks interleave on each worker, and a contextual span would
                    // be the child of another task's (its close would then come later).
                    let span = tracing::info_span!(
                        parent: None,
                        "request",
                        nemo.group.job = tracing::field::Empty,
                        i
                    );
                    let _entered = span.enter();
                    let on = std::thread::current().id();
                    // Busy enough that the other worker steals queued tasks.
                    std::thread::sleep(Duration::from_micros(200));
                    tokio::task::yield_now().await;
                    on != std::thread::current().id()
                })
            })
            .collect();
        crossed += runtime.block_on(async {
            let mut n = 0;
            for t in tasks {
                n += usize::from(t.await.unwrap());
            }
            n
        });
    }

    // Code in no span, on every worker: nothing to inject.
    let injected: Arc<Mutex<Vec<(ThreadId, String)>>> = Arc::default();
    let mut seen = HashSet::new();
    while seen.len() < workers.lock().unwrap().len() {
        assert!(
            Instant::now() < deadline,
            "the injections did not reach every worker"
        );
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let injected = injected.clone();
                runtime.spawn(async move {
                    assert!(tracing::Span::current().is_none(), "code in no span");
                    let mut carrier = HashMap::new();
                    // The current lens span's context, else `Context::current()`.
                    nemo_lens::propagation::inject_context(&mut carrier);
                    // And after nemo-lens ran on this thread, the current context itself.
                    if opentelemetry::Context::current()
                        .span()
                        .span_context()
                        .is_valid()
                    {
                        carrier.insert("current".into(), "a span".into());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    let id = std::thread::current().id();
                    injected.lock().unwrap().push((id, format!("{carrier:?}")));
                    id
                })
            })
            .collect();
        runtime.block_on(async {
            for t in tasks {
                seen.insert(t.await.unwrap());
            }
        });
    }
    for (worker, carrier) in injected.lock().unwrap().iter() {
        assert_eq!(carrier, "{}", "worker {worker:?} injected a closed span");
    }
    drop(runtime);
    telemetry.force_flush().unwrap();
    assert!(
        exporter
            .get_finished_spans()
            .unwrap()
            .iter()
            .any(|s| s.name == "request")
    );
}
