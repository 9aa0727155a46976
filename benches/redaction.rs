//! Cost of one exported span with four string fields, one of them redacted, under the default
//! redact keys and under a set of 10,000 keys given to `TelemetryBuilder::redact_keys` (the
//! default keys and 9,992 others): each string field is checked against the set, so the figure
//! shows what the set's size costs the training thread.
//!
//! Run: `cargo bench --bench redaction`, then `python3 benches/report.py` for the table.
//!
//! Instructions on the training thread (the load-independent figure): with
//! `REDACTION_COUNT=N` (and `REDACTION_KEYS=default` or `10000`) the binary makes N spans of that
//! case in `redaction::counted` after 2,000 warm-up spans, outside criterion, and prints what was
//! dropped (give `OTEL_BSP_MAX_QUEUE_SIZE` room for N spans); count them with callgrind and
//! divide by N:
//!
//! ```sh
//! cargo bench --no-run --bench redaction   # prints the binary's path
//! OTEL_BSP_MAX_QUEUE_SIZE=100000 REDACTION_COUNT=20000 REDACTION_KEYS=default valgrind --tool=callgrind \
//!     --callgrind-out-file=cg.out target/release/deps/redaction-<hash>
//! callgrind_annotate --inclusive=yes cg.out | grep 'redaction::counted'
//! ```
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use nemo_lens::{Telemetry, TelemetryBuilder};
use tracing::Dispatch;
use tracing_subscriber::prelude::*;

use common::{Discard, exporting_config};
use nemo_lens_test_support::bench as common;

/// One span with four string fields (`prompt` is redacted by both sets).
#[inline(always)]
fn one_span() {
    let span = tracing::info_span!(
        "request",
        model = "llama-3-8b",
        dataset = "c4",
        split = "train",
        prompt = "the quick brown fox"
    );
    let _e = span.enter();
}

/// The redact keys of a case: the default set, or 10,000 keys (the default ones among them).
fn keys(case: &str) -> Option<Vec<String>> {
    (case != "default_keys").then(|| {
        TelemetryBuilder::DEFAULT_REDACT_KEYS
            .iter()
            .map(|k| k.to_string())
            .chain(
                (TelemetryBuilder::DEFAULT_REDACT_KEYS.len()..10_000).map(|i| format!("field_{i}")),
            )
            .collect()
    })
}

/// An exporting telemetry with the redact keys of `case`, and its subscriber.
fn telemetry(case: &str) -> (Telemetry, Dispatch) {
    let mut builder = Telemetry::builder(exporting_config("all"))
        .span_exporter(Discard(Arc::new(AtomicU64::new(0))))
        .allow_reinit_for_testing(true);
    if let Some(keys) = keys(case) {
        builder = builder.redact_keys(keys);
    }
    let telemetry = builder.build().expect("valid bench config");
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    (telemetry, dispatch)
}

const CASES: [&str; 2] = ["default_keys", "keys_10000"];

fn bench_redaction(c: &mut Criterion) {
    let mut g = c.benchmark_group("redacted_span");
    for case in CASES {
        let (telemetry, dispatch) = telemetry(case);
        tracing::dispatcher::with_default(&dispatch, || {
            g.bench_function(case, |b| b.iter(one_span))
        });
        let _ = telemetry.shutdown(Duration::from_secs(30));
    }
    g.finish();
}

/// `n` spans: the function callgrind counts.
#[inline(never)]
fn counted(n: u64) {
    for _ in 0..n {
        one_span();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_redaction
}

fn main() {
    if let Ok(n) = std::env::var("REDACTION_COUNT") {
        let n: u64 = n.parse().expect("REDACTION_COUNT: a number of spans");
        let case = match std::env::var("REDACTION_KEYS").as_deref() {
            Ok("10000") => "keys_10000",
            _ => "default_keys",
        };
        let (telemetry, dispatch) = telemetry(case);
        tracing::dispatcher::with_default(&dispatch, || {
            for _ in 0..2_000 {
                one_span();
            }
            let _ = telemetry.force_flush();
            counted(n);
        });
        let _ = telemetry.shutdown(Duration::from_secs(60));
        println!(
            "COUNT case={case} spans={n} dropped={:?}",
            telemetry.stats()
        );
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
