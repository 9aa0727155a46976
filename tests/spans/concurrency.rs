//! Concurrency: spans and events from many threads at once (including a span entered on one
//! thread and closed on another) are each exported once with the right parent, and an exporter
//! that logs through `tracing` while spans are open neither deadlocks nor feeds back.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nemo_lens::testing::CollectingExporter;
use nemo_lens::{LensConfig, Telemetry};
use opentelemetry::Value;
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::{self, Child};

const THREADS: usize = 8;
const STEPS: usize = 200;

fn enabled() -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.metrics_enabled = false;
    })
}

fn int(span: &SpanData, key: &str) -> i64 {
    match span.attributes.iter().find(|kv| kv.key.as_str() == key) {
        Some(kv) => match kv.value {
            Value::I64(v) => v,
            ref other => panic!("{key}: {other:?}"),
        },
        None => panic!("{key} missing on {}", span.name),
    }
}

/// Eight threads, each running steps of nested spans with events, all under one run span
/// created on the main thread, exported through the batch processor: every span arrives once,
/// with its parent, and every event on its span.
#[test]
fn spans_from_many_threads_are_exported_once_with_their_parents() {
    let exporter = CollectingExporter::default();
    let telemetry = Telemetry::builder(enabled())
        .span_exporter(exporter.clone())
        .env_lookup(|k| (k == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| "100000".into()))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    let run = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("run"));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (dispatch, run) = (dispatch.clone(), run.clone());
            s.spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for i in 0..STEPS {
                        let step = tracing::info_span!(parent: &run, "step", t, i);
                        step.in_scope(|| {
                            tracing::info!(t, i, "begin");
                            tracing::info_span!("inner", t, i).in_scope(|| {
                                tracing::info!(t, i, "inside");
                            });
                        });
                    }
                });
            });
        }
    });
    drop(run);
    telemetry.shutdown(Duration::from_secs(30)).unwrap();
    assert_eq!(telemetry.stats().dropped_spans, 0);

    let spans = exporter.spans();
    assert_eq!(spans.len(), 1 + 2 * THREADS * STEPS);
    let ids: HashSet<SpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
    assert_eq!(ids.len(), spans.len(), "each span exported once");
    let run = spans.iter().find(|s| s.name == "run").unwrap();
    let trace = run.span_context.trace_id();
    let steps: HashMap<(i64, i64), &SpanData> = spans
        .iter()
        .filter(|s| s.name == "step")
        .map(|s| ((int(s, "t"), int(s, "i")), s))
        .collect();
    assert_eq!(steps.len(), THREADS * STEPS);
    for span in &spans {
        assert_eq!(span.span_context.trace_id(), trace, "one trace");
        match span.name.as_ref() {
            "step" => {
                assert_eq!(span.parent_span_id, run.span_context.span_id());
                assert_eq!(span.events.events.len(), 1);
                assert_eq!(int_event(span, 0, "i"), int(span, "i"));
            }
            "inner" => {
                let step = steps[&(int(span, "t"), int(span, "i"))];
                assert_eq!(span.parent_span_id, step.span_context.span_id());
                assert_eq!(span.events.events.len(), 1);
                assert_eq!(int_event(span, 0, "t"), int(span, "t"));
            }
            "run" => assert_eq!(span.parent_span_id, SpanId::INVALID),
            other => panic!("unexpected span {other}"),
        }
    }
}

fn int_event(span: &SpanData, index: usize, key: &str) -> i64 {
    let event = &span.events.events[index];
    match event.attributes.iter().find(|kv| kv.key.as_str() == key) {
        Some(kv) => match kv.value {
            Value::I64(v) => v,
            ref other => panic!("{other:?}"),
        },
        None => panic!("{key} missing on event {}", event.name),
    }
}

/// A span created and entered on one thread, handed to another that records into it, opens a
/// child in it and closes it: exported once, ended on the second thread, with both threads'
/// children under it.
#[test]
fn a_span_closed_on_another_thread_is_exported_once_with_its_children() {
    let exporter = CollectingExporter::default();
    let telemetry = Telemetry::builder(enabled())
        .span_exporter(exporter.clone())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    let handed = tracing::dispatcher::with_default(&dispatch, || {
        let span = tracing::info_span!("handed_over", moved = tracing::field::Empty);
        span.in_scope(|| tracing::info_span!("child_on_a").in_scope(|| {}));
        span
    });
    let closer = {
        let dispatch = dispatch.clone();
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                handed.record("moved", true);
                handed.in_scope(|| {
                    tracing::info!("on thread b");
                    tracing::info_span!("child_on_b").in_scope(|| {});
                });
                drop(handed); // the last handle: the span closes here
            });
            std::thread::current().id()
        })
    };
    closer.join().unwrap();
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    let spans = exporter.spans();
    let handed: Vec<&SpanData> = spans.iter().filter(|s| s.name == "handed_over").collect();
    assert_eq!(handed.len(), 1, "exported once");
    let handed = handed[0];
    assert!(
        handed
            .attributes
            .iter()
            .all(|kv| kv.key.as_str() != "nemo.span.truncated"),
        "closed, not truncated"
    );
    assert_eq!(handed.events.events[0].name, "on thread b");
    for child in ["child_on_a", "child_on_b"] {
        let c = spans.iter().find(|s| s.name == child).unwrap();
        assert_eq!(c.parent_span_id, handed.span_context.span_id(), "{child}");
    }
    assert_eq!(telemetry.stats().open_spans, 0);
}

/// An exporter that logs through `tracing` (an event and a span of its own) on every export,
/// and counts its exports.
#[derive(Clone, Debug, Default)]
struct ChattyExporter {
    inner: CollectingExporter,
    exports: Arc<AtomicU64>,
}

impl SpanExporter for ChattyExporter {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let _span = tracing::info_span!(target: "chatty_exporter", "export_batch", n = batch.len())
            .entered();
        tracing::info!(target: "chatty_exporter", n = batch.len(), "exporting");
        self.exports.fetch_add(1, Ordering::Relaxed);
        self.inner.export(batch)
    }
}

const MODE_VAR: &str = "LENSTEST_CONCURRENCY_MODE";

/// The exporter logs through the *global* `tracing` subscriber, which holds the lens layer,
/// while spans are open on several threads; synchronous and batched. Nothing deadlocks (the
/// scenario runs in a fresh process; a hang fails after a minute), the exporter's own span and
/// events are not recorded, and the application's spans all arrive.
#[test]
fn an_exporter_that_logs_through_tracing_neither_deadlocks_nor_feeds_back() {
    if !child::is_child() {
        for mode in ["synchronous", "batch"] {
            Child::this_test()
                .env(MODE_VAR, mode)
                .timeout(Duration::from_secs(60))
                .run_passing();
        }
        return;
    }
    let mode = std::env::var(MODE_VAR).unwrap();
    let exporter = ChattyExporter::default();
    let telemetry = Telemetry::builder(enabled())
        .span_exporter(exporter.clone())
        .export_mode(if mode == "synchronous" {
            nemo_lens::ExportMode::Synchronous
        } else {
            nemo_lens::ExportMode::Batched
        })
        .env_lookup(|k| (k == "OTEL_BSP_SCHEDULE_DELAY").then(|| "1".into()))
        .build()
        .unwrap();
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
        )
        .init();
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let _outer = tracing::info_span!("outer", t).entered();
                for i in 0..100 {
                    tracing::info_span!("work", t, i).in_scope(|| tracing::info!(i, "tick"));
                }
            });
        }
    });
    telemetry.shutdown(Duration::from_secs(30)).unwrap();
    let spans = exporter.inner.spans();
    assert!(exporter.exports.load(Ordering::Relaxed) > 0);
    assert_eq!(spans.iter().filter(|s| s.name == "work").count(), 400);
    assert_eq!(spans.iter().filter(|s| s.name == "outer").count(), 4);
    assert!(
        spans.iter().all(|s| s.name != "export_batch"),
        "the exporter's own span was recorded"
    );
    assert!(
        spans
            .iter()
            .flat_map(|s| s.events.events.iter())
            .all(|e| e.name != "exporting"),
        "the exporter's event was recorded"
    );
}
