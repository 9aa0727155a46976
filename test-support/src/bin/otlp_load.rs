//! A rank under sustained load for the export tests (`tests/export/keepup.rs`): a user's
//! program configured from the environment only (`NEMO_LENS_*`, `OTEL_*`; it must export).
//!
//! It makes `LOAD_SPANS` training-loop spans ([`training_span`]: three attributes each), spread
//! evenly over `LOAD_SECONDS` seconds (0: as fast as it can), shuts down within 120 s and prints
//! one line:
//! `LOAD produced=<n> dropped=<spans counted as dropped> shutdown=<ok|error text>`.

use std::time::{Duration, Instant};

use nemo_lens_test_support::bench::training_span;
use nemo_lens_test_support::rank::exporting_from_env;

fn var(name: &str) -> f64 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is required"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn main() {
    let spans = var("LOAD_SPANS") as u64;
    let seconds = var("LOAD_SECONDS");
    let (telemetry, guard) = exporting_from_env();
    let start = Instant::now();
    for i in 0..spans {
        if seconds > 0.0 {
            // Paced: span i is due at i / spans of the run.
            let due = start + Duration::from_secs_f64(seconds * i as f64 / spans as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        training_span(i as i64);
    }
    drop(guard);
    let shutdown = match telemetry.shutdown(Duration::from_secs(120)) {
        Ok(()) => "ok".to_string(),
        Err(e) => e.to_string().replace(char::is_whitespace, "_"),
    };
    println!(
        "LOAD produced={spans} dropped={} shutdown={shutdown}",
        telemetry.stats().dropped_spans
    );
}
