//! Collector faults: absent at start, killed mid-run, restarted, gone at shutdown. The training
//! loop never blocks on export, memory stays bounded, export resumes after a restart, shutdown
//! returns within its timeout (plus a margin) with the collector gone, and every span is either
//! delivered or counted as dropped.
//!
//! Runs in a process of its own (`nemo_lens_test_support::child`): the OTLP endpoint goes through the process
//! environment, as a user's job script would set it, and resident memory is measured.

use std::time::{Duration, Instant};

use nemo_lens::Telemetry;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;
use nemo_lens_test_support::collector::{self, Collector, count_with, free_port};
use nemo_lens_test_support::rss_kib;

/// Emits `n` spans of `phase` and returns how long the loop took.
fn emit(phase: &'static str, n: u64) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        tracing::info_span!("work", phase, i).in_scope(|| {});
    }
    started.elapsed()
}

fn delivered(collectors: &[&Collector]) -> u64 {
    collectors.iter().map(|c| c.spans().len() as u64).sum()
}

fn delivered_phase(collector: &Collector, phase: &str) -> usize {
    count_with(&collector.spans(), "phase", phase)
}

#[test]
fn absent_killed_restarted_and_gone_collector() {
    child::run_alone(faults);
}

fn faults() {
    // Generous bound for "did not block / did not hang"; the costs themselves are benched.
    const NEVER_HANGS: Duration = Duration::from_secs(60);
    let (grpc, http) = (free_port(), free_port());
    // SAFETY: the only test of this child process; set before anything reads the environment.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
        std::env::set_var(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{http}"),
        );
        std::env::set_var("OTEL_EXPORTER_OTLP_TIMEOUT", "1000");
        std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "100");
    }
    let telemetry =
        Telemetry::builder(collector::otlp_config().with(|c| c.metrics_enabled = false))
            .build()
            .unwrap();
    let _guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    let rss_before = rss_kib();
    let mut produced = 0;

    // 1. No collector at all: the loop runs, spans that cannot wait are dropped and counted.
    assert!(emit("absent", 20_000) < NEVER_HANGS);
    produced += 20_000;
    let _ = telemetry.force_flush();
    assert!(
        telemetry.stats().dropped_spans > 0,
        "nothing counted with no collector"
    );

    // 2. The collector comes up: export resumes.
    let mut first = Collector::start_on(grpc, http);
    assert!(emit("started", 50) < NEVER_HANGS);
    produced += 50;
    first.wait_for("the spans after start", Duration::from_secs(30), |_| {
        let _ = telemetry.force_flush();
        delivered_phase(&first, "started") == 50
    });

    // 3. Killed mid-run: the loop still never blocks.
    first.kill();
    let dropped_before_kill = telemetry.stats().dropped_spans;
    assert!(emit("killed", 20_000) < NEVER_HANGS);
    produced += 20_000;
    let _ = telemetry.force_flush();
    assert!(telemetry.stats().dropped_spans > dropped_before_kill);

    // 4. Restarted on the same ports: export resumes again.
    let mut second = Collector::start_on(grpc, http);
    assert!(emit("restarted", 50) < NEVER_HANGS);
    produced += 50;
    second.wait_for("the spans after restart", Duration::from_secs(30), |_| {
        let _ = telemetry.force_flush();
        delivered_phase(&second, "restarted") == 50
    });

    // Memory stayed bounded through 40 000 spans that could not be exported.
    let grown_mib = rss_kib().saturating_sub(rss_before) / 1024;
    assert!(grown_mib < 64, "resident memory grew by {grown_mib} MiB");

    // 5. Gone for good at shutdown: shutdown returns within its timeout plus a margin.
    second.kill();
    assert!(emit("gone", 100) < NEVER_HANGS);
    produced += 100;
    let started = Instant::now();
    let _ = telemetry.shutdown(Duration::from_secs(2));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");

    // Nothing lost silently: every span arrived or was counted (a batch that arrived while the
    // collector died answering it counts as both, hence >=).
    let delivered = delivered(&[&first, &second]);
    eprintln!(
        "produced {produced}, delivered {delivered}, dropped {}",
        telemetry.stats().dropped_spans
    );
    let dropped = telemetry.stats().dropped_spans;
    assert!(delivered <= produced);
    assert!(
        delivered + dropped >= produced,
        "produced {produced}, delivered {delivered}, dropped {dropped}"
    );
}
