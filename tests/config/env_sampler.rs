//! `OTEL_TRACES_SAMPLER`, which the SDK reads, keeps its meaning for lens spans: the sampled
//! flag decided on the training thread (what children and propagation see) agrees with what the
//! SDK span built on the batch worker is, and spans the sampler drops are not counted as
//! dropped. The test runs in a process of its own (`nemo_lens_test_support::child`): it sets process variables
//! before anything reads them.

use std::collections::HashSet;
use std::time::Duration;

use nemo_lens::testing::CollectingExporter;
use nemo_lens::{LensConfig, LensSpanExt, Telemetry};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;

#[test]
fn the_sdk_sampler_from_the_environment_decides_on_the_training_thread_too() {
    child::run_alone(sampler_from_the_environment);
}

fn sampler_from_the_environment() {
    // SAFETY: the only test of this child process; nothing else reads the environment
    // concurrently.
    unsafe {
        std::env::set_var("OTEL_TRACES_SAMPLER", "traceidratio");
        std::env::set_var("OTEL_TRACES_SAMPLER_ARG", "0.5");
    }
    let exporter = CollectingExporter::default();
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.metrics_enabled = false;
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
    });
    let telemetry = Telemetry::builder(config)
        .span_exporter(exporter.clone())
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let mut sampled = HashSet::new();
    let mut unsampled = 0;
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..400 {
            let root = tracing::info_span!("root");
            let child = root.in_scope(|| tracing::info_span!("child"));
            let (r, c) = (root.span_context().unwrap(), child.span_context().unwrap());
            assert_eq!(r.is_sampled(), c.is_sampled(), "children follow their root");
            if r.is_sampled() {
                sampled.insert(r.span_id());
                sampled.insert(c.span_id());
            } else {
                unsampled += 1;
            }
        }
    });
    telemetry.shutdown(Duration::from_secs(5)).unwrap();
    let exported: HashSet<_> = exporter
        .spans()
        .iter()
        .map(|s| s.span_context.span_id())
        .collect();
    assert!(
        !sampled.is_empty() && unsampled > 0,
        "a 0.5 ratio keeps some, drops some"
    );
    assert_eq!(
        exported, sampled,
        "exactly the spans flagged sampled are exported"
    );
    assert_eq!(
        telemetry.stats().dropped_spans,
        0,
        "sampled-out spans are not drops"
    );
}
