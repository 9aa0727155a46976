//! Resident memory stays flat when one span is re-entered millions of times: the candle
//! pattern, where a model builds its `forward` span once and enters it on every forward pass.
//!
//! The measurement runs in a child process (this test binary again, running only the ignored
//! `child_reenters_one_span`; see `common::child`), so that nothing else in the test run moves
//! its resident set.
//! The child reads `VmRSS` from `/proc/self/status` after a warm-up and again after three
//! million re-entries (with a child span and an event every 100th pass), and prints both;
//! the parent checks the growth against a generous bound. No timing is asserted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

use crate::common::{self, child::Child};

const WARM_UP: u64 = 300_000;
const PASSES: u64 = 3_000_000;
/// Growth allowed between the two readings. A leak of even 4 bytes per pass is 12 MB.
const MAX_GROWTH_KIB: u64 = 8 * 1024;

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

#[test]
#[ignore = "child process of resident_memory_is_flat_over_millions_of_reentries"]
fn child_reenters_one_span() {
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
    for pass in 0..WARM_UP {
        forward_pass(&forward, pass);
    }
    telemetry.force_flush().expect("flush");
    let before = common::rss_kib();
    for pass in WARM_UP..WARM_UP + PASSES {
        forward_pass(&forward, pass);
    }
    telemetry.force_flush().expect("flush");
    let after = common::rss_kib();
    drop(forward);
    telemetry
        .shutdown(Duration::from_secs(10))
        .expect("shutdown");
    println!(
        "REENTRY rss_before_kib={before} rss_after_kib={after} exported={}",
        exported.0.load(Ordering::Relaxed)
    );
}

#[test]
fn resident_memory_is_flat_over_millions_of_reentries() {
    let out = Child::sibling("child_reenters_one_span").run_passing();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // `--nocapture` prints the line after the harness's `test ... ` prefix.
    let line = stdout
        .lines()
        .find_map(|l| l.find("REENTRY ").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no REENTRY line from the child:\n{stdout}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    println!("{line}");
    let (before, after, exported) = (
        field("rss_before_kib"),
        field("rss_after_kib"),
        field("exported"),
    );
    // The forward span, plus one `attention` span every 100th pass.
    let expected = 1 + (WARM_UP + PASSES) / 100;
    assert!(
        exported > expected / 2,
        "the child exported only {exported} of {expected} spans: {line}"
    );
    assert!(
        after <= before + MAX_GROWTH_KIB,
        "resident memory grew by {} KiB over {PASSES} re-entries (bound {MAX_GROWTH_KIB} KiB): {line}",
        after.saturating_sub(before)
    );
}
