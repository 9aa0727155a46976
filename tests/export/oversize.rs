//! Over gRPC, one span above the collector's message size limit (4 MiB) must not sink its
//! batch: a real collector (rotel) on loopback receives the batch's other spans, and the huge
//! one is dropped alone and counted.
//!
//! Runs in a process of its own (`nemo_lens_test_support::child`): the OTLP endpoint goes through the process
//! environment, as a user's job script would set it.

use std::time::Duration;

use nemo_lens::Telemetry;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;
use nemo_lens_test_support::collector::{self, Collector, count_with};

fn delivered(collector: &Collector, kind: &str) -> usize {
    count_with(&collector.spans(), "kind", kind)
}

#[test]
fn a_span_above_the_grpc_message_limit_is_dropped_alone_and_counted() {
    child::run_alone(huge_span);
}

fn huge_span() {
    let collector = Collector::start();
    // SAFETY: the only test of this child process; set before anything reads the environment.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint("grpc"));
        // Everything goes out in one batch, at shutdown.
        std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "600000");
    }
    let telemetry =
        Telemetry::builder(collector::otlp_config().with(|c| c.metrics_enabled = false))
            .build()
            .unwrap();
    let blob = "x".repeat(6 << 20);
    tracing::subscriber::with_default(
        tracing_subscriber::registry().with(telemetry.layer()),
        || {
            for i in 0..40_i64 {
                tracing::info_span!("step", kind = "small", i).in_scope(|| {});
                if i == 20 {
                    tracing::info_span!("step", kind = "huge", blob = blob.as_str())
                        .in_scope(|| {});
                }
            }
        },
    );
    let _ = telemetry.shutdown(Duration::from_secs(20));
    collector.wait_for("the 40 small spans", Duration::from_secs(30), |_| {
        delivered(&collector, "small") == 40
    });
    assert_eq!(delivered(&collector, "huge"), 0);
    assert_eq!(telemetry.stats().dropped_spans, 1, "the huge span, counted");
}
