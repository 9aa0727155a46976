//! The measured process of `tests/lifecycle/reentry_memory.rs`: one span re-entered millions of
//! times (the candle pattern, where a model builds its `forward` span once and enters it on
//! every forward pass), with a child span and an event every 100th pass, exported to a counting
//! exporter.
//!
//! ```sh
//! reentry_memory <warm-up passes> <counted passes>
//! ```
//!
//! Reads `VmRSS` after the warm-up and again after the counted passes, and prints
//! `REENTRY rss_before_kib=<n> rss_after_kib=<n> exported=<spans>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use nemo_lens_test_support::rss_kib;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

/// Counts what it receives and drops it.
#[derive(Debug, Clone, Default)]
struct Counting(Arc<AtomicU64>);

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

fn forward_pass(forward: &tracing::Span, pass: u64) {
    let _e = forward.enter();
    if pass.is_multiple_of(100) {
        let layer = tracing::info_span!("attention", nemo.group.forward_backward = Empty, pass);
        let _l = layer.enter();
        tracing::info!(pass, "activations checked");
    }
}

fn main() {
    let passes: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number of passes"))
        .collect();
    let [warm_up, counted] = passes[..] else {
        panic!("usage: reentry_memory <warm-up passes> <counted passes>");
    };
    let exported = Counting::default();
    let telemetry = Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.metrics_enabled = false;
    }))
    .span_exporter(exported.clone())
    .build()
    .expect("telemetry");
    let _guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    let forward = tracing::info_span!("forward", nemo.group.forward_backward = Empty);
    for pass in 0..warm_up {
        forward_pass(&forward, pass);
    }
    telemetry.force_flush().expect("flush");
    let before = rss_kib();
    for pass in warm_up..warm_up + counted {
        forward_pass(&forward, pass);
    }
    telemetry.force_flush().expect("flush");
    let after = rss_kib();
    drop(forward);
    telemetry
        .shutdown(Duration::from_secs(10))
        .expect("shutdown");
    println!(
        "REENTRY rss_before_kib={before} rss_after_kib={after} exported={}",
        exported.0.load(Ordering::Relaxed)
    );
}
