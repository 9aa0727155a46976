//! Memory bounded in bytes, not only in items: spans with 1 MiB attributes against a collector
//! that never answers (served on loopback by the test) fill the byte budget
//! (`NEMO_LENS_QUEUE_MAX_BYTES`), and the rest are dropped and counted; an absurd
//! `OTEL_BSP_MAX_QUEUE_SIZE` is clamped with a warning instead of reserving gigabytes.
//!
//! Each test runs in a process of its own (`nemo_lens_test_support::child`): the first sets the OTLP endpoint
//! in the process environment and measures this process's resident memory, the second the
//! peak of the process's only child.

use std::time::Duration;

use nemo_lens::Telemetry;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child::{self, Child};
use nemo_lens_test_support::collector::otlp_config;
use nemo_lens_test_support::hung::HungCollector;
use nemo_lens_test_support::rss_kib;

#[test]
fn spans_with_huge_attributes_stay_within_the_byte_budget_and_the_rest_are_counted() {
    child::run_alone(within_the_byte_budget);
}

fn within_the_byte_budget() {
    let collector = HungCollector::start();
    // SAFETY: the only test of this child process; set before anything reads the environment.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint());
        std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "100");
        std::env::set_var("OTEL_BSP_EXPORT_TIMEOUT", "1000");
        std::env::set_var("NEMO_LENS_QUEUE_MAX_BYTES", "16777216");
    }
    let telemetry = Telemetry::builder(otlp_config().with(|c| c.metrics_enabled = false))
        .build()
        .unwrap();
    let blob = "x".repeat(1 << 20);
    let before = rss_kib();
    tracing::subscriber::with_default(
        tracing_subscriber::registry().with(telemetry.layer()),
        || {
            for i in 0..300_i64 {
                tracing::info_span!("big", i, blob = blob.as_str()).in_scope(|| {});
            }
        },
    );
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    let dropped = telemetry.stats().dropped_spans;
    eprintln!("resident memory grew by {grown_mib} MiB; dropped {dropped} of 300");
    // 300 MiB of attributes; the budget holds 16 MiB of them (waiting and in flight).
    assert!(grown_mib < 100, "resident memory grew by {grown_mib} MiB");
    assert!(dropped >= 300 - 16, "dropped {dropped}");
    let _ = telemetry.shutdown(Duration::from_secs(1));
    assert_eq!(
        telemetry.stats().dropped_spans,
        300,
        "nothing delivered, all counted"
    );
}

#[test]
fn an_absurd_queue_size_is_clamped_with_a_warning() {
    child::run_alone(clamped_with_a_warning);
}

fn clamped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let output = Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_CONSOLE_PATH", &out)
        .env("OTEL_BSP_MAX_QUEUE_SIZE", "16777216")
        .args(["--steps", "1", "--step-ms", "1"])
        .run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("OTEL_BSP_MAX_QUEUE_SIZE=16777216") && stderr.contains("clamped"),
        "{stderr}"
    );
    // The peak resident set of the trainer (the only child of this child process).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) },
        0
    );
    let peak_mib = usage.ru_maxrss / 1024;
    assert!(peak_mib < 512, "the trainer peaked at {peak_mib} MiB");
    assert!(std::fs::read_to_string(&out).unwrap().contains("\"train\""));
}
