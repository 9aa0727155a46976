//! A collector that accepts connections and never answers (served on loopback by the test),
//! over HTTP with metrics on: `force_flush` returns within the export timeout, and every span
//! that ends before, during or after a shutdown is counted (none can be delivered).
//!
//! Runs in a process of its own (`nemo_lens_test_support::child`): the OTLP endpoint goes through the process
//! environment, as a user's job script would set it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nemo_lens::Telemetry;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;
use nemo_lens_test_support::collector::otlp_config;
use nemo_lens_test_support::hung::HungCollector;
use nemo_lens_test_support::wait::wait_until;

#[test]
fn flush_is_bounded_and_spans_ending_during_shutdown_are_counted() {
    child::run_alone(bounded_flush_and_counted_spans);
}

fn bounded_flush_and_counted_spans() {
    let collector = HungCollector::start();
    // SAFETY: the only test of this child process; set before anything reads the environment.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint());
        // The client would wait 30 s; nemo-lens's export timeout is 1 s.
        std::env::set_var("OTEL_EXPORTER_OTLP_TIMEOUT", "30000");
        std::env::set_var("OTEL_BSP_EXPORT_TIMEOUT", "1000");
        std::env::set_var("OTEL_BLRP_EXPORT_TIMEOUT", "1000");
        std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "100");
    }
    let telemetry = Telemetry::builder(otlp_config()).build().unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    let produced = Arc::new(AtomicU64::new(0));
    let emit = |n: u64| {
        tracing::dispatcher::with_default(&dispatch, || {
            for i in 0..n {
                tracing::info_span!("work", i).in_scope(|| {});
                produced.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    emit(100);
    telemetry.meter().u64_counter("steps").build().add(1, &[]);

    // Bounded by the export timeout (1 s), plus a generous margin for "did not hang".
    let started = Instant::now();
    assert!(telemetry.force_flush().is_err(), "nothing can be flushed");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(6), "force_flush took {took:?}");

    // Training goes on while the shutdown runs, and after it.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let dispatch = dispatch.clone();
        let produced = produced.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                while !stop.load(Ordering::SeqCst) {
                    tracing::info_span!("during").in_scope(|| {});
                    produced.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
    };
    let before = produced.load(Ordering::SeqCst);
    wait_until(
        Duration::from_secs(30),
        "the training thread's spans before the shutdown",
        || produced.load(Ordering::SeqCst) > before + 100,
    );
    let started = Instant::now();
    let _ = telemetry.shutdown(Duration::from_secs(2));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(7), "shutdown took {took:?}");
    let after = produced.load(Ordering::SeqCst);
    wait_until(
        Duration::from_secs(30),
        "the training thread's spans after the shutdown",
        || produced.load(Ordering::SeqCst) > after + 100,
    );
    stop.store(true, Ordering::SeqCst);
    producer.join().unwrap();

    // Nothing was delivered (the collector never answers): every span is counted.
    let produced = produced.load(Ordering::SeqCst);
    let dropped = telemetry.stats().dropped_spans;
    eprintln!("produced {produced}, dropped {dropped}");
    assert!(produced > 1000, "{produced}");
    assert_eq!(dropped, produced, "every span exported or counted");
}
