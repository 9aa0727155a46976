//! Cost of one `ERROR` event (a message and one field) inside an exported span, on the training
//! thread, beside the same event at `INFO`: the lens layer exporting every group (batch
//! processor, discarding exporter), a new span every 100 events as in `benches/events.rs`.
//!
//! `RUST_BACKTRACE` is read once per process, so run the bench twice, without and with it; the
//! group's name says which (`error_event_rust_backtrace_unset` / `_set`):
//!
//! ```sh
//! env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE cargo bench --bench errors
//! RUST_BACKTRACE=1 cargo bench --bench errors
//! ```
//!
//! Cases: `info_event`, `error_event` (the default set-up) and `error_event_with_backtraces`
//! (`TelemetryBuilder::error_backtraces(true)`: the backtrace is captured on the training thread
//! and resolved on the export worker).
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

use common::{Discard, exporting_config};
use nemo_lens_test_support::bench as common;

/// Events per span: below the SDK's default limit of 128 events per span.
const EVENTS_PER_SPAN: u64 = 100;

/// `iters` events of `level`, a new span every [`EVENTS_PER_SPAN`] events; returns the time.
fn events(iters: u64, error: bool) -> Duration {
    let start = Instant::now();
    let mut left = iters;
    while left > 0 {
        let n = left.min(EVENTS_PER_SPAN);
        let span = tracing::info_span!("step", nemo.group.step = Empty, step = 1_i64);
        let _e = span.enter();
        for _ in 0..n {
            if error {
                tracing::error!(loss = black_box(f64::NAN), "nan loss");
            } else {
                tracing::info!(loss = black_box(0.25_f64), "step done");
            }
        }
        left -= n;
    }
    start.elapsed()
}

fn bench_errors(c: &mut Criterion) {
    let captured =
        std::backtrace::Backtrace::capture().status() == std::backtrace::BacktraceStatus::Captured;
    let mut g = c.benchmark_group(if captured {
        "error_event_rust_backtrace_set"
    } else {
        "error_event_rust_backtrace_unset"
    });
    let cases: [(&str, bool, bool); 3] = [
        ("info_event", false, false),
        ("error_event", true, false),
        ("error_event_with_backtraces", true, true),
    ];
    for (name, error, backtraces) in cases {
        let telemetry = nemo_lens::Telemetry::builder(exporting_config("all"))
            .span_exporter(Discard(Arc::new(AtomicU64::new(0))))
            .error_backtraces(backtraces)
            .allow_reinit_for_testing(true)
            .build()
            .expect("valid bench config");
        let dispatch = Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
        tracing::dispatcher::with_default(&dispatch, || {
            g.bench_function(name, |b| b.iter_custom(|iters| events(iters, error)))
        });
        let _ = telemetry.shutdown(Duration::from_secs(30));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_errors
}
criterion_main!(benches);
